// Link and Requests (see link.h).
#include "ops/mpi/link.h"

#include "ops/mpi/roll_call.h"

#include "runtime/host_split.h"
#include "runtime/mpi_check.h"
#include "runtime/peer_watch.h"

#include <accord/error.h>

#include <algorithm>
#include <climits>
#include <thread>

namespace accord::mpi {

namespace {

using Clock = std::chrono::steady_clock;

// Larger transfers go as several messages: MPI counts are ints.
constexpr std::size_t kMaxMessage = std::size_t{1} << 30;

struct Waiting {
  std::chrono::microseconds spin, yield_until, first_sleep, max_sleep;
};

// Negotiation: a peer that is already negotiating answers within microseconds; one
// sleeping between idle cycles (up to 20 ms) takes longer, and waking a few thousand
// times a second at most bounds the added latency to 200 us. In between, for the first
// millisecond, the wait yields rather than spins or sleeps: where ranks outnumber cores
// (hosts shared with data loaders, several simulated hosts on one machine), a spinning
// waiter holds the core its peer needs, and a sleeping one pays a scheduler wake-up per
// message; yielding costs nothing when the core is free.
constexpr Waiting kNegotiation{std::chrono::microseconds(5), std::chrono::microseconds(1000),
                               std::chrono::microseconds(5), std::chrono::microseconds(200)};
// Data: as the shared-memory transport waits for a peer's piece.
constexpr Waiting kData{std::chrono::microseconds(20), std::chrono::microseconds(1000),
                        std::chrono::microseconds(20), std::chrono::microseconds(20)};

}  // namespace

std::chrono::milliseconds rollCallTime(std::chrono::milliseconds stall) {
  // A quarter of the stall time, at least a tenth of a second (a time slice or two of a
  // shared core), at most two seconds (a rank that takes longer to answer is as good as
  // stopped for the job).
  return std::clamp(stall / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(2000));
}

void Requests::add(MPI_Request request, int peer, bool receive) {
  requests_.push_back(request);
  peers_.push_back(peer);
  receives_.push_back(receive);
}

Link::Link(MPI_Comm comm, std::vector<int> global_ranks, std::chrono::milliseconds timeout)
    : comm_(comm), global_ranks_(std::move(global_ranks)), timeout_(timeout) {
  ACCORD_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ACCORD_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  if (static_cast<int>(global_ranks_.size()) != size_) {
    global_ranks_.resize(size_);
    for (int r = 0; r < size_; ++r) global_ranks_[r] = r;
  }
  MPI_Comm host = splitByHost(comm_, rank_);
  int host_size = 0;
  ACCORD_MPI_CHECK(MPI_Comm_size(host, &host_size));
  MPI_Comm_free(&host);
  spans_hosts_ = host_size < size_;
  roll_call_ = std::make_unique<RollCall>(comm_, global_ranks_, timeout_);
}

Link::~Link() {
  roll_call_.reset();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Link::send(Requests& requests, const void* data, std::size_t bytes, int peer, int tag) {
  const char* p = static_cast<const char*>(data);
  for (std::size_t off = 0; off < bytes; off += kMaxMessage) {
    const int n = static_cast<int>(std::min(kMaxMessage, bytes - off));
    MPI_Request request;
    ACCORD_MPI_CHECK(MPI_Isend(p + off, n, MPI_BYTE, peer, tag, comm_, &request));
    requests.add(request, peer, false);
  }
}

void Link::recv(Requests& requests, void* data, std::size_t bytes, int peer, int tag) {
  char* p = static_cast<char*>(data);
  for (std::size_t off = 0; off < bytes; off += kMaxMessage) {
    const int n = static_cast<int>(std::min(kMaxMessage, bytes - off));
    MPI_Request request;
    ACCORD_MPI_CHECK(MPI_Irecv(p + off, n, MPI_BYTE, peer, tag, comm_, &request));
    requests.add(request, peer, true);
  }
}

void Link::checkUsable() const {
  if (!broken_.empty()) throw CommError(broken_);
}

void Link::fail(const std::string& message) {
  if (broken_.empty()) broken_ = message;
  throw CommError(message);
}

// True when at least one request completed; `remaining` counts the others.
bool Link::progress(Requests& requests, int& remaining) {
  static thread_local std::vector<int> done;
  done.resize(requests.requests_.size());
  int count = 0;
  ACCORD_MPI_CHECK(MPI_Testsome(static_cast<int>(requests.requests_.size()),
                                requests.requests_.data(), &count, done.data(),
                                MPI_STATUSES_IGNORE));
  if (count == MPI_UNDEFINED) {
    remaining = 0;
    return false;
  }
  remaining -= count;
  return count > 0;
}

void Link::await(Requests& requests, const std::string& what, const char* step, Patience patience) {
  checkUsable();
  const Waiting& w = patience == Patience::Data ? kData : kNegotiation;
  int remaining = static_cast<int>(requests.requests_.size());
  try {
    auto last = Clock::now();  // of the last completion: the deadline counts from it
    auto sleep = w.first_sleep;
    while (remaining > 0) {
      if (progress(requests, remaining)) {
        last = Clock::now();
        sleep = w.first_sleep;
        continue;
      }
      const auto now = Clock::now();
      const auto idle = now - last;
      if (idle < w.spin) continue;
      if (timeout_.count() > 0 && idle >= timeout_) giveUp(requests, what, step);
      if (idle < w.yield_until) {
        std::this_thread::yield();
        continue;
      }
      // Asleep on peers: say which, for failure messages written on other threads, and
      // to other ranks that call the roll (RollCall::answerAll).
      PeerWatch::instance().waiting(last, globalRanks(silentPeers(requests)), step);
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, w.max_sleep);
    }
  } catch (const CommError& e) {
    // The wait that failed stays published: its ranks remain the ones to blame.
    if (broken_.empty()) broken_ = e.what();
    throw;
  }
  PeerWatch::instance().waitEnded();
  requests = Requests();
}

std::vector<int> Link::silentPeers(const Requests& requests) const {
  std::vector<int> silent;
  for (std::size_t i = 0; i < requests.requests_.size(); ++i) {
    if (requests.requests_[i] == MPI_REQUEST_NULL) continue;
    const int peer = requests.peers_[i];
    if (std::find(silent.begin(), silent.end(), peer) == silent.end()) silent.push_back(peer);
  }
  std::sort(silent.begin(), silent.end());
  return silent;
}

std::vector<int> Link::globalRanks(const std::vector<int>& ranks) const {
  std::vector<int> global;
  for (int r : ranks) global.push_back(global_ranks_[r]);
  std::sort(global.begin(), global.end());
  return global;
}

void Link::giveUp(Requests& requests, const std::string& what, const char* step) {
  const std::vector<int> silent = silentPeers(requests);
  int writes_pending = 0;
  for (std::size_t i = 0; i < requests.requests_.size(); ++i) {
    MPI_Request& request = requests.requests_[i];
    if (request == MPI_REQUEST_NULL) continue;
    // Only a receive that no message has matched yet can be cancelled; an unmatched
    // send needs no cancelling once the transport is abandoned.
    int completed = 0;
    if (requests.receives_[i] && MPI_Cancel(&request) == MPI_SUCCESS)
      MPI_Test(&request, &completed, MPI_STATUS_IGNORE);
    if (requests.receives_[i] && !completed) ++writes_pending;
  }
  requests = Requests();  // the handles are MPI's now: never freed

  std::string message =
      what + ": " +
      RollCall::verdict(*roll_call_, global_ranks_[rank_], globalRanks(silent), step, timeout_);
  if (writes_pending > 0)
    message += ". MPI could not cancel " + std::to_string(writes_pending) +
               " receive(s) already under way: this collective's buffers may still be written "
               "until the process exits, so keep them allocated";
  fail(message);
}

}  // namespace accord::mpi

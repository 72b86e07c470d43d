// RollCall (see roll_call.h).
#include "ops/mpi/roll_call.h"

#include "ops/mpi/link.h"

#include "runtime/mpi_check.h"
#include "runtime/peer_watch.h"

#include <algorithm>
#include <mutex>
#include <thread>

namespace accord::mpi {

namespace {

using Clock = std::chrono::steady_clock;

// The only tag on the roll call's own communicator.
constexpr int kRollCallTag = 0x524c;

// Between two looks for answers: a live rank answers within a sleep of its wait (at most
// 200 us) once it notices, so a finer poll would only take the core from it.
constexpr std::chrono::microseconds kPoll{200};

// Every roll call of this process. Only the background thread creates, destroys and
// uses them; the mutex only keeps a wrong guess about that from corrupting the list.
std::mutex g_mu;
std::vector<RollCall*> g_roll_calls;

}  // namespace

RollCall::RollCall(MPI_Comm comm, std::vector<int> global_ranks, std::chrono::milliseconds stall)
    : global_ranks_(std::move(global_ranks)), stall_(stall) {
  ACCORD_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  // A failed send to a dead rank must come back as a code, not abort the process.
  ACCORD_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  ACCORD_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ACCORD_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  heard_.assign(size_, Clock::time_point{});
  waits_.resize(size_);
  std::lock_guard<std::mutex> lock(g_mu);
  g_roll_calls.push_back(this);
  PeerWatch::instance().setWaitingHook(&RollCall::answerAll);
  PeerWatch::instance().setCallRollHook(&RollCall::callFromElsewhere);
}

RollCall& RollCall::widest(RollCall& own) {
  std::lock_guard<std::mutex> lock(g_mu);
  RollCall* best = &own;
  for (RollCall* r : g_roll_calls)
    if (r->size_ > best->size_) best = r;
  return *best;
}

std::string RollCall::verdict(RollCall& roll_call, int me, const std::vector<int>& waited_for,
                              const std::string& step, std::chrono::milliseconds stall) {
  const std::chrono::milliseconds round = rollCallTime(stall);
  RollCall& widest = RollCall::widest(roll_call);
  RollCallFinding finding;
  finding.me = me;
  finding.waited_for = waited_for;
  Heard heard = widest.call(finding.waited_for, round);
  finding.size = static_cast<int>(heard.stopped.size() + heard.answers.size()) + 1;
  finding.stopped = std::move(heard.stopped);
  finding.answers = std::move(heard.answers);
  std::vector<int> answering{finding.me};
  for (const auto& [rank, waits] : finding.answers) answering.push_back(rank);
  std::sort(answering.begin(), answering.end());
  PeerWatch::instance().rollCalled(finding.stopped, answering);
  return describeStopped(finding, step, stall, round);
}

std::string RollCall::callFromElsewhere(const std::vector<int>& waited_for, const std::string& step,
                                        std::chrono::milliseconds stall) {
  RollCall* widest = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (RollCall* r : g_roll_calls)
      if (!widest || r->size_ > widest->size_) widest = r;
  }
  if (!widest) return "";
  return verdict(*widest, widest->global_ranks_[widest->rank_], waited_for, step, stall);
}

void RollCall::answerAll(Clock::time_point since, const std::vector<int>& waiting_for) {
  std::lock_guard<std::mutex> lock(g_mu);
  RollCall* widest = nullptr;
  for (RollCall* r : g_roll_calls) {
    r->answer(waiting_for);
    if (!widest || r->size_ > widest->size_) widest = r;
  }
  if (!widest || widest->stall_.count() == 0 || widest->noticed_for_ == since) return;
  if (Clock::now() - since < widest->stall_ / 2) return;
  widest->noticed_for_ = since;
  for (int r = 0; r < widest->size_; ++r)
    if (r != widest->rank_) widest->post(r, kNotice, waiting_for);
}

RollCall::~RollCall() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    std::erase(g_roll_calls, this);
  }
  reap();
  for (Outgoing& out : outbox_) {
    // MPI still owns the send: let it finish on its own, with its buffer.
    MPI_Request_free(&out.request);
    static_cast<void>(out.message.release());
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Errors are ignored here and below: the roll call runs while a link is failing, and a
// message that cannot go or come is a rank that does not answer.
void RollCall::post(int peer, Kind kind, const std::vector<int>& waiting_for) {
  auto message = std::make_unique<Message>();
  message->fill(-1);
  (*message)[0] = kind;
  (*message)[1] = static_cast<int>(waiting_for.size());
  for (std::size_t i = 0; i < waiting_for.size() && i < kListed; ++i)
    (*message)[2 + i] = waiting_for[i];
  MPI_Request request;
  if (MPI_Isend(message->data(), static_cast<int>(message->size()), MPI_INT, peer, kRollCallTag,
                comm_, &request) != MPI_SUCCESS)
    return;
  outbox_.push_back({std::move(message), request});
}

void RollCall::reap() {
  std::erase_if(outbox_, [](Outgoing& out) {
    int done = 0;
    return MPI_Test(&out.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
  });
}

void RollCall::listen(const std::vector<int>* reply) {
  for (;;) {
    int arrived = 0;
    MPI_Message handle;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kRollCallTag, comm_, &arrived, &handle, &status) !=
            MPI_SUCCESS ||
        !arrived)
      break;
    Message message;
    if (MPI_Mrecv(message.data(), static_cast<int>(message.size()), MPI_INT, &handle,
                  MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    const int peer = status.MPI_SOURCE;
    if (peer < 0 || peer >= size_ || peer == rank_) continue;
    heard_[peer] = Clock::now();
    std::vector<int>& waits = waits_[peer];
    waits.clear();
    const int listed = std::clamp(message[1], 0, kListed);
    for (int i = 0; i < listed; ++i)
      if (message[2 + i] >= 0) waits.push_back(message[2 + i]);  // global ranks
    if (reply && message[0] == kCall) post(peer, kAnswer, *reply);
  }
  reap();
}

void RollCall::answer(const std::vector<int>& waiting_for) { listen(&waiting_for); }

Heard RollCall::call(const std::vector<int>& waiting_for, std::chrono::milliseconds deadline) {
  if (!called_) {
    called_ = true;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) post(r, kCall, waiting_for);
  }
  const auto end = Clock::now() + deadline;
  const auto fresh = Clock::now() - stall_ - deadline;
  auto heard = [&](int r) { return heard_[r] != Clock::time_point{} && heard_[r] >= fresh; };
  auto everyone = [&] {
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !heard(r)) return false;
    return true;
  };
  for (;;) {
    {
      // Calls on this communicator need no answer: this rank's own call has gone to
      // their senders. A call on another one (a rank that counts another communicator
      // the widest) does.
      std::lock_guard<std::mutex> lock(g_mu);
      for (RollCall* r : g_roll_calls) r->listen(r == this ? nullptr : &waiting_for);
    }
    if (everyone() || Clock::now() >= end) break;
    std::this_thread::sleep_for(kPoll);
  }
  Heard found;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (heard(r))
      found.answers.emplace_back(global_ranks_[r], waits_[r]);
    else
      found.stopped.push_back(global_ranks_[r]);
  }
  std::sort(found.stopped.begin(), found.stopped.end());
  std::sort(found.answers.begin(), found.answers.end());
  return found;
}

}  // namespace accord::mpi

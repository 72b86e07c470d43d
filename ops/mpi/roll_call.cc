// RollCall (see roll_call.h).
#include "ops/mpi/roll_call.h"

#include "runtime/mpi_check.h"

#include <algorithm>
#include <thread>

namespace accord::mpi {

namespace {

using Clock = std::chrono::steady_clock;

// The only tag on the roll call's own communicator.
constexpr int kRollCallTag = 0x524c;

// Between two looks for answers: a live rank answers within a sleep of its wait (at most
// 200 us) once it notices, so a finer poll would only take the core from it.
constexpr std::chrono::microseconds kPoll{200};

}  // namespace

RollCall::RollCall(MPI_Comm comm) {
  ACCORD_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  // A failed send to a dead rank must come back as a code, not abort the process.
  ACCORD_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  ACCORD_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ACCORD_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  heard_.assign(size_, false);
  waits_.resize(size_);
}

RollCall::~RollCall() {
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
    heard_[peer] = true;
    std::vector<int>& waits = waits_[peer];
    waits.clear();
    const int listed = std::clamp(message[1], 0, kListed);
    for (int i = 0; i < listed; ++i) {
      const int r = message[2 + i];
      if (r >= 0 && r < size_) waits.push_back(r);
    }
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
  auto everyone = [&] {
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !heard_[r]) return false;
    return true;
  };
  for (;;) {
    // Calls need no answer now: this rank's own call has gone to their senders.
    listen(nullptr);
    if (everyone() || Clock::now() >= end) break;
    std::this_thread::sleep_for(kPoll);
  }
  Heard heard;
  heard.waits.resize(size_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (!heard_[r]) {
      heard.stopped.push_back(r);
      continue;
    }
    heard.answered.push_back(r);
    heard.waits[r] = waits_[r];
  }
  return heard;
}

}  // namespace accord::mpi

// What this process knows of other ranks' trouble, for failure messages that name a
// rank where the failing library cannot.
//
// NCCL does not say which rank broke a collective: a peer that died shows as a closed
// socket, one that hangs as nothing at all, one whose GPU failed as either. But every
// rank's background thread takes part in a negotiation round every cycle, busy or not,
// so a rank that died or hangs is also the rank that negotiation has been waiting for;
// and a rank whose own GPU failed is alive and can say so. This object collects both:
//   - the negotiation channels and links publish a wait for other ranks once it has
//     lasted a while (the slow part of their wait loops), and clear it when it ends;
//   - a rank that sees its own CUDA context fail records it (ownFailure), the next
//     negotiation round tells every rank (Controller), and each records it (announced).
// The finalizer reads suspects() when a device collective fails and adds it to the
// message.
//
// A wait of the MPI link that gives up first calls the roll (ops/mpi/roll_call.h): the
// ranks that do not answer are the ones that stopped, whoever the wait itself was
// waiting for. describeStopped() words what it found for the link's CommError, and
// rollCalled() keeps it, so that suspects() names those ranks rather than the live one
// the wait was stuck on.
//
// Thread boundary: the background thread writes the waits and announcements; the
// finalizer thread (and the CUDA checks on any thread) read and record under one mutex.
// The wait loops call waiting() only once they sleep, and waitEnded() costs one atomic
// load unless something was published.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace accord {

// What a roll call found once a wait gave up, in global ranks.
struct RollCallFinding {
  int me = 0;
  int size = 0;                 // ranks called, this one included
  std::vector<int> waited_for;  // whom the wait that gave up waited for, ascending
  std::vector<int> stopped;     // did not answer, ascending
  // Each rank that answered, with whom it said it waits for.
  std::vector<std::pair<int, std::vector<int>>> answers;
};

// The message of a wait that gave up after `stall` and a roll call of `round`, after
// "allreduce 'x': ". It starts with the ranks that stopped:
//   "rank 2 did not pass on its part within 3 s (ACCORD_STALL_SHUTDOWN_TIME) and stopped
//    answering: it has died or hangs; ranks 0, 1, 3 still answer. ..."
// or, where this rank waited for a live rank that waits in turn,
//   "rank 2 stopped answering: it has died or hangs; ranks 0, 1, 3 still answer. This
//    rank waited for rank 3 to pass on its part within 3 s (...), and in turn rank 3
//    waits for rank 2. ..."
// and says so where the roll call could not tell (every rank answered, or none did).
std::string describeStopped(const RollCallFinding& finding, const std::string& step,
                            std::chrono::milliseconds stall, std::chrono::milliseconds round);

class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // A wait shorter than this is normal (an idle peer sleeps up to 20 ms between rounds).
  static constexpr std::chrono::milliseconds kSuspectAfter{200};

  static PeerWatch& instance();

  // The background thread has waited since `since` for `global_ranks` to `step` ("join
  // a negotiation round"); the latest call wins. Also runs the waiting hook.
  void waiting(Clock::time_point since, const std::vector<int>& global_ranks, const char* step);
  // Called by waiting() with its ranks, on the waiting thread: the MPI transport answers
  // other ranks' roll calls through it (ops/mpi/roll_call.h), from whichever wait this
  // rank is stuck in.
  using WaitingHook = void (*)(Clock::time_point since, const std::vector<int>& global_ranks);
  void setWaitingHook(WaitingHook hook) { hook_.store(hook, std::memory_order_release); }
  void waitEnded();

  // A wait outside the MPI link (the shared-memory transport's) that gave up on
  // `waited_for` (global ranks) after `stall`: the roll call's verdict, from the MPI
  // transport that installs the hook (ops/mpi/roll_call.h), as describeStopped words it
  // after "what: "; "" where no roll call can be made.
  using CallRollHook = std::string (*)(const std::vector<int>& waited_for,
                                       const std::string& step,
                                       std::chrono::milliseconds stall);
  void setCallRollHook(CallRollHook hook) { call_roll_.store(hook, std::memory_order_release); }
  std::string callRoll(const std::vector<int>& waited_for, const std::string& step,
                       std::chrono::milliseconds stall) {
    const CallRollHook hook = call_roll_.load(std::memory_order_acquire);
    return hook ? hook(waited_for, step, stall) : std::string();
  }

  // This rank's own GPU failed: told to the other ranks at the next negotiation round.
  // The first reason is kept.
  void ownFailure(const std::string& reason);
  // For the negotiation: this rank's failure not yet told ("" if none), once.
  std::string takeOwnFailure();
  // Rank `global_rank` told of its own failure.
  void announced(int global_rank, const std::string& reason);

  // A roll call found `stopped` silent while `answering` (this rank included) answered;
  // the latest call wins.
  void rollCalled(const std::vector<int>& stopped, const std::vector<int>& answering);

  // What points at a rank, for a failure message: "rank 2 reported that its GPU failed:
  // ..." or "rank 2 did not join a negotiation round in the last 3.2 s (it, or a rank it
  // waits for in turn, has died or hangs)", or after a roll call "rank 2 stopped
  // answering (ranks 0, 1, 3 still answer)"; "" when nothing does.
  std::string suspects(Clock::time_point now) const;

  // Tests in one process: forget everything.
  void reset();

 private:
  mutable std::mutex mu_;
  std::atomic<bool> published_{false};
  std::atomic<WaitingHook> hook_{nullptr};
  std::atomic<CallRollHook> call_roll_{nullptr};
  Clock::time_point since_{};
  std::vector<int> waited_for_;
  std::string step_;
  std::vector<int> stopped_, answering_;  // the latest roll call's
  std::string own_failure_;
  bool own_told_ = false;
  std::vector<std::pair<int, std::string>> announced_;
};

}  // namespace accord

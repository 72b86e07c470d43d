// Who has really stopped, once a wait has given up on a peer.
//
// A rank that freezes inside a ring holds its neighbours, and they hold theirs in turn:
// every survivor's wait runs out, most of them on a live rank that is itself stuck. So
// before a wait gives up (Link::await), its rank calls the roll among the ranks of the
// communicator: it tells every other rank whom it waited for, and listens for a short
// while. A live rank answers wherever it is stuck: still inside a wait of its own (the
// wait answers calls while it sleeps), or calling the roll itself (its own call reached
// every rank, the late callers included). A rank that says nothing in that time has
// stopped. Every survivor hears the same ranks, so all of them name the same ones.
//
// A rank answers from any wait that publishes itself to PeerWatch, the shared-memory
// transport's included, and once such a wait has lasted half the stall time it tells
// every rank unasked: a wait that gives up without calling the roll, as the
// shared-memory transport's do, still leaves word that its rank was alive. A survivor
// of the hierarchical allreduce may sit in its host's window waiting for a host peer
// while the others wait for it across hosts. And the roll is called on the widest
// communicator this process has (the global set's), not only on the failing link's:
// the rank at the end of a chain of waits need not belong to the link whose wait gave
// up (rank 0 waits across hosts for rank 2, which waits in its window for rank 3).
//
// Survivors reach their deadlines at different times, up to a stall time apart: an early
// caller hears the late ones answer from inside their waits, and a late caller finds the
// early ones' calls already queued, so the round itself stays short.
//
// The messages go over a duplicate of the communicator, made with the link, so that no
// message of the collective that failed is mistaken for one of these, nor the other way
// round. Each is a few dozen bytes, which every MPI transport sends eagerly: a send
// completes whether or not its peer ever reads it, so none is left for MPI_Finalize or a
// later shutdown to wait on. One that has not completed when the roll call is destroyed
// is handed to MPI (MPI_Request_free) with its buffer, never freed.
#pragma once

#include <mpi.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace accord::mpi {

// What one rank's roll call heard, in global ranks.
struct Heard {
  std::vector<int> stopped;  // said nothing within the deadline, ascending
  // Each rank that answered (this one not included), ascending, with whom it said it
  // waits for.
  std::vector<std::pair<int, std::vector<int>>> answers;
};

class RollCall {
 public:
  // Collective over `comm` (duplicates it; `comm` stays the caller's), whose rank i is
  // global rank global_ranks[i].
  // `stall`: ACCORD_STALL_SHUTDOWN_TIME (0: waits never give up).
  RollCall(MPI_Comm comm, std::vector<int> global_ranks, std::chrono::milliseconds stall);
  ~RollCall();
  RollCall(const RollCall&) = delete;
  RollCall& operator=(const RollCall&) = delete;

  // The roll call of this process with the most ranks (`own` if none has more): the
  // one to call.
  static RollCall& widest(RollCall& own);

  // This rank gave up waiting for `waiting_for` (global ranks): calls every other rank
  // and listens for at most `deadline`, less when every rank has been heard from.
  Heard call(const std::vector<int>& waiting_for, std::chrono::milliseconds deadline);

  // PeerWatch's hook, for every wait that sleeps on `waiting_for` (global ranks) since
  // `since`: every roll call of this process answers the calls that have arrived (one
  // MPI_Improbe per roll call when there are none), and past half the stall time the
  // widest tells every rank, once per wait.
  static void answerAll(std::chrono::steady_clock::time_point since,
                        const std::vector<int>& waiting_for);

  // Calls the roll on `roll_call`'s widest for a wait that gave up on `waited_for` after
  // `stall`, records the verdict with PeerWatch, and words it (describeStopped).
  static std::string verdict(RollCall& roll_call, int me, const std::vector<int>& waited_for,
                             const std::string& step, std::chrono::milliseconds stall);
  // PeerWatch's CallRollHook: the same from a wait outside any link (shared memory), on
  // the widest roll call of this process; "" when there is none.
  static std::string callFromElsewhere(const std::vector<int>& waited_for, const std::string& step,
                                       std::chrono::milliseconds stall);

 private:
  // A message: kind, how many ranks the sender waits for, and the first kListed of them
  // (a rank gathering from every other one waits for all of them; the first few are
  // enough to trace a chain of waits, and keep every message small enough to go
  // eagerly).
  static constexpr int kListed = 30;
  using Message = std::array<int, 2 + kListed>;
  enum Kind : int { kCall = 1, kAnswer = 2, kNotice = 3 };

  void answer(const std::vector<int>& waiting_for);
  void post(int peer, Kind kind, const std::vector<int>& waiting_for);
  // Reads every message that has arrived; answers each call when `reply` is set.
  void listen(const std::vector<int>* reply);
  void reap();  // forgets the sends that have completed

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> global_ranks_;
  std::chrono::milliseconds stall_;
  bool called_ = false;
  std::chrono::steady_clock::time_point noticed_for_{};  // the wait last told of
  // When each rank was last heard from (a default time point: never). Only what came
  // within a stall time and a roll call counts: older word says nothing of now.
  std::vector<std::chrono::steady_clock::time_point> heard_;
  std::vector<std::vector<int>> waits_;
  struct Outgoing {
    std::unique_ptr<Message> message;
    MPI_Request request;
  };
  std::vector<Outgoing> outbox_;
};

}  // namespace accord::mpi

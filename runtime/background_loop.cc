// The background loop: one thread per rank that runs the runtime's cycles.
//
// Each cycle reads as the data flow: take what the application submitted, negotiate
// every process set this rank belongs to (in id order, the same on every rank, so
// blocking collectives on different sets cannot cross), execute the agreed responses,
// then apply process-set changes. Between cycles the thread sleeps on the queue's
// condition variable (after a cycle that completed something, it yields the core for
// a moment first).
//
// A cycle belongs to whichever thread holds the cycle lock: this one, or (with
// ACCORD_INLINE_CYCLES) an application thread that waits on a handle and finds the
// background thread between cycles, which then runs the next cycle itself. One thread
// at a time calls MPI either way; the inline cycle only saves the hand-off to this
// thread and back, two thread switches that cost more than a small collective where
// both threads share one core (mpirun binds each rank to one).
#include "runtime/autotune.h"
#include "runtime/controller.h"
#include "runtime/executor.h"
#include "runtime/handle_state.h"
#include "runtime/keep_alive.h"
#include "runtime/logging.h"
#include "runtime/mpi_check.h"
#include "runtime/peer_watch.h"
#include "runtime/runtime.h"
#include "runtime/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include <pthread.h>
#include <csignal>

namespace accord {

namespace {

// When nothing is outstanding anywhere, idle cycles back off up to this: they exist
// only so that the stall inspector, joins and shutdowns of other ranks progress.
constexpr auto kIdleMax = std::chrono::milliseconds(20);
// Wait after a cycle that brought nothing new while this rank has submissions the
// others have not matched yet (it is ahead of them). Where every set's negotiation
// sleeps until the late ranks join (shared memory), there is none: the next round
// itself waits for them, asleep. Elsewhere it starts short and doubles up to
// kMaxBusyWait, so that a waiting rank does not turn into a negotiation storm. A rank
// that is behind (others wait for its submissions, it has none pending) waits as an
// idle one does: its own submission ends the wait at once. Every wake-up of this
// thread takes a core from the application's compute for a moment, which data-parallel
// training on CPUs feels (examples/python/README.md, "Accord against DDP").
constexpr auto kMinBusyWait = std::chrono::microseconds(50);
constexpr auto kMaxBusyWait = std::chrono::microseconds(2000);
// After a cycle that completed collectives, the next submission often follows within
// microseconds (a loop of small collectives, the next gradient of a backward pass):
// for this long the idle wait yields the core instead of sleeping, so that the
// submission does not pay a scheduler wake-up. Yielding costs nothing when no other
// thread wants the core.
constexpr auto kYieldAfterProgress = std::chrono::microseconds(50);

class BackgroundLoop {
 public:
  explicit BackgroundLoop(Runtime& rt)
      : rt_(rt),
        controller_(rt.config),
        executor_(rt.config, rt.queue, *rt.backend,
                  {[&rt](ProcessSetId set) { restartGeneratedNames(rt, set); },
                   [](const std::string& error) { noteStallTimeout(error); }}) {
    if (rt.config.autotune) tuner_.emplace(rt.config, rt.rank == 0);
  }

  void run() noexcept;
  // Runs one cycle on the calling thread, which holds the cycle lock. False when the
  // loop ended in it: shutdown was negotiated, or a failure failed everything pending.
  bool step() noexcept;
  // Whether an application thread may run the next cycle: not where ACCORD_CYCLE_TIME
  // (perhaps as autotune set it) spaces the cycles to batch what arrives between them.
  bool runsInline() const { return rt_.config.cycle_time.count() == 0; }

 private:
  // How the background thread waits before its next cycle (decided under the cycle
  // lock, waited without it).
  struct Pause {
    std::optional<Clock::time_point> not_before;  // ACCORD_CYCLE_TIME
    std::chrono::microseconds wait{0};            // for queue work, at most this long
    std::chrono::microseconds yielding{0};        // of which yielding the core
  };
  bool runOnce();
  Pause pace();
  void finish();
  void admitNew(Clock::time_point now);
  void noteAnnounced(const std::vector<std::pair<int, std::string>>& announced);
  void applyChanges(std::vector<SetChange>& changes);
  void addSet(SetChange& change);
  void removeSet(SetChange& change);
  void failEverything(std::exception_ptr reason, bool shut_down);
  void retune(ProcessSet& global);

  Runtime& rt_;
  Controller controller_;
  Executor executor_;
  std::optional<Autotuner> tuner_;  // ACCORD_AUTOTUNE
  bool last_progress_ = false;
  bool anyone_pending_ = false;
  std::chrono::microseconds idle_wait_{kMinBusyWait};
  std::chrono::microseconds busy_wait_{kMinBusyWait};
  Clock::time_point cycle_start_{};
  std::vector<int> shut_down_by_;  // the ranks that asked for the negotiated shutdown
};

// Who shut Accord down, for the messages of what that leaves undone: "rank 1 called
// shutdown() or exited" (Accord shuts down at exit), "ranks 0 and 2 ...", "every rank
// called shutdown()".
std::string whoShutDown(const std::vector<int>& ranks, int size) {
  if (ranks.empty()) return "a rank called shutdown() or exited";
  if (static_cast<int>(ranks.size()) == size && size > 1) return "every rank called shutdown()";
  std::string who = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    who += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return who + " called shutdown() or exited";
}

BackgroundLoop::Pause BackgroundLoop::pace() {
  Pause pause;
  // ACCORD_CYCLE_TIME > 0 batches: a cycle starts no sooner than that after the last
  // one, so what is submitted meanwhile is negotiated, and fused, together.
  if (rt_.config.cycle_time.count() > 0) pause.not_before = cycle_start_ + rt_.config.cycle_time;
  if (rt_.queue.hasWork() || rt_.queue.shutdownRequested()) return pause;
  bool local_pending = false;
  bool rounds_sleep = true;
  for (auto* set : rt_.sets.memberSets()) {
    // A joined rank must answer the others' collectives promptly.
    if (set->pending.joined()) return pause;
    local_pending = local_pending || !set->pending.empty();
    rounds_sleep = rounds_sleep && set->transport->channel().sleepsUntilJoined();
  }
  if (last_progress_) busy_wait_ = kMinBusyWait;
  if ((last_progress_ || rounds_sleep) && local_pending) return pause;
  if (local_pending) {
    idle_wait_ = kMinBusyWait;
    pause.wait = busy_wait_;
    busy_wait_ = std::min<std::chrono::microseconds>(busy_wait_ * 2, kMaxBusyWait);
    return pause;
  }
  busy_wait_ = kMinBusyWait;
  if (last_progress_) idle_wait_ = std::min(idle_wait_, kMaxBusyWait);
  pause.wait = idle_wait_;
  if (last_progress_) pause.yielding = kYieldAfterProgress;
  idle_wait_ = std::min<std::chrono::microseconds>(idle_wait_ * 2, kIdleMax);
  return pause;
}

// Device collectives that fail name these ranks (PeerWatch::suspects).
void BackgroundLoop::noteAnnounced(const std::vector<std::pair<int, std::string>>& announced) {
  for (const auto& [rank, reason] : announced) {
    if (rank == rt_.rank) continue;
    log().error("rank {} reported that its GPU failed: {}", rank, reason);
    PeerWatch::instance().announced(rank, reason);
  }
}

void BackgroundLoop::admitNew(Clock::time_point now) {
  for (auto& op : rt_.queue.drain()) {
    ProcessSet* set = rt_.sets.find(op.process_set);
    if (!set || !set->member()) {
      rt_.queue.release(op.process_set, op.request.name);
      op.entry.handle->fail(std::make_exception_ptr(
          InvalidArgument("process set " + std::to_string(op.process_set) + " was removed before " +
                          describeCollective(requestTypeName(op.request.type), op.request.name) +
                          " was negotiated")));
      continue;
    }
    controller_.admit(*set, std::move(op), now);
  }
}

bool BackgroundLoop::runOnce() {
  const auto now = Clock::now();
  cycle_start_ = now;
  admitNew(now);
  const bool want_shutdown = rt_.queue.shutdownRequested();
  std::vector<SetChange> changes;
  bool progress = false;
  for (auto* set : rt_.sets.memberSets()) {
    // A failure of this rank's own GPU is told to every rank through the global set.
    const bool global = set->id == kGlobalProcessSet;
    auto negotiated = controller_.negotiate(*set, want_shutdown, now,
                                            global ? PeerWatch::instance().takeOwnFailure() : "");
    if (global) {
      if (negotiated.shutdown) {  // every rank sees this in the same cycle
        shut_down_by_ = std::move(negotiated.shut_down_by);
        return false;
      }
      anyone_pending_ = negotiated.anyone_pending;
      noteAnnounced(negotiated.announced);
    }
    progress = progress || !negotiated.responses.empty() || !negotiated.carried.empty();
    bool trial_ended = false;
    if (set->id == kGlobalProcessSet && tuner_) {
      if (negotiated.carried.empty()) {  // always so on one host: no copy every cycle
        trial_ended = tuner_->observe(negotiated.responses, now);
      } else {
        std::vector<Response> seen = negotiated.carried;  // carried first: done first
        seen.insert(seen.end(), negotiated.responses.begin(), negotiated.responses.end());
        trial_ended = tuner_->observe(seen, now);
      }
    }
    executor_.completeCarried(*set, negotiated.carried);
    executor_.run(*set, std::move(negotiated.responses), changes);
    if (trial_ended) retune(*set);
  }
  applyChanges(changes);
  last_progress_ = progress;
  Timeline& timeline = Timeline::instance();
  if (progress && timeline.active()) {
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - now).count();
    timeline.instant(kCyclePhase, fmt::format("{{\"us\":{:.1f}}}", us));
  }
  timeline.flush();
  return true;
}

// Every rank ends the trial in the same cycle (autotune.h): rank 0's choice reaches all
// of them here, and they apply it before the next cycle plans any fusion or piece.
// Only this thread reads these settings once the loop runs.
void BackgroundLoop::retune(ProcessSet& global) {
  std::vector<std::uint8_t> choice;
  if (rt_.rank == 0) choice = tuner_->decide();
  if (rt_.size > 1) global.transport->channel().broadcastFromRoot(choice);
  const TunedSettings& s = tuner_->accept(choice);
  rt_.config.fusion_threshold = s.fusion_threshold;
  rt_.config.chunk_bytes = s.chunk_bytes;
  rt_.config.cycle_time = s.cycle_time;
}

void BackgroundLoop::applyChanges(std::vector<SetChange>& changes) {
  for (auto& change : changes) {
    if (change.type == ResponseType::AddProcessSet) {
      addSet(change);
    } else {
      removeSet(change);
    }
  }
}

// MPI_Comm_create is collective over the runtime's world communicator; every rank
// applies the same changes in the same order, so the calls line up. So does connect(),
// collective over the new set's members.
void BackgroundLoop::addSet(SetChange& change) {
  MPI_Group world_group, group;
  ACCORD_MPI_CHECK(MPI_Comm_group(rt_.world, &world_group));
  ACCORD_MPI_CHECK(MPI_Group_incl(world_group, static_cast<int>(change.ranks.size()),
                                  change.ranks.data(), &group));
  MPI_Comm comm = MPI_COMM_NULL;
  ACCORD_MPI_CHECK(MPI_Comm_create(rt_.world, group, &comm));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  std::unique_ptr<SetTransport> transport;
  if (comm != MPI_COMM_NULL) {
    ACCORD_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    transport = rt_.backend->connect(comm, change.ranks);
  }
  const ProcessSetId id = rt_.sets.nextId();
  rt_.sets.add(ProcessSet::create(id, change.ranks, std::move(transport), rt_.rank,
                                  rt_.config.cache_capacity));
  log().debug("added process set {} with {} ranks", id, change.ranks.size());
  if (change.handle) {
    change.handle->process_set = id;
    change.handle->completePart();
  }
}

void BackgroundLoop::removeSet(SetChange& change) {
  auto set = rt_.sets.remove(change.id);
  if (set) {
    set->pending.failAll(
        [&](const std::string& what) {
          return std::make_exception_ptr(InvalidArgument(what + ": process set " +
                                                         std::to_string(set->id) +
                                                         " was removed while it was pending"));
        },
        [&](const std::string& name) { rt_.queue.release(set->id, name); });
    set->transport.reset();  // collective over the set, whose members all remove it now
  }
  if (change.handle) change.handle->completePart();
}

void BackgroundLoop::failEverything(std::exception_ptr reason, bool shut_down) {
  rt_.queue.close(reason);
  if (!shut_down) {
    // The peers may never take part in a collective free, and MPI may still complete
    // transfers it could not cancel: keep every transport and buffer allocated.
    rt_.failed = true;
    for (auto* set : rt_.sets.memberSets()) keepAlive(std::move(set->transport));
    keepAlive(std::move(rt_.backend));
  }
  auto why = [&](const std::string& what) {
    if (!shut_down) return reason;
    return std::make_exception_ptr(ShutDown(what + " did not complete: Accord shut down (" +
                                            whoShutDown(shut_down_by_, rt_.size) + ")"));
  };
  for (auto& op : rt_.queue.drain()) {
    op.entry.handle->fail(
        why(describeCollective(requestTypeName(op.request.type), op.request.name)));
  }
  for (auto* set : rt_.sets.memberSets()) set->pending.failAll(why);
}

// The cycle lock, and the loop while it runs (null before and after: no cycle to run).
struct CycleOwner {
  std::mutex mu;
  BackgroundLoop* loop = nullptr;
};

CycleOwner& cycleOwner() {
  static CycleOwner owner;
  return owner;
}

bool BackgroundLoop::step() noexcept {
  try {
    if (runOnce()) return true;
    log().debug("background loop finished: shutdown negotiated");
    finish();
  } catch (const Error& e) {
    log().error("background loop failed: {}", e.what());
    failEverything(std::current_exception(), false);
  } catch (const std::exception& e) {
    log().error("background loop failed: {}", e.what());
    failEverything(std::make_exception_ptr(
                       CommError(std::string("Accord's background loop failed: ") + e.what())),
                   false);
  }
  cycleOwner().loop = nullptr;
  return false;
}

void BackgroundLoop::finish() {
  if (tuner_) tuner_->finish();
  // Every rank leaves the loop in this same cycle, so the collective frees line up.
  for (auto* set : rt_.sets.memberSets()) set->transport.reset();
  failEverything(std::make_exception_ptr(ShutDown("Accord has shut down (" +
                                                  whoShutDown(shut_down_by_, rt_.size) + ")")),
                 true);
}

void BackgroundLoop::run() noexcept {
  CycleOwner& owner = cycleOwner();
  {
    std::lock_guard<std::mutex> lock(owner.mu);
    owner.loop = this;
  }
  for (;;) {
    Pause pause;
    {
      std::lock_guard<std::mutex> lock(owner.mu);
      if (!owner.loop) break;  // the loop ended in a cycle an application thread ran
      pause = pace();
    }
    if (pause.not_before) std::this_thread::sleep_until(*pause.not_before);
    if (pause.wait.count() > 0) rt_.queue.waitForWork(pause.wait, pause.yielding);
    std::lock_guard<std::mutex> lock(owner.mu);
    if (!owner.loop || !step()) break;
  }
}

thread_local bool t_background = false;

// An application thread's inline cycle (handle_state.h). Not from a thread already in a
// cycle: an allocator that the cycle calls, and that waits on a handle, must not take
// the lock its own thread holds.
bool runInlineCycle() {
  if (t_background) return false;
  CycleOwner& owner = cycleOwner();
  std::unique_lock<std::mutex> lock(owner.mu, std::try_to_lock);
  if (!lock.owns_lock() || !owner.loop || !owner.loop->runsInline()) return false;
  // The cycle runs as the background thread's do: allocators see it as the cycle's
  // thread, and a write to a dead peer's socket fails instead of raising SIGPIPE (see
  // runBackgroundLoop); the application's own mask comes back after it.
  sigset_t pipe, before;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &before);
  t_background = true;
  owner.loop->step();
  t_background = false;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return true;
}

}  // namespace

bool onBackgroundThread() { return t_background; }

void runBackgroundLoop(Runtime& rt) noexcept {
  t_background = true;
  // MPI's TCP transport writes to its sockets on this thread. A write to a peer that has
  // died raises SIGPIPE, whose default action ends the process without a word, before
  // the wait's deadline could report the dead peer as a CommError. Blocked here, the
  // write fails with EPIPE instead, the transfer never completes, and the deadline
  // names the rank. Only this thread's mask changes: the application's own handling of
  // SIGPIPE stays as it set it.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  BackgroundLoop loop(rt);
  detail::setInlineCycle(rt.config.inline_cycles ? &runInlineCycle : nullptr);
  loop.run();
  detail::setInlineCycle(nullptr);
}

}  // namespace accord

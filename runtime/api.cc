// init() and shutdown() (the queries of a running runtime: queries.cc).
//
// Accord works whether or not the application initialized MPI: it initializes MPI
// itself only when needed (and then finalizes it), and always talks on its own
// duplicates of MPI_COMM_WORLD (or of the communicator or the world ranks the
// application gave init, runtime/world_comm.h) so the application's traffic never
// mixes with its own.
//
// After a communication failure (a peer died or stopped answering) MPI cannot be torn
// down: freeing a communicator or finalizing waits for peers that will never come.
// shutdown() then returns without touching MPI, leaves the runtime's resources
// allocated, and the process should exit (with a non-zero code, so that the launcher
// reports the failure); Accord cannot be started again in that process.
//
// After a collective timed out (Timeout: ranks that never submitted it), the late ranks
// may never finalize MPI, and MPI_Finalize waits until every rank of the job does. Where
// Accord owns MPI, every rank's shutdown() first meets the others in a barrier; a rank
// that saw a collective time out waits there for at most ACCORD_SHUTDOWN_WAIT_TIME. If
// every rank came, MPI is finalized and the job can end cleanly (a late rank was only
// late, as in Horovod's stall test); if not, shutdown() tears Accord down, leaves MPI
// initialized and returns.
//
// A process forked after init() has a copy of the runtime but none of its threads:
// every call there fails at once (NotInitialized, naming the process that owns it)
// instead of waiting forever for a background thread that is not there.
#include "runtime/handle_state.h"
#include "runtime/host_split.h"
#include "runtime/init_steps.h"
#include "runtime/keep_alive.h"
#include "runtime/logging.h"
#include "runtime/mpi_check.h"
#include "runtime/peer_watch.h"
#include "runtime/runtime.h"
#include "runtime/timeline.h"
#include "runtime/world_comm.h"

#include <accord/mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include <pthread.h>
#include <unistd.h>  // environ, getpid

namespace accord {

namespace {

std::mutex g_lifetime_mu;  // serializes init() and shutdown()
std::unique_ptr<Runtime> g_runtime;
// g_runtime for the calls that read it without the lock (every collective): a thread
// that raced shutdown() holds a runtime that stays alive, retired rather than freed,
// and fails with ShutDown there instead of using freed memory.
std::atomic<Runtime*> g_live{nullptr};
bool g_initialized_mpi = false;  // Accord called MPI_Init_thread
bool g_finalized_mpi = false;
std::string g_broken;  // why a failed runtime could not be torn down: no restart
int g_owner_pid = 0;   // the process that called init()
// The first collective since init() that timed out, waiting for ranks that never
// submitted it; written by the background thread, read by shutdown() after joining it.
std::string g_timed_out;
// The parent's runtime in a forked child: kept, never used nor destroyed there.
Runtime* g_parents_runtime = nullptr;

// pthread_atfork's child handler, on the child's only thread. Takes no lock (another
// thread of the parent may have held it at the fork) and touches no MPI.
void forgetRuntimeInChild() {
  if (!g_runtime) return;
  detail::markForkedFrom(g_owner_pid);
  Timeline::instance().abandon();
  g_live.store(nullptr);
  g_parents_runtime = g_runtime.release();  // its destructor would free the parent's MPI state
}

// MPI_Finalize first deletes MPI_COMM_SELF's attributes, while MPI still works (MPI
// 4.0, 11.2.4): one whose delete callback shuts Accord down makes an application's
// MPI_Finalize before accord::shutdown() shut Accord down first, instead of pulling
// MPI out from under its background thread. It is set once per MPI initialization.
int shutdownBeforeFinalize(MPI_Comm, int, void*, void*) {
  if (!is_initialized()) return MPI_SUCCESS;  // Accord's own shutdown, or none
  log().warn("MPI_Finalize before accord::shutdown(): shutting Accord down first");
  {
    std::lock_guard<std::mutex> lock(g_lifetime_mu);
    if (g_runtime) g_runtime->finalize_mpi = false;  // the application is finalizing it
  }
  try {
    shutdown();
  } catch (const std::exception& e) {
    log().error("accord::shutdown in MPI_Finalize failed: {}", e.what());
  }
  return MPI_SUCCESS;
}

void shutDownAtFinalize() {
  static bool hooked = false;  // MPI is initialized once per process
  if (hooked) return;
  int key = MPI_KEYVAL_INVALID;
  hooked = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, shutdownBeforeFinalize, &key, nullptr) ==
               MPI_SUCCESS &&
           MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) == MPI_SUCCESS;
  if (!hooked) log().warn("could not hook MPI_Finalize: call accord::shutdown() before it");
}

void initMpi(Runtime& rt, const WorldSource& source) {
  int initialized = 0, finalized = 0;
  ACCORD_MPI_CHECK(MPI_Initialized(&initialized));
  ACCORD_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized) {
    throw NotInitialized(
        g_finalized_mpi
            ? "accord::init after accord::shutdown: Accord finalized MPI, which cannot be "
              "initialized twice; initialize MPI in the application to restart Accord"
            : "accord::init: MPI has been finalized; Accord needs MPI to be initialized (or "
              "never initialized, so that Accord initializes it)");
  }
  if (!initialized && source.kind == WorldSource::Kind::Comm) {
    throw NotInitialized(source.call() +
                         ": MPI is not initialized; a communicator exists only once the "
                         "application has initialized MPI (MPI_Init_thread, with "
                         "MPI_THREAD_MULTIPLE where it also calls MPI)");
  }
  int provided = 0;
  if (!initialized) {
    ACCORD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    g_initialized_mpi = true;
  } else {
    ACCORD_MPI_CHECK(MPI_Query_thread(&provided));
  }
  shutDownAtFinalize();
  // Also where an init() that failed (a bad setting) initialized it: this one owns it.
  rt.finalize_mpi = g_initialized_mpi;
  rt.world = makeWorld(source);
  // Failures become exceptions with MPI's message instead of aborting the job.
  ACCORD_MPI_CHECK(MPI_Comm_set_errhandler(rt.world, MPI_ERRORS_RETURN));
  ACCORD_MPI_CHECK(MPI_Comm_rank(rt.world, &rt.rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(rt.world, &rt.size));
  // shutdown()'s barrier before MPI_Finalize is a collective: only where every rank
  // will take part in it, that is, where Accord owns MPI on every rank.
  int owned = rt.finalize_mpi ? 1 : 0;
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &owned, 1, MPI_INT, MPI_MIN, rt.world));
  rt.finalize_mpi_everywhere = owned == 1;
  if (provided < MPI_THREAD_SERIALIZED) {
    log().warn(
        "MPI was initialized with thread level {} (< MPI_THREAD_SERIALIZED); Accord calls "
        "MPI from its background thread. Initialize MPI with MPI_Init_thread("
        "MPI_THREAD_MULTIPLE) if the application also calls MPI.",
        provided);
  }
}

}  // namespace

void noteStallTimeout(const std::string& error) {
  if (g_timed_out.empty()) g_timed_out = error;
}

Runtime& runtime(const char* what) {
  // Reading the pointer without the lock is safe: it changes only in init/shutdown,
  // which the application must not race with its own collectives.
  if (detail::forked()) throw NotInitialized(detail::forkedError(what));
  Runtime* rt = g_live.load(std::memory_order_acquire);
  if (!rt) {
    throw NotInitialized(std::string(what) +
                         ": Accord is not initialized; call accord::init() first");
  }
  return *rt;
}

Runtime::~Runtime() {
  if (loop.joinable()) loop.detach();
}

namespace {

// Returning from main without shutdown() shuts down as Horovod does: the other ranks'
// pending collectives then fail with ShutDown instead of waiting for this rank.
void shutdownAtExit() {
  if (!is_initialized()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    // The application finalized MPI under a running Accord: nothing can be torn down.
    log().error("MPI was finalized before accord::shutdown(); call accord::shutdown() first");
    g_live.store(nullptr);
    keepAlive(std::move(g_runtime));
    return;
  }
  try {
    shutdown();
  } catch (const std::exception& e) {
    log().error("accord::shutdown at exit failed: {}", e.what());
  }
}

}  // namespace

namespace {

void initOver(const WorldSource& source) {
  if (detail::forked()) throw NotInitialized(detail::forkedError("accord::init"));
  std::lock_guard<std::mutex> lock(g_lifetime_mu);
  checkSourceBeforeMpi(source);
  if (g_runtime) {
    if (sameRanks(source, g_runtime->world)) return;
    throw InvalidArgument(source.call() + ": Accord already runs in this process, over " +
                          std::to_string(g_runtime->size) +
                          " ranks that are not these; call accord::shutdown() first to "
                          "start it over these");
  }
  if (!g_broken.empty()) {
    throw NotInitialized(
        "accord::init: Accord cannot restart in this process after a "
        "communication failure (" +
        g_broken + "); start a new process");
  }
  auto rt = std::make_unique<Runtime>();
  std::string bad_setting;
  try {
    rt->config = Config::fromEnvironment();
  } catch (const InvalidArgument& e) {
    bad_setting = e.what();
  }
  initMpi(*rt, source);
  checkConfigParsed(*rt, bad_setting);
  configureLogging(rt->rank, rt->config.log_level);
  warnUnknownVariables(rt->rank);
  setHostName(rt->config.hostname);
  PeerWatch::instance().reset();  // nothing known of the other ranks of this job yet
  initTopology(*rt);
  checkConfigAgrees(*rt);
  checkAutotuneLog(*rt);
  rt->backend = makeBackend(rt->config, rt->local_size);
  std::vector<int> all(rt->size);
  std::iota(all.begin(), all.end(), 0);
  MPI_Comm global;
  ACCORD_MPI_CHECK(MPI_Comm_dup(rt->world, &global));
  auto transport = rt->backend->connect(global, all);
  rt->sets.add(ProcessSet::create(kGlobalProcessSet, all, std::move(transport), rt->rank,
                                  rt->config.cache_capacity));
  // The settings agree on every rank (checked above): rank 0 lists them, once a job.
  const auto world = describeWorld(source, rt->world);
  if (rt->rank == 0)
    log().info("initialized: {} ranks{}, {} per host\n{}", rt->size, world, rt->local_size,
               rt->config.describe());
  else
    log().info("initialized: {} ranks{}, {} per host", rt->size, world, rt->local_size);
  if (rt->rank == 0 && !rt->config.timeline.empty()) {
    // A timeline is a diagnostic: a path it cannot use is reported, not fatal.
    try {
      Timeline::instance().start(rt->config.timeline);
    } catch (const InvalidArgument& e) {
      log().error("ACCORD_TIMELINE: {}; no timeline is written", e.what());
    }
  }
  Runtime& ref = *rt;
  g_timed_out.clear();
  rt->loop = std::thread([&ref] { runBackgroundLoop(ref); });
  g_owner_pid = static_cast<int>(getpid());
  g_runtime = std::move(rt);
  g_live.store(g_runtime.get(), std::memory_order_release);
  static const bool registered = std::atexit(shutdownAtExit) == 0;
  if (!registered) log().warn("could not register Accord's shutdown at exit");
  static const bool fork_handled = pthread_atfork(nullptr, nullptr, forgetRuntimeInChild) == 0;
  if (!fork_handled) log().warn("could not register Accord's fork handler");
}

}  // namespace

void init() { initOver({}); }

void init(MPI_Comm comm) {
  WorldSource source;
  source.kind = WorldSource::Kind::Comm;
  source.comm = comm;
  initOver(source);
}

void init(const std::vector<int>& world_ranks) {
  WorldSource source;
  source.kind = WorldSource::Kind::Ranks;
  source.ranks = world_ranks;
  initOver(source);
}

std::vector<int> ranks_of(MPI_Comm comm) {
  return ranksIn(comm, runtime("accord::ranks_of").world, "accord::ranks_of");
}

void shutdown() {
  if (detail::forked()) throw NotInitialized(detail::forkedError("accord::shutdown"));
  if (onBackgroundThread())
    throw InvalidArgument(
        "accord::shutdown: called from an Allocator, inside Accord's background cycle, "
        "which would wait for itself to end; an Allocator must only allocate");
  std::lock_guard<std::mutex> lock(g_lifetime_mu);
  if (!g_runtime) return;
  auto& rt = *g_runtime;
  rt.queue.requestShutdown();
  // Returns within ACCORD_STALL_SHUTDOWN_TIME even when a peer stopped answering:
  // every wait of the loop has that deadline.
  rt.loop.join();
  Timeline::instance().stop();
  if (rt.failed) {
    g_broken = "a rank stopped answering or failed";
    log().warn(
        "shutdown after a communication failure: MPI is left as it is (finalizing would "
        "wait for the failed rank). Exit the process with a non-zero status; do not call "
        "MPI_Finalize.");
    g_live.store(nullptr);
    keepAlive(std::move(g_runtime));  // MPI may still use its memory
    return;
  }
  // The loop freed every transport in its last cycle, in step with the other ranks.
  rt.sets.takeAll();
  rt.backend.reset();
  const bool timed_out = !g_timed_out.empty();
  const bool owned = rt.finalize_mpi;
  const auto wait = rt.config.shutdown_wait_time;
  bool finalize = owned;
  std::string why;  // after a timeout, why MPI is left initialized
  if (owned && rt.finalize_mpi_everywhere) {
    if (!timed_out) {
      finalize = everyRankReachedShutdown(rt.world, std::nullopt);
    } else if (wait.count() <= 0) {
      finalize = false;
      why = " (ACCORD_SHUTDOWN_WAIT_TIME=0)";
    } else {
      finalize = everyRankReachedShutdown(rt.world, wait);
      if (finalize)
        log().info("every rank reached shutdown after the timeout: finalizing MPI");
      else
        why = ", and some rank did not reach shutdown within " + secondsText(wait) +
              " s (ACCORD_SHUTDOWN_WAIT_TIME)";
    }
  } else if (timed_out) {
    finalize = false;  // no barrier here to tell whether the late ranks will ever come
  }
  MPI_Comm_free(&rt.world);
  g_live.store(nullptr);
  // Retired, not freed: another thread may still be inside a collective's submission
  // with it (which the application must not let happen, but then it fails cleanly).
  keepAlive(std::move(g_runtime));
  if (timed_out && !finalize) {
    log().warn(
        "shutdown after a collective timed out ({}): MPI is left initialized, since "
        "MPI_Finalize waits until every rank of the job finalizes, the late ones too{}. Exit "
        "the process (with a non-zero status, so that the launcher reports the failure){}",
        g_timed_out.substr(0, g_timed_out.find('\n')), why,
        owned ? "" : " without calling MPI_Finalize");
    return;
  }
  if (finalize) {
    MPI_Finalize();
    g_finalized_mpi = true;
  }
}

bool is_initialized() { return g_live.load(std::memory_order_acquire) != nullptr; }

}  // namespace accord

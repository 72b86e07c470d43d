// init(), shutdown(), topology and process-set queries.
//
// Accord works whether or not the application initialized MPI: it initializes MPI
// itself only when needed (and then finalizes it), and always talks on its own
// duplicate of MPI_COMM_WORLD so the application's traffic never mixes with its own.
#include "logging.h"
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_check.h"
#include "ops/mpi/mpi_types.h"
#include "runtime.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include <unistd.h>  // environ

namespace accord {

namespace {

std::mutex g_lifetime_mu;  // serializes init() and shutdown()
std::unique_ptr<Runtime> g_runtime;
bool g_finalized_mpi = false;

void initMpi(Runtime& rt) {
  int initialized = 0;
  ACCORD_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    if (g_finalized_mpi) {
      throw NotInitialized(
          "accord::init after accord::shutdown: Accord finalized MPI, which cannot be "
          "initialized twice; initialize MPI in the application to restart Accord");
    }
    ACCORD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    rt.finalize_mpi = true;
  } else {
    ACCORD_MPI_CHECK(MPI_Query_thread(&provided));
  }
  ACCORD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &rt.world));
  // Failures become exceptions with MPI's message instead of aborting the job.
  ACCORD_MPI_CHECK(MPI_Comm_set_errhandler(rt.world, MPI_ERRORS_RETURN));
  ACCORD_MPI_CHECK(MPI_Comm_rank(rt.world, &rt.rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(rt.world, &rt.size));
  if (provided < MPI_THREAD_SERIALIZED) {
    log().warn(
        "MPI was initialized with thread level {} (< MPI_THREAD_SERIALIZED); Accord calls "
        "MPI from its background thread. Initialize MPI with MPI_Init_thread("
        "MPI_THREAD_MULTIPLE) if the application also calls MPI.",
        provided);
  }
}

void initTopology(Runtime& rt) {
  MPI_Comm local, cross;
  ACCORD_MPI_CHECK(
      MPI_Comm_split_type(rt.world, MPI_COMM_TYPE_SHARED, rt.rank, MPI_INFO_NULL, &local));
  ACCORD_MPI_CHECK(MPI_Comm_rank(local, &rt.local_rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(local, &rt.local_size));
  ACCORD_MPI_CHECK(MPI_Comm_split(rt.world, rt.local_rank, rt.rank, &cross));
  ACCORD_MPI_CHECK(MPI_Comm_rank(cross, &rt.cross_rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(cross, &rt.cross_size));
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);
}

// Fusion planning and the cache's bit vectors are computed locally on every rank, so
// the settings that shape them must agree.
void checkConfigAgrees(const Runtime& rt) {
  const std::pair<const char*, std::uint64_t> values[] = {
      {"ACCORD_FUSION_THRESHOLD", rt.config.fusion_threshold},
      {"ACCORD_CACHE_CAPACITY", rt.config.cache_capacity},
      // Every rank must cut a buffer into the same pieces and use the same transport.
      {"ACCORD_CHUNK_BYTES", rt.config.chunk_bytes},
      {"ACCORD_SHARED_MEMORY", rt.config.shared_memory},
  };
  for (const auto& [name, value] : values) {
    std::uint64_t lo = value, hi = value;
    ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, rt.world));
    ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, rt.world));
    if (lo != hi) {
      throw InvalidArgument(std::string(name) + " differs between ranks (" +
                            std::to_string(lo) + " vs " + std::to_string(hi) +
                            "): it must be the same on every rank");
    }
  }
}

// A misspelt variable would otherwise be ignored without a word.
void warnUnknownVariables(int rank) {
  if (rank != 0) return;  // every rank normally has the same environment: say it once
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  const auto unknown = Config::unknownVariables(environment);
  if (unknown.empty()) return;
  std::string known;
  for (const auto& name : Config::knownVariables()) known += (known.empty() ? "" : ", ") + name;
  for (const auto& name : unknown)
    log().warn("{} is not an Accord variable and is ignored (known: {})", name, known);
}

}  // namespace

Runtime& runtime(const char* what) {
  // Reading the pointer without the lock is safe: it changes only in init/shutdown,
  // which the application must not race with its own collectives.
  if (!g_runtime) {
    throw NotInitialized(std::string(what) +
                         ": Accord is not initialized; call accord::init() first");
  }
  return *g_runtime;
}

void init() {
  std::lock_guard<std::mutex> lock(g_lifetime_mu);
  if (g_runtime) return;
  auto rt = std::make_unique<Runtime>();
  rt->config = Config::fromEnvironment();  // a bad value fails before MPI is touched
  initMpi(*rt);
  configureLogging(rt->rank, rt->config.log_level);
  warnUnknownVariables(rt->rank);
  initTopology(*rt);
  checkConfigAgrees(*rt);
  initMpiOps();
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  cpu::setThreads(std::max(1, cores / rt->local_size));
  std::vector<int> all(rt->size);
  std::iota(all.begin(), all.end(), 0);
  auto global = ProcessSet::create(kGlobalProcessSet, all, rt->world, rt->rank,
                                  rt->config.cache_capacity);
  attachSharedMemory(rt->config, *global);
  rt->sets.add(std::move(global));
  log().info("initialized: {} ranks, {} per host\n{}", rt->size, rt->local_size,
             rt->config.describe());
  Runtime& ref = *rt;
  rt->loop = std::thread([&ref] { runBackgroundLoop(ref); });
  g_runtime = std::move(rt);
}

void shutdown() {
  std::lock_guard<std::mutex> lock(g_lifetime_mu);
  if (!g_runtime) return;
  auto& rt = *g_runtime;
  rt.queue.requestShutdown();
  rt.loop.join();
  for (auto& set : rt.sets.takeAll()) {
    if (set->comm != MPI_COMM_NULL && set->comm != rt.world) MPI_Comm_free(&set->comm);
  }
  freeMpiOps();
  MPI_Comm_free(&rt.world);
  const bool finalize = rt.finalize_mpi;
  g_runtime.reset();
  if (finalize) {
    MPI_Finalize();
    g_finalized_mpi = true;
  }
}

bool is_initialized() { return g_runtime != nullptr; }

int rank() { return runtime("accord::rank").rank; }
int size() { return runtime("accord::size").size; }
int local_rank() { return runtime("accord::local_rank").local_rank; }
int local_size() { return runtime("accord::local_size").local_size; }
int cross_rank() { return runtime("accord::cross_rank").cross_rank; }
int cross_size() { return runtime("accord::cross_size").cross_size; }

std::vector<int> process_set_ranks(ProcessSetId id) {
  return runtime("accord::process_set_ranks").sets.ranks(id);
}
bool process_set_included(ProcessSetId id) {
  return runtime("accord::process_set_included").sets.included(id);
}
int process_set_rank(ProcessSetId id) {
  return runtime("accord::process_set_rank").sets.rankIn(id);
}
int process_set_size(ProcessSetId id) {
  return static_cast<int>(runtime("accord::process_set_size").sets.ranks(id).size());
}

}  // namespace accord

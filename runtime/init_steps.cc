// The collective steps of init() and shutdown() that need none of api.cc's lifetime
// state (init_steps.h).
#include "runtime/init_steps.h"

#include "runtime/host_split.h"
#include "runtime/logging.h"
#include "runtime/mpi_check.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>  // environ

namespace accord {

// local_*: this rank among the ranks of its host. cross_*: its host among the hosts,
// numbered in the order of their lowest global ranks. Splitting by local rank would
// number hosts only where every host has as many ranks (with 1 + 2 ranks, the second
// host's local rank 1 would be alone and report host 0 of 1).
void initTopology(Runtime& rt) {
  MPI_Comm leaders;
  MPI_Comm local = splitByHost(rt.world, rt.rank);
  ACCORD_MPI_CHECK(MPI_Comm_rank(local, &rt.local_rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(local, &rt.local_size));
  const bool leader = rt.local_rank == 0;
  ACCORD_MPI_CHECK(MPI_Comm_split(rt.world, leader ? 0 : MPI_UNDEFINED, rt.rank, &leaders));
  int host[2] = {0, 0};  // index, count
  if (leader) {
    ACCORD_MPI_CHECK(MPI_Comm_rank(leaders, &host[0]));
    ACCORD_MPI_CHECK(MPI_Comm_size(leaders, &host[1]));
    MPI_Comm_free(&leaders);
  }
  ACCORD_MPI_CHECK(MPI_Bcast(host, 2, MPI_INT, 0, local));
  rt.cross_rank = host[0];
  rt.cross_size = host[1];
  MPI_Comm_free(&local);
}

// A bad ACCORD_* value on some ranks fails init() on every rank, rather than leaving the
// others waiting in init()'s collectives for ranks that never reach them.
void checkConfigParsed(const Runtime& rt, const std::string& error) {
  int first_bad = error.empty() ? rt.size : rt.rank;
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, rt.world));
  if (!error.empty()) throw InvalidArgument(error);
  if (first_bad < rt.size)
    throw InvalidArgument("accord::init: rank " + std::to_string(first_bad) +
                          " has an invalid ACCORD_* setting (its own error says which); the "
                          "settings must be valid, and the same, on every rank");
}

// Fusion planning and the cache's bit vectors are computed locally on every rank, so
// the settings that shape them must agree.
void checkConfigAgrees(const Runtime& rt) {
  // Which settings, and why, is runtime/settings.def's to say (kAgree).
  for (const auto& [name, value] : rt.config.mustAgree()) {
    std::uint64_t lo = value, hi = value;
    ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, rt.world));
    ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, rt.world));
    if (lo != hi) {
      throw InvalidArgument(name + " differs between ranks (" + std::to_string(lo) + " vs " +
                            std::to_string(hi) + "): it must be the same on every rank");
    }
  }
}

// Rank 0 writes ACCORD_AUTOTUNE_LOG from the background thread, where a file it cannot
// open could only be logged: tried here, it fails init() on every rank, naming it.
void checkAutotuneLog(const Runtime& rt) {
  if (!rt.config.autotune || rt.config.autotune_log.empty()) return;  // alike on every rank
  int opened = 1;
  if (rt.rank == 0) opened = std::ofstream(rt.config.autotune_log, std::ios::app) ? 1 : 0;
  ACCORD_MPI_CHECK(MPI_Bcast(&opened, 1, MPI_INT, 0, rt.world));
  if (!opened)
    throw InvalidArgument("ACCORD_AUTOTUNE_LOG='" + rt.config.autotune_log +
                          "': rank 0 cannot open it for writing");
}

// A misspelt variable, or a Horovod setting without a counterpart in Accord, would
// otherwise be ignored without a word.
void warnUnknownVariables(int rank) {
  if (rank != 0) return;  // every rank normally has the same environment: say it once
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  for (const auto& note : Config::unreadHorovodVariables(environment)) log().warn("{}", note);
  const auto unknown = Config::unknownVariables(environment);
  if (unknown.empty()) return;
  std::string known;
  for (const auto& name : Config::knownVariables()) known += (known.empty() ? "" : ", ") + name;
  for (const auto& name : unknown)
    log().warn("{} is not an Accord variable and is ignored (known: {})", name, known);
}

// Every rank of Accord's world has reached shutdown(): a barrier, waited for at most
// `bound` where one is given (then false if some rank did not come in time). A rank
// without a bound waits as MPI_Finalize itself would; the bounded ones leave without
// finalizing, and the launcher ends the job once they exit.
bool everyRankReachedShutdown(MPI_Comm world, std::optional<std::chrono::milliseconds> bound) {
  using Clock = std::chrono::steady_clock;
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(world, &request) != MPI_SUCCESS) {
    log().warn("shutdown: MPI_Ibarrier before MPI_Finalize failed; MPI is left initialized");
    return false;
  }
  const auto start = Clock::now();
  bool said = false;
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      log().warn("shutdown: the barrier before MPI_Finalize failed; MPI is left initialized");
      return false;
    }
    if (done) return true;
    const auto waited = Clock::now() - start;
    if (bound && waited >= *bound) return false;  // the request is left pending
    if (bound && !said && waited >= std::chrono::seconds(1)) {
      said = true;
      log().warn(
          "shutdown after a collective timed out: waiting up to {} s "
          "(ACCORD_SHUTDOWN_WAIT_TIME) for every rank to reach shutdown, so that MPI can "
          "be finalized",
          secondsText(*bound));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
}

}  // namespace accord

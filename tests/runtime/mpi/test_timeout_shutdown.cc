// shutdown() after a collective timed out, where Accord owns MPI (the application never
// calls MPI_Init), so that shutdown() is what finalizes it. Rank 0 submits an allreduce
// that the other ranks do not; it fails with Timeout after ACCORD_STALL_SHUTDOWN_TIME=1 s.
// MPI_Finalize waits until every rank of the job finalizes, so shutdown() first waits up
// to ACCORD_SHUTDOWN_WAIT_TIME for every rank to reach shutdown:
//
//   busy  the other ranks compute for 12 s, longer than the wait (1 s here): rank 0's
//         shutdown() returns within the wait and a margin, leaving MPI initialized; the
//         process then exits without MPI_Finalize, which the launcher reports, so the
//         verdict is rank 0's line.
//   late  the other ranks come after 3 s, within the wait (20 s here), try the
//         allreduce (ShutDown: rank 0 has shut Accord down) and shut down: every rank
//         finalizes MPI and the job exits 0, as Horovod's stall test expects.
#include <accord/accord.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Seconds = std::chrono::duration<double>;
constexpr double kMargin = 2.0;  // a loaded machine's scheduling

std::string allreduceOutcome(const std::string& name) {
  std::vector<float> x(4, 1.0f);
  accord::AllreduceOptions o;
  o.name = name;
  try {
    accord::allreduce({x.data(), accord::DType::Float32, {4}, {}}, o);
    return "ok";
  } catch (const accord::Timeout&) {
    return "Timeout";
  } catch (const accord::ShutDown&) {
    return "ShutDown";
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

double timedShutdown() {
  const auto start = std::chrono::steady_clock::now();
  accord::shutdown();
  return Seconds(std::chrono::steady_clock::now() - start).count();
}

bool mpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool late = argc > 1 && std::strcmp(argv[1], "late") == 0;
  // ACCORD_SHUTDOWN_WAIT_TIME, and how long the other ranks compute.
  const double wait = late ? 20.0 : 1.0;
  const auto away = std::chrono::seconds(late ? 3 : 12);
  setenv("ACCORD_STALL_SHUTDOWN_TIME", "1", 1);
  setenv("ACCORD_SHUTDOWN_WAIT_TIME", std::to_string(wait).c_str(), 1);
  accord::init();
  const int me = accord::rank();
  if (accord::size() < 2) {
    std::printf("needs 2 or more ranks\n");
    return 1;
  }
  int failures = 0;
  if (allreduceOutcome("timeout_shutdown.warm_up") != "ok") ++failures;
  if (me == 0) {
    const std::string kind = allreduceOutcome("timeout_shutdown.lonely");
    if (kind != "Timeout") {
      std::printf("[rank 0] FAILED: the lonely allreduce ended with %s\n", kind.c_str());
      ++failures;
    }
  } else {
    std::this_thread::sleep_for(away);  // never submits the lonely allreduce in time
    if (late) {
      const std::string kind = allreduceOutcome("timeout_shutdown.lonely");
      if (kind != "ShutDown") {
        std::printf("[rank %d] FAILED: the late allreduce ended with %s\n", me, kind.c_str());
        ++failures;
      }
    }
  }
  const double took = timedShutdown();
  if (!late && me == 0) {
    const bool in_time = took < wait + kMargin;
    if (!in_time) ++failures;
    std::printf("[rank 0] shutdown after a Timeout returned in %.2f s: %s\n", took,
                in_time ? "ok" : "too slow (waited for the late ranks)");
  } else if (late) {
    const bool finalized = mpiFinalized();
    if (!finalized) ++failures;
    std::printf("[rank %d] shutdown returned in %.2f s, MPI %s\n", me, took,
                finalized ? "finalized" : "FAILED: left initialized");
  } else {
    std::printf("[rank %d] late rank's shutdown returned in %.2f s\n", me, took);
  }
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

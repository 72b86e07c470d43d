// shutdown() after a collective timed out returns within the stall bound, however long
// the late ranks stay busy. MPI_Finalize would wait until every rank of the job
// finalizes, the late ones too, so Accord leaves MPI initialized after a Timeout.
//
// Accord owns MPI here (the application never calls MPI_Init), so that shutdown() is
// what would finalize it. Rank 0 submits an allreduce that the other ranks never do; it
// fails with Timeout after ACCORD_STALL_SHUTDOWN_TIME=1 s, and rank 0's shutdown() must
// then return within 2 s more while the others compute for kBusy. Rank 0 prints the
// verdict the test looks for; the process then exits without MPI_Finalize, which the
// launcher may report.
#include <accord/accord.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Seconds = std::chrono::duration<double>;
constexpr auto kBusy = std::chrono::seconds(12);  // the late ranks' computation
constexpr double kStallBound = 1.0;               // ACCORD_STALL_SHUTDOWN_TIME below
constexpr double kMargin = 2.0;                   // a loaded machine's scheduling

std::string allreduceOutcome(const std::string& name) {
  std::vector<float> x(4, 1.0f);
  accord::AllreduceOptions o;
  o.name = name;
  try {
    accord::allreduce({x.data(), accord::DType::Float32, {4}, {}}, o);
    return "ok";
  } catch (const accord::Timeout&) {
    return "Timeout";
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

double timedShutdown() {
  const auto start = std::chrono::steady_clock::now();
  accord::shutdown();
  return Seconds(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  setenv("ACCORD_STALL_SHUTDOWN_TIME", "1", 1);
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
    const double took = timedShutdown();
    const bool in_time = took < kStallBound + kMargin;
    if (!in_time) ++failures;
    std::printf("[rank 0] shutdown after a Timeout returned in %.2f s: %s\n", took,
                in_time ? "ok" : "too slow (waited for the late ranks)");
  } else {
    std::this_thread::sleep_for(kBusy);  // busy: never submits the lonely allreduce
    const double took = timedShutdown();
    std::printf("[rank %d] late rank's shutdown returned in %.2f s\n", me, took);
  }
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

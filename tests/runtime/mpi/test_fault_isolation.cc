// A job split in two groups, each running Accord over its own communicator
// (accord/mpi.h), loses a rank of the second group in the middle of an allreduce. The
// group that lost it must fail as any Accord job does (CommError within the stall
// bound, later collectives failing at once, shutdown returning), while the other group
// goes on unharmed: every allreduce it runs during and after the loss completes with
// the right values, and it shuts down as usual. mpirun is told not to end the job when
// the rank leaves (orte_abort_on_non_zero_status 0).
//
// mpirun -np 4 (or more): groups of the first half of the world ranks and the rest;
// the victim is the last world rank. Every rank but the victim prints
// "GROUP-PASSED by rank <world rank>" or "GROUP-FAILED ..." (run_expect_abort.cmake).
#include "fault_test.h"

#include <accord/mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr std::int64_t kElements = 256 * 1024;  // 1 MiB of float32

accord::Handle allreduce(std::vector<float>& x, int world_rank, int step) {
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((world_rank + 1) * (i % 7 + step % 5));
  accord::AllreduceOptions o;
  o.name = "isolation.grad";
  o.op = accord::ReduceOp::Sum;
  return accord::allreduce_async({x.data(), accord::DType::Float32, {kElements}, {}}, o);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int me = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int first_half = (n + 1) / 2, victim = n - 1;
  const bool lossy = me >= first_half;  // the group that loses a rank
  MPI_Comm group;
  MPI_Comm_split(MPI_COMM_WORLD, lossy ? 1 : 0, me, &group);
  long long member_sum = 0;  // sum of (world rank + 1) over the group
  for (int r = lossy ? first_half : 0; r < (lossy ? n : first_half); ++r) member_sum += r + 1;
  // The lossy group's allreduce at the fault goes in 4 KiB pieces, so that the victim
  // leaves with most of it still ahead (each group's runtime reads its own settings).
  if (lossy) setenv("ACCORD_CHUNK_BYTES", "4096", 1);
  accord::init(group);
  const accord_test::FaultSetup setup = accord_test::faultSetup(victim);
  std::vector<float> x(kElements);
  allreduce(x, me, 0).wait();  // connected before the fault
  MPI_Barrier(MPI_COMM_WORLD);

  const auto t0 = Clock::now();
  bool pass = false;
  std::string detail;
  if (!lossy) {
    // Through the other group's whole failure, and a second beyond its bound.
    int done = 0, wrong = 0, failed = 0;
    for (int step = 0;; ++step) {
      // Whether to go on, agreed through the application's own communicator.
      int over = since(t0) >= setup.limit + 1.0 * setup.scale ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_INT, MPI_MAX, group);
      if (over) break;
      std::string message;
      const std::string kind = accord_test::outcome(allreduce(x, me, step), message);
      if (kind != "ok") {
        ++failed;
        detail = kind + ": " + message;
        break;
      }
      for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i] != static_cast<float>(member_sum * static_cast<long long>(i % 7 + step % 5))) {
          ++wrong;
          break;
        }
      ++done;
    }
    const auto t1 = Clock::now();
    accord::shutdown();
    const double shut = since(t1);
    pass = failed == 0 && wrong == 0 && done > 0 && shut <= 1.0 * setup.scale;
    detail = std::to_string(done) + " allreduces over " + std::to_string(since(t0)) + " s, " +
             std::to_string(wrong) + " wrong, shutdown " + std::to_string(shut) + " s" +
             (detail.empty() ? "" : "; " + detail);
  } else {
    // 64 MiB of ones: the victim leaves once its first piece is summed, inside the
    // allreduce (leaving right after submitting it, the victim's background thread
    // could finish it first, as it did under ThreadSanitizer).
    std::vector<float> big(std::size_t{16} << 20, 1.0f);
    accord::AllreduceOptions o;
    o.name = "isolation.big";
    o.op = accord::ReduceOp::Sum;
    accord::Handle h = accord::allreduce_async(
        {big.data(), accord::DType::Float32, {static_cast<std::int64_t>(big.size())}, {}}, o);
    if (me == victim) accord_test::faultOnceChanged(big.data(), 1.0f, false);
    std::string message;
    const std::string kind = accord_test::outcome(h, message);
    const double waited = since(t0);
    const std::string later = accord_test::laterCollective("isolation.later", setup.scale);
    const auto t1 = Clock::now();
    accord::shutdown();
    const double shut = since(t1);
    pass = kind == "CommError" && waited <= setup.limit && later == "CommError" &&
           shut <= 1.0 * setup.scale;
    detail = kind + " after " + std::to_string(waited) + " s (limit " +
             std::to_string(setup.limit) + "), later: " + later + ", shutdown " +
             std::to_string(shut) + " s: " + message;
  }
  std::fprintf(stderr, "%s by rank %d (%s group): %s\n", pass ? "GROUP-PASSED" : "GROUP-FAILED", me,
               lossy ? "the lossy" : "the other", detail.c_str());
  std::fflush(stderr);
  // mpirun ends the job once a rank exits without MPI_Finalize (which would wait for the
  // rank that is gone): the survivors leave together, after every one has reported. On
  // one host MPI between the live ranks is safe enough for that after the loss.
  MPI_Barrier(setup.survivors);
  return pass ? 0 : 1;
}

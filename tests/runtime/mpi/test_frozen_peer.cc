// A rank that stops answering (here: SIGSTOP, as a debugger or a hung process would)
// must not hang the others. With ACCORD_STALL_SHUTDOWN_TIME=2 the survivors' next
// collective fails with CommError within seconds, on either negotiation transport,
// wherever in the cycle the rank froze, and every survivor blames the frozen rank and
// no other: where a survivor watches the frozen rank itself (the shared-memory AND,
// rank 0 gathering requests) and where it waits on a peer that is itself stuck behind
// the frozen rank (MPI's dissemination AND, a non-root rank waiting for rank 0), which
// the roll call after the deadline tells apart (ops/mpi/roll_call.h).
//
// run_expect_abort.cmake passes when the job ends and every survivor printed the
// marker below: rank 0 then kills the frozen rank, so mpirun cannot exit 0.
#include <catch2/catch.hpp>

#include "mpi_test.h"
#include "silent_ranks.h"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/types.h>
#include <unistd.h>

using namespace accord_test;

TEST_CASE("a rank that stops answering fails the others' collectives instead of hanging") {
  const int me = accord::rank();
  const int n = accord::size();
  const int frozen = n - 1;
  std::vector<int> pids(n);
  int pid = static_cast<int>(getpid());
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Comm survivors;
  MPI_Comm_split(MPI_COMM_WORLD, me == frozen ? 1 : 0, me, &survivors);

  Buffer warm(DType::Float32, {1024});
  accord::AllreduceOptions options;
  options.name = "frozen.warm_up";
  CHECK(finish(accord::allreduce_async(warm.view(), options), options.name).ok());
  MPI_Barrier(MPI_COMM_WORLD);
  if (n == 1) return;  // nobody to freeze
  if (me == frozen) {
    std::fprintf(stderr, "[rank %d] stopping myself with SIGSTOP\n", me);
    std::fflush(stderr);
    std::raise(SIGSTOP);  // rank 0 ends this process with SIGKILL
    return;
  }

  Buffer b(DType::Float32, {1 << 16});
  options.name = "frozen.after";
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome outcome = finish(accord::allreduce_async(b.view(), options), options.name);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("rank " << me << " after " << waited << " s: " << outcome.kind << ": " << outcome.message);
  auto pointsAtFrozen = [&](const std::string& message) { return blamesOnly(message, frozen); };
  const bool ok = outcome.kind == "CommError" && pointsAtFrozen(outcome.message) &&
                  waited >= 1.5 && waited <= 20.0;
  CHECK(outcome.kind == "CommError");
  CHECK(pointsAtFrozen(outcome.message));
  CHECK(waited >= 1.5);   // not before ACCORD_STALL_SHUTDOWN_TIME
  CHECK(waited <= 20.0);  // and not much after it
  // Later collectives fail at once with the same reason rather than hanging.
  options.name = "frozen.later";
  const Outcome later = attemptSubmit(
      [&] { return accord::allreduce_async(b.view(), options); }, options.name);
  INFO("later: " << later.kind << ": " << later.message);
  CHECK(contains(later.kind, "CommError"));
  CHECK(pointsAtFrozen(later.message));
  if (ok && contains(later.kind, "CommError")) {
    std::fprintf(stderr, "FROZEN-PEER-DETECTED by rank %d: %s\n", me, outcome.message.c_str());
    std::fflush(stderr);
  }
  MPI_Barrier(survivors);  // every survivor has printed before the job is torn down
  if (me == 0) kill(pids[frozen], SIGKILL);
  // The job cannot finish normally any more (MPI_Finalize would wait for the frozen
  // rank): leave at once, the test's verdict is the markers.
  std::_Exit(0);
}

int main(int argc, char** argv) { return runMain(argc, argv); }

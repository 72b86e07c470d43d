// A rank killed with SIGKILL in the middle of a run must not leave the others hanging:
// run_expect_abort.cmake passes when mpirun exits (non-zero) well within its limit.
// The last rank kills itself with collectives of its own and of the others in flight.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

using namespace accord_test;

TEST_CASE("a rank dies with SIGKILL mid-run") {
  const int me = accord::rank();
  const int n = accord::size();
  for (int step = 0; step < 1000; ++step) {
    Buffer a(DType::Float32, {1 << 16}), b(DType::Float64, {1000});
    accord::AllreduceOptions oa, ob;
    oa.name = "kill.a";
    ob.name = "kill.b." + std::to_string(step % 7);
    auto ha = accord::allreduce_async(a.view(), oa);
    auto hb = accord::allreduce_async(b.view(), ob);
    if (step == 20 && me == n - 1) {
      std::fprintf(stderr, "[rank %d] raising SIGKILL at step %d\n", me, step);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    // Survivors block here (or fail with CommError) until mpirun tears the job down.
    finish(ha, oa.name);
    finish(hb, ob.name);
  }
  // Only reached if no rank died or the survivors were never torn down.
  CHECK(n == 1);
}

int main(int argc, char** argv) { return runMain(argc, argv); }

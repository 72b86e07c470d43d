// Stall reports are per process set: a stall in one set must not silence the report of
// a stall in another. Rank 0 submits a tensor in the global set and one in a set of
// ranks {0, 1}; rank 1 submits neither. With ACCORD_STALL_CHECK_TIME=0.5 rank 0 must
// log a report for both sets (run_expect_output.cmake checks the log), and both tensors
// fail with Timeout after ACCORD_STALL_SHUTDOWN_TIME=2; the set's message says that its
// ranks are the set's, and which global ranks they are. Runs with 2 or 3 ranks.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

using namespace accord_test;

TEST_CASE("stalls in two process sets are both reported") {
  const int me = accord::rank();
  const auto pair = accord::add_process_set({0, 1});
  if (me == 0) {
    Buffer a(DType::Float32, {4}), b(DType::Float32, {4});
    accord::AllreduceOptions oa, ob;
    oa.name = "stall.global";
    ob.name = "stall.pair";
    ob.process_set = pair;
    auto ha = accord::allreduce_async(a.view(), oa);
    auto hb = accord::allreduce_async(b.view(), ob);
    const Outcome ra = finish(ha, oa.name), rb = finish(hb, ob.name);
    INFO(ra.kind << ": " << ra.message);
    INFO(rb.kind << ": " << rb.message);
    CHECK(ra.kind == "Timeout");
    CHECK(rb.kind == "Timeout");
    // Ranks in a set's messages are the set's: the message says so, and which they are.
    CHECK_FALSE(contains(ra.message, "within process set"));
    CHECK(contains(rb.message, "(ranks within process set " + std::to_string(pair) +
                                   ", whose ranks 0..1 are global ranks [0,1])"));
  }
  // The others wait here (on the application's own communicator) until rank 0 has
  // both Timeouts: a collective they submitted meanwhile would stall as well.
  MPI_Barrier(MPI_COMM_WORLD);
  accord::remove_process_set(pair);
}

int main(int argc, char** argv) { return runMain(argc, argv); }

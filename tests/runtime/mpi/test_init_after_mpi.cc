// An application that owns MPI: it calls MPI_Init_thread itself before accord::init,
// runs its own MPI traffic on MPI_COMM_WORLD from the main thread while Accord's
// collectives are in flight, calls accord::shutdown and then MPI_Finalize itself
// (runMain does the init/finalize). Accord must keep to its duplicate communicator,
// leave MPI initialized at shutdown, and report the same topology MPI does.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

TEST_CASE("topology matches MPI's") {
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(accord::is_initialized());
  CHECK(accord::rank() == rank);
  CHECK(accord::size() == size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = -1, local_size = -1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  CHECK(accord::local_rank() == local_rank);
  CHECK(accord::local_size() == local_size);
  // mpirun here starts every rank on this one host.
  CHECK(accord::cross_rank() == 0);
  CHECK(accord::cross_size() == 1);
}

TEST_CASE("the application's own MPI traffic between and during collectives") {
  const int me = accord::rank();
  const int n = accord::size();
  const auto ranks = allRanks(n);
  for (int step = 0; step < 25; ++step) {
    Buffer grad(DType::Float32, {4099});
    grad.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i + step); });
    accord::AllreduceOptions options;
    options.name = "app.grad";  // same name every step: the response-cache path
    auto h = accord::allreduce_async(grad.view(), options);
    Buffer bcast(DType::Int32, {10});
    bcast.fill([&](std::int64_t i) { return tagValue(DType::Int32, me, step, i); });
    accord::BroadcastOptions bo;
    bo.name = "app.bcast";
    bo.root = step % n;
    auto hb = accord::broadcast_async(bcast.view(), bo);

    // While Accord works: the application's collectives and point-to-point messages on
    // MPI_COMM_WORLD, with tags and sizes a runtime might also use.
    long long mine = me + step, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == static_cast<long long>(n) * (n - 1) / 2 + static_cast<long long>(n) * step);
    std::vector<int> out(256, me * 1000 + step), in(256, -1);
    MPI_Sendrecv(out.data(), 256, MPI_INT, (me + 1) % n, 0, in.data(), 256, MPI_INT,
                 (me + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(in[255] == ((me + n - 1) % n) * 1000 + step);
    int root_value = me == 0 ? 4242 + step : -1;
    MPI_Bcast(&root_value, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(root_value == 4242 + step);

    const auto e1 = describe(finish(h, options.name), options.name);
    const auto e2 = describe(finish(hb, bo.name), bo.name);
    INFO("step " << step << ": " << e1 << e2);
    CHECK(e1.empty());
    CHECK(e2.empty());
    const auto d1 = compareElements(DType::Float32, grad.data(), grad.numel(), [&](std::int64_t i) {
      return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i + step);
    });
    const auto d2 = compareElements(DType::Int32, bcast.data(), 10, [&](std::int64_t i) {
      return tagValue(DType::Int32, step % n, step, i);
    });
    INFO("step " << step << ": " << d1 << d2);
    CHECK(d1.empty());
    CHECK(d2.empty());
  }
}

namespace {

// After accord::shutdown: MPI must still be initialized and usable by the application.
int mpiStillUsable() {
  int finalized = 1, initialized = 0;
  MPI_Finalized(&finalized);
  MPI_Initialized(&initialized);
  if (finalized || !initialized) {
    std::fprintf(stderr, "[rank %d] FAILED: accord::shutdown finalized MPI the application owns\n",
                 worldRank());
    return 1;
  }
  int one = 1, n = 0, size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (n != size) {
    std::fprintf(stderr, "[rank %d] FAILED: MPI_Allreduce after shutdown gave %d\n", worldRank(), n);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MainOptions options;
  options.after_shutdown = mpiStillUsable;
  return runMain(argc, argv, options);
}

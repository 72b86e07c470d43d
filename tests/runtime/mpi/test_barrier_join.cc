// barrier and join.
//
// barrier: no rank leaves before the slowest rank arrives. join: ranks run different
// numbers of steps; a rank that has joined contributes the neutral element (zeros for
// Sum) to the others' allreduces, and every rank's join handle names the last rank to
// join.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

std::int64_t nowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Step {
  DType dtype;
  ReduceOp op;
};
// Join's neutral elements: zeros for Sum and Average, and for Min/Max/Product whatever
// leaves the others' result unchanged. Average divides by every rank, the joined ones
// too, as a sum of zeros from them would. A step's tensors differ in dtype or op, so
// none is fused with another: each is reduced on its own.
constexpr Step kSteps[] = {{DType::Float32, ReduceOp::Sum},     {DType::Float32, ReduceOp::Average},
                           {DType::Float64, ReduceOp::Average}, {DType::Int32, ReduceOp::Sum},
                           {DType::Float64, ReduceOp::Min},     {DType::Int64, ReduceOp::Max},
                           {DType::Int8, ReduceOp::Product}};

// Rank r runs steps(r) steps, then joins; returns what its join handle said.
void runUnevenSteps(const std::function<int(int)>& steps, const std::string& tag, int want_last) {
  const int me = accord::rank();
  const int n = accord::size();
  for (int s = 0; s < steps(me); ++s) {
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<accord::Handle> handles;
    std::vector<std::string> names;
    for (const Step& kind : kSteps) {
      auto b = std::make_unique<Buffer>(kind.dtype, Shape{33});
      b->fill([&](std::int64_t i) { return fillValue(kind.dtype, kind.op, me, i + s); });
      accord::AllreduceOptions options;
      options.name = tag + "." + str(kind.dtype) + "." + str(kind.op);  // same name every step
      options.op = kind.op;
      handles.push_back(accord::allreduce_async(b->view(), options));
      names.push_back(options.name);
      buffers.push_back(std::move(b));
    }
    std::vector<int> active;  // ranks that have not joined before step s
    for (int r = 0; r < n; ++r)
      if (steps(r) > s) active.push_back(r);
    for (std::size_t k = 0; k < handles.size(); ++k) {
      const auto error = describe(finish(handles[k], names[k]), names[k]);
      INFO("step " << s << ": " << error);
      CHECK(error.empty());
      const Step kind = kSteps[k];
      const auto diff = compareElements(
          kind.dtype, buffers[k]->data(), 33,
          [&](std::int64_t i) {
            const double value = reducedValue(kind.dtype, kind.op, active, i + s);
            return kind.op == ReduceOp::Average ? value * double(active.size()) / n : value;
          },
          toleranceFor(kind.dtype, kind.op));
      INFO(names[k] << " at step " << s << " with " << active.size() << " active rank(s): " << diff);
      CHECK(diff.empty());
    }
  }
  accord::Handle joined = accord::join_async();
  const auto error = describe(finish(joined, tag + " join"), tag + " join");
  INFO(error);
  CHECK(error.empty());
  if (error.empty()) CHECK(joined.last_joined_rank() == want_last);
}

}  // namespace

TEST_CASE("barrier: nobody leaves before the slowest rank arrives") {
  // The last rank arrives 400 ms after the others. Each rank then compares the moment it
  // left with the moment the last rank arrived, which that rank broadcasts afterwards:
  // steady_clock is the host's monotonic clock, common to every process of the host
  // (the multi-rank tests run on one host). Comparing a rank's own wait with the 400 ms
  // instead would fail whenever a loaded machine (2 cores, or a sanitizer build) starts
  // a rank's clock late.
  const int me = accord::rank();
  const int n = accord::size();
  MPI_Barrier(MPI_COMM_WORLD);  // the application's own traffic: align the start
  if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const std::int64_t arrived = nowNanoseconds();
  const auto error = describe(finish(accord::barrier_async(), "barrier"), "barrier");
  const std::int64_t left = nowNanoseconds();
  std::int64_t last_arrived = arrived;
  MPI_Bcast(&last_arrived, 1, MPI_INT64_T, n - 1, MPI_COMM_WORLD);
  INFO(error);
  CHECK(error.empty());
  INFO("rank " << me << " left the barrier " << (left - last_arrived) / 1e6
               << " ms after the last rank arrived");
  CHECK(left >= last_arrived);
}

TEST_CASE("barrier: 20 in a row, and the blocking call") {
  for (int k = 0; k < 20; ++k) {
    const auto error = describe(finish(accord::barrier_async(), "barrier"), "barrier");
    INFO("barrier #" << k << ": " << error);
    CHECK(error.empty());
  }
  const auto outcome = attempt([] { accord::barrier(); });
  INFO(describe(outcome, "accord::barrier()"));
  CHECK(outcome.ok());
}

TEST_CASE("join: the last rank has the most steps") {
  const int n = accord::size();
  runUnevenSteps([](int r) { return 2 + r; }, "join.a", n - 1);
}

TEST_CASE("join: again, now rank 0 has the most steps and one rank has none") {
  const int n = accord::size();
  // Ranks 1..n-1 run n-1-r steps (the last none at all); rank 0 runs n + 1.
  runUnevenSteps([n](int r) { return r == 0 ? n + 1 : n - 1 - r; }, "join.b", 0);
}

TEST_CASE("join: broadcast and allgather fail at once while the last rank has joined") {
  // Only reductions run around a joined rank. Broadcast and allgather fail on the ranks
  // that submitted them, without waiting, as in Horovod: scripts written for it catch
  // the error and join in turn.
  const int me = accord::rank();
  const int n = accord::size();
  if (n < 2) return;
  if (me == n - 1) {
    accord::Handle joined = accord::join_async();
    const auto error = describe(finish(joined, "join"), "join");
    INFO(error);
    CHECK(error.empty());
    return;
  }
  Buffer b(DType::Float32, {4});
  b.fill([&](std::int64_t i) { return tagValue(DType::Float32, me, 0, i); });
  accord::BroadcastOptions bo;
  bo.name = "join.bcast";
  const Outcome eb = finish(accord::broadcast_async(b.view(), bo), bo.name);
  CHECK(eb.kind == "InvalidArgument");
  CHECK(eb.message == "broadcast 'join.bcast': rank " + std::to_string(n - 1) +
                          " has joined; broadcast is not supported while a rank has joined "
                          "(only allreduce is)");
  Output out(DType::Float32);
  accord::AllgatherOptions go;
  go.name = "join.gather";
  const Outcome eg = finish(accord::allgather_async(b.view(), out.allocator(), go), go.name);
  CHECK(eg.kind == "InvalidArgument");
  CHECK(contains(eg.message, "allgather is not supported while a rank has joined"));
  accord::Handle joined = accord::join_async();
  const auto ej = describe(finish(joined, "join"), "join");
  INFO(ej);
  CHECK(ej.empty());
}

TEST_CASE("join: collectives after a join work as before") {
  const int me = accord::rank();
  Buffer b(DType::Float32, {64});
  b.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  accord::AllreduceOptions options;
  options.name = "join.after";
  const auto error = describe(finish(accord::allreduce_async(b.view(), options), options.name),
                              options.name);
  INFO(error);
  CHECK(error.empty());
  const auto ranks = allRanks(accord::size());
  const auto diff = compareElements(DType::Float32, b.data(), 64, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
  });
  INFO(diff);
  CHECK(diff.empty());
  const auto joined = attempt([] { accord::join(); });
  INFO(describe(joined, "blocking join"));
  CHECK(joined.ok());
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// reducescatter, then allgather in place, then allreduce: a sharded optimizer's step
// (ZeRO). On one host all three run through the same shared-memory window, so these
// cases interleave them the ways a training step does: one tensor at a time, many at
// once (fused), and the three kinds submitted together. Sizes leave ranks an empty
// block (fewer elements than ranks), do not divide by the rank count, and span many
// pieces (the .small_pieces run cuts them at 4 KiB). Expected values are computed here;
// a gathered parameter must also be bitwise the same on every rank, since each block is
// reduced by one rank alone.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

struct Scaled {
  ReduceOp op;
  double pre, post;
};

// One parameter of `numel` elements and its gradient, through one step.
struct Param {
  std::string name;
  DType dtype;
  Scaled how;
  std::int64_t numel;
  std::unique_ptr<Buffer> grad;   // every rank's full gradient
  std::unique_ptr<Output> shard;  // this rank's reduced block of it
  std::vector<std::byte> full;    // the parameter, gathered in place
  std::unique_ptr<Buffer> other;  // an allreduced tensor between the gathers
  accord::Handle handle;

  Param(DType d, Scaled s, std::int64_t n, const std::string& tag)
      : name(tag + "." + str(d) + "." + str(s.op) + ".x" +
             std::to_string(static_cast<int>(s.pre * s.post)) + "." + std::to_string(n)),
        dtype(d),
        how(s),
        numel(n),
        grad(std::make_unique<Buffer>(d, Shape{n})),
        shard(std::make_unique<Output>(d)),
        full(static_cast<std::size_t>(n) * accord::dtype_size(d)),
        other(std::make_unique<Buffer>(d, Shape{n})) {
    const int me = accord::rank();
    grad->fill([&](std::int64_t i) { return fillValue(d, s.op, me, i); }, kFillPeriod);
    other->fill([&](std::int64_t i) { return fillValue(d, ReduceOp::Sum, me, i + 5); },
                kFillPeriod);
  }

  std::size_t elem() const { return accord::dtype_size(dtype); }
  std::int64_t first() const { return firstRow(numel, accord::rank(), accord::size()); }
  std::int64_t rows() const { return rowsFor(numel, accord::rank(), accord::size()); }
  double expected(std::int64_t i) const {
    return how.pre * how.post * reducedValue(dtype, how.op, allRanks(accord::size()), i);
  }
  Tolerance tolerance() const {
    return toleranceFor(dtype, how.pre * how.post == 1.0 ? how.op : ReduceOp::Average);
  }

  void reduceScatter() {
    accord::ReducescatterOptions o;
    o.name = name + ".rs";
    o.op = how.op;
    o.prescale = how.pre;
    o.postscale = how.post;
    handle = accord::reducescatter_async(grad->view(), shard->allocator(), o);
  }

  void checkShard() {
    const auto error = describe(finish(handle, name + ".rs"), name + ".rs");
    INFO(error);
    CHECK(error.empty());
    CHECK(shard->shape() == Shape{rows()});
    if (!error.empty() || shard->shape() != Shape{rows()}) return;
    const std::int64_t at = first();
    const auto diff = compareElements(
        dtype, shard->data(), rows(), [&](std::int64_t i) { return expected(at + i); },
        tolerance());
    INFO(name << ".rs on rank " << accord::rank() << ", elements from " << at << ": " << diff);
    CHECK(diff.empty());
  }

  // The shard goes to its place in the parameter, which is then gathered in place: the
  // input is the output's own block, as the sharded optimizer gathers.
  void allgather() {
    char* base = reinterpret_cast<char*>(full.data());
    std::memset(base, 0xEE, full.size());  // the others' blocks must be overwritten
    if (rows() > 0)
      std::memcpy(base + first() * elem(), shard->data(),
                  static_cast<std::size_t>(rows()) * elem());
    accord::TensorView in;
    in.data = base + first() * elem();
    in.dtype = dtype;
    in.shape = {rows()};
    accord::AllgatherOptions o;
    o.name = name + ".ag";
    const std::int64_t n = numel;
    const DType d = dtype;
    handle = accord::allgather_async(
        in,
        [base, n, d](const Shape& shape) {
          accord::TensorView out;
          out.data = shape == Shape{n} ? base : nullptr;  // a wrong shape fails the handle
          out.dtype = d;
          out.shape = shape;
          return out;
        },
        o);
  }

  void checkFull() {
    const auto error = describe(finish(handle, name + ".ag"), name + ".ag");
    INFO(error);
    CHECK(error.empty());
    if (!error.empty()) return;
    const auto diff = compareElements(
        dtype, full.data(), numel, [&](std::int64_t i) { return expected(i); }, tolerance());
    INFO(name << ".ag on rank " << accord::rank() << ": " << diff);
    CHECK(diff.empty());
    // Bitwise the same everywhere: every rank holds rank 0's bytes.
    std::vector<std::byte> root = full;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
    const bool same = root == full;
    INFO(name << ".ag on rank " << accord::rank() << " differs from rank 0's bytes");
    CHECK(same);
  }

  void allreduce() {
    accord::AllreduceOptions o;
    o.name = name + ".ar";
    handle = accord::allreduce_async(other->view(), o);
  }

  void checkOther() {
    const auto error = describe(finish(handle, name + ".ar"), name + ".ar");
    INFO(error);
    CHECK(error.empty());
    const int n = accord::size();
    const auto diff = compareElements(dtype, other->data(), numel, [&](std::int64_t i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += fillValue(dtype, ReduceOp::Sum, r, i + 5);
      return sum;
    });
    INFO(name << ".ar on rank " << accord::rank() << ": " << diff);
    CHECK(diff.empty());
  }
};

constexpr DType kDTypes[] = {DType::Float32, DType::BFloat16, DType::Float16};
constexpr Scaled kScalings[] = {{ReduceOp::Sum, 1, 1},
                                {ReduceOp::Average, 1, 1},
                                {ReduceOp::Sum, 0.5, 4},
                                {ReduceOp::Average, 0.5, 4}};

// 1 and 2: some ranks get an empty block; 2n + 1: one rank gets one more; 4099: several
// pieces at 4 KiB; 1'100'003: several at the default 1 MiB too (a reduce-scatter round
// takes 1 MiB / ranks of each block, and a block of up to two such pieces goes whole).
std::vector<std::int64_t> sizes() {
  const std::int64_t n = accord::size();
  return {1, 2, 2 * n + 1, 4099, 1'100'003};
}

std::vector<std::unique_ptr<Param>> params(const std::string& tag) {
  std::vector<std::unique_ptr<Param>> all;
  for (DType dtype : kDTypes)
    for (const Scaled& how : kScalings)
      for (std::int64_t numel : sizes())
        all.push_back(std::make_unique<Param>(dtype, how, numel, tag));
  return all;
}

}  // namespace

TEST_CASE("sharded step: one tensor at a time, reducescatter, allgather, allreduce") {
  for (auto& p : params("one")) {
    p->reduceScatter();
    p->checkShard();
    p->allgather();
    p->checkFull();
    p->allreduce();
    p->checkOther();
  }
}

TEST_CASE("sharded step: every tensor's collective in flight at once, kind by kind") {
  auto all = params("batch");
  for (auto& p : all) p->reduceScatter();
  for (auto& p : all) p->checkShard();
  for (auto& p : all) p->allgather();
  for (auto& p : all) p->checkFull();
  for (auto& p : all) p->allreduce();
  for (auto& p : all) p->checkOther();
}

TEST_CASE("sharded step: the three kinds in flight together") {
  // Tensor k's reduce-scatter, tensor k-1's gather and tensor k-2's allreduce are
  // submitted in the same breath, so a cycle's responses mix the three kinds.
  auto all = params("mixed");
  const std::size_t n = all.size();
  for (std::size_t k = 0; k < n + 2; ++k) {
    if (k < n) all[k]->reduceScatter();
    if (k >= 1 && k - 1 < n) all[k - 1]->allgather();
    if (k >= 2) all[k - 2]->allreduce();
    if (k < n) all[k]->checkShard();
    if (k >= 1 && k - 1 < n) all[k - 1]->checkFull();
    if (k >= 2) all[k - 2]->checkOther();
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

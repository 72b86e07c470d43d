// How reducing responses run on NCCL (ops/nccl/reduction.h), without a GPU: the NCCL
// operation and the scaling pass after it, for every op, dtype class and set size.
#include "ops/nccl/reduction.h"

#include <catch2/catch.hpp>

using namespace accord;
using accord::nccl::ReduceKind;

namespace {

Response reducing(ReduceOp op, DType dtype, double prescale = 1.0, double postscale = 1.0) {
  Response r;
  r.type = ResponseType::Allreduce;
  r.op = op;
  r.dtype = dtype;
  r.prescale = prescale;
  r.postscale = postscale;
  return r;
}

}  // namespace

TEST_CASE("NCCL: Sum, Min, Max and Product map one to one, scaled only by postscale", "[nccl]") {
  const std::pair<ReduceOp, ReduceKind> ops[] = {{ReduceOp::Sum, ReduceKind::Sum},
                                                 {ReduceOp::Min, ReduceKind::Min},
                                                 {ReduceOp::Max, ReduceKind::Max},
                                                 {ReduceOp::Product, ReduceKind::Product}};
  for (auto [op, kind] : ops) {
    const auto plan = nccl::planReduction(reducing(op, DType::Float32), 3);
    CHECK(plan.op == kind);
    CHECK(plan.post.isOne());
    const auto scaled = nccl::planReduction(reducing(op, DType::Int32, 1.0, 0.5), 4);
    CHECK(scaled.post.factor == 0.5);
    CHECK(scaled.post.divisor == 1.0);
  }
}

TEST_CASE("NCCL: Average is ncclAvg only where it gives the host path's bits", "[nccl]") {
  // Floating point, a power-of-two set, nothing else scaling: NCCL's own average.
  for (DType dtype : {DType::BFloat16, DType::Float32, DType::Float64}) {
    for (int n : {1, 2, 4, 8}) {
      const auto plan = nccl::planReduction(reducing(ReduceOp::Average, dtype), n);
      CHECK(plan.op == ReduceKind::Average);
      CHECK(plan.post.isOne());
    }
  }
  // float16: ncclAvg's x / n in float16 rounds below 2^-14 (3 * 2^-24 / 2 becomes
  // 2 * 2^-24), where the host path divides the exact sum: always the sum, then the pass.
  for (int n : {2, 4}) {
    const auto half = nccl::planReduction(reducing(ReduceOp::Average, DType::Float16), n);
    CHECK(half.op == ReduceKind::Sum);
    CHECK(half.post.divisor == n);
  }
  // Three ranks: the sum, divided once afterwards.
  auto three = nccl::planReduction(reducing(ReduceOp::Average, DType::Float32), 3);
  CHECK(three.op == ReduceKind::Sum);
  CHECK(three.post.divisor == 3.0);
  CHECK(three.post.factor == 1.0);
  // Integers: always the sum, divided (and truncated) afterwards.
  auto ints = nccl::planReduction(reducing(ReduceOp::Average, DType::Int64), 4);
  CHECK(ints.op == ReduceKind::Sum);
  CHECK(ints.post.divisor == 4.0);
  // Any scale factor: the sum, then one pass with both.
  auto pre = nccl::planReduction(reducing(ReduceOp::Average, DType::Float32, 2.0), 2);
  CHECK(pre.op == ReduceKind::Sum);
  CHECK(pre.post.divisor == 2.0);
  auto post = nccl::planReduction(reducing(ReduceOp::Average, DType::Float32, 1.0, 0.25), 2);
  CHECK(post.op == ReduceKind::Sum);
  CHECK(post.post.factor == 0.25);
  CHECK(post.post.divisor == 2.0);
}

TEST_CASE("NCCL reduces every dtype but int16, uint16 and bool", "[nccl]") {
  for (int d = 0; d < kNumDTypes; ++d) {
    const auto dtype = static_cast<DType>(d);
    const bool staged = dtype == DType::Int16 || dtype == DType::UInt16 || dtype == DType::Bool;
    CHECK(nccl::reducesOnNccl(dtype) == !staged);
  }
}

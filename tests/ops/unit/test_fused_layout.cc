// The fused-layout planner every backend lays fused responses out with: offsets and
// their alignment, which tensors are copied and which regions take the op's neutral
// element, padding to a multiple of elements, zero-size tensors, several dtypes, and
// the rank-major allgather layout; and localInputs, which decides what is local.
#include "ops/common/checks.h"
#include "ops/common/fused_layout.h"

#include <accord/error.h>
#include <catch2/catch.hpp>

#include <vector>

using namespace accord;

namespace {

using Sizes = std::vector<std::size_t>;
using Regions = std::vector<Region>;

}  // namespace

TEST_CASE("fused reduction: tensors back to back at element alignment", "[fused_layout]") {
  // float32: 3, 10 and 2 elements, all local (the host path's layout).
  const auto plan = planFusedReduction({12, 40, 8}, {true, true, true}, 4, 4, 1);
  CHECK(plan.offset == Sizes{0, 12, 52});
  CHECK(plan.bytes == Sizes{12, 40, 8});
  CHECK(plan.used == 60);
  CHECK(plan.count == 15);
  CHECK(plan.copied == Sizes{0, 1, 2});
  CHECK(plan.neutral.empty());
}

TEST_CASE("fused reduction: offsets at the requested alignment", "[fused_layout]") {
  // float32 at 16-byte offsets (the device path's layout): gaps after 12 and 40 bytes.
  const auto plan = planFusedReduction({12, 40, 0, 8}, {true, true, true, true}, 4, 16, 1);
  CHECK(plan.offset == Sizes{0, 16, 64, 64});
  CHECK(plan.used == 80);  // the last tensor's end, aligned
  CHECK(plan.count == 20);
  for (std::size_t at : plan.offset) CHECK(at % 16 == 0);
  // The empty tensor is neither copied nor filled.
  CHECK(plan.copied == Sizes{0, 1, 3});
  CHECK(plan.neutral.empty());
}

TEST_CASE("fused reduction: joined tensors take the neutral element", "[fused_layout]") {
  // Tensor 1 is not this rank's (joined, or its input failed the check): it is
  // filled, not copied; the others are copied in and back out.
  const auto plan = planFusedReduction({8, 24, 16}, {true, false, true}, 8, 16, 1);
  CHECK(plan.offset == Sizes{0, 16, 48});
  CHECK(plan.copied == Sizes{0, 2});
  CHECK(plan.neutral == Regions{{16, 24}});
  CHECK(plan.count == 8);

  const auto joined = planFusedReduction({8, 24, 16}, {false, false, false}, 8, 8, 1);
  CHECK(joined.copied.empty());
  CHECK(joined.neutral == Regions{{0, 8}, {8, 24}, {32, 16}});
  CHECK(joined.count == 6);
}

TEST_CASE("fused reduction: padding to a multiple of elements is neutral", "[fused_layout]") {
  // 5 + 2 float32 elements back to back, padded to a multiple of 4 (a host of 4 ranks).
  const auto plan = planFusedReduction({20, 8}, {true, true}, 4, 4, 4);
  CHECK(plan.used == 28);
  CHECK(plan.count == 8);
  CHECK(plan.neutral == Regions{{28, 4}});
  // Already a multiple: no padding.
  const auto even = planFusedReduction({16}, {true}, 4, 4, 4);
  CHECK(even.count == 4);
  CHECK(even.neutral.empty());
  // With 16-byte offsets the padding starts at the aligned end.
  const auto aligned = planFusedReduction({12, 4}, {true, false}, 4, 16, 3);
  CHECK(aligned.used == 32);
  CHECK(aligned.count == 9);
  CHECK(aligned.neutral == Regions{{16, 4}, {32, 4}});
}

TEST_CASE("fused reduction: zero-size tensors and empty groups", "[fused_layout]") {
  const auto plan = planFusedReduction({0, 0}, {true, false}, 4, 16, 4);
  CHECK(plan.offset == Sizes{0, 0});
  CHECK(plan.used == 0);
  CHECK(plan.count == 0);
  CHECK(plan.copied.empty());
  CHECK(plan.neutral.empty());

  const auto none = planFusedReduction({}, {}, 2, 16, 1);
  CHECK(none.count == 0);
  CHECK(none.neutral.empty());
}

TEST_CASE("fused reduction: every element size", "[fused_layout]") {
  // int8, float16, float32, float64: 2 elements each, at 16-byte offsets.
  for (std::size_t elem : {1, 2, 4, 8}) {
    INFO("element of " << elem << " bytes");
    const std::size_t bytes = 2 * elem;
    const auto plan = planFusedReduction({bytes, bytes, bytes}, {true, false, true}, elem, 16, 1);
    CHECK(plan.offset == Sizes{0, 16, 32});
    CHECK(plan.used == 48);
    CHECK(plan.count == 48 / elem);
    CHECK(plan.copied == Sizes{0, 2});
    CHECK(plan.neutral == Regions{{16, bytes}});
  }
  // float64 tensors of 3 elements: 24 bytes each, the next offset at 32.
  const auto doubles = planFusedReduction({24, 24}, {true, true}, 8, 16, 1);
  CHECK(doubles.offset == Sizes{0, 32});
  CHECK(doubles.count == 8);
  // Back to back, the count is the sum of the elements.
  const auto halves = planFusedReduction({6, 2, 10}, {true, true, false}, 2, 2, 1);
  CHECK(halves.offset == Sizes{0, 6, 8});
  CHECK(halves.count == 9);
  CHECK(halves.neutral == Regions{{8, 10}});
}

TEST_CASE("fused reduction: refuses layouts that split elements", "[fused_layout]") {
  CHECK_THROWS_AS(planFusedReduction({16}, {true}, 8, 4, 1), InvalidArgument);    // alignment
  CHECK_THROWS_AS(planFusedReduction({6}, {true}, 4, 4, 1), InvalidArgument);     // bytes
  CHECK_THROWS_AS(planFusedReduction({8}, {true}, 4, 4, 0), InvalidArgument);     // multiple
  CHECK_THROWS_AS(planFusedReduction({8, 8}, {true}, 4, 4, 1), InvalidArgument);  // flags
}

TEST_CASE("fused gather: rank-major blocks and each tensor's output", "[fused_layout]") {
  // Two tensors over three ranks; rank 1 sends no rows of tensor 0.
  const std::vector<std::vector<std::size_t>> bytes{{8, 0, 4}, {12, 16, 20}};
  const auto plan = planFusedGather(bytes, 3);
  CHECK(plan.total == 60);
  CHECK(plan.blocks == Regions{{0, 20}, {20, 16}, {36, 24}});
  CHECK(plan.at[0] == Sizes{0, 20, 36});
  CHECK(plan.at[1] == Sizes{8, 20, 40});
  // Each output holds the ranks' rows in rank order.
  CHECK(plan.dst[0] == Sizes{0, 8, 8});
  CHECK(plan.dst[1] == Sizes{0, 12, 28});
  // Blocks tile the buffer.
  std::size_t end = 0;
  for (const Region& b : plan.blocks) {
    CHECK(b.at == end);
    end += b.bytes;
  }
  CHECK(end == plan.total);
}

TEST_CASE("fused gather: one tensor, nothing sent, a wrong row", "[fused_layout]") {
  const auto one = planFusedGather({{4, 8}}, 2);
  CHECK(one.blocks == Regions{{0, 4}, {4, 8}});
  CHECK(one.dst[0] == Sizes{0, 4});
  const auto empty = planFusedGather({{0, 0, 0}}, 3);
  CHECK(empty.total == 0);
  CHECK(empty.blocks == Regions{{0, 0}, {0, 0}, {0, 0}});
  CHECK_THROWS_AS(planFusedGather({{4, 8}}, 3), InvalidArgument);
}

TEST_CASE("localInputs: joined, failed and mismatched entries are not local", "[fused_layout]") {
  std::vector<float> a(4), b(2), c(3);
  Response response;
  response.names = {"a", "b", "c", "d"};
  response.shapes = {{4}, {2}, {3}, {5}};
  TensorEntry ea, eb, ec;
  ea.tensor = TensorView{a.data(), DType::Float32, {4}, Device::cpu()};
  eb.tensor = TensorView{b.data(), DType::Float64, {1}, Device::cpu()};  // 8 bytes, wrong dtype
  ec.tensor = TensorView{c.data(), DType::Float32, {3}, Device::cpu()};
  ec.error = std::make_exception_ptr(InvalidArgument("failed before"));
  std::vector<TensorEntry*> entries{&ea, &eb, &ec, nullptr};

  const std::vector<bool> local = localInputs(response, entries);
  CHECK(local == std::vector<bool>{true, false, false, false});
  CHECK_FALSE(ea.error);
  REQUIRE(eb.error);
  CHECK_THROWS_WITH(std::rethrow_exception(eb.error),
                    Catch::Contains("allreduce 'b'") && Catch::Contains("float64"));
}

TEST_CASE("anyOverlap: a shared byte, and only that, is an overlap", "[fused_layout]") {
  using S = Span;
  CHECK_FALSE(anyOverlap({}, {}));
  CHECK_FALSE(anyOverlap({{10, 20}}, {{20, 30}, {0, 10}}));  // touching is not sharing
  CHECK(anyOverlap({{10, 20}}, {{19, 30}}));
  CHECK(anyOverlap({{10, 20}}, {{0, 11}}));
  CHECK(anyOverlap({{10, 20}}, {{12, 13}}));  // inside
  CHECK(anyOverlap({{12, 13}}, {{10, 20}}));  // around
  CHECK_FALSE(anyOverlap({{15, 15}}, {{10, 20}}));  // empty spans hold no byte
  CHECK_FALSE(anyOverlap({{10, 20}}, {{15, 15}}));
  // A long span hidden behind a short one that starts after it.
  CHECK(anyOverlap({{0, 100}, {10, 20}}, {{50, 60}}));
  CHECK(anyOverlap({{10, 20}, {0, 100}}, {{50, 60}}));  // in any order
  // Many spans side by side, the written ones in the gaps.
  std::vector<S> read, gaps;
  for (std::uintptr_t i = 0; i < 100; ++i) {
    read.push_back({i * 10, i * 10 + 6});
    gaps.push_back({i * 10 + 6, i * 10 + 10});
  }
  CHECK_FALSE(anyOverlap(read, gaps));
  gaps.push_back({555, 556});
  CHECK(anyOverlap(read, gaps));
}

TEST_CASE("anyOverlap: spans of one list sharing a byte", "[fused_layout]") {
  CHECK_FALSE(anyOverlap(std::vector<Span>{}));
  CHECK_FALSE(anyOverlap(std::vector<Span>{{0, 10}, {10, 20}, {30, 40}}));
  CHECK_FALSE(anyOverlap(std::vector<Span>{{30, 40}, {0, 10}, {10, 20}}));  // any order
  CHECK(anyOverlap(std::vector<Span>{{0, 10}, {9, 20}}));
  CHECK(anyOverlap(std::vector<Span>{{0, 10}, {0, 10}}));                  // twice the same
  CHECK(anyOverlap(std::vector<Span>{{0, 100}, {10, 20}, {50, 60}}));      // inside another
  CHECK(anyOverlap(std::vector<Span>{{50, 60}, {10, 20}, {0, 100}}));
  CHECK_FALSE(anyOverlap(std::vector<Span>{{0, 10}, {5, 5}, {10, 20}}));   // empty: no byte
}

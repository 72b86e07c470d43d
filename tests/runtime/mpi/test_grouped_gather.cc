// grouped_allgather and grouped_reducescatter: a group's members are negotiated and
// completed as one unit under one handle, each into its own output. Members whose rows
// differ by rank (none on rank 0), trailing dimensions, a member above the fusion
// threshold; the same groups again on later steps (answered by the response cache),
// blocking and asynchronous; a group of members of different dtypes is refused on every
// rank before anything is queued.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

constexpr std::int64_t kCols = 3;

// Member m's rows on rank r; member 3 is above the default fusion threshold.
std::int64_t gatherRows(int m, int r) {
  if (m == 0) return r;  // none on rank 0
  if (m == 3) return 3000 + r;
  return m + r + 1;
}

void gatherStep(DType dtype, const std::string& name, bool blocking) {
  const int me = accord::rank();
  const int n = accord::size();
  std::vector<std::unique_ptr<Buffer>> inputs;
  std::vector<std::unique_ptr<Output>> outputs;
  std::vector<accord::TensorView> views;
  std::vector<accord::Allocator> allocators;
  for (int m = 0; m < 4; ++m) {
    inputs.push_back(std::make_unique<Buffer>(dtype, Shape{gatherRows(m, me), kCols}));
    inputs.back()->fill([&](std::int64_t i) {
      return tagValue(dtype, me, static_cast<int>(i / kCols) + m, i % kCols);
    });
    outputs.push_back(std::make_unique<Output>(dtype));
    views.push_back(inputs.back()->view());
    allocators.push_back(outputs.back()->allocator());
  }
  accord::AllgatherOptions options;
  options.name = name;
  std::string error;
  if (blocking) {
    try {
      accord::grouped_allgather(views, allocators, options);
    } catch (const std::exception& e) {
      error = e.what();
    }
  } else {
    error = describe(finish(accord::grouped_allgather_async(views, allocators, options), name),
                     name);
  }
  INFO(name << ": " << error);
  CHECK(error.empty());
  if (!error.empty()) return;
  for (int m = 0; m < 4; ++m) {
    std::vector<int> owner;
    std::vector<int> local;
    for (int r = 0; r < n; ++r)
      for (std::int64_t k = 0; k < gatherRows(m, r); ++k) {
        owner.push_back(r);
        local.push_back(static_cast<int>(k));
      }
    const Shape want{static_cast<std::int64_t>(owner.size()), kCols};
    INFO(name << " member " << m << ": shape " << accord::shape_string(outputs[m]->shape()));
    CHECK(outputs[m]->calls() == 1);
    CHECK(outputs[m]->shape() == want);
    if (outputs[m]->shape() != want) continue;
    const auto diff = compareElements(dtype, outputs[m]->data(), outputs[m]->numel(),
                                      [&](std::int64_t i) {
                                        const auto row = static_cast<std::size_t>(i / kCols);
                                        return tagValue(dtype, owner[row], local[row] + m,
                                                        i % kCols);
                                      });
    INFO(name << " member " << m << ": " << diff);
    CHECK(diff.empty());
  }
}

void scatterStep(DType dtype, ReduceOp op, const std::string& name) {
  const int me = accord::rank();
  const int n = accord::size();
  const std::vector<std::int64_t> rows{1, 2 * n + 1, 4000};
  std::vector<std::unique_ptr<Buffer>> inputs;
  std::vector<std::unique_ptr<Output>> outputs;
  std::vector<accord::TensorView> views;
  std::vector<accord::Allocator> allocators;
  for (std::size_t m = 0; m < rows.size(); ++m) {
    inputs.push_back(std::make_unique<Buffer>(dtype, Shape{rows[m], kCols}));
    inputs.back()->fill([&](std::int64_t i) {
      return fillValue(dtype, op, me, i + static_cast<std::int64_t>(m));
    }, kFillPeriod);
    outputs.push_back(std::make_unique<Output>(dtype));
    views.push_back(inputs.back()->view());
    allocators.push_back(outputs.back()->allocator());
  }
  accord::ReducescatterOptions options;
  options.name = name;
  options.op = op;
  const auto error =
      describe(finish(accord::grouped_reducescatter_async(views, allocators, options), name), name);
  INFO(name << ": " << error);
  CHECK(error.empty());
  if (!error.empty()) return;
  const auto ranks = allRanks(n);
  for (std::size_t m = 0; m < rows.size(); ++m) {
    const Shape want{rowsFor(rows[m], me, n), kCols};
    CHECK(outputs[m]->shape() == want);
    if (outputs[m]->shape() != want) continue;
    const std::int64_t offset = firstRow(rows[m], me, n) * kCols;
    const auto diff = compareElements(
        dtype, outputs[m]->data(), outputs[m]->numel(),
        [&](std::int64_t i) {
          return reducedValue(dtype, op, ranks, offset + i + static_cast<std::int64_t>(m));
        },
        toleranceFor(dtype, op));
    INFO(name << " member " << m << ": " << diff);
    CHECK(diff.empty());
  }
}

}  // namespace

TEST_CASE("grouped allgather: members of every shape, step after step") {
  for (DType dtype : {DType::Float32, DType::Int64, DType::BFloat16})
    for (int step = 0; step < 3; ++step) {
      gatherStep(dtype, "gg." + str(dtype), step == 1);
    }
}

TEST_CASE("grouped reducescatter: members of every size, step after step") {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max})
    for (int step = 0; step < 3; ++step) scatterStep(DType::Float32, op, "gs." + str(op));
}

TEST_CASE("grouped allgather: members of different dtypes are refused before queueing") {
  Buffer a(DType::Float32, Shape{2, kCols});
  Buffer b(DType::Float64, Shape{2, kCols});
  Output oa(DType::Float32);
  Output ob(DType::Float64);
  accord::AllgatherOptions options;
  options.name = "gg.mixed";
  try {
    accord::grouped_allgather_async({a.view(), b.view()}, {oa.allocator(), ob.allocator()},
                                    options);
    FAIL("a group of float32 and float64 was accepted");
  } catch (const accord::InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("gg.mixed") && Catch::Contains("mixes float32"));
  }
  try {
    accord::grouped_reducescatter_async({a.view()}, {}, {});
    FAIL("a group without outputs was accepted");
  } catch (const accord::InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("1 inputs but 0 output allocators"));
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// grouped_allreduce: a group is negotiated and completed as one unit with one handle.
// Every dtype x op with members of sizes 0, 1, odd and above the fusion threshold;
// several groups in flight, submitted in a different order on each rank; a group of one.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

struct Group {
  std::string name;
  ReduceOp op;
  std::vector<std::unique_ptr<Buffer>> members;
  accord::Handle handle;
};

Group make(DType dtype, ReduceOp op, const std::vector<std::int64_t>& sizes, const std::string& name) {
  const int me = accord::rank();
  Group g{name, op, {}, {}};
  for (std::size_t m = 0; m < sizes.size(); ++m) {
    g.members.push_back(std::make_unique<Buffer>(dtype, Shape{sizes[m]}));
    // Offset by the member index so that members are told apart.
    g.members.back()->fill([&](std::int64_t i) {
      return fillValue(dtype, op, me, i + static_cast<std::int64_t>(m));
    }, kFillPeriod);
  }
  return g;
}

void submit(Group& g) {
  std::vector<accord::TensorView> views;
  for (auto& b : g.members) views.push_back(b->view());
  accord::AllreduceOptions options;
  options.name = g.name;
  options.op = g.op;
  g.handle = accord::grouped_allreduce_async(views, options);
}

void check(Group& g) {
  const auto ranks = allRanks(accord::size());
  const auto error = describe(finish(g.handle, g.name), g.name);
  INFO(error);
  CHECK(error.empty());
  for (std::size_t m = 0; m < g.members.size(); ++m) {
    const Buffer& b = *g.members[m];
    const auto diff = compareElements(
        b.dtype(), b.data(), b.numel(),
        [&](std::int64_t i) {
          return reducedValue(b.dtype(), g.op, ranks, i + static_cast<std::int64_t>(m));
        },
        toleranceFor(b.dtype(), g.op));
    INFO(g.name << "." << m << ": " << diff);
    CHECK(diff.empty());
  }
}

}  // namespace

TEST_CASE("grouped allreduce: every dtype x op, members of every size") {
  for (DType dtype : kAllDTypes) {
    std::vector<Group> groups;
    for (ReduceOp op : kAllOps) {
      auto sizes = testSizes(dtype);
      sizes.push_back(5);  // a second small member after the big one
      groups.push_back(make(dtype, op, sizes, "grp." + str(dtype) + "." + str(op)));
    }
    for (auto& g : groups) submit(g);
    for (auto& g : groups) check(g);
  }
}

TEST_CASE("grouped allreduce: 30 groups submitted in a different order on each rank") {
  std::vector<Group> groups;
  for (int t = 0; t < 30; ++t) {
    const DType dtype = t % 2 ? DType::Float32 : DType::Int64;
    std::vector<std::int64_t> sizes;
    for (int m = 0; m < 1 + t % 6; ++m) sizes.push_back(1 + (t * 13 + m * 101) % 3000);
    groups.push_back(make(dtype, t % 3 ? ReduceOp::Sum : ReduceOp::Min, sizes,
                          "grp.order." + std::to_string(t)));
  }
  // Rank r rotates the submission order by 7r and reverses it on odd ranks.
  std::vector<std::size_t> order(groups.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::rotate(order.begin(), order.begin() + (7 * accord::rank()) % 30, order.end());
  if (accord::rank() % 2) std::reverse(order.begin(), order.end());
  for (std::size_t k : order) submit(groups[k]);
  for (auto& g : groups) check(g);
}

TEST_CASE("grouped allreduce: a group of one, and groups beside plain allreduces") {
  const int me = accord::rank();
  Group single = make(DType::Float64, ReduceOp::Max, {9}, "grp.single");
  submit(single);
  Buffer plain(DType::Float32, {100});
  plain.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  accord::AllreduceOptions options;
  options.name = "grp.beside.plain";
  auto h = accord::allreduce_async(plain.view(), options);
  Group second = make(DType::Float32, ReduceOp::Sum, {100, 200, 300}, "grp.beside");
  submit(second);
  check(single);
  check(second);
  const auto error = describe(finish(h, options.name), options.name);
  INFO(error);
  CHECK(error.empty());
  const auto ranks = allRanks(accord::size());
  const auto diff = compareElements(DType::Float32, plain.data(), 100, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("grouped allreduce: members of different dtypes are rejected on every rank") {
  // A group is fused into one buffer, so its members must share dtype (and op, scale).
  Buffer a(DType::Float32, {4}), b(DType::Int32, {4});
  accord::AllreduceOptions options;
  options.name = "grp.mixed";
  const auto outcome = attemptSubmit(
      [&] { return accord::grouped_allreduce_async({a.view(), b.view()}, options); }, options.name);
  INFO(describe(outcome, options.name));
  // At submission or through the handle: either way every rank sees it, nothing hangs.
  CHECK((outcome.kind == "InvalidArgument" || outcome.kind == "handle:InvalidArgument"));
  CHECK(contains(outcome.message, "grp.mixed"));
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// alltoall: every dtype with uneven splits (some zero), equal parts (empty splits), a
// tensor above the fusion threshold, and bad splits rejected before communication.
// Rank `src` sends rows(src, dst) rows to `dst`; the k-th of them holds
// tagValue(dtype, src * 8 + dst, k, c). received_splits() must say how many rows came
// from each rank, and the output holds them in source-rank order.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

using Splits = std::function<std::int64_t(int src, int dst)>;

struct Exchange {
  std::string name;
  std::int64_t row_elems;
  std::unique_ptr<Buffer> input;
  std::unique_ptr<Output> output;
  accord::Handle handle;
};

double element(DType dtype, int src, int dst, std::int64_t k, std::int64_t c) {
  return tagValue(dtype, src * 8 + dst, static_cast<int>(k), c);
}

Exchange submit(DType dtype, const std::string& name, const Splits& rows, std::int64_t cols,
                bool pass_splits) {
  const int me = accord::rank();
  const int n = accord::size();
  std::vector<std::int64_t> splits;
  std::int64_t total = 0;
  for (int dst = 0; dst < n; ++dst) {
    splits.push_back(rows(me, dst));
    total += rows(me, dst);
  }
  Exchange x{name, cols, std::make_unique<Buffer>(dtype, Shape{total, cols}),
             std::make_unique<Output>(dtype), {}};
  std::int64_t row = 0;
  for (int dst = 0; dst < n; ++dst) {
    for (std::int64_t k = 0; k < rows(me, dst); ++k, ++row) {
      for (std::int64_t c = 0; c < cols; ++c) x.input->set(row * cols + c, element(dtype, me, dst, k, c));
    }
  }
  accord::AlltoallOptions options;
  options.name = name;
  if (pass_splits) options.splits = splits;
  x.handle = accord::alltoall_async(x.input->view(), x.output->allocator(), options);
  return x;
}

void check(Exchange& x, const Splits& rows) {
  const int me = accord::rank();
  const int n = accord::size();
  const DType dtype = x.input->dtype();
  const auto error = describe(finish(x.handle, x.name), x.name);
  INFO(error);
  CHECK(error.empty());
  if (!error.empty()) return;

  std::vector<std::int64_t> want_splits;
  std::vector<double> want;
  for (int src = 0; src < n; ++src) {
    want_splits.push_back(rows(src, me));
    for (std::int64_t k = 0; k < rows(src, me); ++k)
      for (std::int64_t c = 0; c < x.row_elems; ++c) want.push_back(element(dtype, src, me, k, c));
  }
  const std::int64_t total_rows = static_cast<std::int64_t>(want.size()) / x.row_elems;
  INFO(x.name << ": output shape " << accord::shape_string(x.output->shape()));
  CHECK(x.output->calls() == 1);
  CHECK(x.output->shape() == Shape{total_rows, x.row_elems});
  CHECK(x.handle.received_splits() == want_splits);
  if (x.output->shape() != Shape{total_rows, x.row_elems}) return;
  const auto diff = compareElements(dtype, x.output->data(), x.output->numel(),
                                    [&](std::int64_t i) { return want[static_cast<std::size_t>(i)]; });
  INFO(x.name << ": " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("alltoall: every dtype with uneven splits, some of them zero") {
  const Splits uneven = [](int src, int dst) { return std::int64_t{(src + 2 * dst) % 3}; };
  std::vector<Exchange> all;
  for (DType dtype : kAllDTypes) all.push_back(submit(dtype, "a2a." + str(dtype), uneven, 3, true));
  for (auto& x : all) check(x, uneven);
}

TEST_CASE("alltoall: equal parts from empty splits, zero rows, one element") {
  const Splits two = [](int, int) { return std::int64_t{2}; };
  const Splits none = [](int, int) { return std::int64_t{0}; };
  const Splits one_to_last = [](int, int dst) {
    return std::int64_t{dst == accord::size() - 1 ? 1 : 0};
  };
  auto equal = submit(DType::Int32, "a2a.equal", two, 5, false);
  auto empty = submit(DType::Float32, "a2a.empty", none, 4, true);
  auto single = submit(DType::Float64, "a2a.single", one_to_last, 1, true);
  check(equal, two);
  check(empty, none);
  check(single, one_to_last);
}

TEST_CASE("alltoall: above the fusion threshold") {
  const std::int64_t cols = 64;
  const std::int64_t base = kAboveFusionBytes / (4 * cols) / 2;
  const Splits big = [&](int src, int dst) { return base + src + 3 * dst; };
  auto x = submit(DType::Float32, "a2a.big", big, cols, true);
  check(x, big);
}

TEST_CASE("alltoall: splits that do not add up are rejected at once") {
  const int n = accord::size();
  Buffer in(DType::Float32, {static_cast<std::int64_t>(n) * 2, 2});
  Output out(DType::Float32);
  accord::AlltoallOptions wrong_sum;
  wrong_sum.name = "a2a.badsum";
  wrong_sum.splits.assign(static_cast<std::size_t>(n), 3);  // 3n rows claimed, 2n present
  const auto sum = attemptSubmit(
      [&] { return accord::alltoall_async(in.view(), out.allocator(), wrong_sum); }, "a2a.badsum");
  INFO(describe(sum, "splits summing to more rows than the input has"));
  CHECK(sum.kind == "InvalidArgument");

  accord::AlltoallOptions wrong_count;
  wrong_count.name = "a2a.badcount";
  wrong_count.splits.assign(static_cast<std::size_t>(n) + 1, 0);
  wrong_count.splits[0] = static_cast<std::int64_t>(n) * 2;
  const auto count = attemptSubmit(
      [&] { return accord::alltoall_async(in.view(), out.allocator(), wrong_count); },
      "a2a.badcount");
  INFO(describe(count, "one split more than there are ranks"));
  CHECK(count.kind == "InvalidArgument");

  Buffer odd(DType::Float32, {static_cast<std::int64_t>(n) * 2 + 1});
  accord::AlltoallOptions equal;
  equal.name = "a2a.indivisible";
  const auto indivisible = attemptSubmit(
      [&] { return accord::alltoall_async(odd.view(), out.allocator(), equal); },
      "a2a.indivisible");
  INFO(describe(indivisible, "empty splits with a first dimension that does not divide"));
  if (n > 1) CHECK(indivisible.kind == "InvalidArgument");
}

int main(int argc, char** argv) { return runMain(argc, argv); }

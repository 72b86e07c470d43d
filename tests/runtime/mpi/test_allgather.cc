// allgather: every dtype, a first dimension that differs per rank (rank 0 may send no
// rows at all), trailing dimensions, a tensor above the fusion threshold, many gathers
// in flight. Rank r's element (k, c) is tagValue(dtype, r, k, c); the output holds
// rank 0's rows, then rank 1's, ...
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

struct Gather {
  std::string name;
  std::int64_t row_elems;  // elements per row (product of the trailing dims)
  std::unique_ptr<Buffer> input;
  std::unique_ptr<Output> output;
  accord::Handle handle;
};

// `rows(r)` is rank r's first dimension.
Gather submit(DType dtype, const std::string& name, const std::function<std::int64_t(int)>& rows,
              const Shape& trailing) {
  const int me = accord::rank();
  Shape shape{rows(me)};
  shape.insert(shape.end(), trailing.begin(), trailing.end());
  Gather g{name,
           accord::num_elements(trailing),
           std::make_unique<Buffer>(dtype, shape),
           std::make_unique<Output>(dtype),
           {}};
  g.input->fill([&](std::int64_t i) {
    return tagValue(dtype, me, static_cast<int>(i / g.row_elems), i % g.row_elems);
  });
  accord::AllgatherOptions options;
  options.name = name;
  g.handle = accord::allgather_async(g.input->view(), g.output->allocator(), options);
  return g;
}

void check(Gather& g, const std::function<std::int64_t(int)>& rows, const Shape& trailing) {
  const int n = accord::size();
  const DType dtype = g.input->dtype();
  const auto error = describe(finish(g.handle, g.name), g.name);
  INFO(error);
  CHECK(error.empty());
  if (!error.empty()) return;

  std::int64_t total_rows = 0;
  std::vector<int> owner;           // output row -> source rank
  std::vector<std::int64_t> local;  // output row -> row index on the source rank
  for (int r = 0; r < n; ++r) {
    for (std::int64_t k = 0; k < rows(r); ++k) {
      owner.push_back(r);
      local.push_back(k);
    }
    total_rows += rows(r);
  }
  Shape want{total_rows};
  want.insert(want.end(), trailing.begin(), trailing.end());
  INFO(g.name << ": output shape " << accord::shape_string(g.output->shape()) << ", expected "
              << accord::shape_string(want));
  CHECK(g.output->calls() == 1);
  CHECK(g.output->shape() == want);
  if (g.output->shape() != want) return;
  const auto diff =
      compareElements(dtype, g.output->data(), g.output->numel(), [&](std::int64_t i) {
        const auto row = static_cast<std::size_t>(i / g.row_elems);
        return tagValue(dtype, owner[row], static_cast<int>(local[row]), i % g.row_elems);
      });
  INFO(g.name << ": " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("allgather: every dtype, first dimension differs per rank") {
  // Rank r sends r rows (rank 0 none) or r + 1 rows; trailing dims [3] and [2,3].
  const std::function<std::int64_t(int)> kRowsFrom0 = [](int r) { return r; };
  const std::function<std::int64_t(int)> kRowsFrom1 = [](int r) { return r + 1; };
  std::vector<Gather> gathers;
  for (DType dtype : kAllDTypes) {
    gathers.push_back(submit(dtype, "ag.r." + str(dtype), kRowsFrom0, {3}));
    gathers.push_back(submit(dtype, "ag.r+1." + str(dtype), kRowsFrom1, {2, 3}));
  }
  std::size_t k = 0;
  for (DType dtype : kAllDTypes) {
    (void)dtype;
    check(gathers[k++], kRowsFrom0, {3});
    check(gathers[k++], kRowsFrom1, {2, 3});
  }
}

TEST_CASE("allgather: empty on every rank, one element, one-dimensional") {
  const std::function<std::int64_t(int)> kNone = [](int) { return 0; };
  const std::function<std::int64_t(int)> kOne = [](int) { return 1; };
  const std::function<std::int64_t(int)> kOdd = [](int r) { return 1023 + 2 * r; };
  auto empty = submit(DType::Float32, "ag.empty", kNone, {});
  auto one = submit(DType::Int64, "ag.one", kOne, {});
  auto odd = submit(DType::Float16, "ag.odd", kOdd, {});
  check(empty, kNone, {});
  check(one, kOne, {});
  check(odd, kOdd, {});
}

TEST_CASE("allgather: several empty on every rank, fused into one response") {
  // Fused (they arrive in one cycle; the .cycle5ms run makes sure), nothing moves, and
  // still each gets its (0, 2) output from its allocator.
  const std::function<std::int64_t(int)> kNone = [](int) { return 0; };
  std::vector<Gather> gathers;
  for (int t = 0; t < 8; ++t)
    gathers.push_back(submit(DType::Float32, "ag.empties." + std::to_string(t), kNone, {2}));
  for (Gather& g : gathers) check(g, kNone, {2});
}

TEST_CASE("allgather: above the fusion threshold") {
  const std::int64_t cols = 16;
  const std::int64_t base = kAboveFusionBytes / (4 * cols);
  const std::function<std::int64_t(int)> rows = [&](int r) { return base + 3 * r + 1; };
  auto big = submit(DType::Float32, "ag.big", rows, {cols});
  check(big, rows, {cols});
}

TEST_CASE("allgather: 64 gathers in flight at once") {
  std::vector<std::function<std::int64_t(int)>> rows;
  for (int t = 0; t < 64; ++t) rows.push_back([t](int r) { return (r + t) % 4; });
  std::vector<Gather> gathers;
  for (int t = 0; t < 64; ++t) {
    const DType dtype = kAllDTypes[t % 8];
    gathers.push_back(submit(dtype, "ag.many." + std::to_string(t), rows[t], {5}));
  }
  for (int t = 0; t < 64; ++t) check(gathers[static_cast<std::size_t>(t)], rows[t], {5});
}

TEST_CASE("allgather: inputs inside the outputs, off their place, alone and fused") {
  // Each input starts one element into its own output, over what the peers' rows (or
  // this rank's own, on rank 0) will overwrite; large enough to go in several rounds.
  const int me = accord::rank();
  const int n = accord::size();
  auto rows = [](int r, int t) { return std::int64_t{300'000} + 7 * r + t; };
  for (int together : {1, 3}) {
    std::vector<std::vector<float>> outputs;
    std::vector<accord::Handle> handles;
    std::vector<std::string> names;
    for (int t = 0; t < together; ++t) {
      std::int64_t total = 0;
      for (int r = 0; r < n; ++r) total += rows(r, t);
      outputs.emplace_back(static_cast<std::size_t>(total) + 1);
      float* base = outputs.back().data();
      for (std::int64_t k = 0; k < rows(me, t); ++k)
        base[1 + k] = static_cast<float>(tagValue(DType::Float32, me, static_cast<int>(k), 0));
      accord::TensorView in;
      in.data = base + 1;
      in.dtype = DType::Float32;
      in.shape = {rows(me, t)};
      accord::AllgatherOptions options;
      options.name = "ag.inside." + std::to_string(together) + "." + std::to_string(t);
      handles.push_back(accord::allgather_async(in, allocatorAt(base, DType::Float32), options));
      names.push_back(options.name);
    }
    for (int t = 0; t < together; ++t) {
      const auto error = describe(finish(handles[t], names[t]), names[t]);
      INFO(error);
      CHECK(error.empty());
      std::vector<int> owner;
      std::vector<int> row;
      for (int r = 0; r < n; ++r)
        for (std::int64_t k = 0; k < rows(r, t); ++k) {
          owner.push_back(r);
          row.push_back(static_cast<int>(k));
        }
      const auto diff =
          compareElements(DType::Float32, outputs[t].data(),
                          static_cast<std::int64_t>(owner.size()), [&](std::int64_t i) {
                            const auto at = static_cast<std::size_t>(i);
                            return tagValue(DType::Float32, owner[at], row[at], 0);
                          });
      INFO(names[t] << " on rank " << me << ": " << diff);
      CHECK(diff.empty());
    }
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

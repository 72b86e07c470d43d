// reducescatter: every dtype x op, first dimensions 0, 1 (fewer rows than ranks), one
// that does not divide by the rank count, and one above the fusion threshold; pre/post
// scaling. Rank r receives rowsFor(rows, r, n) rows (the first rows % n ranks get one
// extra) starting after the rows of the ranks before it, each the reduction of every
// rank's input, which holds fillValue(dtype, op, rank, i) at flat index i.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

struct Scatter {
  std::string name;
  ReduceOp op;
  double scale;  // prescale * postscale
  std::unique_ptr<Buffer> input;
  std::unique_ptr<Output> output;
  accord::Handle handle;
};

Scatter submit(DType dtype, ReduceOp op, std::int64_t rows, std::int64_t cols,
               const std::string& prefix, double prescale = 1.0, double postscale = 1.0) {
  const int me = accord::rank();
  Scatter s{prefix + "." + str(dtype) + "." + str(op) + "." + std::to_string(rows) + "x" +
                std::to_string(cols),
            op,
            prescale * postscale,
            std::make_unique<Buffer>(dtype, Shape{rows, cols}),
            std::make_unique<Output>(dtype),
            {}};
  s.input->fill([&](std::int64_t i) { return fillValue(dtype, op, me, i); }, kFillPeriod);
  accord::ReducescatterOptions options;
  options.name = s.name;
  options.op = op;
  options.prescale = prescale;
  options.postscale = postscale;
  s.handle = accord::reducescatter_async(s.input->view(), s.output->allocator(), options);
  return s;
}

void check(Scatter& s) {
  const int me = accord::rank();
  const int n = accord::size();
  const DType dtype = s.input->dtype();
  const std::int64_t rows = s.input->shape()[0];
  const std::int64_t cols = s.input->shape()[1];
  const auto error = describe(finish(s.handle, s.name), s.name);
  INFO(error);
  CHECK(error.empty());
  if (!error.empty()) return;

  const Shape want{rowsFor(rows, me, n), cols};
  INFO(s.name << ": output shape " << accord::shape_string(s.output->shape()) << ", expected "
              << accord::shape_string(want));
  CHECK(s.output->calls() == 1);
  CHECK(s.output->shape() == want);
  if (s.output->shape() != want) return;
  const std::int64_t offset = firstRow(rows, me, n) * cols;
  const auto ranks = allRanks(n);
  const auto diff = compareElements(
      dtype, s.output->data(), s.output->numel(),
      [&](std::int64_t i) { return s.scale * reducedValue(dtype, s.op, ranks, offset + i); },
      toleranceFor(dtype, s.scale == 1.0 ? s.op : ReduceOp::Average));
  INFO(s.name << " (rank " << me << " of " << n << ", rows from " << offset / cols
              << "): " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("reducescatter_rows splits like the documentation says") {
  for (std::int64_t rows : {0, 1, 2, 7, 8, 1023})
    for (int n = 1; n <= 5; ++n)
      for (int r = 0; r < n; ++r) {
        INFO("rows " << rows << ", rank " << r << " of " << n);
        CHECK(accord::reducescatter_rows(rows, r, n) == rowsFor(rows, r, n));
      }
}

TEST_CASE("reducescatter: every dtype x op x rows") {
  const int n = accord::size();
  for (DType dtype : kAllDTypes) {
    const std::int64_t cols = 3;
    const std::int64_t big_rows =
        kAboveFusionBytes / static_cast<std::int64_t>(accord::dtype_size(dtype) * cols) + 1;
    std::vector<Scatter> all;
    for (ReduceOp op : kAllOps)
      for (std::int64_t rows :
           {std::int64_t{0}, std::int64_t{1}, std::int64_t{2 * n + 1}, big_rows})
        all.push_back(submit(dtype, op, rows, cols, "rs"));
    for (auto& s : all) check(s);
  }
}

TEST_CASE("reducescatter: prescale and postscale on floating-point dtypes") {
  std::vector<Scatter> all;
  for (DType dtype : kFloatDTypes) {
    all.push_back(submit(dtype, ReduceOp::Sum, 11, 5, "rs.scaled", 0.5, 4.0));
    all.push_back(submit(dtype, ReduceOp::Average, 11, 5, "rs.scaled", 0.5, 4.0));
  }
  for (auto& s : all) check(s);
}

TEST_CASE("reducescatter: prescale and postscale on tensors fused together") {
  // One op and scaling per dtype, so the tensors fuse: the small ones at the default
  // threshold, all of them at a large one (the .fused_large run), where each rank
  // scales its contributions in the window and reduces them where they lie.
  const int n = accord::size();
  std::vector<Scatter> all;
  for (DType dtype : kFloatDTypes)
    for (std::int64_t rows : {std::int64_t{11}, std::int64_t{2 * n + 1}, std::int64_t{4099}})
      all.push_back(submit(dtype, ReduceOp::Sum, rows, 3, "rs.scaled.fused", 0.5, 4.0));
  for (auto& s : all) check(s);
}

TEST_CASE("reducescatter: outputs inside the inputs, alone and fused") {
  // Each output starts one element into its own input: the reduction must read the
  // input before writing over it, whether the tensor goes alone or fused with others.
  const int me = accord::rank();
  const int n = accord::size();
  const auto ranks = allRanks(n);
  for (int together : {1, 3}) {
    std::vector<std::unique_ptr<Buffer>> inputs;
    std::vector<accord::Handle> handles;
    std::vector<std::string> names;
    for (int t = 0; t < together; ++t) {
      const std::int64_t rows = 4099 + t;
      auto in = std::make_unique<Buffer>(DType::Float32, Shape{rows});
      in->fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
      float* shifted = static_cast<float*>(in->view().data) + 1;
      accord::ReducescatterOptions options;
      options.name = "rs.inside." + std::to_string(together) + "." + std::to_string(t);
      handles.push_back(
          accord::reducescatter_async(in->view(), allocatorAt(shifted, DType::Float32), options));
      names.push_back(options.name);
      inputs.push_back(std::move(in));
    }
    for (int t = 0; t < together; ++t) {
      const auto error = describe(finish(handles[t], names[t]), names[t]);
      INFO(error);
      CHECK(error.empty());
      const std::int64_t rows = 4099 + t;
      const std::int64_t offset = firstRow(rows, me, n);
      const auto diff =
          compareElements(DType::Float32, static_cast<const float*>(inputs[t]->view().data) + 1,
                          rowsFor(rows, me, n), [&](std::int64_t i) {
                            return reducedValue(DType::Float32, ReduceOp::Sum, ranks, offset + i);
                          });
      INFO(names[t] << " on rank " << me << ": " << diff);
      CHECK(diff.empty());
    }
  }
}

TEST_CASE("reducescatter: one-dimensional input") {
  const int me = accord::rank();
  const int n = accord::size();
  Buffer in(DType::Int32, {13});
  in.fill([&](std::int64_t i) { return fillValue(DType::Int32, ReduceOp::Sum, me, i); });
  Output out(DType::Int32);
  accord::ReducescatterOptions options;
  options.name = "rs.1d";
  const auto error = describe(
      finish(accord::reducescatter_async(in.view(), out.allocator(), options), options.name),
      options.name);
  INFO(error);
  CHECK(error.empty());
  CHECK(out.shape() == Shape{rowsFor(13, me, n)});
  const auto ranks = allRanks(n);
  const std::int64_t offset = firstRow(13, me, n);
  const auto diff = compareElements(DType::Int32, out.data(), out.numel(), [&](std::int64_t i) {
    return reducedValue(DType::Int32, ReduceOp::Sum, ranks, offset + i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// allreduce on every rank count: every dtype x op x size (0, 1, odd, above the fusion
// threshold), pre/post scaling, fusion of many small tensors, unnamed collectives and
// the response cache (the same name reduced again and again).
//
// CTest also runs this binary with a 16 KiB fusion threshold and 12 KiB reduction
// pieces, so the same cases exercise many fused buffers and uneven pieces.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace accord_test;

namespace {

struct Case {
  std::string name;
  ReduceOp op;
  std::unique_ptr<Buffer> buffer;
  accord::Handle handle;
};

Case submit(DType dtype, ReduceOp op, std::int64_t n, const std::string& prefix) {
  Case c{prefix + "." + str(dtype) + "." + str(op) + "." + std::to_string(n),
         op,
         std::make_unique<Buffer>(dtype, Shape{n}),
         {}};
  const int me = accord::rank();
  c.buffer->fill([&](std::int64_t i) { return fillValue(dtype, op, me, i); }, kFillPeriod);
  accord::AllreduceOptions options;
  options.name = c.name;
  options.op = op;
  c.handle = accord::allreduce_async(c.buffer->view(), options);
  return c;
}

void checkCase(Case& c) {
  const auto ranks = allRanks(accord::size());
  const DType dtype = c.buffer->dtype();
  const std::string error = describe(finish(c.handle, c.name), c.name);
  INFO(error);
  CHECK(error.empty());
  const std::string diff = compareElements(
      dtype, c.buffer->data(), c.buffer->numel(),
      [&](std::int64_t i) { return reducedValue(dtype, c.op, ranks, i); },
      toleranceFor(dtype, c.op));
  INFO(c.name << ": " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("allreduce: every dtype x op x size, submitted together per dtype") {
  for (DType dtype : kAllDTypes) {
    std::vector<Case> cases;
    for (ReduceOp op : kAllOps)
      for (std::int64_t n : testSizes(dtype)) cases.push_back(submit(dtype, op, n, "ar"));
    for (auto& c : cases) checkCase(c);
  }
}

TEST_CASE("allreduce: sizes around one and two reduction pieces") {
  // A buffer of up to two pieces (ACCORD_CHUNK_BYTES) is reduced whole, a larger one in
  // pieces; both sides of each edge, with scaling (Average) and without. CTest gives
  // ACCORD_CHUNK_BYTES in plain bytes.
  const char* env = std::getenv("ACCORD_CHUNK_BYTES");
  const std::int64_t piece = (env ? std::atoll(env) : 1 << 20) / 4;  // float32 elements
  std::vector<Case> cases;
  for (std::int64_t n :
       {piece - 1, piece + 1, 2 * piece - 1, 2 * piece, 2 * piece + 1, 3 * piece + 5})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average})
      cases.push_back(submit(DType::Float32, op, n, "ar.pieces"));
  for (auto& c : cases) checkCase(c);
}

TEST_CASE("allreduce: multi-dimensional shapes and the blocking call") {
  const int me = accord::rank();
  Buffer b(DType::Float32, {3, 5, 7});
  b.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  accord::AllreduceOptions options;
  options.name = "ar.blocking.3x5x7";
  const auto outcome = attempt([&] { accord::allreduce(b.view(), options); });
  INFO(describe(outcome, options.name));
  CHECK(outcome.ok());
  const auto ranks = allRanks(accord::size());
  const auto diff = compareElements(DType::Float32, b.data(), b.numel(), [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("allreduce: a 0-d tensor (shape [], one element)") {
  const int me = accord::rank();
  Buffer b(DType::Int64, {});
  b.set(0, me + 1);
  accord::AllreduceOptions options;
  options.name = "ar.scalar";
  const auto error =
      describe(finish(accord::allreduce_async(b.view(), options), options.name), options.name);
  INFO(error);
  CHECK(error.empty());
  const int n = accord::size();
  CHECK(b.get(0) == n * (n + 1) / 2);
}

namespace {

// Prescale 0.5 and postscale 4, powers of two: Sum stays exact in every float dtype.
Case submitScaled(DType dtype, ReduceOp op, std::int64_t n, const std::string& name) {
  Case c{name, op, std::make_unique<Buffer>(dtype, Shape{n}), {}};
  const int me = accord::rank();
  c.buffer->fill([&](std::int64_t i) { return fillValue(dtype, op, me, i); });
  accord::AllreduceOptions options;
  options.name = c.name;
  options.op = op;
  options.prescale = 0.5;
  options.postscale = 4.0;
  c.handle = accord::allreduce_async(c.buffer->view(), options);
  return c;
}

void checkScaled(Case& c) {
  const auto ranks = allRanks(accord::size());
  const DType dtype = c.buffer->dtype();
  const auto error = describe(finish(c.handle, c.name), c.name);
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(
      dtype, c.buffer->data(), c.buffer->numel(),
      [&](std::int64_t i) { return 2.0 * reducedValue(dtype, c.op, ranks, i); },
      toleranceFor(dtype, ReduceOp::Average));
  INFO(c.name << " (prescale 0.5, postscale 4): " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("allreduce: prescale and postscale on floating-point dtypes") {
  std::vector<Case> cases;
  for (DType dtype : kFloatDTypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average})
      cases.push_back(submitScaled(dtype, op, 1023, "ar.scaled." + str(dtype) + "." + str(op)));
  for (auto& c : cases) checkScaled(c);
}

TEST_CASE("allreduce: prescale and postscale on tensors fused together") {
  // One op and scaling per dtype, so the tensors fuse (all of them in the .fused_large
  // run, where they are scaled and reduced where they lie).
  std::vector<Case> cases;
  for (DType dtype : kFloatDTypes)
    for (std::int64_t n : {std::int64_t{1023}, std::int64_t{5}, std::int64_t{70001}})
      cases.push_back(submitScaled(dtype, ReduceOp::Sum, n,
                                   "ar.scaled.fused." + str(dtype) + "." + std::to_string(n)));
  for (auto& c : cases) checkScaled(c);
}

TEST_CASE("allreduce: many small tensors in flight fuse and come back right") {
  // 300 x 4 KiB = 1.2 MiB: many fusion buffers at the default 64 KiB threshold, more
  // in the small-buffer run.
  std::vector<Case> cases;
  for (int t = 0; t < 300; ++t) {
    const DType dtype = t % 3 == 0 ? DType::Float64 : DType::Float32;
    const ReduceOp op = t % 5 == 0 ? ReduceOp::Max : ReduceOp::Sum;
    cases.push_back(submit(dtype, op, 1000 + t % 7, "ar.small." + std::to_string(t)));
  }
  for (auto& c : cases) checkCase(c);
}

TEST_CASE("allreduce: unnamed collectives get the same generated name on every rank") {
  std::vector<Case> cases;
  const int me = accord::rank();
  for (int t = 0; t < 20; ++t) {
    Case c{"unnamed #" + std::to_string(t),
           ReduceOp::Sum,
           std::make_unique<Buffer>(DType::Int32, Shape{17 + t}),
           {}};
    c.buffer->fill([&](std::int64_t i) { return fillValue(DType::Int32, ReduceOp::Sum, me, i); });
    c.handle = accord::allreduce_async(c.buffer->view());
    cases.push_back(std::move(c));
  }
  for (auto& c : cases) checkCase(c);
}

TEST_CASE("allreduce: one name reduced 50 times (response cache steady state)") {
  const int me = accord::rank();
  const auto ranks = allRanks(accord::size());
  for (int step = 0; step < 50; ++step) {
    // Shapes change every 10 steps: a cached entry must not be reused for a new shape.
    const std::int64_t n = 100 + step / 10;
    Buffer a(DType::Float32, {n});
    Buffer b(DType::Int64, {7});
    a.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i + step); });
    b.fill([&](std::int64_t i) { return fillValue(DType::Int64, ReduceOp::Max, me, i + step); });
    accord::AllreduceOptions oa, ob;
    oa.name = "ar.cached.a";
    ob.name = "ar.cached.b";
    ob.op = ReduceOp::Max;
    auto ha = accord::allreduce_async(a.view(), oa);
    auto hb = accord::allreduce_async(b.view(), ob);
    const auto ea = describe(finish(ha, oa.name), oa.name);
    const auto eb = describe(finish(hb, ob.name), ob.name);
    INFO("step " << step << ": " << ea << eb);
    CHECK(ea.empty());
    CHECK(eb.empty());
    const auto da = compareElements(DType::Float32, a.data(), n, [&](std::int64_t i) {
      return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i + step);
    });
    const auto db = compareElements(DType::Int64, b.data(), 7, [&](std::int64_t i) {
      return reducedValue(DType::Int64, ReduceOp::Max, ranks, i + step);
    });
    INFO("step " << step << ": " << da << db);
    CHECK(da.empty());
    CHECK(db.empty());
  }
}

TEST_CASE("allreduce: fewer elements than ranks, every dtype and op") {
  // Some ranks own no block of the ring or of the shared-memory reduce (and, under the
  // hierarchical allreduce, some cross-host rings get nothing at all).
  std::vector<Case> cases;
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (std::int64_t n = 1; n <= accord::size() + 1; ++n)
        cases.push_back(submit(dtype, op, n, "ar.few"));
  for (auto& c : cases) checkCase(c);
}

namespace {

// Values with full mantissas, so that the order of additions and where the division
// happens both show in the result.
double irregular(int rank, std::int64_t i) {
  const auto h = static_cast<std::uint64_t>(i * 2654435761LL + rank * 40503LL + 17);
  return static_cast<double>(h % 1000003) / 7.0 - 71428.0;
}

template <class T>
std::string averageIsSumOverN(std::int64_t n, const std::string& tag) {
  const int me = accord::rank(), size = accord::size();
  std::vector<T> sum(n), avg(n);
  for (std::int64_t i = 0; i < n; ++i) sum[i] = avg[i] = static_cast<T>(irregular(me, i));
  const DType dtype = std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
  auto run = [&](std::vector<T>& v, ReduceOp op, const std::string& name) {
    accord::TensorView view;
    view.data = v.data();
    view.dtype = dtype;
    view.shape = {n};
    accord::AllreduceOptions o;
    o.name = name;
    o.op = op;
    // One at a time: each is reduced alone, so both see the same blocks and pieces and
    // add in the same order.
    return describe(finish(accord::allreduce_async(view, o), name), name);
  };
  std::string out =
      run(sum, ReduceOp::Sum, tag + ".sum") + run(avg, ReduceOp::Average, tag + ".avg");
  std::int64_t wrong = 0, first = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    const T want = sum[i] / static_cast<T>(size);  // one correctly rounded division
    if (std::memcmp(&want, &avg[i], sizeof(T)) != 0 && wrong++ == 0) first = i;
  }
  if (wrong > 0)
    out += tag + ": " + std::to_string(wrong) + " elements of the Average differ from the Sum / " +
           std::to_string(size) + ", first at " + std::to_string(first);
  return out;
}

}  // namespace

TEST_CASE("allreduce: Average is the Sum divided once, bit for bit") {
  // The division runs in the pass that adds the last contribution to each block. It must
  // act on the finished sum exactly once: dividing the inputs, a partial sum, or twice
  // would change the last bits of these values. Sizes: one fused-size tensor, one over
  // several pieces, one that is not a multiple of the rank count.
  for (std::int64_t n : {std::int64_t{1023}, std::int64_t{(3 << 20) / 4 + 5}}) {
    const std::string f = averageIsSumOverN<float>(n, "ar.avgsum.f32." + std::to_string(n));
    INFO(f);
    CHECK(f.empty());
    const std::string d = averageIsSumOverN<double>(n, "ar.avgsum.f64." + std::to_string(n));
    INFO(d);
    CHECK(d.empty());
  }
}

TEST_CASE("allreduce: every rank ends with the same bits") {
  // Float sums depend on the order of their terms, and Min and Max of +0 and -0 (or of
  // NaNs) on the order of their operands; whatever the algorithm (a ring, recursive
  // doubling for small buffers, with ranks folded in when their number is not a power
  // of two), every rank must hold the bit pattern of one computation. Sizes from one
  // element up to several reduction pieces.
  const int me = accord::rank(), n = accord::size();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == n);
  // Each name twice: the second time it is a cache hit, which small tensors take
  // through the negotiation's own messages where those carry data.
  for (int pass = 0; pass < 2; ++pass)
    for (std::int64_t count : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{3000},
                               std::int64_t{9000}, std::int64_t{70000}, std::int64_t{600000}}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max}) {
        std::vector<float> data(count);
        for (std::int64_t i = 0; i < count; ++i) {
          const int k = static_cast<int>((i + me) % 7);
          if (op == ReduceOp::Sum)  // magnitudes 1e-3..1e7: the sum rounds differently per order
            data[i] = static_cast<float>((me % 2 ? -1.0 : 1.0) * std::pow(10.0, k - 3) *
                                         (1.0 + 0.1234567 * me + 1e-7 * i));
          else  // only +0 and -0, some NaNs: which one wins depends on the operand order
            data[i] = k == 6 ? std::nanf("") : ((i + me) % 2 ? -0.0f : 0.0f);
        }
        const std::string name = "ar.samebits." + str(op) + "." + std::to_string(count);
        accord::AllreduceOptions options;
        options.name = name;
        options.op = op;
        const std::string error = describe(
            finish(accord::allreduce_async(
                       accord::TensorView{data.data(), DType::Float32, Shape{count}, {}}, options),
                   name),
            name);
        INFO(error);
        REQUIRE(error.empty());
        std::vector<float> first(data);
        MPI_Bcast(first.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
        std::int64_t differ = 0, at = -1;
        for (std::int64_t i = 0; i < count; ++i) {
          if (std::memcmp(&first[i], &data[i], sizeof(float)) != 0) {
            if (at < 0) at = i;
            ++differ;
          }
        }
        INFO(name << " (pass " << pass << "): rank " << me << " differs from rank 0 in " << differ
                  << " of " << count << " elements, first at " << at);
        CHECK(differ == 0);
      }
    }
}

TEST_CASE("allreduce: small cached tensors with the ranks out of step") {
  // Steady state of many small tensors, each rank submitting them in its own order and
  // at its own pace: in a cycle the ranks offer different subsets. Where the negotiation
  // carries data (across hosts: tests/multihost runs this suite), together more than it
  // carries (ACCORD_CARRY_BYTES), so some tensors ride on the negotiation, some wait for
  // a later cycle and some take the ordinary path; with scaling, every op and several
  // dtypes. Every result must be exact.
  const int me = accord::rank(), n = accord::size();
  const auto ranks = allRanks(n);
  constexpr int kTensors = 16;
  struct Spec {
    DType dtype;
    ReduceOp op;
    std::int64_t count;
    bool scaled;
  };
  std::vector<Spec> specs;
  for (int t = 0; t < kTensors; ++t) {
    const DType dtype = kFloatDTypes[t % 4];
    const ReduceOp op = kAllOps[t % 5];
    const bool scaled = op == ReduceOp::Sum || op == ReduceOp::Average;
    // 1 element to 24000 (96 KiB in float32): the small ones all fit in one carriage.
    specs.push_back({t % 7 == 3 ? DType::Int32 : dtype, op, 1 + (t * t * 97) % 24000, scaled});
  }
  for (int step = 0; step < 12; ++step) {
    std::vector<std::unique_ptr<Buffer>> buffers(kTensors);
    std::vector<accord::Handle> handles(kTensors);
    for (int k = 0; k < kTensors; ++k) {
      const int t = (k + me * 5 + step) % kTensors;  // a different order on every rank
      const Spec& spec = specs[t];
      buffers[t] = std::make_unique<Buffer>(spec.dtype, Shape{spec.count});
      buffers[t]->fill(
          [&](std::int64_t i) { return fillValue(spec.dtype, spec.op, me, i + step); });
      accord::AllreduceOptions options;
      options.name = "ar.outofstep." + std::to_string(t);
      options.op = spec.op;
      if (spec.scaled && spec.dtype != DType::Int32) {
        options.prescale = 0.5;  // powers of two: exact in every float dtype
        options.postscale = 4.0;
      }
      handles[t] = accord::allreduce_async(buffers[t]->view(), options);
      if ((k + me) % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100 * (me + 1)));
    }
    for (int t = 0; t < kTensors; ++t) {
      const Spec& spec = specs[t];
      const std::string name = "ar.outofstep." + std::to_string(t);
      const std::string error = describe(finish(handles[t], name), name);
      INFO("step " << step << ": " << error);
      REQUIRE(error.empty());
      const double factor = spec.scaled && spec.dtype != DType::Int32 ? 2.0 : 1.0;
      const std::string diff = compareElements(
          spec.dtype, buffers[t]->data(), spec.count,
          [&](std::int64_t i) {
            return factor * reducedValue(spec.dtype, spec.op, ranks, i + step);
          },
          toleranceFor(spec.dtype, spec.scaled ? ReduceOp::Average : spec.op));
      INFO("step " << step << ", " << name << " (" << str(spec.dtype) << ", " << str(spec.op)
                   << ", " << spec.count << " elements): " << diff);
      CHECK(diff.empty());
    }
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

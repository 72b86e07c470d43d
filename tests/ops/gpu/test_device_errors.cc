// Failures of device collectives, which must fail cleanly on every rank and leave the
// runtime working: a CPU tensor on some ranks and a CUDA tensor on another, or a device
// tensor whose dtype or shape differs on one rank (mismatches), device tensors whose data is not that device's memory (refused at
// submission), and an output allocator that returns host memory on one rank (that rank
// fails, the others complete).
#include <catch2/catch.hpp>

#include "device_test.h"

#include <memory>
#include <vector>

using namespace accord_test;
using namespace accord_gpu;

namespace {

bool isLast() { return accord::rank() == accord::size() - 1; }

// A device allreduce still works (the runtime went on after the failure).
void expectWorking(const std::string& name) {
  const int me = accord::rank();
  Buffer b(DType::Float32, {333});
  b.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  DeviceTensor d(b);
  accord::AllreduceOptions o;
  o.name = name;
  const auto error = describe(finish(accord::allreduce_async(d.view(), o), name), name);
  INFO(error);
  CHECK(error.empty());
  const auto ranks = allRanks(accord::size());
  const auto result = d.download();
  const auto diff = compareElements(DType::Float32, result.data(), 333, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("a CPU tensor on some ranks and a CUDA tensor on another is a mismatch everywhere") {
  const int n = accord::size();
  Buffer host(DType::Float32, {64});
  DeviceTensor device(host);
  accord::AllreduceOptions o;
  o.name = "err.mixed.devices";
  auto handle = accord::allreduce_async(isLast() ? device.view() : host.view(), o);
  const Outcome outcome = finish(handle, o.name);
  INFO("rank " << accord::rank() << ": " << outcome.kind << ": " << outcome.message);
  if (n == 1) {
    CHECK(outcome.ok());  // nothing to disagree with
  } else {
    CHECK(outcome.kind == "MismatchError");
    CHECK(contains(outcome.message, o.name));
    CHECK(contains(outcome.message, "device cpu"));
    CHECK(contains(outcome.message, "device cuda:"));
  }
  expectWorking("err.after.mixed");
}

// A dtype or a shape that differs on one rank is a MismatchError on every rank, naming
// the tensor, the ranks and both values, for device tensors as for host ones; the
// runtime and the set's NCCL communicator then go on.
TEST_CASE("a device tensor whose dtype or shape differs on one rank is a mismatch everywhere") {
  const int n = accord::size();
  struct Case {
    const char* name;
    DType dtype, last_dtype;
    Shape shape, last_shape;
    const char* mine;    // in the message: this rank's side of the difference
    const char* theirs;  // and the last rank's
  };
  const Case cases[] = {
      {"err.device.dtype", DType::Float32, DType::Float64, {256}, {256}, "float32", "float64"},
      {"err.device.shape", DType::Float32, DType::Float32, {64, 4}, {64, 5}, "[64,4]", "[64,5]"},
  };
  for (const Case& c : cases) {
    const bool last = isLast() && n > 1;
    Buffer host(last ? c.last_dtype : c.dtype, last ? c.last_shape : c.shape);
    DeviceTensor device(host);
    accord::AllreduceOptions o;
    o.name = c.name;
    const Outcome outcome = finish(accord::allreduce_async(device.view(), o), o.name);
    INFO("rank " << accord::rank() << ": " << outcome.kind << ": " << outcome.message);
    if (n == 1) {
      CHECK(outcome.ok());
    } else {
      CHECK(outcome.kind == "MismatchError");
      CHECK(contains(outcome.message, c.name));
      CHECK(contains(outcome.message, c.mine));
      CHECK(contains(outcome.message, c.theirs));
      CHECK(contains(outcome.message, "rank " + std::to_string(n - 1)));
    }
  }
  expectWorking("err.after.device.mismatch");
}

TEST_CASE("device tensors whose data is not that device's memory are refused at submission") {
  Buffer host(DType::Float32, {16});
  accord::TensorView lying = host.view();
  lying.device = accordDevice();  // host memory that claims to be on the GPU
  accord::AllreduceOptions o;
  o.name = "err.host.pointer";
  const auto a = attemptSubmit([&] { return accord::allreduce_async(lying, o); }, o.name);
  INFO(describe(a, o.name));
  CHECK(a.kind == "InvalidArgument");
  CHECK(contains(a.message, o.name));
  CHECK(contains(a.message, "does not know its data pointer"));

  int count = 0;
  cudaGetDeviceCount(&count);
  DeviceTensor d(host);
  accord::TensorView beyond = d.view();
  beyond.device = accord::Device::cuda(count);
  o.name = "err.no.such.device";
  const auto b = attemptSubmit([&] { return accord::allreduce_async(beyond, o); }, o.name);
  INFO(describe(b, o.name));
  CHECK(b.kind == "InvalidArgument");
  CHECK(contains(b.message, "cuda:" + std::to_string(count)));

  if (count > 1) {  // memory of one GPU passed as another's
    accord::TensorView other = d.view();
    other.device = accord::Device::cuda((device() + 1) % count);
    o.name = "err.other.device";
    const auto c = attemptSubmit([&] { return accord::allreduce_async(other, o); }, o.name);
    INFO(describe(c, o.name));
    CHECK(c.kind == "InvalidArgument");
    CHECK(contains(c.message, "is memory of cuda:" + std::to_string(device())));
  }
  expectWorking("err.after.pointers");
}

TEST_CASE("an allgather output in host memory fails that rank only") {
  const int me = accord::rank(), n = accord::size();
  Buffer input(DType::Int32, {2, 3});
  input.fill([&](std::int64_t i) { return tagValue(DType::Int32, me, 0, i); });
  DeviceTensor device_in(input);
  DeviceOutput good(DType::Int32);
  Output host_memory(DType::Int32);
  accord::Allocator bad = [&](const Shape& shape) {
    accord::TensorView v = host_memory.allocator()(shape);
    v.device = accordDevice();  // claims the GPU, is host memory
    return v;
  };
  accord::AllgatherOptions o;
  o.name = "err.output.host";
  auto handle = accord::allgather_async(device_in.view(), isLast() ? bad : good.allocator(), o);
  const Outcome outcome = finish(handle, o.name);
  INFO("rank " << me << ": " << outcome.kind << ": " << outcome.message);
  if (isLast()) {
    CHECK(outcome.kind == "InvalidArgument");
    CHECK(contains(outcome.message, "(output)"));
  } else {
    CHECK(outcome.ok());
    CHECK(good.shape() == Shape{2 * n, 3});
    const auto result = good.download();
    const auto diff = compareElements(DType::Int32, result.data(), 6 * n, [&](std::int64_t i) {
      return tagValue(DType::Int32, static_cast<int>(i / 6), 0, i % 6);
    });
    INFO(diff);
    CHECK(diff.empty());
  }
  expectWorking("err.after.output");
}

int main(int argc, char** argv) { return gpuTestMain(argc, argv); }

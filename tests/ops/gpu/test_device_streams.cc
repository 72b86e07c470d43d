// Collectives on CUDA tensors and the application's streams: a collective waits for the
// stream its tensor was written on (even one held up on the host), the handle's event
// lets another stream wait for the result, a graph captured while the runtime polls is
// not disturbed, and tensors already ready at submission are reduced as any other.
//
// Built into gpu_test_device_collectives, and run with it (test_device_collectives.cc).
#include <catch2/catch.hpp>

#include "device_test.h"

#include <chrono>
#include <cstring>
#include <thread>

using namespace accord_test;
using namespace accord_gpu;

namespace {

void sleepOnHost(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

}  // namespace

TEST_CASE("device collectives wait for the application's stream, and hand out an event") {
  const int me = accord::rank();
  const auto ranks = allRanks(accord::size());
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::int64_t n = 1 << 20;
  Buffer values(DType::Float32, {n});
  values.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); },
              kFillPeriod);
  Buffer zeros(DType::Float32, {n});
  DeviceTensor tensor(zeros);
  // The stream is held up on the host for 200 ms, then writes the values: a collective
  // that did not wait for the stream would reduce the zeros.
  static int hold_ms = 200;
  void* pinned = nullptr;
  ok(cudaMallocHost(&pinned, n * 4), "cudaMallocHost");
  std::memcpy(pinned, values.data(), n * 4);
  ok(cudaLaunchHostFunc(stream, sleepOnHost, &hold_ms), "cudaLaunchHostFunc");
  ok(cudaMemcpyAsync(tensor.view().data, pinned, n * 4, cudaMemcpyHostToDevice, stream),
     "upload on the stream");
  accord::AllreduceOptions o;
  o.name = "stream.ready";
  o.stream = stream;
  auto handle = accord::allreduce_async(tensor.view(), o);

  // The result, read on the application's stream after the handle's event: no wait().
  REQUIRE(handle.cuda_event() != nullptr);
  REQUIRE(handle.wait_on_stream(stream));
  ok(cudaMemcpyAsync(pinned, tensor.view().data, n * 4, cudaMemcpyDeviceToHost, stream),
     "download on the stream");
  ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const auto diff = compareElements(DType::Float32, pinned, n, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
  });
  INFO(diff);
  CHECK(diff.empty());
  const auto error = describe(finish(handle, o.name), o.name);
  INFO(error);
  CHECK(error.empty());
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

// PyTorch captures CUDA graphs in global mode by default: while one thread captures,
// an event query on any other thread (the runtime polling a collective's events) is
// forbidden and invalidates the capture, unless that thread opted out. Here the
// collective's stream is held for 400 ms, so the runtime polls its ready event all
// through a 150 ms capture on another stream; the capture must stand, and the
// collective complete as usual.
TEST_CASE("a graph captured in global mode while the runtime polls a collective") {
  const int me = accord::rank();
  const auto ranks = allRanks(accord::size());
  cudaStream_t held = nullptr, captured = nullptr;
  ok(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), "cudaStreamCreate");
  ok(cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::int64_t n = 1 << 16;
  Buffer values(DType::Float32, {n});
  values.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); },
              kFillPeriod);
  DeviceTensor tensor(values);
  static int hold_ms = 400;
  ok(cudaLaunchHostFunc(held, sleepOnHost, &hold_ms), "cudaLaunchHostFunc");
  accord::AllreduceOptions o;
  o.name = "capture.beside";
  o.stream = held;
  auto handle = accord::allreduce_async(tensor.view(), o);

  DeviceMemory scratch(1 << 20);
  ok(cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  ok(cudaMemsetAsync(scratch.get(), 0, scratch.bytes(), captured), "memset, captured");
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ok(cudaMemsetAsync(scratch.get(), 1, scratch.bytes(), captured), "memset, captured");
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(captured, &graph);
  cudaGetLastError();
  INFO("cudaStreamEndCapture: " << cudaGetErrorString(ended));
  CHECK(ended == cudaSuccess);
  if (graph) {
    cudaGraphExec_t exec = nullptr;
    ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    ok(cudaGraphLaunch(exec, captured), "cudaGraphLaunch");
    ok(cudaStreamSynchronize(captured), "cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }

  const auto error = describe(finish(handle, o.name), o.name);
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(DType::Float32, tensor.download().data(), n,
                                    [&](std::int64_t i) {
                                      return reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
                                    });
  INFO(diff);
  CHECK(diff.empty());
  cudaStreamDestroy(captured);
  cudaStreamDestroy(held);
}

// A tensor whose stream has nothing left queued is ready at submission: no event is
// recorded for it, and its handle's event is one that is complete from the start. The
// results must be the same, on a stream of the application's and on the per-thread
// default stream, with and without scaling.
TEST_CASE("tensors ready at submission on an idle stream are reduced as any other") {
  const auto ranks = allRanks(accord::size());
  cudaStream_t own = nullptr;
  ok(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::int64_t n = 4099;  // odd: not a multiple of any vector width
  int round = 0;
  for (cudaStream_t stream : {own, cudaStreamPerThread}) {
    for (const double prescale : {1.0, 0.5}) {
      Buffer values(DType::Float32, {n});
      values.fill(
          [&](std::int64_t i) {
            return fillValue(DType::Float32, ReduceOp::Sum, accord::rank(), i);
          },
          kFillPeriod);
      DeviceTensor tensor(values);
      // A cudaMemcpy from pageable memory may return before its copy lands, and a stream
      // of the application's own does not wait for the legacy stream it ran on.
      ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      accord::AllreduceOptions o;
      o.name = "idle." + std::to_string(round++);
      o.stream = stream;
      o.prescale = prescale;
      auto handle = accord::allreduce_async(tensor.view(), o);
      REQUIRE(handle.cuda_event() != nullptr);
      REQUIRE(handle.wait_on_stream(stream));
      const auto error = describe(finish(handle, o.name), o.name);
      INFO(error);
      REQUIRE(error.empty());
      ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const auto got = tensor.download();
      const auto diff = compareElements(DType::Float32, got.data(), n, [&](std::int64_t i) {
        return prescale * reducedValue(DType::Float32, ReduceOp::Sum, ranks, i);
      });
      INFO(o.name << " prescale " << prescale << ": " << diff);
      CHECK(diff.empty());
    }
  }
  cudaStreamDestroy(own);
}

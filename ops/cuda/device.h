// What every device op stands on: checked CUDA calls, the current-device guard,
// events, and one DeviceContext per GPU (the runtime's own stream and its buffers).
//
// Thread boundary: DeviceContext and its buffers belong to the background thread.
// Application threads only record events (Backend::deviceReady) and the finalizer only
// queries them; both through DeviceGuard, so that the application thread's current
// device is left as it was.
#pragma once

#include "ops/cuda/kernels.h"

#include <accord/accord.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#define ACCORD_CUDA_STRINGIFY2(x) #x
#define ACCORD_CUDA_STRINGIFY(x) ACCORD_CUDA_STRINGIFY2(x)
// Throws CommError("<call> at <file>:<line>: <CUDA's message>") unless `call` succeeded.
#define ACCORD_CUDA_CHECK(call) \
  ::accord::cuda::check((call), #call " at " __FILE__ ":" ACCORD_CUDA_STRINGIFY(__LINE__))

namespace accord::cuda {

// CUDA devices this process sees; 0 where there is no GPU or no driver, and then
// `why` (if given) gets CUDA's reason.
int deviceCount(std::string* why = nullptr);

// Makes `device` current on this thread for the guard's life, then restores the
// device that was current before. The runtime's CUDA and NCCL calls around collectives
// are made under one (the teardown of a device's buffers and streams at shutdown is not).
//
// For the guard's life the thread is also in thread-local capture mode (unless it was in
// relaxed mode, which allows more). While any thread captures a CUDA graph in global
// mode (PyTorch's default), CUDA forbids the calls that may synchronize (an event or
// stream query, a pinned allocation) on every other thread that has not opted out, and
// such a call invalidates that capture: the application's graph would fail because
// Accord polled a collective in flight. The runtime captures nothing, so it opts out; a
// capture on this thread itself is judged as before.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  cudaStreamCaptureMode capture_mode_ = cudaStreamCaptureModeThreadLocal;
  bool exchanged_ = false;
};

// An event on the current device, without timing (cheaper to record and to query),
// from a pool of reused ones.
// The pointer's get() is the cudaEvent_t itself; the last copy returns it to the pool.
std::shared_ptr<void> makeEvent();
// An event of the current device that is complete from the start: never recorded, so
// querying it succeeds and a stream's wait on it is a no-op. One per device, shared by
// every tensor that was ready at its submission; it must never be recorded.
std::shared_ptr<void> completedEvent();
inline cudaEvent_t eventOf(const std::shared_ptr<void>& event) {
  return static_cast<cudaEvent_t>(event.get());
}

// Polls `event` until it completed. Throws CommError naming `what` when it has not
// after `timeout` (0: no limit), or when the GPU reports an error.
void waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout, const std::string& what);

// Throws InvalidArgument "<what>: ..." unless `data` is memory that kernels on
// `device` can use (that device's memory, or managed memory). Nothing to check for 0
// bytes.
void checkDevicePointer(const void* data, std::size_t bytes, int device, const std::string& what);

// Fills `count` elements with op's neutral element (the bits cpu::fillNeutral writes).
void fillNeutral(void* data, std::size_t count, DType dtype, ReduceOp op, cudaStream_t stream);

// Device memory that only grows, allocated and freed in the order of one stream
// (cudaMallocAsync / cudaFreeAsync): growing never waits for the GPU, and the old
// block is freed only after the work queued on the stream before it.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // At least `bytes` bytes (never null), for work queued on `stream` until the next
  // reserve(); the contents are not kept when it grows. Always the same stream.
  char* reserve(std::size_t bytes, cudaStream_t stream);

 private:
  char* data_ = nullptr;
  std::size_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

// Page-locked host memory that only grows: the MPI fallback's staging, which the GPU
// copies to and from asynchronously. The caller makes sure no copy still uses it
// before it grows.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory();
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  char* reserve(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  char* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// A stream of the current device that does not wait for the legacy default stream
// implicitly (cudaStreamNonBlocking). Destroying it does not wait: CUDA releases it
// once its work is done.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// One GPU as the runtime uses it. Collectives run on the runtime's own stream, in the
// order they were negotiated (the same on every rank), and wait for the application's
// work only where they wait for its ready events.
struct DeviceContext {
  explicit DeviceContext(int device);

  int device;
  // Declared before the buffers: they are freed in its order, before it goes.
  Stream owned_stream;
  cudaStream_t stream;
  DeviceMemory fusion;   // fused tensors; packed layouts of reducescatter and allgather
  DeviceMemory scratch;  // a joined rank's input, an output this rank could not allocate
  PinnedMemory staging;  // the MPI fallback's host copies of device tensors
};

}  // namespace accord::cuda

// CUDA helpers of the device ops (see device.h).
#include "ops/cuda/device.h"

#include "ops/cpu/kernels.h"
#include "runtime/logging.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace accord::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// Growth policy shared with the host fusion buffer: at least half again, in whole
// pages, so a slowly rising demand reallocates O(log n) times.
std::size_t grownSize(std::size_t bytes, std::size_t capacity) {
  if (bytes > SIZE_MAX / 4)
    throw InvalidArgument("device buffer: " + std::to_string(bytes) + " bytes cannot be allocated");
  const std::size_t grown = std::max(bytes, capacity + capacity / 2);
  return std::max<std::size_t>((grown + 4095) / 4096 * 4096, 4096);
}

// Events are created once and reused: creating and destroying one per collective cost
// microseconds of every small collective's latency.
constexpr std::size_t kPooledEvents = 1024;  // per device

struct EventPool {
  std::mutex mu;
  std::vector<std::vector<cudaEvent_t>> free;  // by device
};

// Never destroyed: events come back to it from other statics' destructors at exit.
EventPool& eventPool() {
  static auto* pool = new EventPool;
  return *pool;
}

}  // namespace

int deviceCount(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it, so that later calls do not report it
    // Without a driver CUDA says its runtime needs a newer one: name the cause plainly.
    if (why)
      *why = status == cudaErrorInsufficientDriver
                 ? "no NVIDIA driver, or one older than CUDA " +
                       std::to_string(CUDART_VERSION / 1000) + " needs"
                 : cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device";
  return count;
}

DeviceGuard::DeviceGuard(int device) {
  ACCORD_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) ACCORD_CUDA_CHECK(cudaSetDevice(device));
  // Swaps: the thread's mode becomes thread-local, capture_mode_ keeps the one it had.
  // (Were that refused, the calls would go on in the thread's own mode, as before.)
  exchanged_ = cudaThreadExchangeStreamCaptureMode(&capture_mode_) == cudaSuccess;
  if (!exchanged_) cudaGetLastError();
  // A thread the application put in relaxed mode is freer still: leave it so.
  if (exchanged_ && capture_mode_ == cudaStreamCaptureModeRelaxed) {
    cudaThreadExchangeStreamCaptureMode(&capture_mode_);
    exchanged_ = false;
  }
}

DeviceGuard::~DeviceGuard() {
  if (exchanged_) cudaThreadExchangeStreamCaptureMode(&capture_mode_);
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

std::shared_ptr<void> makeEvent() {
  int device = 0;
  ACCORD_CUDA_CHECK(cudaGetDevice(&device));
  EventPool& pool = eventPool();
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (static_cast<std::size_t>(device) < pool.free.size() && !pool.free[device].empty()) {
      event = pool.free[device].back();
      pool.free[device].pop_back();
    }
  }
  if (!event) ACCORD_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  // Back to the pool when the last copy goes. Recording a returned event again while
  // work it recorded earlier is still queued is allowed: the stream waits already
  // enqueued on it keep the earlier record.
  return std::shared_ptr<void>(static_cast<void*>(event), [device](void* e) {
    EventPool& pool = eventPool();
    std::lock_guard<std::mutex> lock(pool.mu);
    if (pool.free.size() <= static_cast<std::size_t>(device)) pool.free.resize(device + 1);
    if (pool.free[device].size() < kPooledEvents) {
      pool.free[device].push_back(static_cast<cudaEvent_t>(e));
      return;
    }
    // At process exit the runtime may already be gone: ignore the status.
    cudaEventDestroy(static_cast<cudaEvent_t>(e));
  });
}

std::shared_ptr<void> completedEvent() {
  int device = 0;
  ACCORD_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::vector<cudaEvent_t> events;  // by device; never destroyed (see eventPool)
  std::lock_guard<std::mutex> lock(mu);
  if (events.size() <= static_cast<std::size_t>(device)) events.resize(device + 1, nullptr);
  cudaEvent_t& event = events[static_cast<std::size_t>(device)];
  if (!event) ACCORD_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return std::shared_ptr<void>(static_cast<void*>(event), [](void*) {});
}

void waitEvent(cudaEvent_t event, std::chrono::milliseconds timeout, const std::string& what) {
  const auto start = Clock::now();
  auto sleep = std::chrono::microseconds(20);
  for (;;) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady)
      throw CommError(what + ": the GPU reported an error: " + cudaGetErrorString(status));
    // Not an error, but the runtime may keep it as this thread's last one, which the
    // next kernel launch's check would then report as its own.
    cudaGetLastError();
    const auto waited = Clock::now() - start;
    if (timeout.count() > 0 && waited >= timeout)
      throw CommError(what + ": the GPU did not finish the copies within " + secondsText(timeout) +
                      " s (ACCORD_STALL_SHUTDOWN_TIME)");
    // Copies of a few MB take microseconds to milliseconds: spin briefly, then sleep.
    if (waited < std::chrono::microseconds(50)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
}

void checkDevicePointer(const void* data, std::size_t bytes, int device, const std::string& what) {
  if (bytes == 0) return;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw InvalidArgument(what + ": CUDA cannot tell what memory the pointer refers to (" +
                          cudaGetErrorString(status) +
                          "); expected memory of cuda:" + std::to_string(device));
  }
  switch (attributes.type) {
    case cudaMemoryTypeManaged:
      return;
    case cudaMemoryTypeDevice:
      if (attributes.device == device) return;
      throw InvalidArgument(what +
                            ": the data is memory of cuda:" + std::to_string(attributes.device) +
                            ", but the tensor says cuda:" + std::to_string(device));
    case cudaMemoryTypeHost:
      throw InvalidArgument(what + ": the tensor says cuda:" + std::to_string(device) +
                            ", but its data is page-locked host memory; pass it as a cpu tensor");
    default:
      throw InvalidArgument(what + ": the tensor says cuda:" + std::to_string(device) +
                            ", but CUDA does not know its data pointer (host memory, or freed "
                            "device memory)");
  }
}

void fillNeutral(void* data, std::size_t count, DType dtype, ReduceOp op, cudaStream_t stream) {
  if (count == 0) return;
  std::uint64_t value = 0;  // room for the widest element
  cpu::fillNeutral(&value, 1, dtype, op);
  fill(data, count, dtype_size(dtype), &value, stream);
}

DeviceMemory::~DeviceMemory() {
  if (data_) cudaFreeAsync(data_, stream_);
}

char* DeviceMemory::reserve(std::size_t bytes, cudaStream_t stream) {
  if (data_ && bytes <= capacity_) return data_;
  const std::size_t grown = grownSize(bytes, capacity_);
  if (data_) ACCORD_CUDA_CHECK(cudaFreeAsync(data_, stream_));
  data_ = nullptr;
  capacity_ = 0;
  stream_ = stream;
  void* p = nullptr;
  const cudaError_t status = cudaMallocAsync(&p, grown, stream);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error("device buffer: cannot allocate " + std::to_string(grown) +
                " bytes of GPU memory (requested " + std::to_string(bytes) + "): " +
                cudaGetErrorString(status) + "; lower ACCORD_FUSION_THRESHOLD or the tensor sizes");
  }
  data_ = static_cast<char*>(p);
  capacity_ = grown;
  return data_;
}

PinnedMemory::~PinnedMemory() {
  if (data_) cudaFreeHost(data_);
}

char* PinnedMemory::reserve(std::size_t bytes) {
  if (data_ && bytes <= capacity_) return data_;
  const std::size_t grown = grownSize(bytes, capacity_);
  if (data_) cudaFreeHost(data_);
  data_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  const cudaError_t status = cudaHostAlloc(&p, grown, cudaHostAllocPortable);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error("staging buffer: cannot allocate " + std::to_string(grown) +
                " bytes of page-locked host memory: " + cudaGetErrorString(status));
  }
  data_ = static_cast<char*>(p);
  capacity_ = grown;
  return data_;
}

Stream::Stream() { ACCORD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

Stream::~Stream() { cudaStreamDestroy(stream_); }

namespace {
// The guard must be in place before the stream is created on the device.
Stream createOn(int device) {
  DeviceGuard guard(device);
  return Stream();
}
}  // namespace

DeviceContext::DeviceContext(int d)
    : device(d), owned_stream(createOn(d)), stream(owned_stream.get()) {}

}  // namespace accord::cuda

// GPU support of a build with the CUDA toolkit (DeviceSupport, see ops/common/op.h): the
// device ops' shared state, the check of device tensors at submission and the ready
// event recorded on the application's stream.
#include "ops/cuda/device_ops.h"

#include "ops/common/checks.h"
#include "runtime/logging.h"

#include <accord/accord.h>
#include <accord/error.h>

namespace accord::cuda {

Devices::Devices(const Config& config) : config_(config), finalizer_(config.stall_shutdown_time) {}

DeviceContext& Devices::context(int device) {
  auto& slot = contexts_[device];
  if (!slot) slot = std::make_unique<DeviceContext>(device);
  return *slot;
}

int deviceOf(const Devices& devices, const std::vector<TensorEntry*>& entries) {
  for (const TensorEntry* e : entries)
    if (e) return e->tensor.device.index;
  return devices.homeDevice();
}

void waitUntilReady(const Response& response, int device, cudaStream_t stream,
                    std::vector<TensorEntry*>& entries) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    if (!e || e->error) continue;
    if (e->tensor.device.index != device) {
      prepareLocal(*e, [&] {
        throw InvalidArgument(describeTensor(response, i) + ": tensor is on " +
                              e->tensor.device.str() + ", but this rank runs the collective on " +
                              "cuda:" + std::to_string(device) +
                              " (the device of its first tensor in it); use one GPU per process");
      });
      continue;
    }
    if (e->ready) ACCORD_CUDA_CHECK(cudaStreamWaitEvent(stream, eventOf(e->ready), 0));
  }
}

void* deviceOutput(const Response& response, std::size_t i, TensorEntry& entry, const Shape& shape,
                   int device) {
  const TensorView out = allocateOutput(response, i, entry, shape);
  const std::string what = describeTensor(response, i);
  if (out.device != Device::cuda(device))
    throw InvalidArgument(what + ": the output allocator returned a tensor on " + out.device.str() +
                          ", expected cuda:" + std::to_string(device));
  checkDevicePointer(out.data, num_bytes(shape, response.dtype), device, what + " (output)");
  return out.data;
}

namespace {

// A GPU this process sees; else InvalidArgument: `prefix` followed by the device.
void checkVisible(const Device& device, const std::string& prefix) {
  std::string why;
  const int count = deviceCount(&why);
  if (device.index < 0 || device.index >= count)
    throw InvalidArgument(prefix + device.str() + ", but this process " +
                          (count == 0 ? "sees no CUDA device (" + why + ")"
                                      : "sees CUDA devices 0.." + std::to_string(count - 1)));
}

std::string wrongStream(const std::string& what, const TensorView& tensor, const std::string& why) {
  return what + ": cannot record an event on the given stream of " + tensor.device.str() + " (" +
         why + "); pass a stream of that device, or nullptr";
}

// True when everything queued on the application's stream so far has completed: the
// tensor is ready now, and no event needs recording (nor the GPU's round trip to
// complete one). Only for a stream of the application's own: the legacy default stream
// (nullptr) also waits for other streams' work, which a query of it does not cover;
// and not while the stream is being captured into a graph, where a query is not allowed.
bool idleNow(cudaStream_t stream, const TensorView& tensor, const std::string& what) {
  if (stream == nullptr || stream == cudaStreamLegacy) return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone || cudaStreamQuery(stream) != cudaSuccess) {
    // cudaErrorNotReady (a busy stream, the usual case in training) is no error, but may
    // be kept as the last one; the event record that follows reports a real one.
    cudaGetLastError();
    return false;
  }
  // The check the event record makes otherwise, here only where it is skipped.
  int owner = -1;
  if (cudaStreamGetDevice(stream, &owner) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (owner != tensor.device.index)
    throw InvalidArgument(wrongStream(what, tensor, "it belongs to cuda:" + std::to_string(owner)));
  return true;
}

class CudaSupport final : public DeviceSupport {
 public:
  explicit CudaSupport(const Config& config) : devices_(std::make_shared<Devices>(config)) {}

  std::vector<std::unique_ptr<Op>> makeOps(const HostOpFactory& host) override {
    std::vector<std::unique_ptr<Op>> ops;
    if (devices_->config().nccl) ops = makeNcclOps(devices_);
    if (devices_->config().nccl && ops.empty())
      log().info(
          "this build of Accord has no NCCL: CUDA tensors go through MPI, staged in "
          "page-locked host memory");
    // Staged host ops for whatever NCCL does not take (everything, where it is off).
    for (auto& op : makeStagedOps(devices_, host)) ops.push_back(std::move(op));
    return ops;
  }

  std::shared_ptr<void> ready(const TensorView& tensor, void* stream,
                              const std::string& what) override {
    const int device = tensor.device.index;
    checkVisible(tensor.device, what + ": tensor is on ");
    checkDevicePointer(tensor.data, tensor.bytes(), device, what);
    DeviceGuard guard(device);
    if (idleNow(static_cast<cudaStream_t>(stream), tensor, what)) {
      devices_->noteDevice(device);
      return completedEvent();
    }
    auto event = makeEvent();
    const cudaError_t status = cudaEventRecord(eventOf(event), static_cast<cudaStream_t>(stream));
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw InvalidArgument(wrongStream(what, tensor, cudaGetErrorString(status)));
    }
    devices_->noteDevice(device);
    return event;
  }

  void home(Device device, const std::string& what) override {
    if (deviceCount() == 0) return;  // no device collectives can come
    checkVisible(device, what + ": device ");
    devices_->noteDevice(device.index);
  }

 private:
  std::shared_ptr<Devices> devices_;
};

}  // namespace

}  // namespace accord::cuda

namespace accord {

std::unique_ptr<DeviceSupport> makeDeviceSupport(const Config& config) {
  return std::make_unique<cuda::CudaSupport>(config);
}
bool deviceSupportBuilt() { return true; }
int cudaDevices(std::string* why) { return cuda::deviceCount(why); }

// Here, with the GPU support, rather than beside cuda_event() in the runtime's core.
bool Handle::wait_on_stream(void* stream) const {
  void* event = cuda_event();
  if (!event) return false;
  ACCORD_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  return true;
}

}  // namespace accord

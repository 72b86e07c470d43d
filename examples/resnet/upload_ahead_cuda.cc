// UploadAhead (see upload_ahead.h).
#include "upload_ahead.h"

#include "nn/cuda/layers_cuda.h"

#include <accord/error.h>

#include <string>

namespace accord::resnet {

namespace {

void check(cudaError_t s, const std::string& what) {
  if (s != cudaSuccess) throw Error(what + ": CUDA failed: " + cudaGetErrorString(s));
}

}  // namespace

UploadAhead::UploadAhead(int device, std::size_t image_floats,
                         const std::vector<std::pair<float*, std::size_t>>& buffers)
    : device_(device), image_floats_(image_floats) {
  const char* what = "uploading batches ahead";
  check(cudaSetDevice(device_), what);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what);
  for (const auto& [host, floats] : buffers) {
    Twin& t = twins_[host];
    t.floats = floats;
    check(cudaMalloc(reinterpret_cast<void**>(&t.device), floats * sizeof(float)), what);
    check(cudaEventCreateWithFlags(&t.uploaded, cudaEventDisableTiming), what);
    check(cudaEventCreateWithFlags(&t.consumed, cudaEventDisableTiming), what);
  }
}

UploadAhead::~UploadAhead() {
  // From a destructor: no throw.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& [host, t] : twins_) {
    if (t.device) cudaFree(t.device);
    if (t.uploaded) cudaEventDestroy(t.uploaded);
    if (t.consumed) cudaEventDestroy(t.consumed);
  }
  if (stream_) cudaStreamDestroy(stream_);
}

UploadAhead::Twin& UploadAhead::twinOf(const float* x, const char* what) {
  auto it = twins_.find(x);
  if (it == twins_.end())
    throw Error(std::string(what) + ": a loader buffer that was not given a device twin");
  return it->second;
}

void UploadAhead::beforeFill(const float* x) {
  Twin& t = twinOf(x, "uploading batches ahead (refill)");
  check(cudaSetDevice(device_), "uploading batches ahead");
  // The last copy out of this buffer must be done before the loader writes it again. An
  // event never recorded counts as done.
  check(cudaEventSynchronize(t.uploaded), "uploading batches ahead: waiting for a copy");
  t.n = -1;
}

void UploadAhead::filled(const float* x, int n) {
  Twin& t = twinOf(x, "uploading batches ahead");
  const std::size_t floats = static_cast<std::size_t>(n) * image_floats_;
  if (n < 0 || floats > t.floats)
    throw Error("uploading batches ahead: a batch of " + std::to_string(n) +
                " images does not fit its buffer's twin");
  const char* what = "uploading batches ahead";
  check(cudaSetDevice(device_), what);
  check(cudaStreamWaitEvent(stream_, t.consumed, 0), what);  // the layers read the last batch
  if (floats > 0)
    check(cudaMemcpyAsync(t.device, x, floats * sizeof(float), cudaMemcpyHostToDevice, stream_),
          what);
  check(cudaEventRecord(t.uploaded, stream_), what);
  t.n = n;
}

bool UploadAhead::intoInput(const float* x, int n, float* input, int C, int H, int W, int C_pad) {
  auto it = twins_.find(x);
  if (it == twins_.end() || it->second.n != n) return false;
  Twin& t = it->second;
  cudaStream_t layers = nn::cuda::stream();
  check(cudaStreamWaitEvent(layers, t.uploaded, 0), "taking a batch uploaded ahead");
  nn::cuda::input_from_device_async(input, t.device, n, C, H, W, C_pad);
  check(cudaEventRecord(t.consumed, layers), "taking a batch uploaded ahead");
  t.n = -1;
  return true;
}

void UploadAhead::drain() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
}

}  // namespace accord::resnet

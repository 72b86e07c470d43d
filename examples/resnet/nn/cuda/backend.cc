// The GPU backend's state (see backend_cuda.h): one stream for every layer, so the
// layers of a step run in order without host synchronisation, with cuDNN and cuBLAS
// bound to it. Created on first use on the current device; never destroyed (the
// process's end releases it; destroying handles from a static destructor can run after
// the CUDA runtime has shut down).
#include "nn/cuda/backend_cuda.h"

namespace accord::nn::cuda {

namespace detail {

namespace {
std::string where(const char* file, int line) {
  std::string f(file);
  size_t slash = f.find_last_of('/');
  return (slash == std::string::npos ? f : f.substr(slash + 1)) + ":" + std::to_string(line);
}
}  // namespace

void fail(const std::string& what, const char* call, const char* library,
          const std::string& message, const char* file, int line) {
  throw Error(what + ": " + library + " failed: " + message + " (in " + call + " at " +
              where(file, line) + ")");
}

void checkLaunch(const std::string& what) {
  cudaError_t s = cudaGetLastError();
  if (s != cudaSuccess) throw Error(what + ": CUDA kernel launch failed: " + cudaGetErrorString(s));
}

Backend& backend() {
  static Backend* b = [] {
    auto* p = new Backend;
    const std::string what = "nn::cuda backend setup";
    ACCORD_NN_CUDA_CHECK(what, cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
    ACCORD_NN_CUDA_CHECK(what, cudnnCreate(&p->cudnn));
    ACCORD_NN_CUDA_CHECK(what, cudnnSetStream(p->cudnn, p->stream));
    ACCORD_NN_CUDA_CHECK(what, cublasCreate(&p->cublas));
    ACCORD_NN_CUDA_CHECK(what, cublasSetStream(p->cublas, p->stream));
    // A workspace of its own (after cublasSetStream, which resets it), so cuBLAS never
    // allocates while a CUDA graph is being captured.
    constexpr size_t kCublasWorkspace = size_t(32) << 20;
    ACCORD_NN_CUDA_CHECK(what, cudaMalloc(&p->cublas_workspace, kCublasWorkspace));
    ACCORD_NN_CUDA_CHECK(what,
                         cublasSetWorkspace(p->cublas, p->cublas_workspace, kCublasWorkspace));
    // Plain fp32 unless set_math asks for TF32 (NVIDIA_TF32_OVERRIDE=0 forces it off).
    ACCORD_NN_CUDA_CHECK(what, cublasSetMathMode(p->cublas, CUBLAS_DEFAULT_MATH));
    return p;
  }();
  return *b;
}

namespace {
// Grows `buf` to `bytes`; the old buffer may still be in use by queued work, so the
// stream drains first (cudaFree alone would not wait for a non-blocking stream).
void* grow(std::pair<void*, size_t>& buf, size_t bytes, const char* what) {
  if (buf.second >= bytes && buf.first) return buf.first;
  Backend& b = backend();
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(b.stream));
  if (buf.first) {
    ACCORD_NN_CUDA_CHECK(what, cudaFree(buf.first));
    ++b.memory_generation;
  }
  buf = {nullptr, 0};
  ACCORD_NN_CUDA_CHECK(what, cudaMalloc(&buf.first, bytes ? bytes : 256));
  buf.second = bytes;
  return buf.first;
}
}  // namespace

void* scratch(int slot, size_t bytes) {
  return grow(backend().scratch[slot], bytes, "nn::cuda scratch");
}

void* workspace(size_t bytes) {
  Backend& b = backend();
  std::pair<void*, size_t> ws{b.workspace, b.workspace_bytes};
  void* p = grow(ws, bytes, "nn::cuda cuDNN workspace");
  b.workspace = ws.first;
  b.workspace_bytes = ws.second;
  return p;
}

namespace {
// A device buffer that frees itself with the plan cache.
std::shared_ptr<void> deviceBuffer(size_t bytes, const std::string& what) {
  void* p = nullptr;
  ACCORD_NN_CUDA_CHECK(what, cudaMalloc(&p, bytes ? bytes : 256));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

std::string halfWeightsKey(const float* w, size_t n) {
  return key("16-bit weights", static_cast<const void*>(w), n);
}
}  // namespace

const void* halfWeights(const float* w, size_t n, const std::string& what,
                        const FilterShape* filter) {
  auto& slot = backend().plans[halfWeightsKey(w, n)];
  if (!slot) slot = deviceBuffer(n * 2, what);
  if (filter)
    launchToHalfNhwc(w, slot.get(), filter->K, filter->C, filter->RS, nullptr, filter->Cp);
  else
    launchToHalf(w, slot.get(), n);
  checkLaunch(what);
  return slot.get();
}

void* cachedBuffer(const std::string& key, size_t bytes, const std::string& what) {
  auto& slot = backend().plans[key];
  if (!slot) slot = deviceBuffer(bytes, what);
  return slot.get();
}

void* existingBuffer(const std::string& key) {
  auto found = backend().plans.find(key);
  return found == backend().plans.end() ? nullptr : found->second.get();
}

const void* lastHalfWeights(const float* w, size_t n, const std::string& what) {
  auto found = backend().plans.find(halfWeightsKey(w, n));
  if (found == backend().plans.end())
    throw InvalidArgument(what + ": backward before forward with 16-bit activations");
  return found->second.get();
}

}  // namespace detail

using namespace detail;

cudaStream_t stream() { return backend().stream; }

void synchronize() {
  ACCORD_NN_CUDA_CHECK("nn::cuda::synchronize", cudaStreamSynchronize(backend().stream));
}

Math set_math(Math math) {
  Backend& b = backend();
  Math old = b.math;
  b.math = math;
  // 16-bit math's products are cublasGemmEx calls on 16-bit operands, which use tensor
  // cores in the default mode; TF32 applies to float32 operands only.
  ACCORD_NN_CUDA_CHECK("nn::cuda::set_math",
                       cublasSetMathMode(b.cublas, math == Math::Tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                      : CUBLAS_DEFAULT_MATH));
  return old;  // conv plans are keyed by math, so they need no flush
}

Math math() { return backend().math; }

bool set_conv_search(bool on) {
  const bool old = backend().conv_search;
  backend().conv_search = on;
  return old;
}

bool set_deterministic(bool on) {
  const bool old = backend().deterministic;
  backend().deterministic = on;
  return old;
}

void clear_plan_cache() {
  backend().plans.clear();
  ++backend().memory_generation;
}
uint64_t memory_generation() { return backend().memory_generation; }
size_t plan_cache_size() { return backend().plans.size(); }

void copy_to_device(float* device, const float* host, size_t n) {
  if (n == 0) return;
  const std::string what = key("nn::cuda::copy_to_device floats", n);
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(device, host, n * sizeof(float),
                                             cudaMemcpyHostToDevice, backend().stream));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(backend().stream));
}

void copy_to_device_async(float* device, const float* host, size_t n) {
  if (n == 0) return;
  const std::string what = key("nn::cuda::copy_to_device_async floats", n);
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(device, host, n * sizeof(float),
                                             cudaMemcpyHostToDevice, backend().stream));
}

void copy_to_host(float* host, const float* device, size_t n) {
  if (n == 0) return;
  const std::string what = key("nn::cuda::copy_to_host floats", n);
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(host, device, n * sizeof(float),
                                             cudaMemcpyDeviceToHost, backend().stream));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(backend().stream));
}

}  // namespace accord::nn::cuda

namespace accord::nn::cuda {

void scale(float* x, size_t n, float factor) {
  launchScale(x, n, factor);
  checkLaunch(key("nn::cuda::scale floats", n));
}

bool all_finite(const float* x, size_t n) {
  const std::string what = key("nn::cuda::all_finite floats", n);
  auto* bad = static_cast<int*>(scratch(kSlotFlags, sizeof(int)));
  Backend& b = backend();
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(bad, 0, sizeof(int), b.stream));
  launchNonFinite(x, n, bad);
  checkLaunch(what);
  int host = 0;
  ACCORD_NN_CUDA_CHECK(what,
                       cudaMemcpyAsync(&host, bad, sizeof(int), cudaMemcpyDeviceToHost, b.stream));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(b.stream));
  return host == 0;
}

namespace {
// The input's channels on the device: C, or with 16-bit activations C_pad where more.
int checkedPad(int C, int C_pad, const std::string& what) {
  if (C_pad <= C) return C;
  if (!halfActivations())
    throw InvalidArgument(what + ": input channels padded to " + std::to_string(C_pad) +
                          " need 16-bit activations (bf16 or fp16)");
  return C_pad;
}
}  // namespace

void upload_input_async(float* device, const float* host, int N, int C, int H, int W, int C_pad) {
  const size_t n = size_t(N) * C * H * W;
  const std::string what = key("nn::cuda::upload_input_async (N C H W pad)", N, C, H, W, C_pad);
  C_pad = checkedPad(C, C_pad, what);
  if (!halfActivations()) return copy_to_device_async(device, host, n);
  if (n == 0) return;
  // The stream orders the next upload's copy after this one's conversion.
  auto* staging = static_cast<float*>(scratch(kSlotInput, n * sizeof(float)));
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(staging, host, n * sizeof(float),
                                             cudaMemcpyHostToDevice, backend().stream));
  launchToHalfNhwc(staging, device, N, C, size_t(H) * W, nullptr, C_pad);
  checkLaunch(what);
}

void gather_input_async(float* device, const float* pool, const int32_t* slots, int N, int C, int H,
                        int W, int C_pad) {
  const size_t per = size_t(C) * H * W;
  const std::string what = key("nn::cuda::gather_input_async (N C H W pad)", N, C, H, W, C_pad);
  C_pad = checkedPad(C, C_pad, what);
  if (N <= 0 || per == 0) return;
  if (halfActivations()) {
    // One pass that reads each image where it lies in the pool and writes it converted
    // and channels last, rather than a copy per image and a conversion after them. The
    // indices go up first; the stream orders the next batch's after this conversion.
    auto* on_device = static_cast<int32_t*>(scratch(kSlotInputSlots, N * sizeof(int32_t)));
    ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(on_device, slots, N * sizeof(int32_t),
                                               cudaMemcpyHostToDevice, backend().stream));
    launchToHalfNhwc(pool, device, N, C, size_t(H) * W, on_device, C_pad);
    checkLaunch(what);
    return;
  }
  for (int i = 0; i < N;) {
    int run = 1;  // consecutive images of the pool in a row go as one copy
    while (i + run < N && slots[i + run] == slots[i] + run) ++run;
    ACCORD_NN_CUDA_CHECK(
        what,
        cudaMemcpyAsync(device + size_t(i) * per, pool + size_t(slots[i]) * per,
                        run * per * sizeof(float), cudaMemcpyDeviceToDevice, backend().stream));
    i += run;
  }
}

void input_from_device_async(float* device, const float* staged, int N, int C, int H, int W,
                             int C_pad) {
  const size_t n = size_t(N) * C * H * W;
  const std::string what =
      key("nn::cuda::input_from_device_async (N C H W pad)", N, C, H, W, C_pad);
  C_pad = checkedPad(C, C_pad, what);
  if (n == 0) return;
  if (!halfActivations()) {
    ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(device, staged, n * sizeof(float),
                                               cudaMemcpyDeviceToDevice, backend().stream));
    return;
  }
  launchToHalfNhwc(staged, device, N, C, size_t(H) * W, nullptr, C_pad);
  checkLaunch(what);
}

void activations_to_host(float* host, const float* device, int N, int C, int H, int W) {
  const size_t n = size_t(N) * C * H * W;
  if (!halfActivations()) return copy_to_host(host, device, n);
  if (n == 0) return;
  const std::string what = key("nn::cuda::activations_to_host (N C H W)", N, C, H, W);
  auto* staging = static_cast<float*>(scratch(kSlotInput, n * sizeof(float)));
  launchFromHalfNchw(device, staging, N, C, size_t(H) * W);
  checkLaunch(what);
  copy_to_host(host, staging, n);
}

}  // namespace accord::nn::cuda

// The GPU backend's shared state, private to nn/cuda/: the stream, the cuDNN and cuBLAS
// handles bound to it, one growing cuDNN workspace, scratch buffers, and the checks that
// turn a library's status into accord::Error. Plus the launchers of our own kernels
// (nn/cuda/*.cu), declared here so the .cc files that hold the library calls can use them.
#pragma once

#include <accord/error.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

#include "nn/cuda/layers_cuda.h"

namespace accord::nn::cuda::detail {

struct BnForward {
  int ex = 0;
  const void* y = nullptr;
  const char* backward = "none";  // the call the last training backward took
};

struct Backend {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  Math math = Math::Fp32;
  bool conv_search = false;   // set_conv_search
  bool deterministic = false;           // set_deterministic
  Fusion conv_bn_fusion = Fusion::Off;  // set_conv_bn_fusion
  void* workspace = nullptr;  // cuDNN's, grown to the largest an algorithm asked for
  size_t workspace_bytes = 0;
  void* cublas_workspace = nullptr;  // cuBLAS's own, fixed (graph capture allocates none)
  uint64_t memory_generation = 0;    // memory_generation()
  std::unordered_map<int, std::pair<void*, size_t>> scratch;
  std::unordered_map<std::string, std::shared_ptr<void>> plans;
  // Per training batch norm (by its save_mean): which of cuDNN's Ex calls its last
  // forward took (batchnorm2d.cc's Ex; 0: none), whose reserve space its backward then
  // reads, and its output, which the one with the ReLU fused reads too.
  std::unordered_map<const void*, BnForward> bn_forward;
};
Backend& backend();

// A device buffer of at least `bytes` for slot `slot`; grows (after the stream drains),
// never shrinks. Slots keep buffers that are alive at the same time apart.
void* scratch(int slot, size_t bytes);
void* workspace(size_t bytes);

enum ScratchSlot {
  kSlotBatchNormDy = 0,
  kSlotLosses = 1,
  kSlotFlags = 2,
  kSlotWeightGrad = 3,   // 16-bit math: a conv's weight gradient in 16 bits
  kSlotLinearDy = 4,     // 16-bit math: the linear layer's output gradient in 16 bits
  kSlotInput = 5,        // 16-bit math: upload_input_async's float staging buffer
  kSlotFusionStats = 6,  // conv_bn_forward: the fused convolution's channel sums
  kSlotFusionCheck = 7,  // ... its first run per shape: the plain convolution's output
  kSlotFusionSums = 8,   // ... and that output's sums
  kSlotBnBackward = 9,   // launchBnBackwardTraining's partial sums and coefficients
  kSlotInputSlots = 10,  // 16-bit math: gather_input_async's pool indices
  kSlotBnStatistics = 11,  // launchBnStatistics's partial sums
};

// Whether activations are stored in 16 bits (Math::Bf16: bfloat16, Math::Fp16: IEEE
// half), and their element size and library types. 16-bit activations are laid out
// NHWC (channels last), float32 ones NCHW.
inline bool halfActivations() {
  return backend().math == Math::Bf16 || backend().math == Math::Fp16;
}
inline size_t activationBytes(size_t n) { return n * (halfActivations() ? 2 : sizeof(float)); }
inline cudnnDataType_t activationType() {
  switch (backend().math) {
    case Math::Bf16:
      return CUDNN_DATA_BFLOAT16;
    case Math::Fp16:
      return CUDNN_DATA_HALF;
    default:
      return CUDNN_DATA_FLOAT;
  }
}
// cuBLAS's name for the 16-bit type (halfActivations() only).
inline cudaDataType_t halfType() { return backend().math == Math::Fp16 ? CUDA_R_16F : CUDA_R_16BF; }
// A 16-bit copy (the activations' type) of the `n` float32 weights at `w`, refreshed on
// the stream now; the copy
// is the layer's own (kept in the plan cache, keyed by w) and stays valid until the next
// refresh, so backward reads the weights forward used. `filter` (K, C, RS): a conv
// filter (K, C, R, S), copied as (K, R, S, C) for NHWC convolutions.
struct FilterShape {
  int K, C;
  size_t RS;
  int Cp = 0;  // > C: copied with Cp channels, the last Cp - C zeros (Conv2d::x_channels)
};
const void* halfWeights(const float* w, size_t n, const std::string& what,
                        const FilterShape* filter = nullptr);
// A device buffer of `bytes` kept in the plan cache under `key` (made on first use,
// freed with the cache): per-layer state that lives from forward to backward.
void* cachedBuffer(const std::string& key, size_t bytes, const std::string& what);
void* existingBuffer(const std::string& key);  // nullptr where none was made
// A training batch norm's forward that did not go through batchnorm2d_forward
// (conv_bn_forward's fused statistics): its backward must not read an Ex reserve space.
void bnForwardWithoutEx(const BatchNorm2d& bn);
// The copy halfWeights last made of `w` (backward reads what forward used); throws
// InvalidArgument naming `what` when there is none yet.
const void* lastHalfWeights(const float* w, size_t n, const std::string& what);

// "conv2d_forward 32 64 56 56 ..." from the arguments, for keys and messages.
template <class... Args>
std::string key(const char* kind, const Args&... args) {
  std::ostringstream os;
  os << kind;
  ((os << ' ' << args), ...);
  return os.str();
}

// The cached plan under `key` (the key starts with the layer kind, so T is fixed by it).
template <class T, class Make>
T& cached(const std::string& key, Make&& make) {
  auto& slot = backend().plans[key];
  if (!slot) slot = std::make_shared<T>(make());
  return *static_cast<T*>(slot.get());
}

[[noreturn]] void fail(const std::string& what, const char* call, const char* library,
                       const std::string& message, const char* file, int line);
inline void check(cudaError_t s, const std::string& what, const char* call, const char* file,
                  int line) {
  if (s != cudaSuccess) fail(what, call, "CUDA", cudaGetErrorString(s), file, line);
}
inline void check(cudnnStatus_t s, const std::string& what, const char* call, const char* file,
                  int line) {
  if (s != CUDNN_STATUS_SUCCESS) fail(what, call, "cuDNN", cudnnGetErrorString(s), file, line);
}
inline void check(cublasStatus_t s, const std::string& what, const char* call, const char* file,
                  int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(what, call, "cuBLAS", cublasGetStatusString(s), file, line);
}

// Throws, naming `what`, if a kernel launch just failed.
void checkLaunch(const std::string& what);

// ---- our own kernels (launched on the backend's stream) ------------------------------
//
// Those that take activations read and write them in the type the math says (the
// float* then point at 16-bit data); parameters, statistics, biases, logits and argmax
// are always float32 / int32. Arithmetic is float32 either way. "Half" below means the
// activations' 16-bit type: bf16 or fp16.

void launchToHalf(const float* x, void* y, size_t n);
void launchFromHalf(const void* x, float* y, size_t n);
// (N, C, HW) float32 to (N, HW, C) 16-bit, and back: activations (NCHW <-> NHWC) and
// conv filters ((K, C, R, S) <-> (K, R, S, C): N = K, HW = R S). With `slots` (device
// memory, N of them), image n of y is image slots[n] of x: a batch gathered from a pool.
// With Cp > C the 16-bit side has Cp channels, the last Cp - C zeros (written as zeros,
// left out when read back): the stem's input and filter padded for tensor cores.
void launchToHalfNhwc(const float* x, void* y, int N, int C, size_t HW,
                      const int32_t* slots = nullptr, int Cp = 0);
void launchFromHalfNchw(const void* x, float* y, int N, int C, size_t HW, int Cp = 0);

void launchRelu(const float* x, float* y, size_t n);
void launchReluBackward(const float* y, const float* dy, float* dx, size_t n);
void launchAdd(const float* a, const float* b, float* y, size_t n);
void launchAddRelu(const float* a, const float* b, float* y, size_t n);  // max(a + b, 0)
// y = relu_y > 0 ? y + x : 0
void launchAccumulateReluBackward(float* y, const float* x, const float* relu_y, size_t n);

void launchMaxPool(const float* x, float* y, int32_t* argmax, int N, int C, int H, int W, int Ho,
                   int Wo, int K, int stride, int pad);
void launchMaxPoolBackward(const float* dy, const int32_t* argmax, float* dx, int N, int C, int H,
                           int W, int Ho, int Wo, int K, int stride, int pad);
void launchAvgPool(const float* x, float* y, int N, int C, int HW);
void launchAvgPoolBackward(const float* dy, float* dx, int N, int C, int HW);

void launchScale(float* x, size_t n, float factor);
// Sets *bad (device int) to 1 when any of the n floats is not finite; leaves it otherwise.
void launchNonFinite(const float* x, size_t n, int* bad);

// y (N, out) += b; db (out) = column sums of dy (N, out).
void launchAddBias(float* y, const float* b, int N, int out);
void launchBiasGrad(const float* dy, float* db, int N, int out);

// Batch norm as y = x * scale + shift per channel c, with scale = gamma * invstd,
// shift = beta - mean * scale, and invstd = `invstd[c]` when given, else
// 1 / sqrt(var[c] + eps). Apply: y = that, clamped at 0 with `relu` (y may be x). Mask:
// g = x * scale + shift > 0 ? dy : 0. Both evaluate x * scale + shift with the same
// device code, so backward's mask is forward's, bit for bit.
struct BnAffine {
  const float* gamma;
  const float* beta;
  const float* mean;
  const float* var;     // used when invstd is nullptr
  const float* invstd;  // nullable
  float eps;
};
void launchBnApply(const float* x, float* y, BnAffine f, bool relu, int N, int C, size_t HW);
// The end of a residual block in one pass: y = max(a * scale + shift + t, 0), with
// t = s * scale' + shift' of `g` where `g` (the shortcut's batch norm) is given, else s.
// Nothing is rounded between the maps and the sum. y may be a or s.
void launchBnAddRelu(const float* a, BnAffine f, const float* s, const BnAffine* g, float* y,
                     int N, int C, size_t HW);
void launchBnReluMask(const float* x, const float* dy, float* g, BnAffine f, int N, int C,
                      size_t HW);
// Inference-mode backward (mean and variance fixed): dbeta = sum g, dgamma = sum g * xhat,
// dx = gamma * invstd * g, with g = dy masked by the fused ReLU when `relu`.
void launchBnBackwardInference(const float* x, const float* dy, float* dx, float* dgamma,
                               float* dbeta, BnAffine f, bool relu, int N, int C, size_t HW);
// Training-mode backward on 16-bit NHWC activations from the forward's saved statistics
// (f.mean, f.invstd), summed in a fixed order (bn_backward.cu): over the M = N HW values
// of each channel, dbeta = sum g, dgamma = invstd sum g (x - mean) and
// dx = gamma invstd (g - dbeta / M - (x - mean) invstd dgamma / M), g = dy masked by the
// ReLU when `relu`; dx may be dy. False, with nothing launched, unless C is a multiple
// of 8 and x, dy and dx start on 16 bytes.
bool launchBnBackwardTraining(const float* x, const float* dy, float* dx, float* dgamma,
                              float* dbeta, BnAffine f, bool relu, int N, int C, size_t HW);

// Batch norm from per-channel sums of `count` values (bn_stats.cu): save_mean and
// save_invstd as cuDNN's forward training saves them, the running statistics moved by
// `momentum` (the variance unbiased).
void launchBnFinalize(const float* sum, const float* sqsum, double count, int C, float momentum,
                      float eps, float* save_mean, float* save_invstd, float* running_mean,
                      float* running_var);
// A training batch norm's statistics of 16-bit NHWC x, (N, C, HW), summed here in a fixed
// order (bn_stats.cu): save_mean and save_invstd, and the running statistics moved, as
// launchBnFinalize leaves them. False, with nothing launched, unless C is a multiple of
// 8 and x starts on 16 bytes.
bool launchBnStatistics(const float* x, int N, int C, size_t HW, float momentum, float eps,
                        float* save_mean, float* save_invstd, float* running_mean,
                        float* running_var);
// 16-bit (rows, C) x: each channel's sum and sum of squares; and out[0] = max |x - y|,
// out[1] = max |y| (as float bits; out zeroed first).
void launchChannelSums(const void* x, size_t rows, int C, float* sum, float* sqsum);
void launchMaxDifference(const void* x, const void* y, size_t n, unsigned* out);

// Per row: loss[i] (double), dlogits (when not nullptr), bad label count in *bad.
void launchSoftmaxXent(const float* logits, const int32_t* labels, float* dlogits, double* loss,
                       int* bad, int N, int C, float smoothing);
// Per row: ahead[i] = how many other logits are >= the label's, -1 for a NaN row.
void launchTopK(const float* logits, const int32_t* labels, int* ahead, int* bad, int N, int C);

}  // namespace accord::nn::cuda::detail

#define ACCORD_NN_CUDA_CHECK(what, call) \
  ::accord::nn::cuda::detail::check((call), (what), #call, __FILE__, __LINE__)

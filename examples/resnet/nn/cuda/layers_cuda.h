// The trainer's layers on the GPU: the same structs and the same forward/backward pairs
// as nn/layers.h, with every float* (and the labels) in device memory.
//
// Convolutions, batch norm and pooling's neighbours run on cuDNN's legacy API, linear on
// cuBLAS, the rest on small kernels of our own (nn/cuda/*.cu). Every call is enqueued on
// one CUDA stream that the backend owns (stream()); functions return before the GPU is
// done, except those that return a value computed on the GPU (softmax_xent,
// topk_correct), which wait for it. Call synchronize() before reading results on the
// host another way than copy_to_host.
//
// Differences from the CPU backend, all behind the same declarations:
//   - BatchNorm2d::save_var holds cuDNN's saved INVERSE standard deviation,
//     1 / sqrt(var + eps), not the biased variance: backward is cuDNN's and takes that.
//     Only this backend's forward and backward read it.
//   - maxpool2d's ws holds the arg-max of each output as an int32 index into its input
//     plane (cuDNN's pooling backward wants x and y, which the interface does not pass).
//   - Convolutions use FMA (no TF32) math by default, so they match the CPU to fp32
//     rounding; set_math(Math::Tf32) allows tensor cores.
//
// The layer functions take accord::nn's structs, so an unqualified call such as
// conv2d_forward(conv, ...) finds both backends by argument-dependent lookup: always
// qualify (nn::conv2d_forward, cuda::conv2d_forward).
//
// Failures (bad shapes, CUDA, cuDNN or cuBLAS errors) throw accord::Error /
// InvalidArgument naming the layer, the shape and the library's own message.
#pragma once

#include "nn/layer_ops.h"
#include "nn/layers.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace accord::nn::cuda {

using nn::BatchNorm2d;
using nn::Conv2d;
using nn::Linear;
using nn::MaxPool2d;
using nn::TopK;

// ---- backend ------------------------------------------------------------------------

// The stream every layer runs on (created on first use, on the current device).
cudaStream_t stream();
void synchronize();  // waits for everything enqueued so far; throws on an async error

enum class Math {
  Fp32,  // CUDNN_FMA_MATH / cuBLAS default: plain fp32, matches the CPU
  Tf32,  // tensor cores with TF32 inputs (~1e-3 relative): faster, for training
  // Mixed precision: activations and their gradients are STORED as bfloat16 in NHWC
  // order (the float* of the layer functions then point at bf16 data, half the bytes;
  // the shapes they take stay (N, C, H, W)), convolutions and the linear layer run on
  // bf16 tensor cores with float32 accumulation; parameters, their gradients,
  // batch-norm statistics and the logits (the linear layer's output and the loss's
  // input) stay float32. A bf16 copy of each weight is made as its layer runs forward.
  // Feed the network's input through upload_input_async.
  Bf16,
  // As Bf16 with IEEE half (fp16) storage: 10-bit mantissas but a 5-bit exponent, so
  // gradients need loss scaling to stay in range (the trainer's --precision fp16).
  Fp16,
};
Math set_math(Math math);  // returns the previous setting; later calls use the new one
Math math();               // the current setting
// Convolution algorithms: false (the default) takes cuDNN's heuristics' first usable
// pick; true times cuDNN's candidates once per shape and takes the fastest (what
// PyTorch's torch.backends.cudnn.benchmark does; the first pass of each shape pays for
// it). Returns the previous setting; plans are kept per setting.
bool set_conv_search(bool on);
// true: convolutions take only the algorithms cuDNN marks deterministic (no atomics) and
// training batch norm keeps to its plain spatial mode (not the persistent one, which
// may sum with atomics), so the same inputs give the same bits run after run, as with
// PyTorch's torch.backends.cudnn.deterministic; conv_bn_forward then does not fuse (its
// summed statistics promise no order). false (the default) takes the fastest ones.
// Returns the previous setting; plans are kept per setting.
bool set_deterministic(bool on);
// conv_bn_forward's fusion of the convolution with its batch norm's statistics (cuDNN's
// graph API, conv_bn.cc): Off (the default: convolution, then batch norm), WherePays
// (per shape, where cuDNN has a fused engine that checks out against the plain
// convolution and is at most 5% slower than it) or WhereSupported (where it checks out,
// whatever its speed: for tests). Returns the previous setting.
enum class Fusion { Off, WherePays, WhereSupported };
Fusion set_conv_bn_fusion(Fusion fusion);
// One line per convolution shape conv_bn_forward has seen with the fusion on: fused or
// not, and why (cuDNN's refusal, the check that failed, or the two timings).
std::string conv_bn_fusion_report();

// ---- profile ------------------------------------------------------------------------

// The layer table with every call timed on the GPU (timing events around it on the
// stream), by kind: "conv forward", "batch norm backward", ...; and the host's time
// in the call, queueing that work. profileReport() reads the times (it waits for the
// GPU) and returns a table, per step when `steps` > 0; profileReset() waits for the
// GPU too, and forgets every time so far (a run's first step, say).
const LayerOps& profiledLayers();
std::string profileReport(int steps);
void profileReset();
// Times the GPU work enqueued during its life as `kind` (a string that outlives it),
// for work outside the layer table (copies, the optimizer); where `shape` is given, also
// as that shape of the kind, which does `flop` floating-point operations per call (the
// report's table of convolutions by shape).
class ProfileScope {
 public:
  explicit ProfileScope(const char* kind, const std::string& shape = {}, double flop = 0.0);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;
  // The least memory traffic of the call (bytes), for the report's achieved bandwidth.
  void traffic(double bytes) { bytes_ = bytes; }

 private:
  int kind_, shape_ = -1;
  double bytes_ = 0.0;
  cudaEvent_t start_ = nullptr;
  std::chrono::steady_clock::time_point host_start_;
};

// Drops cached cuDNN descriptors and algorithm choices (keyed by shape and math).
void clear_plan_cache();
size_t plan_cache_size();
// Goes up whenever the backend frees memory it handed to the layers: a scratch buffer or
// the cuDNN workspace that grew, the plans cleared. Work captured in a CUDA graph before
// it changed may read freed memory: capture it again.
uint64_t memory_generation();

void copy_to_device(float* device, const float* host, size_t n);  // synchronous
// Queued on the layers' stream and returns at once: `host` must hold its values until
// the stream has read them (the next synchronous copy, say). From page-locked memory
// the host goes on launching while the bytes move.
void copy_to_device_async(float* device, const float* host, size_t n);
void copy_to_host(float* host, const float* device, size_t n);    // synchronous
// copy_to_device_async for the network's input, (N, C, H, W) floats: under Math::Bf16 and
// Fp16 they go to a staging buffer and `device` receives them in 16 bits in NHWC order,
// as the first layer reads them; otherwise the same as copy_to_device_async. C_pad > C
// (16-bit only): `device` gets C_pad channels, the last C_pad - C zeros, for a first
// convolution whose x_channels say so (the stem padded for tensor cores).
void upload_input_async(float* device, const float* host, int N, int C, int H, int W,
                        int C_pad = 0);
// upload_input_async for images already in device memory: image i of the batch is
// pool + slots[i] * C * H * W ((C, H, W) floats each; slots in host memory). Under
// Math::Bf16 and Fp16 one pass reads each image from the pool into the same conversion;
// in float32, device-to-device copies on the layers' stream (a run of consecutive
// images as one).
void gather_input_async(float* device, const float* pool, const int32_t* slots, int N, int C, int H,
                        int W, int C_pad = 0);
// The network's input from (N, C, H, W) floats already in device memory (`staged`,
// which the stream reads before anything queued after this): copied, or under
// Math::Bf16 and Fp16 converted, into `device`.
void input_from_device_async(float* device, const float* staged, int N, int C, int H, int W,
                             int C_pad = 0);
// Device activations of shape (N, C, H, W) to host floats in NCHW order, whatever they
// are stored as. Synchronous.
void activations_to_host(float* host, const float* device, int N, int C, int H, int W);

// ---- arenas -------------------------------------------------------------------------

// nn::Arena's two passes on device memory: take() counts while planning, allocate()
// cudaMallocs what was counted (zeroed) and rewinds. Pieces are rounded to 16 floats
// like nn::Arena's, so the same take() sequence gives the same offsets on both: a host
// Arena can mirror a DeviceArena one to one (checkpoints, tests).
struct DeviceArena {
  float* base = nullptr;  // (capacity), device
  size_t capacity = 0;
  size_t used = 0;
  bool planning = true;

  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena();

  float* take(size_t n);
  void allocate();
  void reset() { used = 0; }
};

// Makes `arena` (still planning) allocate zeroed device memory: nn's binds then carve
// device pieces, so a whole model can be laid out on the GPU by the CPU's code.
void useDeviceMemory(nn::Arena& arena);

// This backend's functions as a table, for code written once over both backends.
const LayerOps& layers();

// The binds carve the same pieces as nn's; the inits draw the same random numbers as
// nn's (on the host, then copy), so one seed gives the same model on both backends.
void conv2d_bind(Conv2d& c, DeviceArena& params, DeviceArena& grads);
void conv2d_init(Conv2d& c, std::mt19937_64& rng);
void batchnorm2d_bind(BatchNorm2d& bn, DeviceArena& params, DeviceArena& grads,
                      DeviceArena& buffers, DeviceArena& acts);
void batchnorm2d_init(BatchNorm2d& bn, bool zero_gamma);
void linear_bind(Linear& l, DeviceArena& params, DeviceArena& grads);
void linear_init(Linear& l, std::mt19937_64& rng);

// ---- layers (see nn/layers.h for each one's contract) ---------------------------------

void conv2d_forward(Conv2d& c, const float* x, float* y, int N, int H, int W);
void conv2d_backward(Conv2d& c, const float* x, const float* dy, float* dx, int N, int H, int W);

void batchnorm2d_forward(BatchNorm2d& bn, const float* x, float* y, int N, int H, int W,
                         bool training);
// conv2d_forward(c, x, a, N, H, W) then batchnorm2d_forward(bn, a, b, ...) in training,
// with the statistics summed by the convolution where set_conv_bn_fusion says so.
void conv_bn_forward(Conv2d& c, BatchNorm2d& bn, const float* x, float* a, float* b, int N, int H,
                     int W);
void batchnorm2d_backward(BatchNorm2d& bn, const float* x, const float* dy, float* dx, int N, int H,
                          int W, bool training);
// The end of a residual block in training, in one pass (residual.cc): y = max(bn(a) + t, 0),
// t = shortcut_bn(shortcut) where the shortcut has a batch norm, else shortcut; all
// (N, bn.C, H, W). Each batch norm's statistics are summed (saved and running ones, as
// batchnorm2d_forward leaves them; its backward then runs the layers' own kernels), and
// neither batch norm's output is written. Where the kernels cannot take the tensors
// (float32 activations, channels not a multiple of 8), batchnorm2d_forward into y and
// into shortcut_out, then add_relu_forward. Both batch norms' relu are set false.
void bn_add_relu_forward(BatchNorm2d& bn, const float* a, BatchNorm2d* shortcut_bn,
                         const float* shortcut, float* shortcut_out, float* y, int N, int H,
                         int W);
// Which cuDNN call `bn`'s last training forward took: "plain" (or none yet), "Ex" or "Ex
// with the ReLU" (batchnorm2d.cc), for the tests and the curious.
std::string batchnorm2d_forward_path(const BatchNorm2d& bn);
// Which call `bn`'s last training backward took: "none" (none yet), "Ex" (cuDNN's, after
// forward's), "ours" (the layers' kernels, bn_backward.cu) or "plain" (cuDNN's plain one).
std::string batchnorm2d_backward_path(const BatchNorm2d& bn);

void relu_forward(const float* x, float* y, size_t n);
void relu_backward(const float* y, const float* dy, float* dx, size_t n);

void maxpool2d_forward(MaxPool2d& p, const float* x, float* y, float* ws, int N, int C, int H,
                       int W);
void maxpool2d_backward(MaxPool2d& p, const float* dy, const float* ws, float* dx, int N, int C,
                        int H, int W);

void avgpool_forward(const float* x, float* y, int N, int C, int H, int W);
void avgpool_backward(const float* dy, float* dx, int N, int C, int H, int W);

void linear_forward(Linear& l, const float* x, float* y, int N);
void linear_backward(Linear& l, const float* x, const float* dy, float* dx, int N);

void add_forward(const float* a, const float* b, float* y, size_t n);
void accumulate(float* y, const float* x, size_t n);
void add_relu_forward(const float* a, const float* b, float* y, size_t n);  // max(a + b, 0)
// y = relu_y > 0 ? y + x : 0: accumulate, then relu_backward through the ReLU whose output
// is relu_y, in one pass (where a residual block's input gradient meets the ReLU that
// ended the block before it).
void accumulate_relu_backward(float* y, const float* x, const float* relu_y, size_t n);

// labels: (N) int32 in device memory. Waits for the GPU (returns the loss).
float softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int N, int C,
                   float smoothing);
TopK topk_correct(const float* logits, const int32_t* labels, int N, int C);

// The same two queued on the stream without waiting, their results left in device
// memory (what a CUDA graph can hold): *loss gets softmax_xent's value, counts[0] and
// counts[1] topk_correct's top1 and top5, and each adds the number of labels outside
// [0, C) to *bad (zero it first) instead of throwing.
void softmax_xent_async(const float* logits, const int32_t* labels, float* dlogits, int N, int C,
                        float smoothing, float* loss, int* bad);
void topk_correct_async(const float* logits, const int32_t* labels, int N, int C, int* counts,
                        int* bad);

// x[i] *= factor over n float32s, on the stream (loss scaling).
void scale(float* x, size_t n, float factor);
// Whether all n float32s are finite (no NaN, no infinity). Waits for the GPU.
bool all_finite(const float* x, size_t n);

// ---- optimizer ----------------------------------------------------------------------

// One parameter tensor inside a flat parameter array: elements [offset, offset + n),
// updated with weight decay `weight_decay` (0 for BN and biases when so configured).
struct SgdSegment {
  size_t offset = 0;
  size_t n = 0;
  float weight_decay = 0.0f;
};

// resnet::Sgd's update (torch.optim.SGD, dampening 0) as one kernel over every segment
// of a flat array: g' = g + wd w; buf = mu buf + g'; d = nesterov ? g' + mu buf : buf;
// w -= lr d. buf has w's layout and starts at zero (PyTorch's buf = g on the first
// step). The same float operations in the same order as the CPU, without FMA
// contraction, so both give the same bits.
class FusedSgd {
 public:
  FusedSgd(const std::vector<SgdSegment>& segments, float momentum, bool nesterov);
  ~FusedSgd();
  FusedSgd(const FusedSgd&) = delete;
  FusedSgd& operator=(const FusedSgd&) = delete;

  // All device, on stream(). `grad_scale` multiplies each gradient as it is read (the
  // inverse of the loss scale; 1 reads it as it is).
  void step(float* w, const float* g, float* buf, float lr, float grad_scale = 1.0f);

  struct Chunk;  // one block's share of the array (sgd.cu)

 private:
  Chunk* chunks_ = nullptr;  // (num_chunks_) device
  size_t num_chunks_ = 0;
  float momentum_;
  bool nesterov_;
};

}  // namespace accord::nn::cuda

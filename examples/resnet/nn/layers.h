// The trainer's layers: the narrow interface the model code is written against.
//
// Every layer is a plain struct (its configuration plus pointers to its parameters and
// gradients) and a pair of free functions, <layer>_forward and <layer>_backward.
// Activations are passed in by the caller. The CPU backend (oneDNN + oneTBB, nn/*.cc)
// and the cuDNN backend (nn/cuda/) implement exactly these declarations; on the GPU
// every float* is a device pointer.
//
// Conventions, the same for every layer:
//   - Tensors are float32, NCHW, dense and plain (no blocked layouts leak out).
//   - Every buffer is carved from an Arena: one for parameters, one for gradients,
//     one for activations (and the forward caches backward needs).
//   - forward overwrites y; backward OVERWRITES dx and the parameter gradients (no
//     accumulation), so no zeroing is needed between steps. A residual branch adds
//     its gradient with nn::accumulate.
//   - dx may be nullptr where the input needs no gradient (the first conv).
//   - Functions are not thread-safe: call them from one thread (the training loop).
//     They parallelise internally (oneDNN's OpenMP pool, oneTBB for the hand loops),
//     by default over every core: under mpirun with several ranks per host, call
//     set_num_threads(cores / ranks per host) first.
//   - Memory beyond the arenas: cached oneDNN primitives, and three scratch buffers
//     that convolutions reorder through, each as large as the largest conv input or
//     output (in bytes) seen so far.
//   - Failures (bad shapes, oneDNN errors) throw accord::Error / InvalidArgument
//     naming the layer and shape.
//
// A typical conv -> bn -> relu, N images of H x W:
//   nn::conv2d_forward(conv, x, a, N, H, W);          // a  (N, C_out, Ho, Wo)
//   nn::batchnorm2d_forward(bn, a, b, N, Ho, Wo, true);
//   nn::relu_forward(b, b, n);                         // in place
//   ...
//   nn::relu_backward(b, db, db, n);                   // uses the relu OUTPUT
//   nn::batchnorm2d_backward(bn, a, db, da, N, Ho, Wo, true);   // bn.dgamma, bn.dbeta
//   nn::conv2d_backward(conv, x, da, dx, N, H, W);     // conv.dw (conv.db)
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace accord::nn {

// ---- arenas -------------------------------------------------------------------------

// One contiguous, 64-byte aligned, zero-initialised float allocation, handed out in
// pieces. Two passes: while planning (the state after construction) take() returns
// nullptr and only counts; allocate() then allocates what was counted and rewinds, and
// the same sequence of take() calls runs again for real. Every piece starts on a
// 64-byte boundary (sizes are rounded up to 16 floats), so vector loads are aligned.
struct Arena {
  float* base = nullptr;  // (capacity)
  size_t capacity = 0;    // floats allocated
  size_t used = 0;        // floats taken (planned, while planning)
  bool planning = true;
  // Where allocate() gets its memory; host memory when unset. A GPU backend sets both
  // (nn::cuda::useDeviceMemory) so that a model's arenas, and every piece carved from
  // them, are device memory. alloc must return zeroed memory or throw.
  float* (*alloc)(size_t bytes) = nullptr;
  void (*release)(float* base) = nullptr;
  size_t mapped = 0;  // bytes of a host arena mapped from the kernel (arena.cc), else 0
  // Whether a mapped host arena reserves its memory when allocated, so that one larger
  // than the host can hold fails there rather than when its pages are first touched.
  // false for an arena that is mostly never touched (MAP_NORESERVE).
  bool reserve = true;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  float* take(size_t n);      // throws accord::Error when an allocated arena runs out
  void allocate();            // planning -> allocated; allocates `used` floats, used = 0
  void reset() { used = 0; }  // reuse an allocated arena (e.g. for a new batch size)
};

// ---- conv2d -------------------------------------------------------------------------

// y = conv(x, w) (+ b). No groups, no dilation (ResNet needs neither).
struct Conv2d {
  int C_in = 0, C_out = 0, K = 1, stride = 1, pad = 0;
  bool bias = false;
  // The GPU's 16-bit NHWC layers only: x holds this many channels, C_in of them real and
  // the rest zeros (the stem's 3 padded to 4, where tensor cores have kernels); the
  // filter is padded to match inside the layer and dw keeps only the real channels.
  // 0: x holds C_in. Every other backend ignores it.
  int x_channels = 0;
  float* w = nullptr;   // (C_out, C_in, K, K)
  float* b = nullptr;   // (C_out), nullptr without bias
  float* dw = nullptr;  // (C_out, C_in, K, K)
  float* db = nullptr;  // (C_out), nullptr without bias

  int out_h(int H) const { return (H + 2 * pad - K) / stride + 1; }
  int out_w(int W) const { return (W + 2 * pad - K) / stride + 1; }
  size_t num_params() const;
};
// Carves w, b from params and dw, db from grads (nullptr pieces while planning).
void conv2d_bind(Conv2d& c, Arena& params, Arena& grads);
// He/Kaiming normal, fan_out mode like torchvision: std = sqrt(2 / (C_out*K*K)); bias 0.
void conv2d_init(Conv2d& c, std::mt19937_64& rng);

void conv2d_forward(Conv2d& c,
                    const float* x,  // (N, C_in, H, W)
                    float* y,        // (N, C_out, out_h(H), out_w(W))
                    int N, int H, int W);
// Writes dx (when not nullptr), c.dw and c.db (with bias).
void conv2d_backward(Conv2d& c,
                     const float* x,   // (N, C_in, H, W)   forward input
                     const float* dy,  // (N, C_out, Ho, Wo)
                     float* dx,        // (N, C_in, H, W)   nullable
                     int N, int H, int W);

// ---- batchnorm2d --------------------------------------------------------------------

// Per-channel batch norm over (N, H, W). Training: normalise with the batch mean and
// biased variance, and update running_mean/var with the unbiased variance like
// PyTorch: r = (1 - momentum) * r + momentum * batch_stat. Inference: normalise with
// the running statistics. Backward works in both modes (in inference mode it is the
// gradient of the fixed affine map).
struct BatchNorm2d {
  int C = 0;
  float momentum = 0.1f;
  float eps = 1e-5f;
  // Fuse the ReLU that follows: forward writes max(bn(x), 0) and backward takes the
  // gradient w.r.t. that output (it recomputes the mask from x). Equals
  // batchnorm2d_forward + relu_forward, in one pass instead of two each way.
  bool relu = false;
  float* gamma = nullptr;         // (C) param
  float* beta = nullptr;          // (C) param
  float* dgamma = nullptr;        // (C) grad
  float* dbeta = nullptr;         // (C) grad
  float* running_mean = nullptr;  // (C) buffer, not trained (checkpoint it)
  float* running_var = nullptr;   // (C) buffer, not trained (checkpoint it)
  float* save_mean = nullptr;     // (C) activation: batch mean of the last forward
  float* save_var = nullptr;      // (C) activation: batch (biased) variance of the last forward

  size_t num_params() const { return 2 * static_cast<size_t>(C); }
};
// gamma, beta from params; dgamma, dbeta from grads; running_mean/var from buffers
// (pass the params arena to keep them next to the weights); save_* from acts.
void batchnorm2d_bind(BatchNorm2d& bn, Arena& params, Arena& grads, Arena& buffers, Arena& acts);
// gamma = 1 (0 with zero_gamma: the last BN of a residual block), beta = 0,
// running_mean = 0, running_var = 1.
void batchnorm2d_init(BatchNorm2d& bn, bool zero_gamma);

void batchnorm2d_forward(BatchNorm2d& bn,
                         const float* x,  // (N, C, H, W)
                         float* y,        // (N, C, H, W), may alias x in inference only
                         int N, int H, int W, bool training);
// Writes dx, bn.dgamma and bn.dbeta.
void batchnorm2d_backward(BatchNorm2d& bn,
                          const float* x,   // (N, C, H, W)  forward input
                          const float* dy,  // (N, C, H, W)
                          float* dx,        // (N, C, H, W)  may alias dy
                          int N, int H, int W, bool training);

// ---- relu ---------------------------------------------------------------------------

// y = max(x, 0); y may alias x. Backward uses the OUTPUT y (so in-place forward is
// fine): dx = dy * (y > 0); dx may alias dy.
void relu_forward(const float* x, float* y, size_t n);  // (n)
void relu_backward(const float* y, const float* dy, float* dx, size_t n);

// ---- max pool -----------------------------------------------------------------------

// ResNet's stem pool by default: 3x3, stride 2, padding 1 (padding never wins the max).
struct MaxPool2d {
  int K = 3, stride = 2, pad = 1;
  int out_h(int H) const { return (H + 2 * pad - K) / stride + 1; }
  int out_w(int W) const { return (W + 2 * pad - K) / stride + 1; }
};
// ws: backend-private record of the arg-max, as many floats as y has elements
// (N, C, Ho, Wo); carve it from the activation arena.
void maxpool2d_forward(MaxPool2d& p,
                       const float* x,  // (N, C, H, W)
                       float* y,        // (N, C, Ho, Wo)
                       float* ws,       // (N, C, Ho, Wo) opaque
                       int N, int C, int H, int W);
void maxpool2d_backward(MaxPool2d& p,
                        const float* dy,  // (N, C, Ho, Wo)
                        const float* ws,  // (N, C, Ho, Wo) from forward
                        float* dx,        // (N, C, H, W)
                        int N, int C, int H, int W);

// ---- global average pool ------------------------------------------------------------

void avgpool_forward(const float* x,  // (N, C, H, W)
                     float* y,        // (N, C)
                     int N, int C, int H, int W);
void avgpool_backward(const float* dy,  // (N, C)
                      float* dx,        // (N, C, H, W)
                      int N, int C, int H, int W);

// ---- linear -------------------------------------------------------------------------

// y = x W^T + b (torch.nn.Linear).
struct Linear {
  int in = 0, out = 0;
  float* w = nullptr;   // (out, in)
  float* b = nullptr;   // (out)
  float* dw = nullptr;  // (out, in)
  float* db = nullptr;  // (out)
  size_t num_params() const { return static_cast<size_t>(out) * in + out; }
};
void linear_bind(Linear& l, Arena& params, Arena& grads);
// torchvision's default: w and b uniform(-1/sqrt(in), 1/sqrt(in)).
void linear_init(Linear& l, std::mt19937_64& rng);

void linear_forward(Linear& l,
                    const float* x,  // (N, in)
                    float* y,        // (N, out)
                    int N);
void linear_backward(Linear& l,
                     const float* x,   // (N, in)  forward input
                     const float* dy,  // (N, out)
                     float* dx,        // (N, in)  nullable
                     int N);           // writes l.dw, l.db

// ---- residual add -------------------------------------------------------------------

// y = a + b; y may alias a or b. Its backward passes dy unchanged to both inputs: the
// model hands the same dy buffer to both branches and sums where they meet with
// accumulate (y += x).
void add_forward(const float* a, const float* b, float* y, size_t n);  // (n)
void accumulate(float* y, const float* x, size_t n);                   // (n)
// y = max(a + b, 0): the add and the ReLU that end a residual block, in one pass
// (relu_backward on y is its backward, as for add_forward then relu_forward).
void add_relu_forward(const float* a, const float* b, float* y, size_t n);  // (n)
// y = relu_y > 0 ? y + x : 0: accumulate, then relu_backward through the ReLU whose
// output is relu_y (where a residual block's input gradient meets the ReLU that ended
// the block before it).
void accumulate_relu_backward(float* y, const float* x, const float* relu_y, size_t n);
// The end of a residual block in training, y = max(bn(a) + t, 0) with t = shortcut_bn(
// shortcut) written to shortcut_out where the shortcut has a batch norm, else t =
// shortcut; all (N, bn.C, H, W). The CPU's is the reference of the GPU's one-pass kernel
// (--fuse-residual): exactly batchnorm2d_forward of each, then add_relu_forward, with
// both batch norms' relu set false. Not in cpuLayers(), whose passes stay the unfused
// calls; tests put it in a table of their own to check the fused block's wiring.
void bn_add_relu_forward(BatchNorm2d& bn, const float* a, BatchNorm2d* shortcut_bn,
                         const float* shortcut, float* shortcut_out, float* y, int N, int H, int W);

// ---- softmax cross-entropy ----------------------------------------------------------

// Mean over the batch of cross-entropy between softmax(logits) and the smoothed target
// q = (1 - smoothing) * onehot(label) + smoothing / C (torch's label_smoothing).
// Writes dlogits = (softmax - q) / N when dlogits is not nullptr (may alias logits).
float softmax_xent(const float* logits,    // (N, C)
                   const int32_t* labels,  // (N), each in [0, C)
                   float* dlogits,         // (N, C), nullable
                   int N, int C, float smoothing);

// How many of the N rows have their label among the top-1 / top-5 logits. Ties count
// against: the label is in the top k when fewer than k other logits are >= its logit
// (so an all-equal row, e.g. an untrained zero model, is never counted correct), and a
// row with a NaN logit (a diverged model) is never correct.
struct TopK {
  int top1 = 0;
  int top5 = 0;  // top-min(5, C)
};
TopK topk_correct(const float* logits,    // (N, C)
                  const int32_t* labels,  // (N)
                  int N, int C);

// ---- backend ------------------------------------------------------------------------

// Threads the layers use from now on (oneDNN's OpenMP pool and oneTBB); 0 restores the
// default (the OMP_NUM_THREADS / core count the process started with). Call it from the
// thread that runs the layers; it empties the primitive cache, as oneDNN primitives
// keep the thread count they were made with. Returns the previous setting.
int set_num_threads(int n);

// Drops the cached oneDNN primitives (they are keyed by shape and mode; a new batch
// size adds entries). Never needed for correctness.
void clear_primitive_cache();
size_t primitive_cache_size();

}  // namespace accord::nn

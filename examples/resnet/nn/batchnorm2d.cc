// batchnorm2d on the caller's NCHW buffers, as hand loops over channels on oneTBB.
//
// Why not oneDNN: on plain NCHW it runs its generic ncsp kernel, which measured 3-5x
// slower than these loops (32x64x56x56 on 2 cores: forward 42-56 ms vs 9-12, backward
// 50-69 ms vs 14-16; a memcpy of the tensor takes 5), and a blocked layout would not
// pay for its reorders on a memory-bound op. Each task owns whole channels: one channel
// of a ResNet batch (N*H*W floats, 400 KB at 32x56x56) stays in L2 between the
// statistics pass and the normalising pass, so x is read from memory about once.
// Per-channel sums run in a fixed order, so results are bitwise the same for any
// thread count. The inner loops are written in blocks of 8 lanes so that GCC
// vectorises them at the baseline ISA without -ffast-math.
//
// Training normalises with the batch mean and biased variance, saves them for backward
// and folds them into the running statistics (PyTorch's rule, unbiased variance).
// Inference, and backward in inference mode, use the running statistics. An optional
// fused ReLU (BatchNorm2d::relu) saves the separate ReLU's passes over the tensor
// (measured forward 12 ms vs 15-17 for BN then ReLU, backward 19-26 vs 23-35, same
// shape); backward recomputes its mask from x instead of storing it.
#include "nn/backend.h"
#include "nn/layers.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

namespace accord::nn {

namespace {

// Sums of a plane in 8 float lanes (vectorisable without -ffast-math), then in double
// across planes: float error stays at one plane's length.
constexpr int kLanes = 8;

// A channel's normalisation as y = x * scale + shift, computed the same way in forward
// and backward (x * scale + shift in both loops) so a fused ReLU's mask is recomputed
// bit for bit. floor is where the
// output is clamped: 0 with a fused ReLU, -inf (no clamp) without.
struct Affine {
  float mean, invstd, scale, shift, floor;
  Affine(const BatchNorm2d& bn, int c, float m, float var)
      : mean(m),
        invstd(1.0f / std::sqrt(var + bn.eps)),
        scale(bn.gamma[c] / std::sqrt(var + bn.eps)),
        shift(bn.beta[c] - m * scale),
        floor(bn.relu ? 0.0f : -INFINITY) {}
};

struct Dims {
  int N, C;
  size_t HW;
  const float* plane(const float* t, int n, int c) const { return t + (size_t(n) * C + c) * HW; }
  float* plane(float* t, int n, int c) const { return t + (size_t(n) * C + c) * HW; }
};

// sum_i f(i) over one plane, f returning float.
template <class F>
double planeSum(size_t HW, F&& f) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= HW; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += f(i + k);
  double s = 0.0;
  for (; i < HW; ++i) s += f(i);
  for (float a : acc) s += a;
  return s;
}

// q[i] = f(i) over one plane, in blocks of kLanes whose loads all precede their stores:
// that vectorises even when q is one of f's inputs (in place), where a plain loop
// falls back to scalar code after GCC's run-time alias check.
template <class F>
void planeMap(size_t HW, float* q, F&& f) {
  size_t i = 0;
  for (; i + kLanes <= HW; i += kLanes) {
    float t[kLanes];
    for (int k = 0; k < kLanes; ++k) t[k] = f(i + k);
    for (int k = 0; k < kLanes; ++k) q[i + k] = t[k];
  }
  for (; i < HW; ++i) q[i] = f(i);
}

// Over one plane, with dy masked by a fused ReLU (m = 1 where x * scale + shift > floor):
// sum_dy += sum m dy, sum_dy_xc += sum m dy (x - mean). One pass, kLanes float lanes.
// noinline: inlined into the channel loop, GCC (12) no longer if-converts the select.
// kRelu = false compiles the mask away: the plain batch norm pays nothing for the option.
template <bool kRelu>
__attribute__((noinline)) void maskedSums(const float* g, const float* p, size_t HW,
                                          const Affine& f, double& sum_dy, double& sum_dy_xc) {
  const float scale = f.scale, shift = f.shift, floor = f.floor, mean = f.mean;
  float s1[kLanes] = {}, s2[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= HW; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      float gk = g[i + k], pk = p[i + k];  // unconditional loads: the select vectorises
      float gm = !kRelu || pk * scale + shift > floor ? gk : 0.0f;
      s1[k] += gm;
      s2[k] += gm * (pk - mean);
    }
  for (; i < HW; ++i) {
    float gi = g[i], pi = p[i];
    float gm = !kRelu || pi * scale + shift > floor ? gi : 0.0f;
    sum_dy += gm;
    sum_dy_xc += gm * (pi - mean);
  }
  for (int k = 0; k < kLanes; ++k) sum_dy += s1[k], sum_dy_xc += s2[k];
}

// Over one plane: dx = k * m dy - a * (x - mean) - b, m the fused ReLU's mask. dx may be
// dy: each block of kLanes is loaded before it is stored.
template <bool kRelu>
__attribute__((noinline)) void maskedGradient(const float* g, const float* p, float* q, size_t HW,
                                              const Affine& f, float k, float a, float b) {
  const float scale = f.scale, shift = f.shift, floor = f.floor, mean = f.mean;
  size_t i = 0;
  for (; i + kLanes <= HW; i += kLanes) {
    float t[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      float gj = g[i + j], pj = p[i + j];  // unconditional loads: the select vectorises
      t[j] = k * (!kRelu || pj * scale + shift > floor ? gj : 0.0f) - a * (pj - mean) - b;
    }
    for (int j = 0; j < kLanes; ++j) q[i + j] = t[j];
  }
  for (; i < HW; ++i) {
    float gi = g[i], pi = p[i];
    q[i] = k * (!kRelu || pi * scale + shift > floor ? gi : 0.0f) - a * (pi - mean) - b;
  }
}

// Batch mean and biased variance of channel c (two passes: the second hits L2).
void channelStats(const Dims& d, const float* x, int c, float& mean, float& var) {
  double s = 0.0;
  for (int n = 0; n < d.N; ++n) {
    const float* p = d.plane(x, n, c);
    s += planeSum(d.HW, [p](size_t i) { return p[i]; });
  }
  double count = double(d.N) * d.HW;
  float m = float(s / count);
  double v = 0.0;
  for (int n = 0; n < d.N; ++n) {
    const float* p = d.plane(x, n, c);
    v += planeSum(d.HW, [p, m](size_t i) { return (p[i] - m) * (p[i] - m); });
  }
  mean = m;
  var = float(v / count);
}

template <class F>
void forChannels(int C, F&& body) {
  tbb::parallel_for(tbb::blocked_range<int>(0, C), [&](const tbb::blocked_range<int>& r) {
    for (int c = r.begin(); c < r.end(); ++c) body(c);
  });
}

void checkBound(const BatchNorm2d& bn, int N, int H, int W, bool training, bool backward,
                const char* fn) {
  std::string what =
      detail::key(fn, "(N C H W)", N, bn.C, H, W, training ? "training" : "inference");
  if (N <= 0 || bn.C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  if (!bn.gamma || !bn.beta || !bn.running_mean || !bn.running_var ||
      (training && (!bn.save_mean || !bn.save_var)))
    throw InvalidArgument(what + ": buffers not bound");
  if (backward && (!bn.dgamma || !bn.dbeta)) throw InvalidArgument(what + ": gradients not bound");
}

// PyTorch: running = (1 - m) * running + m * batch, with the unbiased batch variance.
void updateRunningStats(BatchNorm2d& bn, size_t count) {
  float unbias = count > 1 ? float(count) / float(count - 1) : 1.0f;
  for (int c = 0; c < bn.C; ++c) {
    bn.running_mean[c] = (1 - bn.momentum) * bn.running_mean[c] + bn.momentum * bn.save_mean[c];
    bn.running_var[c] =
        (1 - bn.momentum) * bn.running_var[c] + bn.momentum * bn.save_var[c] * unbias;
  }
}

}  // namespace

void batchnorm2d_bind(BatchNorm2d& bn, Arena& params, Arena& grads, Arena& buffers, Arena& acts) {
  bn.gamma = params.take(bn.C);
  bn.beta = params.take(bn.C);
  bn.dgamma = grads.take(bn.C);
  bn.dbeta = grads.take(bn.C);
  bn.running_mean = buffers.take(bn.C);
  bn.running_var = buffers.take(bn.C);
  bn.save_mean = acts.take(bn.C);
  bn.save_var = acts.take(bn.C);
}

void batchnorm2d_init(BatchNorm2d& bn, bool zero_gamma) {
  for (int c = 0; c < bn.C; ++c) {
    bn.gamma[c] = zero_gamma ? 0.0f : 1.0f;
    bn.beta[c] = 0.0f;
    bn.running_mean[c] = 0.0f;
    bn.running_var[c] = 1.0f;
  }
}

void batchnorm2d_forward(BatchNorm2d& bn, const float* x, float* y, int N, int H, int W,
                         bool training) {
  checkBound(bn, N, H, W, training, false, "batchnorm2d_forward");
  Dims d{N, bn.C, size_t(H) * W};
  forChannels(bn.C, [&](int c) {
    float mean = bn.running_mean[c], var = bn.running_var[c];
    if (training) {
      channelStats(d, x, c, mean, var);
      bn.save_mean[c] = mean;
      bn.save_var[c] = var;
    }
    const Affine f(bn, c, mean, var);
    const float scale = f.scale, shift = f.shift, floor = f.floor;  // registers, not memory
    for (int n = 0; n < N; ++n) {
      const float* p = d.plane(x, n, c);
      float* q = d.plane(y, n, c);
      planeMap(d.HW, q, [&](size_t i) { return std::max(p[i] * scale + shift, floor); });
    }
  });
  if (training) updateRunningStats(bn, size_t(N) * H * W);
}

// With xhat = (x - mean) * invstd and dy masked by a fused ReLU (0 where the
// normalised value was <= 0): dbeta = sum dy, dgamma = sum dy * xhat, and
//   training:  dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M)
//   inference: dx = gamma * invstd * dy   (mean and variance are constants)
void batchnorm2d_backward(BatchNorm2d& bn, const float* x, const float* dy, float* dx, int N, int H,
                          int W, bool training) {
  checkBound(bn, N, H, W, training, true, "batchnorm2d_backward");
  Dims d{N, bn.C, size_t(H) * W};
  double count = double(N) * d.HW;
  forChannels(bn.C, [&](int c) {
    Affine f(bn, c, training ? bn.save_mean[c] : bn.running_mean[c],
             training ? bn.save_var[c] : bn.running_var[c]);
    const float invstd = f.invstd;
    double sum_dy = 0.0, sum_dy_xc = 0.0;
    for (int n = 0; n < N; ++n)
      (bn.relu ? maskedSums<true> : maskedSums<false>)(d.plane(dy, n, c), d.plane(x, n, c), d.HW, f,
                                                       sum_dy, sum_dy_xc);
    bn.dbeta[c] = float(sum_dy);
    bn.dgamma[c] = float(sum_dy_xc * invstd);
    float k = bn.gamma[c] * invstd;
    // dx = k * dy - a * (x - mean) - b; a and b are 0 in inference.
    float a = training ? float(k * sum_dy_xc * invstd * invstd / count) : 0.0f;
    float b = training ? float(k * sum_dy / count) : 0.0f;
    for (int n = 0; n < N; ++n) {
      const float* p = d.plane(x, n, c);
      const float* g = d.plane(dy, n, c);
      (bn.relu ? maskedGradient<true> : maskedGradient<false>)(g, p, d.plane(dx, n, c), d.HW, f, k,
                                                               a, b);
    }
  });
}

}  // namespace accord::nn

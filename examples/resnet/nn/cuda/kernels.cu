// The GPU backend's own kernels for the memory-bound layers (conversions, pools, bias;
// ReLU and the residual add are in elementwise.cu, batch norm's in bn_apply.cu); see
// backend_cuda.h.
//
// Kernels that map values are grid-stride loops (any size, one launch). Reductions give
// every output to one thread or one block and sum in a fixed order, so results are
// bitwise reproducible run to run; no atomics.
//
// Activations are templates on their storage type A (float; __nv_bfloat16 under
// Math::Bf16, __half under Math::Fp16), read into float and rounded to nearest-even when
// stored; the launchers pick the instance from the math. The storage type also fixes
// the layout: float activations are NCHW, 16-bit ones NHWC (kNhwc<A>), as the tensor
// cores want them.
#include "nn/cuda/kernel_util.cuh"

#include <algorithm>
#include <cfloat>
#include <type_traits>

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

template <class H>
__global__ void toHalfKernel(const float* x, H* y, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) store(y, i, x[i]);
}

template <class H>
__global__ void fromHalfKernel(const H* x, float* y, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) y[i] = load(x, i);
}

// (N, C, HW) float32 to (N, HW, C) 16-bit: y[(n HW + p) C + c] = x[(n C + c) HW + p].
template <class H>
__global__ void toHalfNhwcKernel(const float* x, H* y, int C, size_t HW, size_t total) {
  for (size_t o = firstIndex(); o < total; o += gridStride()) {
    const size_t c = o % C, t = o / C, p = t % HW, n = t / HW;
    store(y, o, x[(n * C + c) * HW + p]);
  }
}

// The inverse: (N, HW, C) 16-bit to (N, C, HW) float32.
template <class H>
__global__ void fromHalfNchwKernel(const H* x, float* y, int C, size_t HW, size_t total) {
  for (size_t i = firstIndex(); i < total; i += gridStride()) {
    const size_t p = i % HW, t = i / HW, c = t % C, n = t / C;
    y[i] = load(x, (n * HW + p) * C + c);
  }
}

// ---- pooling ------------------------------------------------------------------------

// One thread per output: the first maximum of its window, in row-major order; padding
// never wins (it is skipped). argmax = h * W + w within the plane.
template <class A>
__global__ void maxPoolKernel(const A* x, A* y, int32_t* argmax, size_t total, int C, int H, int W,
                              int Ho, int Wo, int K, int stride, int pad) {
  for (size_t o = firstIndex(); o < total; o += gridStride()) {
    // Input (h, w) of this output's image and channel is x[base + (h W + w) step].
    size_t base, step;
    int oh, ow;
    if constexpr (kNhwc<A>) {
      const size_t c = o % C, t = o / C;
      ow = int(t % Wo), oh = int(t / Wo % Ho);
      base = t / (size_t(Wo) * Ho) * H * W * C + c, step = C;
    } else {
      ow = int(o % Wo), oh = int(o / Wo % Ho);
      base = o / (size_t(Ho) * Wo) * H * W, step = 1;
    }
    float best = -INFINITY;
    int at = -1;
    for (int kh = 0; kh < K; ++kh) {
      int h = oh * stride - pad + kh;
      if (h < 0 || h >= H) continue;
      for (int kw = 0; kw < K; ++kw) {
        int w = ow * stride - pad + kw;
        if (w < 0 || w >= W) continue;
        float v = load(x, base + (size_t(h) * W + w) * step);
        // NaN propagates like a maximum (the first NaN wins), as oneDNN's max does.
        if (at < 0 || v > best || (v != v && best == best)) best = v, at = h * W + w;
      }
    }
    store(y, o, best);
    argmax[o] = at;
  }
}

// One thread per input element: the sum of dy over the outputs whose arg-max it was,
// visited in a fixed order (a gather, so no atomics and the same bits every run).
template <class A>
__global__ void maxPoolBackwardKernel(const A* dy, const int32_t* argmax, A* dx, size_t total,
                                      int C, int H, int W, int Ho, int Wo, int K, int stride,
                                      int pad) {
  for (size_t i = firstIndex(); i < total; i += gridStride()) {
    // Output (oh, ow) of this input's image and channel is dy[base + (oh Wo + ow) step].
    size_t base, step;
    int h, w;
    if constexpr (kNhwc<A>) {
      const size_t c = i % C, t = i / C;
      w = int(t % W), h = int(t / W % H);
      base = t / (size_t(W) * H) * Ho * Wo * C + c, step = C;
    } else {
      w = int(i % W), h = int(i / W % H);
      base = i / (size_t(H) * W) * Ho * Wo, step = 1;
    }
    // Outputs oh whose window [oh * stride - pad, + K) contains h.
    int oh0 = max(0, (h + pad - K + stride) / stride), oh1 = min(Ho - 1, (h + pad) / stride);
    int ow0 = max(0, (w + pad - K + stride) / stride), ow1 = min(Wo - 1, (w + pad) / stride);
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        size_t o = base + (size_t(oh) * Wo + ow) * step;
        if (argmax[o] == h * W + w) sum += load(dy, o);
      }
    store(dx, i, sum);
  }
}

// y (N, C) from x (N, C, HW), or (N, HW, C) for bf16.
template <class A>
__global__ void avgPoolKernel(const A* x, A* y, int C, int HW, size_t NC) {
  for (size_t p = firstIndex(); p < NC; p += gridStride()) {
    const size_t n = p / C, c = p % C;
    float s = 0.0f;
    for (int i = 0; i < HW; ++i) s += load(x, kNhwc<A> ? (n * HW + i) * C + c : p * HW + i);
    store(y, p, s / float(HW));
  }
}

template <class A>
__global__ void avgPoolBackwardKernel(const A* dy, A* dx, int C, size_t HW, size_t total) {
  for (size_t i = firstIndex(); i < total; i += gridStride()) {
    const size_t p = kNhwc<A> ? i / (HW * C) * C + i % C : i / HW;  // its (n, c)
    store(dx, i, load(dy, p) / float(HW));
  }
}

// ---- loss scaling -------------------------------------------------------------------

__global__ void scaleKernel(float* x, size_t n, float factor) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) x[i] = x[i] * factor;
}

// Sets *bad when any element is NaN or infinite (every writer writes the same 1).
__global__ void nonFiniteKernel(const float* x, size_t n, int* bad) {
  for (size_t i = firstIndex(); i < n; i += gridStride())
    if (!isfinite(x[i])) *bad = 1;
}

// ---- linear's bias ------------------------------------------------------------------

__global__ void addBiasKernel(float* y, const float* b, size_t total, int out) {
  for (size_t i = firstIndex(); i < total; i += gridStride()) y[i] += b[i % out];
}

__global__ void biasGradKernel(const float* dy, float* db, int N, int out) {
  for (size_t j = firstIndex(); j < size_t(out); j += gridStride()) {
    float s = 0.0f;
    for (int n = 0; n < N; ++n) s += dy[size_t(n) * out + j];
    db[j] = s;
  }
}

}  // namespace

void launchToHalf(const float* x, void* y, size_t n) {
  if (!n) return;
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    toHalfKernel<<<blocksFor(n), kThreads, 0, backend().stream>>>(x, static_cast<H*>(y), n);
  });
}

void launchFromHalf(const void* x, float* y, size_t n) {
  if (!n) return;
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    fromHalfKernel<<<blocksFor(n), kThreads, 0, backend().stream>>>(static_cast<const H*>(x), y, n);
  });
}

void launchToHalfNhwc(const float* x, void* y, int N, int C, size_t HW) {
  const size_t total = size_t(N) * C * HW;
  if (!total) return;
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    toHalfNhwcKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(x, static_cast<H*>(y), C,
                                                                          HW, total);
  });
}

void launchFromHalfNchw(const void* x, float* y, int N, int C, size_t HW) {
  const size_t total = size_t(N) * C * HW;
  if (!total) return;
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    fromHalfNchwKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(
        static_cast<const H*>(x), y, C, HW, total);
  });
}

void launchMaxPool(const float* x, float* y, int32_t* argmax, int N, int C, int H, int W, int Ho,
                   int Wo, int K, int stride, int pad) {
  size_t total = size_t(N) * C * Ho * Wo;
  dispatch([&](auto a) {
    using A = decltype(a);
    maxPoolKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(
        as<A>(x), as<A>(y), argmax, total, C, H, W, Ho, Wo, K, stride, pad);
  });
}

void launchMaxPoolBackward(const float* dy, const int32_t* argmax, float* dx, int N, int C, int H,
                           int W, int Ho, int Wo, int K, int stride, int pad) {
  size_t total = size_t(N) * C * H * W;
  dispatch([&](auto a) {
    using A = decltype(a);
    maxPoolBackwardKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(
        as<A>(dy), argmax, as<A>(dx), total, C, H, W, Ho, Wo, K, stride, pad);
  });
}

void launchAvgPool(const float* x, float* y, int N, int C, int HW) {
  const size_t NC = size_t(N) * C;
  dispatch([&](auto a) {
    using A = decltype(a);
    avgPoolKernel<<<blocksFor(NC), kThreads, 0, backend().stream>>>(as<A>(x), as<A>(y), C, HW, NC);
  });
}

void launchAvgPoolBackward(const float* dy, float* dx, int N, int C, int HW) {
  size_t total = size_t(N) * C * HW;
  dispatch([&](auto a) {
    using A = decltype(a);
    avgPoolBackwardKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(
        as<A>(dy), as<A>(dx), C, size_t(HW), total);
  });
}

void launchScale(float* x, size_t n, float factor) {
  if (n) scaleKernel<<<blocksFor(n), kThreads, 0, backend().stream>>>(x, n, factor);
}

void launchNonFinite(const float* x, size_t n, int* bad) {
  if (n) nonFiniteKernel<<<blocksFor(n), kThreads, 0, backend().stream>>>(x, n, bad);
}

void launchAddBias(float* y, const float* b, int N, int out) {
  size_t total = size_t(N) * out;
  addBiasKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(y, b, total, out);
}

void launchBiasGrad(const float* dy, float* db, int N, int out) {
  biasGradKernel<<<blocksFor(out), kThreads, 0, backend().stream>>>(dy, db, N, out);
}

}  // namespace accord::nn::cuda::detail

// The GPU backend's own kernels for the memory-bound layers (conversions, loss scaling,
// bias; ReLU and the residual add are in elementwise.cu, batch norm's in bn_apply.cu,
// the pools' in pool.cu); see backend_cuda.h.
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

// (N, C, HW) float32 to (N, HW, Cp) 16-bit, Cp >= C channels, the last Cp - C of them
// zeros: y[(n HW + p) Cp + c] = x[(s C + c) HW + p], where s is n, or slots[n] where
// slots are given: image n of y is image slots[n] of x (a pool of images, which may hold
// more than 2^31 values). I: withIndex's type for total, N HW Cp.
template <class H, class I>
__global__ void toHalfNhwcKernel(const float* x, H* y, const int32_t* slots, int C, int Cp, I HW,
                                 I total) {
  for (I o = I(firstIndex()); o < total; o += I(gridStride())) {
    const I t = o / Cp, c = o - t * Cp, n = t / HW, p = t - n * HW;
    const size_t image = slots ? size_t(slots[n]) : size_t(n);
    store(y, o, c < C ? x[image * size_t(C) * size_t(HW) + size_t(c * HW + p)] : 0.0f);
  }
}

// The inverse: (N, HW, Cp) 16-bit to (N, C, HW) float32, the padding left out.
template <class H, class I>
__global__ void fromHalfNchwKernel(const H* x, float* y, int C, int Cp, I HW, I total) {
  for (I i = I(firstIndex()); i < total; i += I(gridStride())) {
    const I t = i / HW, p = i - t * HW, n = t / C, c = t - n * C;
    y[i] = load(x, (n * HW + p) * Cp + c);
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

void launchToHalfNhwc(const float* x, void* y, int N, int C, size_t HW, const int32_t* slots,
                      int Cp) {
  if (Cp < C) Cp = C;
  const size_t total = size_t(N) * Cp * HW;
  if (!total) return;
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    withIndex(total, [&](auto index) {
      using I = decltype(index);
      toHalfNhwcKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(
          x, static_cast<H*>(y), slots, C, Cp, I(HW), I(total));
    });
  });
}

void launchFromHalfNchw(const void* x, float* y, int N, int C, size_t HW, int Cp) {
  if (Cp < C) Cp = C;
  // Indexed up to the padded input's size, the largest index read.
  const size_t total = size_t(N) * C * HW, reach = size_t(N) * Cp * HW;
  if (!total) return;
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    withIndex(reach, [&](auto index) {
      using I = decltype(index);
      fromHalfNchwKernel<<<blocksFor(total), kThreads, 0, backend().stream>>>(
          static_cast<const H*>(x), y, C, Cp, I(HW), I(total));
    });
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

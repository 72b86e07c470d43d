// The pools' kernels: max pool with its arg-max each way, and the global average pool.
//
// Max pool splits every index into its image, row, column and channel, which is most of
// its work: the loops index in 32 bits where the tensors allow (withIndex), and 16-bit
// NHWC activations with whole Packs of channels (every ResNet's) take one thread per
// position and Pack, eight channels per 16-byte access. Each value, and each arg-max,
// is the same either way; the packed kernels pick and sum exactly as the others.
#include "nn/cuda/kernel_util.cuh"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

// Whether value v at `at` takes the place of the window's best so far: the first
// maximum in row-major order, and NaN propagates like a maximum (the first NaN wins), as
// oneDNN's max does. at < 0: nothing yet.
__device__ inline bool beats(float v, int at, float best) {
  return at < 0 || v > best || (v != v && best == best);
}

// The outputs oh whose window [oh * stride - pad, + K) holds input row h: [first, last].
__device__ inline int firstOutput(int h, int K, int stride, int pad) {
  return max(0, (h + pad - K + stride) / stride);
}
__device__ inline int lastOutput(int h, int Ho, int stride, int pad) {
  return min(Ho - 1, (h + pad) / stride);
}

// Element i of a (planes, rows, cols) tensor, as the pools see it: its row and column,
// and where the same image and channel start in the other tensor of the pool, whose
// (to_rows, to_cols) positions are `step` apart. Channels last: i counts C channels
// (or C Packs of them) fastest, and a position's values are consecutive; else each
// plane (image and channel) is rows x cols consecutive values.
template <class I>
struct Site {
  I base, step;
  int row, col;
};
template <bool kChannelsLast, class I>
__device__ inline Site<I> siteOf(I i, int C, int rows, int cols, int to_rows, int to_cols) {
  if constexpr (kChannelsLast) {
    const I t = i / C, c = i - t * C, u = t / cols, n = u / rows;
    return {n * to_rows * to_cols * C + c, I(C), int(u - n * rows), int(t - u * cols)};
  } else {
    const I t = i / cols, plane = t / rows;
    return {plane * to_rows * to_cols, I(1), int(t - plane * rows), int(i - t * cols)};
  }
}

// One thread per output: the first maximum of its window; padding never wins (it is
// skipped). argmax = h * W + w within the plane.
template <class A, class I>
__global__ void maxPoolKernel(const A* x, A* y, int32_t* argmax, I total, int C, int H, int W,
                              int Ho, int Wo, int K, int stride, int pad) {
  for (I o = I(firstIndex()); o < total; o += I(gridStride())) {
    // Input (h, w) of this output's image and channel is x[base + (h W + w) step].
    const auto [base, step, oh, ow] = siteOf<kNhwc<A>>(o, C, Ho, Wo, H, W);
    float best = -INFINITY;
    int at = -1;
    for (int kh = 0; kh < K; ++kh) {
      const int h = oh * stride - pad + kh;
      if (h < 0 || h >= H) continue;
      for (int kw = 0; kw < K; ++kw) {
        const int w = ow * stride - pad + kw;
        if (w < 0 || w >= W) continue;
        const float v = load(x, base + (I(h) * W + w) * step);
        if (beats(v, at, best)) best = v, at = h * W + w;
      }
    }
    store(y, o, best);
    argmax[o] = at;
  }
}

// The same on whole Packs of NHWC channels: `total` output Packs, Q per position. The
// arg-maxes of a Pack's channels are eight consecutive int32, two 16-byte stores.
template <class A, class I>
__global__ void maxPoolPacksKernel(const A* x, A* y, int32_t* argmax, I total, int Q, int H, int W,
                                   int Ho, int Wo, int K, int stride, int pad) {
  constexpr int P = Pack<A>::kCount;
  static_assert(P == 8, "two int4 per Pack's arg-maxes");
  const auto* xv = reinterpret_cast<const Pack<A>*>(x);
  auto* yv = reinterpret_cast<Pack<A>*>(y);
  auto* av = reinterpret_cast<int4*>(argmax);
  for (I o = I(firstIndex()); o < total; o += I(gridStride())) {
    // The Pack at input (h, w) is xv[base + (h W + w) Q].
    const auto [base, step, oh, ow] = siteOf<true>(o, Q, Ho, Wo, H, W);
    float best[P];
    int at[P];
#pragma unroll
    for (int j = 0; j < P; ++j) best[j] = -INFINITY, at[j] = -1;
    for (int kh = 0; kh < K; ++kh) {
      const int h = oh * stride - pad + kh;
      if (h < 0 || h >= H) continue;
      for (int kw = 0; kw < K; ++kw) {
        const int w = ow * stride - pad + kw;
        if (w < 0 || w >= W) continue;
        const Pack<A> v = xv[base + (I(h) * W + w) * step];
        const int here = h * W + w;
#pragma unroll
        for (int j = 0; j < P; ++j) {
          const float f = toFloat(v.v[j]);
          if (beats(f, at[j], best[j])) best[j] = f, at[j] = here;
        }
      }
    }
    Pack<A> out;
#pragma unroll
    for (int j = 0; j < P; ++j) out.v[j] = fromFloat<A>(best[j]);
    yv[o] = out;
    av[2 * size_t(o)] = make_int4(at[0], at[1], at[2], at[3]);
    av[2 * size_t(o) + 1] = make_int4(at[4], at[5], at[6], at[7]);
  }
}

// One thread per input element: the sum of dy over the outputs whose arg-max it was,
// visited in a fixed order (a gather, so no atomics and the same bits every run).
template <class A, class I>
__global__ void maxPoolBackwardKernel(const A* dy, const int32_t* argmax, A* dx, I total, int C,
                                      int H, int W, int Ho, int Wo, int K, int stride, int pad) {
  for (I i = I(firstIndex()); i < total; i += I(gridStride())) {
    // Output (oh, ow) of this input's image and channel is dy[base + (oh Wo + ow) step].
    const auto [base, step, h, w] = siteOf<kNhwc<A>>(i, C, H, W, Ho, Wo);
    const int oh0 = firstOutput(h, K, stride, pad), oh1 = lastOutput(h, Ho, stride, pad);
    const int ow0 = firstOutput(w, K, stride, pad), ow1 = lastOutput(w, Wo, stride, pad);
    const int here = h * W + w;
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        const I o = base + (I(oh) * Wo + ow) * step;
        if (argmax[o] == here) sum += load(dy, o);
      }
    store(dx, i, sum);
  }
}

// The same on whole Packs of NHWC channels: `total` input Packs, Q per position.
template <class A, class I>
__global__ void maxPoolBackwardPacksKernel(const A* dy, const int32_t* argmax, A* dx, I total,
                                           int Q, int H, int W, int Ho, int Wo, int K, int stride,
                                           int pad) {
  constexpr int P = Pack<A>::kCount;
  static_assert(P == 8, "two int4 per Pack's arg-maxes");
  const auto* dyv = reinterpret_cast<const Pack<A>*>(dy);
  const auto* av = reinterpret_cast<const int4*>(argmax);
  auto* dxv = reinterpret_cast<Pack<A>*>(dx);
  for (I i = I(firstIndex()); i < total; i += I(gridStride())) {
    // The Pack at output (oh, ow) is dyv[base + (oh Wo + ow) Q].
    const auto [base, step, h, w] = siteOf<true>(i, Q, H, W, Ho, Wo);
    const int oh0 = firstOutput(h, K, stride, pad), oh1 = lastOutput(h, Ho, stride, pad);
    const int ow0 = firstOutput(w, K, stride, pad), ow1 = lastOutput(w, Wo, stride, pad);
    const int here = h * W + w;
    float sum[P];
#pragma unroll
    for (int j = 0; j < P; ++j) sum[j] = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        const I o = base + (I(oh) * Wo + ow) * step;
        const int4 lo = av[2 * size_t(o)], hi = av[2 * size_t(o) + 1];
        const int at[P] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        const Pack<A> d = dyv[o];
#pragma unroll
        for (int j = 0; j < P; ++j)
          if (at[j] == here) sum[j] += toFloat(d.v[j]);
      }
    Pack<A> out;
#pragma unroll
    for (int j = 0; j < P; ++j) out.v[j] = fromFloat<A>(sum[j]);
    dxv[i] = out;
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

// Runs launch(A{}, I{}, P) for a max pool on tensors of C channels at `pointers`, the
// larger of `values` values: A the activations' storage type, I withIndex's type, and
// P the channels a thread takes, Pack<A>::kCount where the packed kernels take the
// tensors, else 1 (a std::integral_constant).
template <class F>
void forMaxPool(size_t values, int C, std::initializer_list<const void*> pointers, F&& launch) {
  dispatch([&](auto a) {
    using A = decltype(a);
    withIndex(values, [&](auto index) {
      if constexpr (kNhwc<A>) {
        constexpr int P = Pack<A>::kCount;
        if (wholePacks(C, P, pointers)) return launch(a, index, std::integral_constant<int, P>{});
      }
      launch(a, index, std::integral_constant<int, 1>{});
    });
  });
}

}  // namespace

void launchMaxPool(const float* x, float* y, int32_t* argmax, int N, int C, int H, int W, int Ho,
                   int Wo, int K, int stride, int pad) {
  const size_t in = size_t(N) * C * H * W, total = size_t(N) * C * Ho * Wo;
  if (!total) return;
  forMaxPool(std::max(in, total), C, {x, y, argmax}, [&](auto a, auto index, auto per_thread) {
    using A = decltype(a);
    using I = decltype(index);
    constexpr int P = decltype(per_thread)::value;
    const size_t threads = total / P;
    if constexpr (P > 1) {
      maxPoolPacksKernel<<<blocksFor(threads), kThreads, 0, backend().stream>>>(
          as<A>(x), as<A>(y), argmax, I(threads), C / P, H, W, Ho, Wo, K, stride, pad);
    } else {
      maxPoolKernel<<<blocksFor(threads), kThreads, 0, backend().stream>>>(
          as<A>(x), as<A>(y), argmax, I(threads), C, H, W, Ho, Wo, K, stride, pad);
    }
  });
}

void launchMaxPoolBackward(const float* dy, const int32_t* argmax, float* dx, int N, int C, int H,
                           int W, int Ho, int Wo, int K, int stride, int pad) {
  const size_t total = size_t(N) * C * H * W, out = size_t(N) * C * Ho * Wo;
  if (!total) return;
  forMaxPool(std::max(total, out), C, {dy, argmax, dx}, [&](auto a, auto index, auto per_thread) {
    using A = decltype(a);
    using I = decltype(index);
    constexpr int P = decltype(per_thread)::value;
    const size_t threads = total / P;
    if constexpr (P > 1) {
      maxPoolBackwardPacksKernel<<<blocksFor(threads), kThreads, 0, backend().stream>>>(
          as<A>(dy), argmax, as<A>(dx), I(threads), C / P, H, W, Ho, Wo, K, stride, pad);
    } else {
      maxPoolBackwardKernel<<<blocksFor(threads), kThreads, 0, backend().stream>>>(
          as<A>(dy), argmax, as<A>(dx), I(threads), C, H, W, Ho, Wo, K, stride, pad);
    }
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

}  // namespace accord::nn::cuda::detail

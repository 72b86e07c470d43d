// Batch norm's own kernels: the affine map from given statistics with the ReLU after it
// (after a fused convolution summed them, where cuDNN did not fuse the ReLU, and in
// inference), the same map ending a residual block (with the shortcut's own map, the
// sum and the ReLU in the one pass), its gradient mask, and the inference-mode
// backward; see backend_cuda.h.
//
// The map and the mask read each channel's scale and shift from shared memory, made
// once per block, rather than from its four parameters per value; in 16 bits (NHWC,
// where eight consecutive values are eight consecutive channels) they move 16 bytes per
// access where the channels and the pointers allow it, as elementwise.cu does. Both
// compute x * scale + shift the same way (bn_channel.cuh), so a value the forward's ReLU
// zeroed is one the mask zeroes.
#include "nn/cuda/bn_channel.cuh"
#include "nn/cuda/kernel_util.cuh"

#include <initializer_list>
#include <type_traits>

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

// The channel of element i: NCHW for float activations, NHWC for 16-bit ones.
template <class A>
__device__ int channelAt(size_t i, int C, size_t HW) {
  return kNhwc<A> ? int(i % C) : int(i / HW % C);
}

// Channels whose (scale, shift) go to shared memory: 32 KiB, under the 48 KiB a block
// may take without asking.
constexpr int kSharedChannels = 4096;

// Every channel's (scale, shift) into the block's shared memory (C of them), where they
// fit (kShared).
template <bool kShared>
__device__ void loadChannels(const BnAffine& f, int C, float2* k) {
  if constexpr (kShared) {
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const Channel ch = channelOf(f, c);
      k[c] = make_float2(ch.scale, ch.shift);
    }
    __syncthreads();
  }
}

// Channel c's (scale, shift): from shared memory, or made here where they did not fit.
template <bool kShared>
__device__ float2 affineAt(const BnAffine& f, const float2* k, int c) {
  if constexpr (kShared) {
    return k[c];
  } else {
    const Channel ch = channelOf(f, c);
    return make_float2(ch.scale, ch.shift);
  }
}

// The (scale, shift) of the channels of a thread's Pack, kept in registers while its
// grid-stride steps land on the same channels (always where a stride's values are a
// multiple of C, as for every C dividing 2048), and read again where they move: one
// Pack's reads of shared memory hit few banks, so they are not repeated per Pack.
template <class A, bool kShared>
struct PackChannels {
  static constexpr int K = Pack<A>::kCount;
  float2 k[K];
  int c0 = -1;  // the first channel held in k
  int next;     // the first channel of the thread's next Pack
  int step;     // how far that moves per grid stride
  __device__ PackChannels(int C)
      : next(int(firstIndex() * K % C)), step(int(gridStride() * K % C)) {}
  // Makes k hold the next Pack's channels.
  __device__ void advance(const BnAffine& f, const float2* shared, int C) {
    if (next != c0) {
      c0 = next;
#pragma unroll
      for (int j = 0; j < K; ++j) k[j] = affineAt<kShared>(f, shared, c0 + j);
    }
    next += step;
    if (next >= C) next -= C;
  }
};

// y = x * scale + shift (then the ReLU); the first `packs` Packs in vector accesses.
template <class A, bool kShared>
__global__ void bnApplyKernel(const A* x, A* y, BnAffine f, bool relu, size_t total, int C,
                              size_t HW, size_t packs) {
  extern __shared__ float2 channels[];
  loadChannels<kShared>(f, C, channels);
  constexpr int K = Pack<A>::kCount;
  PackChannels<A, kShared> ch(C);
  for (size_t i = firstIndex(); i < packs; i += gridStride()) {
    const Pack<A> in = reinterpret_cast<const Pack<A>*>(x)[i];
    ch.advance(f, channels, C);
    Pack<A> out;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float v = normalised(toFloat(in.v[k]), ch.k[k]);
      out.v[k] = fromFloat<A>(relu ? fmaxf(v, 0.0f) : v);
    }
    reinterpret_cast<Pack<A>*>(y)[i] = out;
  }
  for (size_t i = packs * K + firstIndex(); i < total; i += gridStride()) {
    const float v = normalised(load(x, i), affineAt<kShared>(f, channels, channelAt<A>(i, C, HW)));
    store(y, i, relu ? fmaxf(v, 0.0f) : v);
  }
}

// g = dy where x * scale + shift > 0, else 0; likewise.
template <class A, bool kShared>
__global__ void bnReluMaskKernel(const A* x, const A* dy, A* g, BnAffine f, size_t total, int C,
                                 size_t HW, size_t packs) {
  extern __shared__ float2 channels[];
  loadChannels<kShared>(f, C, channels);
  constexpr int K = Pack<A>::kCount;
  PackChannels<A, kShared> ch(C);
  for (size_t i = firstIndex(); i < packs; i += gridStride()) {
    const Pack<A> in = reinterpret_cast<const Pack<A>*>(x)[i];
    const Pack<A> d = reinterpret_cast<const Pack<A>*>(dy)[i];
    ch.advance(f, channels, C);
    Pack<A> out;
#pragma unroll
    for (int k = 0; k < K; ++k)  // through float, as the single-value path stores it
      out.v[k] =
          fromFloat<A>(normalised(toFloat(in.v[k]), ch.k[k]) > 0.0f ? toFloat(d.v[k]) : 0.0f);
    reinterpret_cast<Pack<A>*>(g)[i] = out;
  }
  for (size_t i = packs * K + firstIndex(); i < total; i += gridStride()) {
    const float2 k = affineAt<kShared>(f, channels, channelAt<A>(i, C, HW));
    store(g, i, normalised(load(x, i), k) > 0.0f ? load(dy, i) : 0.0f);
  }
}

// y = max(a * scale + shift + t, 0), t = s mapped by g's (scale, shift) (kDual) or s;
// with the channels of g after f's in shared memory.
template <class A, bool kShared, bool kDual>
__global__ void bnAddReluKernel(const A* a, const A* s, A* y, BnAffine f, BnAffine g,
                                size_t total, int C, size_t HW, size_t packs) {
  extern __shared__ float2 channels[];
  loadChannels<kShared>(f, C, channels);
  if constexpr (kDual) loadChannels<kShared>(g, C, channels + C);
  constexpr int K = Pack<A>::kCount;
  PackChannels<A, kShared> cf(C), cg(C);
  // Explicitly rounded, as the maps are (bn_channel.cuh): one evaluation everywhere.
  const auto sum = [](float v, float t) { return fmaxf(__fadd_rn(v, t), 0.0f); };
  for (size_t i = firstIndex(); i < packs; i += gridStride()) {
    const Pack<A> in = reinterpret_cast<const Pack<A>*>(a)[i];
    const Pack<A> sh = reinterpret_cast<const Pack<A>*>(s)[i];
    cf.advance(f, channels, C);
    if constexpr (kDual) cg.advance(g, channels + C, C);
    Pack<A> out;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float t = kDual ? normalised(toFloat(sh.v[k]), cg.k[k]) : toFloat(sh.v[k]);
      out.v[k] = fromFloat<A>(sum(normalised(toFloat(in.v[k]), cf.k[k]), t));
    }
    reinterpret_cast<Pack<A>*>(y)[i] = out;
  }
  for (size_t i = packs * K + firstIndex(); i < total; i += gridStride()) {
    const int c = channelAt<A>(i, C, HW);
    const float t =
        kDual ? normalised(load(s, i), affineAt<kShared>(g, channels + C, c)) : load(s, i);
    store(y, i, sum(normalised(load(a, i), affineAt<kShared>(f, channels, c)), t));
  }
}

// Sum of v over the block, returned to every thread (blockDim.x == kThreads).
__device__ double blockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();
  return total;
}

// One block per channel. dx = scale * g is written in the same pass that sums (each
// element is read, then written, by the same thread: dx may be dy).
template <class A>
__global__ void bnBackwardInferenceKernel(const A* x, const A* dy, A* dx, float* dgamma,
                                          float* dbeta, BnAffine f, bool relu, int N, int C,
                                          size_t HW) {
  __shared__ double shared[kThreads];
  const int c = blockIdx.x;
  const Channel k = channelOf(f, c);
  const float2 affine = make_float2(k.scale, k.shift);
  double sum_g = 0.0, sum_g_xc = 0.0;
  for (int n = 0; n < N; ++n) {
    // Element i of this image's channel plane sits at base + i * step.
    const size_t base = kNhwc<A> ? size_t(n) * HW * C + c : (size_t(n) * C + c) * HW;
    const size_t step = kNhwc<A> ? size_t(C) : 1;
    for (size_t i = threadIdx.x; i < HW; i += kThreads) {
      const size_t at = base + i * step;
      float xv = load(x, at), gv = load(dy, at);
      if (relu && !(normalised(xv, affine) > 0.0f)) gv = 0.0f;
      sum_g += gv;
      sum_g_xc += double(gv) * (xv - k.mean);
      store(dx, at, k.scale * gv);
    }
  }
  sum_g = blockSum(sum_g, shared);
  sum_g_xc = blockSum(sum_g_xc, shared);
  if (threadIdx.x == 0) {
    dbeta[c] = float(sum_g);
    dgamma[c] = float(sum_g_xc * k.invstd);
  }
}

// Packs the map and the mask take: none unless the values are NHWC with whole Packs
// of channels and every pointer is 16-byte aligned.
template <class A>
size_t packsOf(size_t total, int C, std::initializer_list<const void*> pointers) {
  if constexpr (!kNhwc<A>) {
    return 0;
  } else {
    return wholePacks(C, Pack<A>::kCount, pointers) ? total / Pack<A>::kCount : 0;
  }
}

// Runs launch(std::bool_constant<shared>{}, blocks, shared bytes) for `work` threads'
// worth: with the channels in shared memory where they fit, on blocks few enough that
// a block's C channels are a small part of the values it maps (at least 16 C each),
// but never fewer than four per multiprocessor, which the memory needs in flight.
template <class F>
void launchWithChannels(size_t work, size_t total, int C, F&& launch) {
  if (C > kSharedChannels) return launch(std::false_type{}, blocksFor(work), size_t(0));
  const size_t most = std::max(total / (16 * size_t(C)), 4 * multiprocessors());
  launch(std::true_type{}, unsigned(std::min<size_t>(blocksFor(work), most)), C * sizeof(float2));
}

}  // namespace

void launchBnApply(const float* x, float* y, BnAffine f, bool relu, int N, int C, size_t HW) {
  const size_t total = size_t(N) * C * HW;
  if (!total) return;
  dispatch([&](auto a) {
    using A = decltype(a);
    const size_t packs = packsOf<A>(total, C, {x, y});
    launchWithChannels(
        packs ? packs : total, total, C, [&](auto shared, unsigned blocks, size_t bytes) {
          bnApplyKernel<A, decltype(shared)::value><<<blocks, kThreads, bytes, backend().stream>>>(
              as<A>(x), as<A>(y), f, relu, total, C, HW, packs);
        });
  });
}

void launchBnAddRelu(const float* a, BnAffine f, const float* s, const BnAffine* g, float* y,
                     int N, int C, size_t HW) {
  const size_t total = size_t(N) * C * HW;
  if (!total) return;
  dispatch([&](auto t) {
    using A = decltype(t);
    const size_t packs = packsOf<A>(total, C, {a, s, y});
    const auto run = [&](auto dual) {
      constexpr bool kDual = decltype(dual)::value;
      launchWithChannels(packs ? packs : total, total, kDual ? 2 * C : C,
                         [&](auto shared, unsigned blocks, size_t bytes) {
                           bnAddReluKernel<A, decltype(shared)::value, kDual>
                               <<<blocks, kThreads, bytes, backend().stream>>>(
                                   as<A>(a), as<A>(s), as<A>(y), f, g ? *g : f, total, C, HW,
                                   packs);
                         });
    };
    if (g) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  });
}

void launchBnReluMask(const float* x, const float* dy, float* g, BnAffine f, int N, int C,
                      size_t HW) {
  const size_t total = size_t(N) * C * HW;
  if (!total) return;
  dispatch([&](auto a) {
    using A = decltype(a);
    const size_t packs = packsOf<A>(total, C, {x, dy, g});
    launchWithChannels(packs ? packs : total, total, C,
                       [&](auto shared, unsigned blocks, size_t bytes) {
                         bnReluMaskKernel<A, decltype(shared)::value>
                             <<<blocks, kThreads, bytes, backend().stream>>>(
                                 as<A>(x), as<A>(dy), as<A>(g), f, total, C, HW, packs);
                       });
  });
}

void launchBnBackwardInference(const float* x, const float* dy, float* dx, float* dgamma,
                               float* dbeta, BnAffine f, bool relu, int N, int C, size_t HW) {
  dispatch([&](auto a) {
    using A = decltype(a);
    bnBackwardInferenceKernel<<<C, kThreads, 0, backend().stream>>>(
        as<A>(x), as<A>(dy), as<A>(dx), dgamma, dbeta, f, relu, N, C, HW);
  });
}

}  // namespace accord::nn::cuda::detail

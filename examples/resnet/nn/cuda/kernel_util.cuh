// What the backend's CUDA sources share (kernels.cu, elementwise.cu, pool.cu,
// bn_apply.cu, bn_stats.cu): launch sizes, grid-stride indices and their type, the
// activations' storage types, their layout, float loads and rounded stores, 16-byte
// Packs of them, and the dispatch from the backend's math to a storage type.
#pragma once

#include "nn/cuda/backend_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace accord::nn::cuda::detail::kernel {

inline constexpr int kThreads = 256;
inline constexpr size_t kMaxBlocks = 4096;

inline unsigned blocksFor(size_t work) {
  return unsigned(std::clamp<size_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__device__ inline size_t firstIndex() { return size_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline size_t gridStride() { return size_t(gridDim.x) * blockDim.x; }

// Runs f(I{}) with the index type of a grid-stride loop over n items whose arithmetic
// stays below n: 32 bits where that and the step past the end fit (the GPU divides
// 32-bit integers several times faster than 64-bit ones, which matters to kernels
// that split an index into coordinates), size_t otherwise.
template <class F>
void withIndex(size_t n, F&& f) {
  static_assert(size_t(kMaxBlocks) * kThreads <= (size_t(1) << 31));
  if (n <= (size_t(1) << 31)) return f(uint32_t{});
  f(size_t{});
}

using bf16_t = __nv_bfloat16;
using fp16_t = __half;

// float activations are NCHW, 16-bit ones NHWC, as the tensor cores want them.
template <class A>
inline constexpr bool kNhwc = !std::is_same_v<A, float>;

// 16 bytes of the storage type A: what one vector access moves.
template <class A>
struct alignas(16) Pack {
  static constexpr int kCount = 16 / sizeof(A);
  A v[kCount];
};

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Whether kernels that take whole Packs of NHWC channels (P = Pack<A>::kCount per
// access) can take these tensors: C a multiple of P, every pointer on 16 bytes.
inline bool wholePacks(int C, int P, std::initializer_list<const void*> pointers) {
  if (C % P != 0) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

__device__ inline float toFloat(float v) { return v; }
__device__ inline float toFloat(bf16_t v) { return __bfloat162float(v); }
__device__ inline float toFloat(fp16_t v) { return __half2float(v); }

// The storage type's value nearest to v (ties to even).
template <class A>
__device__ inline A fromFloat(float v) {
  if constexpr (std::is_same_v<A, bf16_t>) {
    return __float2bfloat16_rn(v);
  } else if constexpr (std::is_same_v<A, fp16_t>) {
    return __float2half_rn(v);
  } else {
    return v;
  }
}

template <class A>
__device__ inline float load(const A* p, size_t i) {
  return toFloat(p[i]);
}
template <class A>
__device__ inline void store(A* p, size_t i, float v) {
  p[i] = fromFloat<A>(v);
}

// Runs f with the activations' storage type: f(float{}), f(bf16_t{}) or f(fp16_t{}).
template <class F>
void dispatch(F&& f) {
  switch (backend().math) {
    case Math::Bf16:
      return f(bf16_t{});
    case Math::Fp16:
      return f(fp16_t{});
    default:
      return f(float{});
  }
}

// Runs f with the activations' 16-bit type (halfActivations() must hold).
template <class F>
void dispatchHalf(F&& f) {
  if (backend().math == Math::Fp16) return f(fp16_t{});
  f(bf16_t{});
}

// The layer interface passes activations as float*, whatever they hold.
template <class A>
const A* as(const float* p) {
  return reinterpret_cast<const A*>(p);
}
template <class A>
A* as(float* p) {
  return reinterpret_cast<A*>(p);
}

}  // namespace accord::nn::cuda::detail::kernel

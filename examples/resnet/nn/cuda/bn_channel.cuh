// What batch norm's kernels share (bn_apply.cu, bn_backward.cu): a channel's statistics
// and affine map, computed the same way in every kernel, so that the ReLU mask of a
// backward is exactly the forward's; and the GPU's size, for their launches.
#pragma once

#include "nn/cuda/backend_cuda.h"

#include <cuda_runtime.h>

#include <cstddef>

namespace accord::nn::cuda::detail::kernel {

struct Channel {
  float mean, invstd, scale, shift;
};

// Explicitly rounded operations: the compiler may not contract them differently in
// one kernel and another, so x * scale + shift is the same in all of them.
__device__ inline Channel channelOf(const BnAffine& f, int c) {
  Channel k;
  k.mean = f.mean[c];
  k.invstd = f.invstd ? f.invstd[c] : __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(f.var[c], f.eps)));
  k.scale = __fmul_rn(f.gamma[c], k.invstd);
  k.shift = __fsub_rn(f.beta[c], __fmul_rn(k.mean, k.scale));
  return k;
}

// x * scale + shift for k = (scale, shift).
__device__ inline float normalised(float x, float2 k) { return __fmaf_rn(x, k.x, k.y); }

// The GPU's multiprocessors (asked once).
inline size_t multiprocessors() {
  static const size_t count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        n <= 0) {
      cudaGetLastError();
      return size_t(108);
    }
    return size_t(n);
  }();
  return count;
}

}  // namespace accord::nn::cuda::detail::kernel

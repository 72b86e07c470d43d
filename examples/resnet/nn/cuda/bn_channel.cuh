// What batch norm's kernels share (bn_apply.cu, bn_backward.cu, bn_stats.cu): a
// channel's statistics and affine map, computed the same way in every kernel, so that
// the ReLU mask of a backward is exactly the forward's; the two fixed-order reductions
// of their per-channel sums; and the GPU's size, for their launches.
#pragma once

#include "nn/cuda/backend_cuda.h"
#include "nn/cuda/kernel_util.cuh"

#include <cuda_runtime.h>

#include <algorithm>
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

// Two per-channel sums over rows, in two launches and a fixed order (no atomics: the
// same input gives the same bits). Launch 1 runs blocks of kThreads on a grid (tiles of
// Qt channel Packs of P, slices of rows; RowGrid); thread t of a block takes Pack
// q = blockIdx.x Qt + t % Qt and every R-th row from blockIdx.y R + t / Qt (forRows),
// sums its values into a[P], b[P], then calls blockPartials: the block's R row slices
// are added in order into row blockIdx.y of the partials (rows of C = Q P floats).

// Launch 1's grid for `rows` rows of C channels in Packs of P. Each block sums at least
// kRowsPerThread rows a thread where the rows allow (fewer rows of partials for launch 2
// to add), at most four blocks per multiprocessor; past one block per multiprocessor,
// the blocks are rounded up to as many on every one: at ResNet's last stage (2048
// channels of 7x7, batch 128: 196 slices of one tile) 64 of an H200's 132
// multiprocessors had two blocks and the rest one, and waited for them.
struct RowGrid {
  static constexpr size_t kRowsPerThread = 32;
  int Q, Qt, R;  // Packs of channels, Packs a block takes, row slices a block takes
  size_t tiles;  // blocks across the channels
  int parts;     // blocks down the rows: rows of partials
  RowGrid(size_t rows, int C, int P, size_t sms) {
    Q = C / P, Qt = std::min(Q, kThreads), R = kThreads / Qt;
    tiles = (size_t(Q) + Qt - 1) / Qt;
    const size_t want = (rows + R * kRowsPerThread - 1) / (R * kRowsPerThread);
    const size_t most = std::max<size_t>(1, 4 * sms / tiles);
    const size_t wave = std::max<size_t>(1, sms / tiles);
    size_t p = std::min(want, most);
    if (p > wave) p = std::min((p + wave - 1) / wave * wave, std::max(most, wave));
    parts = int(std::clamp<size_t>(p, 1, 65535));
  }
};

// f(r) for the rows r = first, first + step, ... below `rows`, in that order, with the
// loads of four rows issued before the first of them is used: load(r) reads row r and
// use(value) takes it. Each thread of launch 1 streams a few dozen rows, one after the
// other; with one row's load at a time, too few bytes are in flight on the many-channel
// shapes, where a block's threads cover one row between them. The order of the uses,
// and so the sums' bits, are the one-at-a-time loop's.
template <class I, class Load, class Use>
__device__ inline void forRows(I first, I step, I rows, Load&& load, Use&& use) {
  I r = first;
  for (; r < rows && rows - r > 3 * step; r += 4 * step) {
    decltype(load(r)) v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load(r + I(u) * step);
#pragma unroll
    for (int u = 0; u < 4; ++u) use(v[u]);
  }
  for (; r < rows; r += step) use(load(r));
}
template <int P>
__device__ void blockPartials(const float (&a)[P], const float (&b)[P], int Q, int Qt, int R,
                              float* part_a, float* part_b) {
  __shared__ float shared[2][kThreads * P];
  const int tx = int(threadIdx.x) % Qt, ty = int(threadIdx.x) / Qt;
  const int q = int(blockIdx.x) * Qt + tx;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    shared[0][threadIdx.x * P + j] = a[j];
    shared[1][threadIdx.x * P + j] = b[j];
  }
  __syncthreads();
  if (ty != 0 || q >= Q) return;
  const int C = Q * P;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    float sa = 0.0f, sb = 0.0f;
    for (int l = 0; l < R; ++l) {
      sa += shared[0][(l * Qt + tx) * P + j];
      sb += shared[1][(l * Qt + tx) * P + j];
    }
    part_a[size_t(blockIdx.y) * C + q * P + j] = sa;
    part_b[size_t(blockIdx.y) * C + q * P + j] = sb;
  }
}

// Launch 2 runs blocks of kThreads over channels 32 at a time: the block's warps add
// every (kThreads / 32)-th of the `parts` rows of partials, the first warp the warps'
// sums in order. True, with channel c's totals in *a and *b, in the one thread that
// holds them.
__device__ inline bool channelTotals(const float* part_a, const float* part_b, int parts, int C,
                                     int* c, double* a, double* b) {
  constexpr int kSlices = kThreads / 32;
  __shared__ double shared[2][kThreads];
  const int lane = int(threadIdx.x) % 32, slice = int(threadIdx.x) / 32;
  *c = int(blockIdx.x) * 32 + lane;
  double sa = 0.0, sb = 0.0;
  if (*c < C) {
    for (int p = slice; p < parts; p += kSlices) {
      sa += part_a[size_t(p) * C + *c];
      sb += part_b[size_t(p) * C + *c];
    }
  }
  shared[0][threadIdx.x] = sa;
  shared[1][threadIdx.x] = sb;
  __syncthreads();
  if (slice != 0 || *c >= C) return false;
  for (int s = 1; s < kSlices; ++s) {
    sa += shared[0][s * 32 + lane];
    sb += shared[1][s * 32 + lane];
  }
  *a = sa, *b = sb;
  return true;
}

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

// Batch norm from statistics summed elsewhere (conv_bn.cc: by cuDNN in the convolution's
// own pass), and the two checks conv_bn.cc makes once per shape before it trusts such
// sums: per-channel sums of a tensor computed here, and the largest difference between
// two tensors. 16-bit NHWC activations only (the fused path's layout).
//
// Also a training batch norm's statistics alone, summed here (launchBnStatistics), for
// the layers that apply them in a pass of their own (residual.cc): two launches, the
// first summing tiles of channels over slices of the rows into rows of partials as
// bn_backward.cu's first pass does, the second adding each channel's partials in order
// and finishing as bnFinalizeKernel. No atomics, so the same input gives the same bits.
// The values are summed less each channel's running mean, which a trained network's
// batch means stay near, so that the sum of squares does not lose the variance to a
// large mean.
#include "nn/cuda/bn_channel.cuh"
#include "nn/cuda/kernel_util.cuh"

#include <algorithm>

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

// Per channel c of `count` values summed as `sum` and `sqsum`: the batch mean and the
// inverse standard deviation 1 / sqrt(var + eps) of the biased variance, as cuDNN's
// forward training saves them, and the running statistics moved as it moves them
// (the variance unbiased).
// Channel c from the sums of its `count` values less `shift` (0, or the running mean
// the sums were taken against).
__device__ void finalizeChannel(int c, double sum, double sqsum, double shift, double count,
                                float momentum, float eps, float* save_mean, float* save_invstd,
                                float* running_mean, float* running_var) {
  const double centred = sum / count;
  const double var = fmax(sqsum / count - centred * centred, 0.0);
  const double mean = shift + centred;
  save_mean[c] = float(mean);
  save_invstd[c] = float(1.0 / sqrt(var + double(eps)));
  const double unbiased = count > 1 ? var * count / (count - 1) : var;
  running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = float((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

__global__ void bnFinalizeKernel(const float* sum, const float* sqsum, double count, int C,
                                 float momentum, float eps, float* save_mean, float* save_invstd,
                                 float* running_mean, float* running_var) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  finalizeChannel(c, sum[c], sqsum[c], 0.0, count, momentum, eps, save_mean, save_invstd,
                  running_mean, running_var);
}

// Pass 1 of launchBnStatistics (bn_channel.cuh's first reduction): the values less
// their channel's shift, and their squares. `rows` rows of Q Packs.
template <class A, class I>
__global__ void bnStatisticsSumsKernel(const A* x, const float* shift, I rows, int Q, int Qt, int R,
                                       float* part_sum, float* part_sq) {
  constexpr int P = Pack<A>::kCount;
  const int tx = int(threadIdx.x) % Qt, ty = int(threadIdx.x) / Qt;
  const int q = int(blockIdx.x) * Qt + tx;
  float sum[P], sq[P];
#pragma unroll
  for (int j = 0; j < P; ++j) sum[j] = 0.0f, sq[j] = 0.0f;
  if (ty < R && q < Q) {
    float s[P];
#pragma unroll
    for (int j = 0; j < P; ++j) s[j] = shift[q * P + j];
    const auto* xv = reinterpret_cast<const Pack<A>*>(x);
    forRows(
        I(blockIdx.y) * R + ty, I(gridDim.y) * R, rows, [&](I r) { return xv[r * Q + q]; },
        [&](const Pack<A>& a) {
#pragma unroll
          for (int j = 0; j < P; ++j) {
            const float d = toFloat(a.v[j]) - s[j];
            sum[j] += d;
            sq[j] += d * d;
          }
        });
  }
  blockPartials<P>(sum, sq, Q, Qt, R, part_sum, part_sq);
}

// Pass 2: each channel's totals (bn_channel.cuh's second reduction), finished. The
// running mean is read (as the shift pass 1 took) before it is moved.
__global__ void bnStatisticsFinalizeKernel(const float* part_sum, const float* part_sq, int parts,
                                           int C, double count, float momentum, float eps,
                                           float* save_mean, float* save_invstd,
                                           float* running_mean, float* running_var) {
  int c;
  double a, b;
  if (!channelTotals(part_sum, part_sq, parts, C, &c, &a, &b)) return;
  finalizeChannel(c, a, b, running_mean[c], count, momentum, eps, save_mean, save_invstd,
                  running_mean, running_var);
}

// One block per channel of an (rows, C) tensor: the channel's sum and sum of squares.
template <class H>
__global__ void channelSumsKernel(const H* x, size_t rows, int C, float* sum, float* sqsum) {
  __shared__ double s1[kThreads], s2[kThreads];
  const int c = blockIdx.x;
  double a = 0, b = 0;
  for (size_t r = threadIdx.x; r < rows; r += kThreads) {
    const double v = load(x, r * C + c);
    a += v;
    b += v * v;
  }
  s1[threadIdx.x] = a;
  s2[threadIdx.x] = b;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      s1[threadIdx.x] += s1[threadIdx.x + s];
      s2[threadIdx.x] += s2[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sum[c] = float(s1[0]);
    sqsum[c] = float(s2[0]);
  }
}

// out[0] = max |x - y|, out[1] = max |y| over n values, as the bits of non-negative
// floats (which order as the floats do); out starts at zero.
template <class H>
__global__ void maxDifferenceKernel(const H* x, const H* y, size_t n, unsigned* out) {
  float diff = 0, scale = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float a = load(x, i), b = load(y, i);
    diff = fmaxf(diff, isnan(a - b) ? INFINITY : fabsf(a - b));
    scale = fmaxf(scale, fabsf(b));
  }
  atomicMax(&out[0], __float_as_uint(diff));
  atomicMax(&out[1], __float_as_uint(scale));
}

}  // namespace

void launchBnFinalize(const float* sum, const float* sqsum, double count, int C, float momentum,
                      float eps, float* save_mean, float* save_invstd, float* running_mean,
                      float* running_var) {
  bnFinalizeKernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, backend().stream>>>(
      sum, sqsum, count, C, momentum, eps, save_mean, save_invstd, running_mean, running_var);
}

bool launchBnStatistics(const float* x, int N, int C, size_t HW, float momentum, float eps,
                        float* save_mean, float* save_invstd, float* running_mean,
                        float* running_var) {
  if (!halfActivations() || N <= 0 || C <= 0 || HW == 0) return false;
  bool launched = false;
  dispatchHalf([&](auto h) {
    using A = decltype(h);
    constexpr int P = Pack<A>::kCount;
    if (!wholePacks(C, P, {x})) return;
    const size_t rows = size_t(N) * HW;
    const RowGrid grid(rows, C, P, multiprocessors());
    const int parts = grid.parts;
    auto* part_sum =
        static_cast<float*>(scratch(kSlotBnStatistics, 2 * size_t(parts) * C * sizeof(float)));
    float* part_sq = part_sum + size_t(parts) * C;
    cudaStream_t stream = backend().stream;
    withIndex(rows * C, [&](auto index) {
      using I = decltype(index);
      bnStatisticsSumsKernel<<<dim3(unsigned(grid.tiles), unsigned(parts)), kThreads, 0, stream>>>(
          static_cast<const A*>(static_cast<const void*>(x)), running_mean, I(rows), grid.Q,
          grid.Qt, grid.R, part_sum, part_sq);
    });
    bnStatisticsFinalizeKernel<<<unsigned((C + 31) / 32), kThreads, 0, stream>>>(
        part_sum, part_sq, parts, C, double(rows), momentum, eps, save_mean, save_invstd,
        running_mean, running_var);
    launched = true;
  });
  return launched;
}

void launchChannelSums(const void* x, size_t rows, int C, float* sum, float* sqsum) {
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    channelSumsKernel<<<C, kThreads, 0, backend().stream>>>(static_cast<const H*>(x), rows, C, sum,
                                                            sqsum);
  });
}

void launchMaxDifference(const void* x, const void* y, size_t n, unsigned* out) {
  dispatchHalf([&](auto h) {
    using H = decltype(h);
    maxDifferenceKernel<<<1024, kThreads, 0, backend().stream>>>(static_cast<const H*>(x),
                                                                 static_cast<const H*>(y), n, out);
  });
}

}  // namespace accord::nn::cuda::detail

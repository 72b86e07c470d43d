// Batch norm from statistics summed elsewhere (conv_bn.cc: by cuDNN in the convolution's
// own pass), and the two checks conv_bn.cc makes once per shape before it trusts such
// sums: per-channel sums of a tensor computed here, and the largest difference between
// two tensors. 16-bit NHWC activations only (the fused path's layout).
#include "nn/cuda/kernel_util.cuh"

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

// Per channel c of `count` values summed as `sum` and `sqsum`: the batch mean and the
// inverse standard deviation 1 / sqrt(var + eps) of the biased variance, as cuDNN's
// forward training saves them, and the running statistics moved as it moves them
// (the variance unbiased).
__global__ void bnFinalizeKernel(const float* sum, const float* sqsum, double count, int C,
                                 float momentum, float eps, float* save_mean, float* save_invstd,
                                 float* running_mean, float* running_var) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double mean = double(sum[c]) / count;
  const double var = fmax(double(sqsum[c]) / count - mean * mean, 0.0);
  save_mean[c] = float(mean);
  save_invstd[c] = float(1.0 / sqrt(var + double(eps)));
  const double unbiased = count > 1 ? var * count / (count - 1) : var;
  running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = float((1.0 - momentum) * running_var[c] + momentum * unbiased);
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

// Softmax cross-entropy with label smoothing, and top-k counts, on the GPU: one block per
// row (a row is the classes of one image, 1000 at most in ImageNet), in double like the
// CPU backend. Each row's loss goes to its own slot; the host sums the slots in order,
// so the loss is the same bits every run. Labels live on the device, so their check
// happens there too: a row with a label outside [0, C) counts itself in a flag that the
// host reads with the losses and turns into InvalidArgument.
//
// With q = (1 - s) onehot(label) + s / C and z a row of logits (see nn/softmax_xent.cc):
//   loss = logsumexp(z) - (1 - s) z_label - (s / C) sum_j z_j,  dz = (softmax(z) - q) / N
#include "nn/cuda/backend_cuda.h"

#include <vector>

namespace accord::nn::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;

// Reduces v over the block with op, returned to every thread.
template <class Op>
__device__ double blockReduce(double v, double* shared, Op op) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  double r = shared[0];
  __syncthreads();
  return r;
}

struct Sum {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Max {
  __device__ double operator()(double a, double b) const { return a > b ? a : b; }
};

__global__ void softmaxXentKernel(const float* logits, const int32_t* labels, float* dlogits,
                                  double* loss, int* bad, int C, float smoothing, float scale) {
  __shared__ double shared[kThreads];
  const int row = blockIdx.x;
  const float* z = logits + size_t(row) * C;
  const int label = labels[row];
  if (label < 0 || label >= C) {  // the same for the whole block: no thread reaches a barrier
    if (threadIdx.x == 0) {
      atomicAdd(bad, 1);
      loss[row] = 0.0;
    }
    return;
  }
  double zmax = -INFINITY;
  for (int j = threadIdx.x; j < C; j += kThreads) zmax = fmax(zmax, double(z[j]));
  zmax = blockReduce(zmax, shared, Max());
  double sumexp = 0.0, sumz = 0.0;
  for (int j = threadIdx.x; j < C; j += kThreads) {
    sumexp += exp(double(z[j]) - zmax);
    sumz += z[j];
  }
  sumexp = blockReduce(sumexp, shared, Sum());
  sumz = blockReduce(sumz, shared, Sum());
  const double lse = zmax + log(sumexp);
  if (threadIdx.x == 0) loss[row] = lse - (1.0 - smoothing) * z[label] - smoothing / C * sumz;
  if (!dlogits) return;
  // Every read of z above precedes this point for all threads (the reductions end on a
  // barrier), so dlogits may be logits.
  float* d = dlogits + size_t(row) * C;
  const float off = smoothing / C;  // in float, as the CPU computes it
  for (int j = threadIdx.x; j < C; j += kThreads) {
    double p = exp(double(z[j]) - lse);
    double q = off + (j == label ? 1.0 - smoothing : 0.0);
    d[j] = float((p - q) * scale);
  }
}

// ahead[row] = how many other logits are >= the label's (ties count against), or -1
// when the row has a NaN (a diverged model predicts nothing).
__global__ void topkKernel(const float* logits, const int32_t* labels, int* ahead, int* bad,
                           int C) {
  __shared__ double shared[kThreads];
  const int row = blockIdx.x;
  const float* z = logits + size_t(row) * C;
  const int label = labels[row];
  if (label < 0 || label >= C) {
    if (threadIdx.x == 0) {
      atomicAdd(bad, 1);
      ahead[row] = -1;
    }
    return;
  }
  const float target = z[label];
  double count = 0.0, nan = 0.0;
  for (int j = threadIdx.x; j < C; j += kThreads) {
    count += (j != label && z[j] >= target);
    nan += isnan(z[j]) ? 1.0 : 0.0;
  }
  count = blockReduce(count, shared, Sum());
  nan = blockReduce(nan, shared, Sum());
  if (threadIdx.x == 0) ahead[row] = nan > 0.0 ? -1 : int(count);
}

// The mean of the rows' losses as softmax_xent computes it on the host: summed in row
// order in double, divided, rounded to float (the same bits).
__global__ void meanLossKernel(const double* rows, int N, float* out) {
  double total = 0.0;
  for (int i = 0; i < N; ++i) total += rows[i];
  *out = float(total / N);
}

// counts[0], counts[1]: the rows whose label is in the top 1 and the top k5, as
// topk_correct counts them on the host.
__global__ void countTopKKernel(const int* ahead, int N, int k5, int* counts) {
  int top1 = 0, top5 = 0;
  for (int i = 0; i < N; ++i) {
    if (ahead[i] < 0) continue;
    top1 += ahead[i] < 1;
    top5 += ahead[i] < k5;
  }
  counts[0] = top1;
  counts[1] = top5;
}

// The loss's description for messages, after checking its shape and smoothing.
std::string checkedLoss(const char* fn, int N, int C, float smoothing) {
  const std::string what = key(fn, N, C);
  if (N <= 0 || C <= 0) throw InvalidArgument(what + ": invalid shape");
  if (!(smoothing >= 0.0f && smoothing < 1.0f))
    throw InvalidArgument(key(what.c_str(), ": label smoothing", smoothing, "is outside [0, 1)"));
  return what;
}

// Per-row results and the bad-label flag, back on the host (waits for the stream).
template <class T>
std::vector<T> fetchRows(const T* rows, const int* bad, int N, int& bad_count,
                         const std::string& what) {
  std::vector<T> host(N);
  Backend& b = backend();
  ACCORD_NN_CUDA_CHECK(
      what, cudaMemcpyAsync(host.data(), rows, N * sizeof(T), cudaMemcpyDeviceToHost, b.stream));
  ACCORD_NN_CUDA_CHECK(
      what, cudaMemcpyAsync(&bad_count, bad, sizeof(int), cudaMemcpyDeviceToHost, b.stream));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(b.stream));
  return host;
}

void throwIfBad(int bad_count, int C, const std::string& what) {
  if (bad_count)
    throw InvalidArgument(
        key(what.c_str(), ":", bad_count, "labels are outside [0, C) with C =", C));
}

}  // namespace

float softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int N, int C,
                   float smoothing) {
  const std::string what = checkedLoss("softmax_xent (N C)", N, C, smoothing);
  Backend& b = backend();
  auto* loss = static_cast<double*>(scratch(kSlotLosses, N * sizeof(double)));
  auto* bad = static_cast<int*>(scratch(kSlotFlags, sizeof(int)));
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(bad, 0, sizeof(int), b.stream));
  softmaxXentKernel<<<N, kThreads, 0, b.stream>>>(logits, labels, dlogits, loss, bad, C, smoothing,
                                                  1.0f / N);
  checkLaunch(what);
  int bad_count = 0;
  std::vector<double> rows = fetchRows(loss, bad, N, bad_count, what);
  throwIfBad(bad_count, C, what);
  double total = 0.0;
  for (double l : rows) total += l;
  return float(total / N);
}

TopK topk_correct(const float* logits, const int32_t* labels, int N, int C) {
  const std::string what = key("topk_correct (N C)", N, C);
  if (N <= 0 || C <= 0) throw InvalidArgument(what + ": invalid shape");
  Backend& b = backend();
  // The losses' slot holds doubles; N ints fit in it.
  auto* ahead = static_cast<int*>(scratch(kSlotLosses, N * sizeof(double)));
  auto* bad = static_cast<int*>(scratch(kSlotFlags, sizeof(int)));
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(bad, 0, sizeof(int), b.stream));
  topkKernel<<<N, kThreads, 0, b.stream>>>(logits, labels, ahead, bad, C);
  checkLaunch(what);
  int bad_count = 0;
  std::vector<int> rows = fetchRows(ahead, bad, N, bad_count, what);
  throwIfBad(bad_count, C, what);
  const int k5 = C < 5 ? C : 5;
  TopK result;
  for (int a : rows) {
    if (a < 0) continue;
    result.top1 += a < 1;
    result.top5 += a < k5;
  }
  return result;
}

void softmax_xent_async(const float* logits, const int32_t* labels, float* dlogits, int N, int C,
                        float smoothing, float* loss, int* bad) {
  const std::string what = checkedLoss("softmax_xent_async (N C)", N, C, smoothing);
  Backend& b = backend();
  auto* rows = static_cast<double*>(scratch(kSlotLosses, N * sizeof(double)));
  softmaxXentKernel<<<N, kThreads, 0, b.stream>>>(logits, labels, dlogits, rows, bad, C, smoothing,
                                                  1.0f / N);
  checkLaunch(what);
  meanLossKernel<<<1, 1, 0, b.stream>>>(rows, N, loss);
  checkLaunch(what);
}

void topk_correct_async(const float* logits, const int32_t* labels, int N, int C, int* counts,
                        int* bad) {
  const std::string what = key("topk_correct_async (N C)", N, C);
  if (N <= 0 || C <= 0) throw InvalidArgument(what + ": invalid shape");
  Backend& b = backend();
  auto* ahead = static_cast<int*>(scratch(kSlotLosses, N * sizeof(double)));
  topkKernel<<<N, kThreads, 0, b.stream>>>(logits, labels, ahead, bad, C);
  checkLaunch(what);
  countTopKKernel<<<1, 1, 0, b.stream>>>(ahead, N, C < 5 ? C : 5, counts);
  checkLaunch(what);
}

}  // namespace accord::nn::cuda

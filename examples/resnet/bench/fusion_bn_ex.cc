// See fusion_bn_ex.h. The descriptors are made here, as batchnorm2d.cc makes its own,
// so that the trainer's layer keeps no path it does not take.
#include "bench/fusion_bn_ex.h"

#include "nn/cuda/backend_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace accord::resnet::probe {

namespace detail = nn::cuda::detail;

namespace {

struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
  ~Descriptors() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (stats) cudnnDestroyTensorDescriptor(stats);
  }
};

// A device buffer freed at scope end.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    detail::check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "probe", "cudaMalloc", __FILE__,
                  __LINE__);
  }
  ~DeviceBuffer() { cudaFree(p); }
};

// max |got - want| / max |want| over n 16-bit values on the device.
double relativeDifference(const float* got, const float* want, size_t n) {
  DeviceBuffer out(2 * sizeof(unsigned));
  cudaStream_t stream = detail::backend().stream;
  detail::check(cudaMemsetAsync(out.p, 0, 2 * sizeof(unsigned), stream), "probe", "cudaMemsetAsync",
                __FILE__, __LINE__);
  detail::launchMaxDifference(got, want, n, static_cast<unsigned*>(out.p));
  unsigned host[2] = {};
  detail::check(cudaMemcpyAsync(host, out.p, sizeof host, cudaMemcpyDeviceToHost, stream), "probe",
                "cudaMemcpyAsync", __FILE__, __LINE__);
  detail::check(cudaStreamSynchronize(stream), "probe", "cudaStreamSynchronize", __FILE__,
                __LINE__);
  float diff = 0, scale = 0;
  std::memcpy(&diff, &host[0], sizeof diff);
  std::memcpy(&scale, &host[1], sizeof scale);
  return scale > 0 ? diff / scale : diff;
}

// max |got - want| / max |want| over n float32 values on the device.
double relativeDifferenceFloat(const float* got, const float* want, size_t n) {
  std::vector<float> a(n), b(n);
  cudaStream_t stream = detail::backend().stream;
  cudaMemcpyAsync(a.data(), got, n * sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(b.data(), want, n * sizeof(float), cudaMemcpyDeviceToHost, stream);
  detail::check(cudaStreamSynchronize(stream), "probe", "cudaStreamSynchronize", __FILE__,
                __LINE__);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

std::string fmt(const char* f, double a) {
  char s[64];
  std::snprintf(s, sizeof s, f, a);
  return s;
}

}  // namespace

std::string exBackwardOnOurStatistics(
    const nn::BatchNorm2d& bn, const float* x, const float* dy, float* dx, const float* dx_ours,
    int N, int H, const std::function<double(const std::function<void()>&)>& time, double* ms) {
  *ms = -1;
  const std::string what = "probe: cuDNN's Ex backward on our statistics";
  cudnnHandle_t h = detail::backend().cudnn;
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  Descriptors d;
  ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&d.x));
  ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&d.stats));
  ACCORD_NN_CUDA_CHECK(what, cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC,
                                                        detail::activationType(), N, bn.C, H, H));
  ACCORD_NN_CUDA_CHECK(what, cudnnDeriveBNTensorDescriptor(d.stats, d.x, CUDNN_BATCHNORM_SPATIAL));
  size_t ws_bytes = 0, reserve_bytes = 0;
  cudnnStatus_t s = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      h, mode, ops, d.x, nullptr, d.x, nullptr, d.x, d.stats, nullptr, &ws_bytes);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, mode, ops, nullptr, d.x,
                                                             &reserve_bytes);
  if (s != CUDNN_STATUS_SUCCESS) return std::string("sizing refused: ") + cudnnGetErrorString(s);
  DeviceBuffer reserve(reserve_bytes), grads(2 * size_t(bn.C) * sizeof(float));
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(reserve.p, 0, std::max<size_t>(reserve_bytes, 256),
                                             detail::backend().stream));
  void* ws = detail::workspace(ws_bytes);
  float* dgamma = static_cast<float*>(grads.p);
  float* dbeta = dgamma + bn.C;
  const float one = 1.0f, zero = 0.0f;
  const auto run = [&] {
    return cudnnBatchNormalizationBackwardEx(
        h, mode, ops, &one, &zero, &one, &zero, d.x, x, nullptr, nullptr, d.x, dy, nullptr, nullptr,
        d.x, dx, d.stats, bn.gamma, bn.beta, dgamma, dbeta, double(bn.eps), bn.save_mean,
        bn.save_var, nullptr, ws, ws_bytes, reserve.p, reserve_bytes);
  };
  s = run();
  if (s != CUDNN_STATUS_SUCCESS) {
    cudaGetLastError();
    return std::string("refused: ") + cudnnGetErrorString(s);
  }
  const size_t n = size_t(N) * bn.C * H * H;
  const double ddx = relativeDifference(dx, dx_ours, n);
  const double dg = relativeDifferenceFloat(dgamma, bn.dgamma, size_t(bn.C));
  const double db = relativeDifferenceFloat(dbeta, bn.dbeta, size_t(bn.C));
  *ms = time([&] { run(); });
  const bool agrees = ddx <= 2e-2 && dg <= 1e-2 && db <= 1e-2;
  return std::string(agrees ? "agrees with ours" : "DIFFERS from ours") + " (dx " +
         fmt("%.1e", ddx) + ", dgamma " + fmt("%.1e", dg) + ", dbeta " + fmt("%.1e", db) +
         " of their scale; reserve " + std::to_string(reserve_bytes) + " bytes, zeroed)";
}

}  // namespace accord::resnet::probe

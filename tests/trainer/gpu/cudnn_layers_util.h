// Helpers of test_cudnn_layers.cc: random host tensors, device copies of them, and the
// comparison every test makes, the GPU result against the CPU backend's.
#pragma once

#include "nn/cuda/layers_cuda.h"

#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace accord::test {

inline std::vector<float> randomVector(size_t n, std::mt19937_64& rng, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A device copy of a host vector (or n floats filled with `fill`), freed at scope end.
// Transfers go through the backend's stream, so they are ordered with the layers.
class Device {
 public:
  explicit Device(const std::vector<float>& host) : n_(host.size()) {
    alloc();
    nn::cuda::copy_to_device(p_, host.data(), n_);
  }
  Device(size_t n, float fill) : Device(std::vector<float>(n, fill)) {}
  ~Device() { cudaFree(p_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  float* get() const { return p_; }
  std::vector<float> host() const {
    std::vector<float> h(n_);
    nn::cuda::copy_to_host(h.data(), p_, n_);
    return h;
  }

 private:
  void alloc() {
    cudaError_t s =
        cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n_, 1) * sizeof(float));
    INFO(cudaGetErrorString(s));
    REQUIRE(s == cudaSuccess);
  }
  size_t n_;
  float* p_ = nullptr;
};

// Labels on the device (int32).
class DeviceLabels {
 public:
  explicit DeviceLabels(const std::vector<int32_t>& host) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p_),
                       std::max<size_t>(host.size(), 1) * sizeof(int32_t)) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(p_, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                            nn::cuda::stream()) == cudaSuccess);
    nn::cuda::synchronize();
  }
  ~DeviceLabels() { cudaFree(p_); }
  DeviceLabels(const DeviceLabels&) = delete;
  DeviceLabels& operator=(const DeviceLabels&) = delete;
  const int32_t* get() const { return p_; }

 private:
  int32_t* p_ = nullptr;
};

// GPU result `got` against the CPU's `want`: every element within tol * max|want|
// (a norm-relative bound: sums of many terms are compared at the scale of the tensor,
// where an absolute per-element bound would fail on values that cancel to near zero).
// The reference must not be all zeros, or the comparison would prove nothing.
inline void checkClose(const std::vector<float>& got, const std::vector<float>& want, double tol,
                       const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  REQUIRE(scale > 0.0);
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (std::isnan(d)) {  // the first NaN is the worst there is, and stays so
      worst = d, at = i;
      break;
    }
    if (d > worst) worst = d, at = i;
  }
  INFO("worst at " << at << ": GPU " << got[at] << " vs CPU " << want[at]
                   << ", |diff| / max|CPU| = " << worst / scale << " (tolerance " << tol << ")");
  CHECK(worst <= tol * scale);
}

// `got` against `want` in the 2-norm: ||got - want|| <= tol ||want||. For gradients that
// sum over a whole network's values (a block's weights, its input gradient), where a few
// ReLUs flipped by rounding move single elements far but leave the tensor's direction
// and size where they were; the element-wise bound above would fail on those alone.
inline void checkCloseL2(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    diff += d * d;
    norm += double(want[i]) * double(want[i]);
  }
  REQUIRE(norm > 0.0);
  INFO("||got - want|| / ||want|| = " << std::sqrt(diff / norm) << " (tolerance " << tol << ")");
  CHECK(std::sqrt(diff) <= tol * std::sqrt(norm));  // NaN fails
}

}  // namespace accord::test

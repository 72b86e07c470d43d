// Helpers of the 16-bit layer tests (test_cudnn_half.cc, test_cudnn_half_bn.cc): the
// two 16-bit maths, values rounded to them, activations on the device in 16-bit NHWC,
// and a batch norm's buffers on the host and on the device.
#pragma once

#include "cudnn_layers_util.h"
#include "nn/cuda/layers_cuda.h"
#include "nn/layers.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

namespace accord::test {

using nn::cuda::Math;

inline const Math kHalfMaths[] = {Math::Bf16, Math::Fp16};
inline const char* nameOf(Math m) { return m == Math::Bf16 ? "bf16" : "fp16"; }

// Each value rounded to `math`'s 16-bit type (to nearest, ties to even), kept as float.
inline std::vector<float> rounded(std::vector<float> v, Math math) {
  for (float& f : v)
    f = math == Math::Bf16 ? __bfloat162float(__float2bfloat16(f)) : __half2float(__float2half(f));
  return v;
}

// `math` for the scope.
struct HalfMode {
  explicit HalfMode(Math math) : old(nn::cuda::set_math(math)) {}
  ~HalfMode() { nn::cuda::set_math(old); }
  Math old;
};

// Activations of shape (N, C, H, W) on the device, stored 16-bit NHWC (in a float-sized
// buffer, as the model's arenas hold them); filled and read back in NCHW order.
class Activations {
 public:
  Activations(const std::vector<float>& host, int N, int C, int H, int W)
      : N_(N), C_(C), H_(H), W_(W), d_(host.size(), 0.0f) {
    REQUIRE(host.size() == size_t(N) * C * H * W);
    nn::cuda::upload_input_async(d_.get(), host.data(), N, C, H, W);
    nn::cuda::synchronize();
  }
  Activations(float fill, int N, int C, int H, int W)
      : Activations(std::vector<float>(size_t(N) * C * H * W, fill), N, C, H, W) {}
  float* get() const { return d_.get(); }
  std::vector<float> host() const {
    std::vector<float> h(size_t(N_) * C_ * H_ * W_);
    nn::cuda::activations_to_host(h.data(), d_.get(), N_, C_, H_, W_);
    return h;
  }

 private:
  int N_, C_, H_, W_;
  Device d_;
};

// A batch norm's parameters, running statistics, saved statistics and gradients, on the
// host for the CPU's layer and on the device for the GPU's (the gradients start at 1e3
// there, so that a result never written shows).
struct BnBuffers {
  BnBuffers(std::vector<float> gamma_, std::vector<float> beta_, std::vector<float> mean_,
            std::vector<float> var_)
      : gamma(std::move(gamma_)),
        beta(std::move(beta_)),
        mean(std::move(mean_)),
        var(std::move(var_)),
        save_mean(gamma.size()),
        save_var(gamma.size()),
        dgamma(gamma.size()),
        dbeta(gamma.size()),
        d_gamma(gamma),
        d_beta(beta),
        d_mean(mean),
        d_var(var),
        d_save_mean(gamma.size(), 0.0f),
        d_save_var(gamma.size(), 0.0f),
        d_dgamma(gamma.size(), 1e3f),
        d_dbeta(gamma.size(), 1e3f) {}
  nn::BatchNorm2d cpu(nn::BatchNorm2d bn) {
    bn.gamma = gamma.data(), bn.beta = beta.data(), bn.running_mean = mean.data();
    bn.running_var = var.data(), bn.save_mean = save_mean.data(), bn.save_var = save_var.data();
    bn.dgamma = dgamma.data(), bn.dbeta = dbeta.data();
    return bn;
  }
  nn::BatchNorm2d gpu(nn::BatchNorm2d bn) const {
    bn.gamma = d_gamma.get(), bn.beta = d_beta.get(), bn.running_mean = d_mean.get();
    bn.running_var = d_var.get(), bn.save_mean = d_save_mean.get();
    bn.save_var = d_save_var.get(), bn.dgamma = d_dgamma.get(), bn.dbeta = d_dbeta.get();
    return bn;
  }
  std::vector<float> gamma, beta, mean, var, save_mean, save_var, dgamma, dbeta;
  Device d_gamma, d_beta, d_mean, d_var, d_save_mean, d_save_var, d_dgamma, d_dbeta;
};

}  // namespace accord::test

// Batch norm's own map and mask (nn/cuda/bn_apply.cu) on every path they have: 16-byte
// accesses where the values are NHWC with whole Packs of channels and the pointers are
// aligned, one value at a time otherwise, and each channel's scale and shift from
// shared memory or, past what that holds, made per value. Each result must be what the
// host computes with the same roundings, bit for bit.
#include "device_bytes.h"
#include "nn/cuda/backend_cuda.h"

#include <cmath>
#include <cstring>
#include <random>

namespace accord::test {
namespace {

using nn::cuda::detail::BnAffine;

float toStored(float v, Math m) {
  if (m == Math::Bf16) return __bfloat162float(__float2bfloat16(v));
  if (m == Math::Fp16) return __half2float(__float2half(v));
  return v;
}

struct Shape {
  int N, C;
  size_t HW;
};

// C 6: no whole Packs (single values); 64 and 8: Packs; 4104: Packs, past what shared
// memory holds (scale and shift made per value); 200 on 4 M values: a thread takes
// several Packs, on other channels each time (200 does not divide a grid's 2048 k).
const Shape kShapes[] = {{3, 6, 5},    {4, 64, 9},  {1, 8, 1},
                         {2, 4104, 3}, {5, 64, 49}, {2, 200, 10240}};

TEST_CASE("batch norm's map and mask: vector and single-value paths, channels shared or not",
          "[batchnorm]") {
  for (Math math : {Math::Fp32, Math::Bf16, Math::Fp16}) {
    HalfMode mode(math);
    INFO(nameOfMath(math));
    std::mt19937_64 rng(41);
    for (const Shape& s : kShapes) {
      const size_t total = size_t(s.N) * s.C * s.HW, w = widthOf(math);
      INFO("N " << s.N << " C " << s.C << " HW " << s.HW);
      auto x = randomVector(total, rng, -2.0f, 2.0f), dy = randomVector(total, rng);
      for (float& v : x) v = toStored(v, math);
      for (float& v : dy) v = toStored(v, math);
      const auto gamma = randomVector(s.C, rng, 0.5f, 1.5f), beta = randomVector(s.C, rng);
      const auto mean = randomVector(s.C, rng, -0.3f, 0.3f), var = randomVector(s.C, rng, 0.2f, 2);
      const auto invstd = randomVector(s.C, rng, 0.5f, 2.0f);
      Device d_gamma(gamma), d_beta(beta), d_mean(mean), d_var(var), d_invstd(invstd);
      for (bool with_invstd : {false, true}) {
        INFO((with_invstd ? "saved inverse deviation" : "running variance"));
        const float eps = 1e-5f;
        const BnAffine f{d_gamma.get(),
                         d_beta.get(),
                         d_mean.get(),
                         with_invstd ? nullptr : d_var.get(),
                         with_invstd ? d_invstd.get() : nullptr,
                         eps};
        // The host's scale and shift, rounded as the kernels round them.
        std::vector<float> scale(s.C), shift(s.C);
        for (int c = 0; c < s.C; ++c) {
          const float inv = with_invstd ? invstd[c] : 1.0f / std::sqrt(var[c] + eps);
          scale[c] = gamma[c] * inv;
          const volatile float moved = mean[c] * scale[c];  // rounded apart, as on the GPU
          shift[c] = beta[c] - moved;
        }
        std::vector<float> want_y(total), want_relu(total), want_g(total);
        for (size_t i = 0; i < total; ++i) {
          const int c = math == Math::Fp32 ? int(i / s.HW % s.C) : int(i % s.C);
          const float v = std::fma(x[i], scale[c], shift[c]);
          want_y[i] = toStored(v, math);
          want_relu[i] = toStored(std::max(v, 0.0f), math);
          want_g[i] = v > 0.0f ? dy[i] : 0.0f;
        }
        for (size_t off : {size_t(0), size_t(1)}) {  // 1: off 16 bytes, one value at a time
          INFO("offset " << off);
          const size_t room = (total + 8) * w, at = off * w, bytes = total * w;
          Bytes bx(room), bdy(room), by(room), bg(room);
          bx.put(at, encode(x, math));
          bdy.put(at, encode(dy, math));
          nn::cuda::detail::launchBnApply(bx.at(at), by.at(at), f, false, s.N, s.C, s.HW);
          REQUIRE(by.get(at, bytes) == encode(want_y, math));
          nn::cuda::detail::launchBnApply(bx.at(at), by.at(at), f, true, s.N, s.C, s.HW);
          REQUIRE(by.get(at, bytes) == encode(want_relu, math));
          nn::cuda::detail::launchBnReluMask(bx.at(at), bdy.at(at), bg.at(at), f, s.N, s.C, s.HW);
          REQUIRE(bg.get(at, bytes) == encode(want_g, math));
          CHECK(by.untouchedAround(at, bytes));
          CHECK(bg.untouchedAround(at, bytes));
          // In place, as inference runs it.
          nn::cuda::detail::launchBnApply(bx.at(at), bx.at(at), f, true, s.N, s.C, s.HW);
          REQUIRE(bx.get(at, bytes) == encode(want_relu, math));
          REQUIRE(cudaGetLastError() == cudaSuccess);
        }
      }
    }
  }
}

}  // namespace
}  // namespace accord::test

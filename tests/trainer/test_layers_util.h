// Helpers for the layer tests: seeded random tensors, a loss that projects a layer's
// output on a fixed random tensor (so dL/dy is that tensor), and a central finite-
// difference check of an analytic gradient against that loss, accumulated in double.
#pragma once

#include "nn/layers.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace accord::nn::test {

using Tensor = std::vector<float>;

inline Tensor randomTensor(size_t n, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t(n);
  for (auto& v : t) v = u(rng);
  return t;
}

// L = sum_i r_i y_i in double.
inline double project(const Tensor& r, const float* y) {
  double s = 0.0;
  for (size_t i = 0; i < r.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

// Finite differences run thousands of tiny forward passes; on one thread each is a
// plain function call, while on several every oneDNN call pays for a fork/join, which a
// busy machine makes slow. Restores the previous setting.
struct SingleThreaded {
  int previous = set_num_threads(1);
  ~SingleThreaded() { set_num_threads(previous); }
};

// Checks analytic[i] against (L(v + h e_i) - L(v - h e_i)) / 2h (v is restored) for
// about max_checks elements of v spread over the whole tensor (all of them when v is
// smaller). loss() runs the forward pass on the current v. Passes when
// |analytic - numeric| <= atol + rtol * |numeric| for each element checked.
inline void checkGradient(const char* name, Tensor& v, const Tensor& analytic,
                          const std::function<double()>& loss, double h, double atol, double rtol,
                          size_t max_checks = 64) {
  REQUIRE(v.size() == analytic.size());
  int failures = 0;
  size_t step = (v.size() + max_checks - 1) / max_checks;
  for (size_t i = step / 2; i < v.size(); i += step) {
    float saved = v[i];
    v[i] = static_cast<float>(saved + h);
    double lp = loss();
    v[i] = static_cast<float>(saved - h);
    double lm = loss();
    v[i] = saved;
    double numeric = (lp - lm) / (2 * h);
    if (std::abs(analytic[i] - numeric) > atol + rtol * std::abs(numeric) && failures++ < 5) {
      INFO(name << "[" << i << "]: analytic " << analytic[i] << " vs numeric " << numeric);
      CHECK(false);
    }
  }
  INFO(name << ": " << failures << " of " << v.size() << " elements off");
  CHECK(failures == 0);
}

// Elementwise |a - b| <= atol + rtol * |b|; reports the first few mismatches.
inline void checkClose(const char* name, const float* a, const std::vector<double>& b, double atol,
                       double rtol) {
  int failures = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::abs(a[i] - b[i]) > atol + rtol * std::abs(b[i]) && failures++ < 5) {
      INFO(name << "[" << i << "]: got " << a[i] << ", expected " << b[i]);
      CHECK(false);
    }
  }
  INFO(name << ": " << failures << " of " << b.size() << " elements off");
  CHECK(failures == 0);
}

}  // namespace accord::nn::test

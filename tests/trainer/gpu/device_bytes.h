// Helpers of the kernel tests that check values bit for bit (test_cuda_elementwise.cc,
// test_cuda_bn_apply.cc): values in a math's storage type as raw bytes, and raw device
// bytes written and read on the layers' stream, at any byte offset.
#pragma once

#include "cudnn_half_util.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

namespace accord::test {

inline const char* nameOfMath(Math m) {
  return m == Math::Bf16 || m == Math::Fp16 ? nameOf(m) : "fp32";
}
inline size_t widthOf(Math m) { return m == Math::Bf16 || m == Math::Fp16 ? 2 : sizeof(float); }

// v in `m`'s storage type, as bytes (rounded to nearest, ties to even).
inline std::vector<unsigned char> encode(const std::vector<float>& v, Math m) {
  std::vector<unsigned char> out(v.size() * widthOf(m));
  for (size_t i = 0; i < v.size(); ++i) {
    if (m == Math::Bf16) {
      const __nv_bfloat16 h = __float2bfloat16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    } else if (m == Math::Fp16) {
      const __half h = __float2half(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    } else {
      std::memcpy(&out[4 * i], &v[i], 4);
    }
  }
  return out;
}

// Storage-type values as float: the exact result a kernel's rounding gives.
inline std::vector<float> stored(const std::vector<float>& v, Math m) {
  return m == Math::Bf16 || m == Math::Fp16 ? rounded(v, m) : v;
}

// Raw device bytes, filled with a sentinel byte, written and read on the layers' stream.
class Bytes {
 public:
  static constexpr unsigned char kSentinel = 0x5a;
  explicit Bytes(size_t n) : n_(n) {
    REQUIRE(cudaMalloc(&p_, n) == cudaSuccess);
    REQUIRE(cudaMemsetAsync(p_, kSentinel, n, nn::cuda::stream()) == cudaSuccess);
  }
  ~Bytes() { cudaFree(p_); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  void put(size_t at, const std::vector<unsigned char>& b) {
    REQUIRE(cudaMemcpyAsync(static_cast<char*>(p_) + at, b.data(), b.size(), cudaMemcpyHostToDevice,
                            nn::cuda::stream()) == cudaSuccess);
    nn::cuda::synchronize();
  }
  std::vector<unsigned char> get(size_t at, size_t bytes) const {
    std::vector<unsigned char> h(bytes);
    nn::cuda::synchronize();
    REQUIRE(cudaMemcpy(h.data(), static_cast<char*>(p_) + at, bytes, cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    return h;
  }
  std::vector<unsigned char> all() const { return get(0, n_); }
  // Whether every byte outside [at, at + bytes) still holds the sentinel.
  bool untouchedAround(size_t at, size_t bytes) const {
    const std::vector<unsigned char> h = all();
    for (size_t i = 0; i < n_; ++i)
      if ((i < at || i >= at + bytes) && h[i] != kSentinel) return false;
    return true;
  }
  float* at(size_t byte) const { return reinterpret_cast<float*>(static_cast<char*>(p_) + byte); }

 private:
  void* p_ = nullptr;
  size_t n_;
};

}  // namespace accord::test

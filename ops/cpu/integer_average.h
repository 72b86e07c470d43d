// Average's division of 64-bit integers, shared by the host kernels (loops.h) and the
// device kernels (ops/cuda/kernels.cu) so that both round every value the same way.
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__CUDACC__)
#define ACCORD_HOST_DEVICE __host__ __device__
#else
#define ACCORD_HOST_DEVICE
#endif

namespace accord::cpu {

// Whether scaling values of `value_size` bytes by factor / divisor is a division alone
// by a whole number, done in integers: through double, a 64-bit value above 2^53 would
// lose its low bits.
inline bool dividesAsIntegers(std::size_t value_size, double factor, double divisor) {
  return value_size == 8 && factor == 1.0 && divisor >= 1.0 && divisor <= 0x1p53 &&
         divisor == std::floor(divisor);
}

// x / d rounded half away from zero, as the path through double rounds (d >= 1).
template <class T>
ACCORD_HOST_DEVICE T divideRounded(T x, T d) {
  const T q = x / d, r = x % d;
  const T twice = r < 0 ? -2 * r : 2 * r;
  if (twice < d) return q;
  return x < 0 ? q - 1 : q + 1;
}

}  // namespace accord::cpu

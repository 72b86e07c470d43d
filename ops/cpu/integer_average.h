// How integer tensors are scaled (Average's division by the set size, prescale and
// postscale), shared by the host kernels (loops.h) and the device kernels
// (ops/cuda/kernels.cu) so that both give every element the same value.
//
// Horovod's integers: scaled in double and truncated toward zero, which is what a
// script written for Horovod (and Horovod's own tests) expect: [1, 2, 3] and [2, 4, 6]
// on two ranks average to [1, 3, 4]. A division alone by a whole number (Average
// without scale factors) is done in integers, where Horovod multiplies by 1.0 / size:
// exact, where 49 * (1.0 / 49) would truncate to 0, and exact for int64 values past
// 2^53 that a double cannot hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define ACCORD_HOST_DEVICE __host__ __device__
#else
#define ACCORD_HOST_DEVICE
#endif

namespace accord::cpu {

// Whether scaling by factor / divisor is a division alone by a whole number, done in
// integers (divideTruncated).
inline bool dividesAsIntegers(double factor, double divisor) {
  return factor == 1.0 && divisor >= 1.0 && divisor <= 0x1p53 &&
         divisor == static_cast<double>(static_cast<std::int64_t>(divisor));
}

// x / d truncated toward zero (d >= 1), in int64 so that a divisor larger than T holds
// (a set of 300 ranks averaging int8) still divides.
template <class T>
ACCORD_HOST_DEVICE T divideTruncated(T x, std::int64_t d) {
  return static_cast<T>(static_cast<std::int64_t>(x) / d);
}

// x * factor / divisor in double, truncated toward zero and saturated to T's range
// (NaN: 0). The conversion of a double inside the range truncates by definition.
template <class T>
ACCORD_HOST_DEVICE T scaleTruncated(T x, double factor, double divisor) {
  using L = std::numeric_limits<T>;
  const double y = static_cast<double>(x) * factor / divisor;
  if (y != y) return T{0};
  if (y <= static_cast<double>(L::lowest())) return L::lowest();
  // For int64, max() rounds up to 2^63 in double, so ">=" also catches exactly 2^63.
  if (y >= static_cast<double>(L::max())) return L::max();
  return static_cast<T>(y);
}

}  // namespace accord::cpu

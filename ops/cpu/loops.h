// The element loops under the host kernels (kernels.cc): one dtype, one op, no calls
// inside, written so that the compiler vectorizes them. reduceBlock and scaleBlock
// are what the kernels call: for float32 and float64 they go to copies of the loops
// compiled for each vector width (loops.cc), for the other dtypes to the loops here.
#pragma once

#include <accord/accord.h>
#include <accord/error.h>

#include "ops/cpu/integer_average.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace accord::cpu::loops {

// Integer Sum/Product in the unsigned type: wraps instead of signed-overflow UB.
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class T>
T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// acc[i] = op(acc[i], in[i]), or with kIntoIn the same value stored in in[i] instead
// (the accumulator then stays as it was).
template <class T, bool kIntoIn = false>
[[gnu::always_inline]] inline void reduceLoop(
    std::conditional_t<kIntoIn, const T, T>* __restrict acc,
    std::conditional_t<kIntoIn, T, const T>* __restrict in, std::size_t n, ReduceOp op) {
  auto each = [&](auto combine) {
    for (std::size_t i = 0; i < n; ++i) {
      const T r = combine(acc[i], in[i]);
      if constexpr (kIntoIn)
        in[i] = r;
      else
        acc[i] = r;
    }
  };
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      return each([](T a, T x) { return add(a, x); });
    case ReduceOp::Min:
      return each([](T a, T x) { return x < a ? x : a; });
    case ReduceOp::Max:
      return each([](T a, T x) { return a < x ? x : a; });
    case ReduceOp::Product:
      return each([](T a, T x) { return mul(a, x); });
    case ReduceOp::Adasum:
      break;  // not element-wise: ops/cpu/adasum.h
  }
  throw InvalidArgument("cpu kernel: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

template <class T>
[[gnu::always_inline]] inline void scaleLoop(T* data, std::size_t n, double factor,
                                             double divisor) {
  if constexpr (std::is_floating_point_v<T>) {
    // As Horovod scales (and so as scripts and Horovod's tests expect): a scale factor
    // is rounded to T and multiplies in T, and so does factor / divisor where both are
    // given. A divisor alone (Average) divides in T, correctly rounded, where Horovod
    // multiplies by 1 / divisor: the exact average of equal values is that value.
    const T f = static_cast<T>(factor), d = static_cast<T>(divisor);
    // Dividing by a power of two and multiplying by its reciprocal both round the same
    // real number once, so they agree bit for bit; the multiply is several times
    // faster (Average over 2, 4, 8 ... ranks).
    int exponent = 0;
    const bool power_of_two = std::frexp(divisor, &exponent) == 0.5 && divisor > 0;
    const T reciprocal = static_cast<T>(1.0 / divisor);
    if (divisor == 1.0) {
      for (std::size_t i = 0; i < n; ++i) data[i] *= f;
    } else if (factor == 1.0 && power_of_two && static_cast<double>(reciprocal) == 1.0 / divisor &&
               std::isnormal(reciprocal)) {
      for (std::size_t i = 0; i < n; ++i) data[i] *= reciprocal;
    } else if (factor == 1.0 && static_cast<double>(d) == divisor) {
      for (std::size_t i = 0; i < n; ++i) data[i] /= d;
    } else {
      const T fd = static_cast<T>(factor / divisor);
      for (std::size_t i = 0; i < n; ++i) data[i] *= fd;
    }
  } else {
    // Integers as Horovod scales them, truncated toward zero (integer_average.h).
    if (dividesAsIntegers(factor, divisor)) {
      const auto d = static_cast<std::int64_t>(divisor);
      for (std::size_t i = 0; i < n; ++i) data[i] = divideTruncated(data[i], d);
      return;
    }
    for (std::size_t i = 0; i < n; ++i) data[i] = scaleTruncated(data[i], factor, divisor);
  }
}

// Bool (one byte, 0 or 1): Sum, Average and Max are logical or; Min and Product
// logical and. Only 0 and 1 ever come out, whatever the inputs hold besides.
template <bool kIntoIn = false>
[[gnu::always_inline]] inline void reduceLogicalLoop(
    std::conditional_t<kIntoIn, const std::uint8_t, std::uint8_t>* __restrict acc,
    std::conditional_t<kIntoIn, std::uint8_t, const std::uint8_t>* __restrict in, std::size_t n,
    ReduceOp op) {
  const bool any = op == ReduceOp::Sum || op == ReduceOp::Average || op == ReduceOp::Max;
  for (std::size_t i = 0; i < n; ++i) {
    const bool a = acc[i] != 0, x = in[i] != 0;
    const std::uint8_t r = any ? (a || x) : (a && x);
    if constexpr (kIntoIn)
      in[i] = r;
    else
      acc[i] = r;
  }
}

// The float32 and float64 loops, compiled once per x86-64 vector width (loops.cc).
void reduceF32(float* acc, const float* in, std::size_t n, ReduceOp op);
void reduceF64(double* acc, const double* in, std::size_t n, ReduceOp op);
void reduceIntoF32(const float* acc, float* in, std::size_t n, ReduceOp op);
void reduceIntoF64(const double* acc, double* in, std::size_t n, ReduceOp op);
void scaleF32(float* data, std::size_t n, double factor, double divisor);
void scaleF64(double* data, std::size_t n, double factor, double divisor);

// reduceLoop and scaleLoop, through the per-width copies where there are some.
template <class T, bool kIntoIn = false>
void reduceBlock(std::conditional_t<kIntoIn, const T, T>* acc,
                 std::conditional_t<kIntoIn, T, const T>* in, std::size_t n, ReduceOp op) {
  if constexpr (std::is_same_v<T, float> && kIntoIn)
    reduceIntoF32(acc, in, n, op);
  else if constexpr (std::is_same_v<T, float>)
    reduceF32(acc, in, n, op);
  else if constexpr (std::is_same_v<T, double> && kIntoIn)
    reduceIntoF64(acc, in, n, op);
  else if constexpr (std::is_same_v<T, double>)
    reduceF64(acc, in, n, op);
  else
    reduceLoop<T, kIntoIn>(acc, in, n, op);
}

template <class T>
void scaleBlock(T* data, std::size_t n, double factor, double divisor) {
  if constexpr (std::is_same_v<T, float>)
    scaleF32(data, n, factor, divisor);
  else if constexpr (std::is_same_v<T, double>)
    scaleF64(data, n, factor, divisor);
  else
    scaleLoop(data, n, factor, divisor);
}

}  // namespace accord::cpu::loops

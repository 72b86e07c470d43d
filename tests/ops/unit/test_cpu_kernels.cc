// Element-wise CPU kernels: every dtype x op against expectations computed another way.
//
// 16-bit floats are checked against a reference rounding written with double and
// std::nearbyint (ties-to-even), independent of the bit tricks in half.h. A sum or
// product of two 16-bit values is exact in double, so rounding it once is the correctly
// rounded answer the kernels must produce.
#include "ops/cpu/half.h"
#include "ops/cpu/kernels.h"
#include "ops/common/fusion_buffer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace accord;
using namespace accord::cpu;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rounds x to a binary float with `mant` stored mantissa bits and exponent bias `bias`
// (float16: 10, 15; bfloat16: 7, 127); returns the bit pattern.
std::uint16_t refRound(double x, int mant, int bias) {
  const int exp_bits = 15 - mant;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const std::uint16_t inf = static_cast<std::uint16_t>(((1 << exp_bits) - 1) << mant);
  if (std::isnan(x)) return sign | inf | (1 << (mant - 1));
  double a = std::fabs(x);
  const int min_exp = 1 - bias;  // exponent of the smallest normal
  int e = a == 0 ? min_exp : std::ilogb(a);
  if (e < min_exp) e = min_exp;  // subnormal: fixed quantum
  double q = std::nearbyint(std::ldexp(a, mant - e));
  if (q >= std::ldexp(1.0, mant + 1)) q /= 2, ++e;  // rounding carried into the next binade
  if (e + bias >= (1 << exp_bits) - 1) return sign | inf;
  const bool normal = q >= std::ldexp(1.0, mant);
  const std::uint32_t field = normal ? (e + bias) : 0;
  const std::uint32_t frac = static_cast<std::uint32_t>(q) & ((1u << mant) - 1);
  return static_cast<std::uint16_t>(sign | (field << mant) | frac);
}
std::uint16_t refHalf(double x) { return refRound(x, 10, 15); }
std::uint16_t refBf16(double x) { return refRound(x, 7, 127); }

double refDecode(std::uint16_t h, int mant, int bias) {
  const int exp_bits = 15 - mant;
  const int field = (h >> mant) & ((1 << exp_bits) - 1);
  const int frac = h & ((1 << mant) - 1);
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (field == (1 << exp_bits) - 1) return frac ? std::nan("") : sign * kInf;
  if (field == 0) return sign * std::ldexp(frac, 1 - bias - mant);
  return sign * std::ldexp(frac + (1 << mant), field - bias - mant);
}
double refHalfValue(std::uint16_t h) { return refDecode(h, 10, 15); }
double refBf16Value(std::uint16_t h) { return refDecode(h, 7, 127); }

template <class T>
std::vector<T> randomValues(std::size_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::is_integral_v<T> ? std::round(d(rng)) : d(rng));
  return v;
}

// Expected op(a, b) for integers, computed in a wider type and wrapped modulo 2^bits.
template <class T>
T refInt(T a, T b, ReduceOp op) {
  using W = std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return static_cast<T>(static_cast<std::uint64_t>(W(a)) + W(b));
    case ReduceOp::Min: return a < b ? a : b;
    case ReduceOp::Max: return a > b ? a : b;
    case ReduceOp::Product: return static_cast<T>(static_cast<std::uint64_t>(W(a)) * W(b));
  }
  return 0;
}

double refReal(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return a + b;
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
    case ReduceOp::Product: return a * b;
  }
  return 0;
}

const DType kDTypes[] = {DType::UInt8,   DType::Int8,     DType::Int16,   DType::UInt16,
                         DType::Int32,   DType::Int64,    DType::Float16, DType::BFloat16,
                         DType::Float32, DType::Float64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max,
                         ReduceOp::Product};
// Small sizes stay on one thread; 300'007 elements cross the parallel grain with a tail.
const std::size_t kSizes[] = {0, 1, 17, 1000, 300'007};

template <class T>
void checkIntReduce(DType dtype, double lo, double hi) {
  std::mt19937 rng(42);
  for (ReduceOp op : kOps)
    for (std::size_t n : kSizes) {
      auto a = randomValues<T>(n, rng, lo, hi), b = randomValues<T>(n, rng, lo, hi);
      auto expect = a;
      for (std::size_t i = 0; i < n; ++i) expect[i] = refInt(a[i], b[i], op);
      reduce(a.data(), b.data(), n, dtype, op);
      INFO(dtype_name(dtype) << " " << reduce_op_name(op) << " n=" << n);
      CHECK(a == expect);
    }
}

template <class T>
void checkFloatReduce(DType dtype) {
  std::mt19937 rng(7);
  for (ReduceOp op : kOps)
    for (std::size_t n : kSizes) {
      auto a = randomValues<T>(n, rng, -100, 100), b = randomValues<T>(n, rng, -100, 100);
      auto expect = a;
      for (std::size_t i = 0; i < n; ++i)
        expect[i] = static_cast<T>(refReal(a[i], b[i], op));  // exact in double, one rounding
      reduce(a.data(), b.data(), n, dtype, op);
      INFO(dtype_name(dtype) << " " << reduce_op_name(op) << " n=" << n);
      CHECK(a == expect);
    }
}

template <class Encode, class Decode>
void checkHalfReduce(DType dtype, Encode encode, Decode decode) {
  std::mt19937 rng(3);
  for (ReduceOp op : kOps)
    for (std::size_t n : kSizes) {
      std::vector<std::uint16_t> a(n), b(n), expect(n);
      std::uniform_real_distribution<double> d(-300, 300);
      for (std::size_t i = 0; i < n; ++i) a[i] = encode(d(rng)), b[i] = encode(d(rng));
      for (std::size_t i = 0; i < n; ++i)
        expect[i] = encode(refReal(decode(a[i]), decode(b[i]), op));
      reduce(a.data(), b.data(), n, dtype, op);
      INFO(dtype_name(dtype) << " " << reduce_op_name(op) << " n=" << n);
      CHECK(a == expect);
    }
}

}  // namespace

TEST_CASE("float16 conversion matches the reference for every bit pattern", "[kernels]") {
  std::vector<std::uint16_t> all(65536), back(65536);
  std::vector<float> wide(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<std::uint16_t>(h);
  halfToFloat(all.data(), wide.data(), all.size());  // block path (F16C where present)
  floatToHalf(wide.data(), back.data(), wide.size());
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const double ref = refHalfValue(all[h]);
    const float scalar = halfToFloat(all[h]);
    if (std::isnan(ref)) {
      mismatches += !std::isnan(wide[h]) || !std::isnan(scalar) || (back[h] & 0x7FFF) <= 0x7C00;
      continue;
    }
    mismatches += wide[h] != ref || scalar != ref || back[h] != all[h] || floatToHalf(scalar) != all[h];
  }
  CHECK(mismatches == 0);
}

TEST_CASE("float16 rounding: ties to even, subnormals, overflow", "[kernels]") {
  CHECK(floatToHalf(1.0f) == 0x3C00);
  CHECK(floatToHalf(1.0f + 0x1p-11f) == 0x3C00);      // tie between 1 and 1+2^-10 -> even
  CHECK(floatToHalf(1.0f + 3 * 0x1p-11f) == 0x3C02);  // tie -> even (upwards)
  CHECK(floatToHalf(65504.0f) == 0x7BFF);             // largest finite
  CHECK(floatToHalf(65519.0f) == 0x7BFF);
  CHECK(floatToHalf(65520.0f) == 0x7C00);             // rounds to infinity
  CHECK(floatToHalf(0x1p-24f) == 0x0001);             // smallest subnormal
  CHECK(floatToHalf(0x1p-25f) == 0x0000);             // tie -> even (zero)
  CHECK(floatToHalf(0x1.8p-25f) == 0x0001);
  CHECK(floatToHalf(-0.0f) == 0x8000);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> mag(-30, 17);
  std::vector<float> in(100'000);
  std::vector<std::uint16_t> out(in.size());
  for (auto& x : in) x = static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(mag(rng)));
  floatToHalf(in.data(), out.data(), in.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < in.size(); ++i)
    mismatches += out[i] != refHalf(in[i]) || floatToHalf(in[i]) != refHalf(in[i]);
  CHECK(mismatches == 0);
}

TEST_CASE("bfloat16 conversion rounds to nearest even", "[kernels]") {
  CHECK(floatToBfloat16(1.0f) == 0x3F80);
  CHECK(floatToBfloat16(1.0f + 0x1p-8f) == 0x3F80);      // tie -> even
  CHECK(floatToBfloat16(1.0f + 3 * 0x1p-8f) == 0x3F82);  // tie -> even (upwards)
  CHECK(floatToBfloat16(std::numeric_limits<float>::max()) == 0x7F80);  // overflows to inf
  CHECK(std::isnan(bfloat16ToFloat(floatToBfloat16(std::nanf("")))));
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> mag(-120, 120);
  int mismatches = 0;
  for (int i = 0; i < 100'000; ++i) {
    const float x = static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(mag(rng)));
    const std::uint16_t b = floatToBfloat16(x);
    mismatches += b != refBf16(x) || bfloat16ToFloat(b) != refBf16Value(b);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("reduce: integers wrap and compare for every op", "[kernels]") {
  checkIntReduce<std::uint8_t>(DType::UInt8, 0, 255);
  checkIntReduce<std::int8_t>(DType::Int8, -128, 127);
  checkIntReduce<std::int32_t>(DType::Int32, -3e9 / 2, 3e9 / 2);
  checkIntReduce<std::int64_t>(DType::Int64, -9e18, 9e18);
}

TEST_CASE("reduce: float32 and float64 for every op", "[kernels]") {
  checkFloatReduce<float>(DType::Float32);
  checkFloatReduce<double>(DType::Float64);
}

TEST_CASE("reduce: float16 and bfloat16 are correctly rounded for every op", "[kernels]") {
  checkHalfReduce(DType::Float16, refHalf, refHalfValue);
  checkHalfReduce(DType::BFloat16, refBf16, refBf16Value);
  // 2048 + 1 is a tie in float16 (spacing 2 above 2048): stays 2048 (even).
  std::uint16_t acc = refHalf(2048), one = refHalf(1);
  reduce(&acc, &one, 1, DType::Float16, ReduceOp::Sum);
  CHECK(acc == refHalf(2048));
  acc = refHalf(60000), one = refHalf(60000);
  reduce(&acc, &one, 1, DType::Float16, ReduceOp::Sum);
  CHECK(acc == 0x7C00);  // overflow to +inf
}

TEST_CASE("scale: integers truncate toward zero, as Horovod's, and saturate", "[kernels]") {
  std::vector<std::int32_t> v = {5, -5, 7, -7, 1, 0, 2'000'000'000};
  scale(v.data(), v.size(), DType::Int32, 0.5);
  CHECK(v == std::vector<std::int32_t>{2, -2, 3, -3, 0, 0, 1'000'000'000});
  // Average of a sum over 3 ranks: an integer division, 8/3 -> 2, -8/3 -> -2.
  std::vector<std::int64_t> w = {7, 8, -8, 9, 3};
  scale(w.data(), w.size(), DType::Int64, 1.0, 3.0);
  CHECK(w == std::vector<std::int64_t>{2, 2, -2, 3, 1});
  // Exact where Horovod's multiply by 1.0 / 49 is not (49 * (1.0 / 49) < 1), for every
  // integer width, and a divisor wider than the type (300 ranks averaging int8).
  std::vector<std::int32_t> i32 = {49, -49, 98};
  scale(i32.data(), i32.size(), DType::Int32, 1.0, 49.0);
  CHECK(i32 == std::vector<std::int32_t>{1, -1, 2});
  std::vector<std::int8_t> i8 = {127, -128, 5};
  scale(i8.data(), i8.size(), DType::Int8, 1.0, 300.0);
  CHECK(i8 == std::vector<std::int8_t>{0, 0, 0});
  scale(i8.data(), i8.size(), DType::Int8, 1.0, 1.0);  // factor and divisor 1: unchanged
  std::vector<std::int16_t> i16 = {-32768, 32767, -7};
  scale(i16.data(), i16.size(), DType::Int16, 1.0, 2.0);
  CHECK(i16 == std::vector<std::int16_t>{-16384, 16383, -3});
  std::vector<std::uint16_t> u16 = {65535, 7};
  scale(u16.data(), u16.size(), DType::UInt16, 1.0, 2.0);
  CHECK(u16 == std::vector<std::uint16_t>{32767, 3});
  scale(u16.data(), u16.size(), DType::UInt16, 3.0);
  CHECK(u16 == std::vector<std::uint16_t>{65535, 9});
  // A scale factor with the division: in double, then truncated (Horovod's postscale
  // of an Average: 0.5 / 2 ranks).
  std::vector<std::int32_t> post = {7, -7, 9};
  scale(post.data(), post.size(), DType::Int32, 0.5, 2.0);
  CHECK(post == std::vector<std::int32_t>{1, -1, 2});
  // ... and exact beyond 2^53, where a double holds only every other integer.
  constexpr std::int64_t kBig = (std::int64_t{1} << 53) + 1;
  std::vector<std::int64_t> exact = {2 * kBig, -2 * kBig, 3 * kBig,
                                     std::numeric_limits<std::int64_t>::min(),
                                     std::numeric_limits<std::int64_t>::max()};
  scale(exact.data(), exact.size(), DType::Int64, 1.0, 2.0);
  CHECK(exact == std::vector<std::int64_t>{kBig, -kBig, 3 * kBig / 2,
                                           std::numeric_limits<std::int64_t>::min() / 2,
                                           std::numeric_limits<std::int64_t>::max() / 2});
  std::vector<std::int8_t> s = {100, -100, 3};
  scale(s.data(), s.size(), DType::Int8, 2.0);
  CHECK(s == std::vector<std::int8_t>{127, -128, 6});
  std::vector<std::uint8_t> u = {10, 200};
  scale(u.data(), u.size(), DType::UInt8, -1.0);
  CHECK(u == std::vector<std::uint8_t>{0, 0});
  scale(u.data(), 0, DType::UInt8, 5.0);  // size 0 is a no-op
  std::vector<std::int64_t> big = {std::numeric_limits<std::int64_t>::max() / 2};
  scale(big.data(), 1, DType::Int64, 4.0);
  CHECK(big[0] == std::numeric_limits<std::int64_t>::max());
  std::vector<std::uint8_t> flags = {0, 1};
  CHECK_THROWS_AS(scale(flags.data(), flags.size(), DType::Bool, 2.0), InvalidArgument);
}

TEST_CASE("reduce: int16 and uint16 wrap; bool is logic", "[kernels]") {
  std::vector<std::int16_t> a = {32767, -5, 3}, b = {1, -7, -3};
  reduce(a.data(), b.data(), a.size(), DType::Int16, ReduceOp::Sum);
  CHECK(a == std::vector<std::int16_t>{-32768, -12, 0});
  std::vector<std::uint16_t> c = {65535, 9}, d = {2, 4};
  reduce(c.data(), d.data(), c.size(), DType::UInt16, ReduceOp::Max);
  CHECK(c == std::vector<std::uint16_t>{65535, 9});
  reduce(c.data(), d.data(), c.size(), DType::UInt16, ReduceOp::Min);
  CHECK(c == std::vector<std::uint16_t>{2, 4});
  const std::vector<std::uint8_t> x = {0, 0, 1, 1}, y = {0, 1, 0, 1};
  for (auto [op, expected] : {std::pair{ReduceOp::Sum, std::vector<std::uint8_t>{0, 1, 1, 1}},
                              {ReduceOp::Max, {0, 1, 1, 1}},
                              {ReduceOp::Min, {0, 0, 0, 1}},
                              {ReduceOp::Product, {0, 0, 0, 1}}}) {
    auto acc = x;
    reduce(acc.data(), y.data(), acc.size(), DType::Bool, op);
    INFO(reduce_op_name(op));
    CHECK(acc == expected);
    std::uint8_t neutral = 7;
    fillNeutral(&neutral, 1, DType::Bool, op);
    CHECK(neutral == (op == ReduceOp::Min || op == ReduceOp::Product ? 1 : 0));
  }
}

TEST_CASE("scale: floating point, including the parallel path", "[kernels]") {
  std::mt19937 rng(5);
  for (std::size_t n : kSizes) {
    auto f = randomValues<float>(n, rng, -1e3, 1e3);
    auto d = randomValues<double>(n, rng, -1e3, 1e3);
    auto ef = f;
    auto ed = d;
    // As Horovod: the factor rounded to float, the product in float (not in double).
    for (auto& x : ef) x = x * 0.1f;
    for (auto& x : ed) x = x * (3.0 / 7.0);
    scale(f.data(), n, DType::Float32, 0.1);
    scale(d.data(), n, DType::Float64, 3.0, 7.0);
    CHECK(f == ef);
    CHECK(d == ed);
    auto both = randomValues<float>(n, rng, -1e3, 1e3);
    auto eboth = both;
    for (auto& x : eboth) x = x * static_cast<float>(0.3 / 3.0);
    scale(both.data(), n, DType::Float32, 0.3, 3.0);
    CHECK(both == eboth);
  }
  // 1.37f * 0.1 is 0.13700001f through float and 0.137f through double: Horovod's is
  // the first.
  float differs = 1.37f;
  scale(&differs, 1, DType::Float32, 0.1);
  CHECK(differs == 1.37f * 0.1f);
  CHECK(differs != static_cast<float>(double(1.37f) * 0.1));
  // A divisor alone (Average) is a correctly rounded division, the same as in double.
  for (std::size_t n : kSizes) {
    auto f = randomValues<float>(n, rng, -1e3, 1e3);
    auto half = f, third = f;
    scale(half.data(), n, DType::Float32, 0.5);
    scale(third.data(), n, DType::Float32, 1.0, 3.0);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(half[i] == static_cast<float>(double(f[i]) * 0.5));
      REQUIRE(third[i] == static_cast<float>(double(f[i]) / 3.0));
    }
  }
  // A power-of-two divisor (Average over 2, 4, 8 ranks) is done as a multiply by its
  // reciprocal: still exactly the division's result, subnormal results included.
  for (double divisor : {2.0, 4.0, 8.0, 1024.0}) {
    std::vector<float> f = {1e-38f, -3e-39f, 1.4e-45f, 7.0f, -1.0f / 3.0f, 3.4e38f};
    std::vector<double> d = {1e-308, -4.9e-324, 3.0, 1.0 / 7.0, -1.7e308};
    for (auto x : randomValues<float>(1000, rng, -1e3, 1e3)) f.push_back(x), d.push_back(x / 7.0);
    auto ef = f;
    auto ed = d;
    for (auto& x : ef) x = static_cast<float>(double(x) / divisor);
    volatile double v = divisor;  // a real division, not one the compiler rewrote
    for (auto& x : ed) x = x / v;
    scale(f.data(), f.size(), DType::Float32, 1.0, divisor);
    scale(d.data(), d.size(), DType::Float64, 1.0, divisor);
    for (std::size_t i = 0; i < f.size(); ++i) {
      INFO("float #" << i << " / " << divisor);
      REQUIRE(std::memcmp(&f[i], &ef[i], sizeof(float)) == 0);
    }
    for (std::size_t i = 0; i < d.size(); ++i) {
      INFO("double #" << i << " / " << divisor);
      REQUIRE(std::memcmp(&d[i], &ed[i], sizeof(double)) == 0);
    }
  }
  // 16-bit: factors exact in 16 bits make the product exact in double, one rounding.
  for (double factor : {0.5, 3.0, 0.25, 1.5}) {
    std::vector<std::uint16_t> h(1000), b(1000), eh(1000), eb(1000);
    std::uniform_real_distribution<double> dist(-2000, 2000);
    for (std::size_t i = 0; i < h.size(); ++i) {
      h[i] = refHalf(dist(rng)), b[i] = refBf16(dist(rng));
      eh[i] = refHalf(refHalfValue(h[i]) * factor);
      eb[i] = refBf16(refBf16Value(b[i]) * factor);
    }
    scale(h.data(), h.size(), DType::Float16, factor);
    scale(b.data(), b.size(), DType::BFloat16, factor);
    CHECK(h == eh);
    CHECK(b == eb);
  }
}

TEST_CASE("fillNeutral writes each op's identity for every dtype", "[kernels]") {
  auto fill = [](DType dtype, ReduceOp op, auto value) {
    std::vector<decltype(value)> v(300'001);
    fillNeutral(v.data(), v.size(), dtype, op);
    INFO(dtype_name(dtype) << " " << reduce_op_name(op));
    CHECK(v.front() == value);
    CHECK(v.back() == value);
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
    fill(DType::Int32, op, std::int32_t{0});
    fill(DType::Float32, op, 0.0f);
    fill(DType::Float16, op, std::uint16_t{0});
  }
  fill(DType::UInt8, ReduceOp::Min, std::uint8_t{255});
  fill(DType::UInt8, ReduceOp::Max, std::uint8_t{0});
  fill(DType::Int8, ReduceOp::Min, std::int8_t{127});
  fill(DType::Int8, ReduceOp::Max, std::int8_t{-128});
  fill(DType::Int64, ReduceOp::Max, std::numeric_limits<std::int64_t>::min());
  fill(DType::Int64, ReduceOp::Product, std::int64_t{1});
  fill(DType::Float32, ReduceOp::Min, inf);
  fill(DType::Float64, ReduceOp::Max, -std::numeric_limits<double>::infinity());
  fill(DType::Float64, ReduceOp::Product, 1.0);
  fill(DType::Float16, ReduceOp::Min, std::uint16_t{0x7C00});
  fill(DType::Float16, ReduceOp::Max, std::uint16_t{0xFC00});
  fill(DType::Float16, ReduceOp::Product, std::uint16_t{0x3C00});
  fill(DType::BFloat16, ReduceOp::Min, std::uint16_t{0x7F80});
  fill(DType::BFloat16, ReduceOp::Max, std::uint16_t{0xFF80});
  fill(DType::BFloat16, ReduceOp::Product, std::uint16_t{0x3F80});
}

TEST_CASE("reducing with the neutral element leaves values unchanged", "[kernels]") {
  std::mt19937 rng(9);
  for (ReduceOp op : kOps) {
    auto x = randomValues<float>(1000, rng, -1e6, 1e6);
    auto i8 = randomValues<std::int8_t>(1000, rng, -128, 127);
    std::vector<float> nf(1000);
    std::vector<std::int8_t> ni(1000);
    fillNeutral(nf.data(), nf.size(), DType::Float32, op);
    fillNeutral(ni.data(), ni.size(), DType::Int8, op);
    auto ex = x;
    auto ei = i8;
    reduce(x.data(), nf.data(), x.size(), DType::Float32, op);
    reduce(i8.data(), ni.data(), i8.size(), DType::Int8, op);
    CHECK(x == ex);
    CHECK(i8 == ei);
  }
}

// Random values of `dtype` that no op turns into NaN: small integers, floats in
// [-4, 4] (a product of three stays far from overflow).
std::vector<unsigned char> randomBytes(DType dtype, std::size_t n, std::mt19937& rng) {
  std::vector<unsigned char> out(n * dtype_size(dtype));
  std::uniform_real_distribution<double> d(-4, 4);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = d(rng);
    unsigned char* at = out.data() + i * dtype_size(dtype);
    auto put = [&](auto v) { std::memcpy(at, &v, sizeof v); };
    switch (dtype) {
      case DType::UInt8: put(static_cast<std::uint8_t>(std::fabs(x) * 10)); break;
      case DType::Int8: put(static_cast<std::int8_t>(x * 10)); break;
      case DType::Int32: put(static_cast<std::int32_t>(x * 1e6)); break;
      case DType::Int64: put(static_cast<std::int64_t>(x * 1e12)); break;
      case DType::Float16: put(refHalf(x)); break;
      case DType::BFloat16: put(refBf16(x)); break;
      case DType::Float32: put(static_cast<float>(x)); break;
      case DType::Float64: put(x); break;
      case DType::Int16: put(static_cast<std::int16_t>(x * 1e3)); break;
      case DType::UInt16: put(static_cast<std::uint16_t>(std::fabs(x) * 1e3)); break;
      case DType::Bool: put(static_cast<std::uint8_t>(x > 0)); break;
    }
  }
  return out;
}

TEST_CASE("reduceScaleMirror equals reduce per input, then scale, then a copy", "[kernels]") {
  std::mt19937 rng(13);
  struct Factors {
    double factor, divisor;
  };
  // 8191 crosses the 8 KiB block for 1-byte types with a tail; 300'007 the parallel grain.
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8191}, std::size_t{300'007}})
    for (DType dtype : kDTypes)
      for (ReduceOp op : kOps)
        for (int inputs : {1, 3})
          for (Factors f : {Factors{1, 1}, Factors{1, 3}, Factors{0.5, 1}}) {
            auto acc = randomBytes(dtype, n, rng);
            std::vector<std::vector<unsigned char>> ins;
            std::vector<const void*> ptrs;
            for (int k = 0; k < inputs; ++k) ins.push_back(randomBytes(dtype, n, rng));
            for (auto& in : ins) ptrs.push_back(in.data());
            auto expect = acc;
            for (auto& in : ins) reduce(expect.data(), in.data(), n, dtype, op);
            if (f.factor != 1 || f.divisor != 1) scale(expect.data(), n, dtype, f.factor, f.divisor);
            std::vector<unsigned char> mirror(acc.size(), 0xAB);
            reduceScaleMirror(acc.data(), ptrs, n, dtype, op, f.factor, f.divisor, mirror.data());
            INFO(dtype_name(dtype) << " " << reduce_op_name(op) << " n=" << n << " inputs="
                                   << inputs << " factor=" << f.factor << " divisor=" << f.divisor);
            REQUIRE(acc == expect);
            REQUIRE(mirror == expect);
          }
  // Without a mirror only the accumulator changes; with no inputs only the scaling runs.
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  const void* in[] = {b.data()};
  reduceScaleMirror(a.data(), in, a.size(), DType::Float32, ReduceOp::Sum, 1, 2, nullptr);
  CHECK(a == std::vector<float>{5.5f, 11, 16.5f});
  reduceScaleMirror(a.data(), {}, a.size(), DType::Float32, ReduceOp::Sum, 2, 1, nullptr);
  CHECK(a == std::vector<float>{11, 22, 33});
}

TEST_CASE("reduceScaleInto gives reduceScaleMirror's values in the input's place", "[kernels]") {
  std::mt19937 rng(17);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8191}, std::size_t{300'007}})
    for (DType dtype : kDTypes)
      for (ReduceOp op : kOps)
        for (double divisor : {1.0, 3.0}) {
          const auto acc = randomBytes(dtype, n, rng);
          auto inout = randomBytes(dtype, n, rng);
          auto expect = acc;
          const void* ins[] = {inout.data()};
          reduceScaleMirror(expect.data(), ins, n, dtype, op, 1.0, divisor, nullptr);
          auto acc_after = acc;
          reduceScaleInto(acc_after.data(), inout.data(), n, dtype, op, 1.0, divisor);
          INFO(dtype_name(dtype) << " " << reduce_op_name(op) << " n=" << n
                                 << " divisor=" << divisor);
          REQUIRE(inout == expect);
          REQUIRE(acc_after == acc);
        }
  // The operands keep their order: Min and Max of a NaN and a number, or of +0 and -0,
  // depend on it.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
    std::vector<float> a = {nan, 1.0f, 0.0f, -0.0f}, x = {1.0f, nan, -0.0f, 0.0f};
    auto expect = a;
    reduce(expect.data(), x.data(), a.size(), DType::Float32, op);
    reduceScaleInto(a.data(), x.data(), a.size(), DType::Float32, op, 1.0, 1.0);
    INFO(reduce_op_name(op));
    REQUIRE(std::memcmp(x.data(), expect.data(), sizeof(float) * x.size()) == 0);
  }
}

TEST_CASE("reduceScaleFrom gives reduceScaleMirror's values in a separate output", "[kernels]") {
  std::mt19937 rng(19);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8191}, std::size_t{300'007}})
    for (DType dtype : kDTypes)
      for (ReduceOp op : kOps)
        for (int inputs : {0, 1, 3})
          for (double divisor : {1.0, 3.0}) {
            const auto first = randomBytes(dtype, n, rng);
            std::vector<std::vector<unsigned char>> ins;
            std::vector<const void*> ptrs;
            for (int k = 0; k < inputs; ++k) ins.push_back(randomBytes(dtype, n, rng));
            for (auto& in : ins) ptrs.push_back(in.data());
            auto expect = first;
            reduceScaleMirror(expect.data(), ptrs, n, dtype, op, 1.0, divisor, nullptr);
            auto first_after = first;
            std::vector<unsigned char> out(first.size(), 0xAB);
            reduceScaleFrom(first_after.data(), ptrs, n, dtype, op, 1.0, divisor, out.data());
            INFO(dtype_name(dtype) << " " << reduce_op_name(op) << " n=" << n
                                   << " inputs=" << inputs << " divisor=" << divisor);
            REQUIRE(out == expect);
            REQUIRE(first_after == first);
          }
}

TEST_CASE("parallelCopy moves many pieces of mixed sizes", "[kernels]") {
  std::mt19937 rng(11);
  // 2000 small pieces (some empty, with null pointers) and three of several MiB.
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 2000; ++i) sizes.push_back(rng() % 5000 * (i % 7 != 0));
  sizes.insert(sizes.begin() + 500, 3 << 20);
  sizes.insert(sizes.begin() + 1000, 1 << 20);
  sizes.push_back((5 << 20) + 3);
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  std::vector<unsigned char> src(total), dst(total, 0), expect(total);
  for (auto& c : src) c = static_cast<unsigned char>(rng());
  // Scatter: piece i of src goes to a shuffled position in dst.
  std::vector<std::size_t> order(sizes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::size_t> src_at(sizes.size()), dst_at(sizes.size());
  for (std::size_t i = 0, at = 0; i < sizes.size(); at += sizes[i], ++i) src_at[i] = at;
  for (std::size_t k = 0, at = 0; k < order.size(); at += sizes[order[k]], ++k) dst_at[order[k]] = at;
  std::vector<CopyPiece> pieces;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) {
      pieces.push_back({nullptr, nullptr, 0});
      continue;
    }
    pieces.push_back({dst.data() + dst_at[i], src.data() + src_at[i], sizes[i]});
    std::memcpy(expect.data() + dst_at[i], src.data() + src_at[i], sizes[i]);
  }
  parallelCopy(pieces);
  CHECK(dst == expect);
  parallelCopy({});  // nothing to copy
}

TEST_CASE("FusionBuffer is 64-byte aligned, grows, and is never null", "[kernels]") {
  FusionBuffer buffer;
  char* p = buffer.reserve(0);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  char* q = buffer.reserve(100'000);
  CHECK(buffer.capacity() >= 100'000);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % 64 == 0);
  q[99'999] = 1;
  CHECK(buffer.reserve(50'000) == q);  // fits: no reallocation
  CHECK(alignUp(1) == 64);
  CHECK(alignUp(128) == 128);
}

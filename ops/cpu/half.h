// float16 (IEEE binary16) and bfloat16 <-> float conversion.
//
// The collectives reduce 16-bit floats by widening to float, operating, and rounding
// back to nearest-even. Because float carries 24 significand bits, at least 2p+2 for
// both 16-bit formats (p = 11 and 8), the double rounding of +, * through float is
// innocuous: results equal a correctly rounded 16-bit operation.
//
// The scalar converters are branch-free bit manipulation (after Maratyszcza's FP16
// library) so GCC vectorizes their loops at the baseline ISA. Block converters for
// float16 use the F16C instructions when the running CPU has them (checked once at
// run time): the build must not assume them. bfloat16 needs nothing beyond shifts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace accord::cpu {

inline float bitsToFloat(std::uint32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

inline std::uint32_t floatToBits(float f) {
  std::uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return w;
}

inline float halfToFloat(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;
  // Normal numbers: move exponent and mantissa into place and rebias by 2^-112 with one
  // multiply (which also turns exponent 31 into inf/NaN).
  const float normalized = bitsToFloat((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormals: place the mantissa under the exponent of 0.5 and subtract 0.5.
  const float denormalized = bitsToFloat((two_w >> 17) | (126u << 23)) - 0.5f;
  const std::uint32_t magnitude =
      two_w < (1u << 27) ? floatToBits(denormalized) : floatToBits(normalized);
  return bitsToFloat(sign | magnitude);
}

inline std::uint16_t floatToHalf(float f) {
  // Scaling up then down by powers of two lets the FPU do the rounding to 11 bits
  // (nearest-even) and saturate overflow to infinity.
  float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const std::uint32_t w = floatToBits(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  std::uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = bitsToFloat((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t bits = floatToBits(base);
  const std::uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float bfloat16ToFloat(std::uint16_t h) {
  return bitsToFloat(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t floatToBfloat16(float f) {
  const std::uint32_t w = floatToBits(f);
  const bool nan = (w & 0x7FFFFFFFu) > 0x7F800000u;
  // Round to nearest-even on the 16 dropped bits; a carry into the exponent is the
  // correct overflow to the next binade or to infinity.
  const std::uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  return static_cast<std::uint16_t>(nan ? ((w >> 16) | 0x0040u) : rounded);  // keep NaN quiet
}

// Block converters; the float16 ones pick F16C at run time when the CPU has it.
void halfToFloat(const std::uint16_t* in, float* out, std::size_t n);
void floatToHalf(const float* in, std::uint16_t* out, std::size_t n);
void bfloat16ToFloat(const std::uint16_t* in, float* out, std::size_t n);
void floatToBfloat16(const float* in, std::uint16_t* out, std::size_t n);

}  // namespace accord::cpu

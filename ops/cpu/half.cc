// Block conversion between 16-bit floats and float.
//
// float16 conversion in software costs about ten integer/float operations per element;
// F16C does eight elements in one instruction. The library is built for the baseline
// ISA (it must run on any x86-64), so the F16C path sits in functions compiled for that
// target and is chosen once at run time with __builtin_cpu_supports. Other
// architectures use the portable converters from half.h.
#include "ops/cpu/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ACCORD_HAVE_F16C_PATH 1
#endif

namespace accord::cpu {

#ifdef ACCORD_HAVE_F16C_PATH
namespace {

__attribute__((target("avx,f16c"))) void halfToFloatF16c(const std::uint16_t* in, float* out,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = halfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void floatToHalfF16c(const float* in, std::uint16_t* out,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = floatToHalf(in[i]);
}

// Evaluated once, at first use; __builtin_cpu_supports initializes its own CPU model.
bool hasF16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}

}  // namespace
#endif

void halfToFloat(const std::uint16_t* in, float* out, std::size_t n) {
#ifdef ACCORD_HAVE_F16C_PATH
  if (hasF16c()) return halfToFloatF16c(in, out, n);
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = halfToFloat(in[i]);
}

void floatToHalf(const float* in, std::uint16_t* out, std::size_t n) {
#ifdef ACCORD_HAVE_F16C_PATH
  if (hasF16c()) return floatToHalfF16c(in, out, n);
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = floatToHalf(in[i]);
}

void bfloat16ToFloat(const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = bfloat16ToFloat(in[i]);
}

void floatToBfloat16(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = floatToBfloat16(in[i]);
}

}  // namespace accord::cpu

// Per-width copies of the float32 and float64 loops (see loops.h).
#include "ops/cpu/loops.h"

namespace accord::cpu::loops {

// Gradients are float32 (float64 now and then): their loops are compiled once per x86-64
// vector width, and the dynamic loader binds each to the widest the CPU has: a piece
// that sits in cache (a ring's block, the shared-memory transport's slot) is reduced
// at the core's speed, not the memory's, so the width shows. Element-wise IEEE
// operations give the same bits at every width, so ranks on different CPUs agree.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(ACCORD_NO_SIMD_CLONES)
#define ACCORD_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ACCORD_SIMD_CLONES
#endif

ACCORD_SIMD_CLONES void reduceF32(float* acc, const float* in, std::size_t n, ReduceOp op) {
  reduceLoop<float>(acc, in, n, op);
}
ACCORD_SIMD_CLONES void reduceF64(double* acc, const double* in, std::size_t n, ReduceOp op) {
  reduceLoop<double>(acc, in, n, op);
}
ACCORD_SIMD_CLONES void reduceIntoF32(const float* acc, float* in, std::size_t n, ReduceOp op) {
  reduceLoop<float, true>(acc, in, n, op);
}
ACCORD_SIMD_CLONES void reduceIntoF64(const double* acc, double* in, std::size_t n, ReduceOp op) {
  reduceLoop<double, true>(acc, in, n, op);
}
ACCORD_SIMD_CLONES void scaleF32(float* data, std::size_t n, double factor, double divisor) {
  scaleLoop(data, n, factor, divisor);
}
ACCORD_SIMD_CLONES void scaleF64(double* data, std::size_t n, double factor, double divisor) {
  scaleLoop(data, n, factor, divisor);
}

}  // namespace accord::cpu::loops

// Element-wise kernels on host memory (see kernels.h for the contract).
//
// Every kernel has the same shape: dispatch once on dtype (and op) to a tight loop over
// one C++ type, and let forRanges() split that loop across oneTBB workers when the
// buffer is large. The loops are written so GCC vectorizes them (select instead of
// branches, no calls); the float32 and float64 loops are also compiled for AVX2 and
// AVX-512, and the loader picks the widest this CPU runs (ACCORD_SIMD_CLONES). float16
// and bfloat16 go through float in small stack blocks, with the conversion itself in
// half.cc (F16C when available).
#include "ops/cpu/kernels.h"

#include "ops/cpu/half.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <memory>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace accord::cpu {
namespace {

// Tags for the 16-bit float formats, stored as raw bits.
struct Float16Codec {
  static void toFloat(const std::uint16_t* in, float* out, std::size_t n) { halfToFloat(in, out, n); }
  static void fromFloat(const float* in, std::uint16_t* out, std::size_t n) { floatToHalf(in, out, n); }
  static std::uint16_t fromFloat(float f) { return floatToHalf(f); }
};
struct BFloat16Codec {
  static void toFloat(const std::uint16_t* in, float* out, std::size_t n) { bfloat16ToFloat(in, out, n); }
  static void fromFloat(const float* in, std::uint16_t* out, std::size_t n) { floatToBfloat16(in, out, n); }
  static std::uint16_t fromFloat(float f) { return floatToBfloat16(f); }
};

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Float16Codec> || std::is_same_v<T, BFloat16Codec>;
template <class T>
using Storage = std::conditional_t<kIsHalf<T>, std::uint16_t, T>;

// Calls fn.operator()<T>() with the C++ type (or 16-bit codec) of dtype.
template <class Fn>
void visitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::UInt8: return fn.template operator()<std::uint8_t>();
    case DType::Int8: return fn.template operator()<std::int8_t>();
    case DType::Int32: return fn.template operator()<std::int32_t>();
    case DType::Int64: return fn.template operator()<std::int64_t>();
    case DType::Float16: return fn.template operator()<Float16Codec>();
    case DType::BFloat16: return fn.template operator()<BFloat16Codec>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
  }
  throw InvalidArgument("cpu kernel: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

// Runs body(begin, end) over [0, count). Buffers up to kParallelGrainBytes stay on the
// calling thread: at memory speed that is over ten microseconds of work, an order of
// magnitude above what waking and stealing a oneTBB task costs, so splitting finer
// would spend more on scheduling than it gains. The same grain bounds the
// smallest piece a worker receives for large buffers.
std::atomic<int> g_threads{0};
std::unique_ptr<tbb::task_arena> g_arena;  // set by setThreads() before any kernel runs

template <class Body>
void forRanges(std::size_t count, std::size_t elem_bytes, const Body& body) {
  const std::size_t grain = std::max<std::size_t>(1, kParallelGrainBytes / elem_bytes);
  if (count <= grain || g_threads.load(std::memory_order_relaxed) == 1) {
    body(std::size_t{0}, count);
    return;
  }
  auto run = [&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, grain),
                      [&](const tbb::blocked_range<std::size_t>& r) { body(r.begin(), r.end()); });
  };
  if (g_arena) {
    g_arena->execute(run);
  } else {
    run();
  }
}

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
  }
  throw InvalidArgument("cpu kernel: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

template <class T>
T saturate(double y) {
  using L = std::numeric_limits<T>;
  if (std::isnan(y)) return T{0};
  if (y <= static_cast<double>(L::lowest())) return L::lowest();
  // For int64, max() rounds up to 2^63 in double, so ">=" also catches exactly 2^63.
  if (y >= static_cast<double>(L::max())) return L::max();
  return static_cast<T>(y);
}

template <class T>
[[gnu::always_inline]] inline void scaleLoop(T* data, std::size_t n, double factor,
                                             double divisor) {
  if constexpr (std::is_floating_point_v<T>) {
    // A lone factor or divisor that T holds exactly is applied in T. That is the same
    // correctly rounded result as in double (one operation on two values of T, rounded
    // once, since double has more than 2p + 2 bits), and for float it saves converting
    // every element to double and back, which costs more than the multiply itself.
    const T f = static_cast<T>(factor), d = static_cast<T>(divisor);
    // Dividing by a power of two and multiplying by its reciprocal both round the same
    // real number once, so they agree bit for bit; the multiply is several times
    // faster (Average over 2, 4, 8 ... ranks).
    int exponent = 0;
    const bool power_of_two = std::frexp(divisor, &exponent) == 0.5 && divisor > 0;
    const T reciprocal = static_cast<T>(1.0 / divisor);
    if (divisor == 1.0 && static_cast<double>(f) == factor) {
      for (std::size_t i = 0; i < n; ++i) data[i] *= f;
    } else if (factor == 1.0 && power_of_two && static_cast<double>(reciprocal) == 1.0 / divisor &&
               std::isnormal(reciprocal)) {
      for (std::size_t i = 0; i < n; ++i) data[i] *= reciprocal;
    } else if (factor == 1.0 && static_cast<double>(d) == divisor) {
      for (std::size_t i = 0; i < n; ++i) data[i] /= d;
    } else {
      const double fd = factor / divisor;
      for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] * fd);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i)
      data[i] = saturate<T>(std::round(static_cast<double>(data[i]) * factor / divisor));
  }
}

// Gradients are float32 (float64 now and then): their loops are compiled once per x86-64
// vector width, and the dynamic loader binds each to the widest the CPU has. In cache
// (a ring's or the shared-memory transport's piece) AVX-512 reduces 64K floats in two
// thirds of the SSE2 time. Element-wise IEEE operations give the same bits at every
// width, so ranks on different CPUs still agree.
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

// 16-bit floats: widen a block of each operand to float, reduce, round back. 256
// elements (2 x 1 KiB of floats) stay in L1 next to the operands.
constexpr std::size_t kHalfBlock = 256;

template <class Codec, bool kIntoIn = false>
void reduceHalf(std::conditional_t<kIntoIn, const std::uint16_t, std::uint16_t>* acc,
                std::conditional_t<kIntoIn, std::uint16_t, const std::uint16_t>* in, std::size_t n,
                ReduceOp op) {
  float a[kHalfBlock], b[kHalfBlock];
  for (std::size_t off = 0; off < n; off += kHalfBlock) {
    const std::size_t m = std::min(kHalfBlock, n - off);
    Codec::toFloat(acc + off, a, m);
    Codec::toFloat(in + off, b, m);
    reduceBlock<float>(a, b, m, op);
    if constexpr (kIntoIn)
      Codec::fromFloat(a, in + off, m);
    else
      Codec::fromFloat(a, acc + off, m);
  }
}

template <class Codec>
void scaleHalf(std::uint16_t* data, std::size_t n, float f) {
  float a[kHalfBlock];
  for (std::size_t off = 0; off < n; off += kHalfBlock) {
    const std::size_t m = std::min(kHalfBlock, n - off);
    Codec::toFloat(data + off, a, m);
    for (std::size_t i = 0; i < m; ++i) a[i] *= f;
    Codec::fromFloat(a, data + off, m);
  }
}

template <class T>
T neutral(ReduceOp op) {
  using L = std::numeric_limits<T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      return T{0};
    case ReduceOp::Min:
      return L::has_infinity ? L::infinity() : L::max();
    case ReduceOp::Max:
      return L::has_infinity ? -L::infinity() : L::lowest();
    case ReduceOp::Product:
      return T{1};
  }
  throw InvalidArgument("cpu kernel: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

}  // namespace

void reduce(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op) {
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    auto* a = static_cast<S*>(acc);
    const auto* b = static_cast<const S*>(in);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      if constexpr (kIsHalf<T>)
        reduceHalf<T>(a + lo, b + lo, hi - lo, op);
      else
        reduceBlock<S>(a + lo, b + lo, hi - lo, op);
    });
  });
}

void scale(void* data, std::size_t count, DType dtype, double factor, double divisor) {
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    auto* d = static_cast<S*>(data);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      if constexpr (kIsHalf<T>)
        scaleHalf<T>(d + lo, hi - lo, static_cast<float>(factor / divisor));
      else
        scaleBlock(d + lo, hi - lo, factor, divisor);
    });
  });
}

void reduceScaleMirror(void* acc, std::span<const void* const> ins, std::size_t count,
                       DType dtype, ReduceOp op, double factor, double divisor, void* mirror) {
  // 8 KiB per operand: the accumulator, one input and the mirror's lines fit in a 32 KiB
  // L1 with room to spare, and the per-block dispatch stays well under 1% of the work.
  constexpr std::size_t kBlockBytes = 8 * 1024;
  const bool scaled = !(factor == 1.0 && divisor == 1.0);
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    auto* a = static_cast<S*>(acc);
    auto* m = static_cast<S*>(mirror);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t b = lo; b < hi; b += kBlockBytes / sizeof(S)) {
        const std::size_t n = std::min(kBlockBytes / sizeof(S), hi - b);
        for (const void* in : ins) {
          const S* x = static_cast<const S*>(in) + b;
          if constexpr (kIsHalf<T>)
            reduceHalf<T>(a + b, x, n, op);
          else
            reduceBlock<S>(a + b, x, n, op);
        }
        if (scaled) {
          if constexpr (kIsHalf<T>)
            scaleHalf<T>(a + b, n, static_cast<float>(factor / divisor));
          else
            scaleBlock(a + b, n, factor, divisor);
        }
        if (m) std::memcpy(m + b, a + b, n * sizeof(S));
      }
    });
  });
}

void reduceScaleInto(const void* acc, void* inout, std::size_t count, DType dtype, ReduceOp op,
                     double factor, double divisor) {
  constexpr std::size_t kBlockBytes = 8 * 1024;  // scaled while still in L1
  const bool scaled = !(factor == 1.0 && divisor == 1.0);
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    const auto* a = static_cast<const S*>(acc);
    auto* x = static_cast<S*>(inout);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t b = lo; b < hi; b += kBlockBytes / sizeof(S)) {
        const std::size_t n = std::min(kBlockBytes / sizeof(S), hi - b);
        if constexpr (kIsHalf<T>)
          reduceHalf<T, true>(a + b, x + b, n, op);
        else
          reduceBlock<S, true>(a + b, x + b, n, op);
        if (!scaled) continue;
        if constexpr (kIsHalf<T>)
          scaleHalf<T>(x + b, n, static_cast<float>(factor / divisor));
        else
          scaleBlock(x + b, n, factor, divisor);
      }
    });
  });
}

void fillNeutral(void* data, std::size_t count, DType dtype, ReduceOp op) {
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    S value;
    if constexpr (kIsHalf<T>)
      value = T::fromFloat(neutral<float>(op));
    else
      value = neutral<T>(op);
    auto* d = static_cast<S*>(data);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      std::fill(d + lo, d + hi, value);
    });
  });
}

void setThreads(int threads) {
  g_arena = threads > 1 ? std::make_unique<tbb::task_arena>(threads) : nullptr;
  g_threads.store(std::max(threads, 0), std::memory_order_relaxed);
}

void parallelCopy(std::span<const CopyPiece> pieces) {
  // Prefix sums of piece sizes map any byte range of the concatenation back to pieces.
  std::vector<std::size_t> start(pieces.size() + 1, 0);
  for (std::size_t i = 0; i < pieces.size(); ++i) start[i + 1] = start[i] + pieces[i].bytes;
  forRanges(start.back(), 1, [&](std::size_t lo, std::size_t hi) {
    std::size_t p = std::upper_bound(start.begin(), start.end(), lo) - start.begin() - 1;
    for (; p < pieces.size() && start[p] < hi; ++p) {
      const std::size_t from = std::max(lo, start[p]);
      const std::size_t to = std::min(hi, start[p + 1]);
      if (to <= from) continue;  // empty piece: its pointers may be null
      std::memcpy(static_cast<char*>(pieces[p].dst) + (from - start[p]),
                  static_cast<const char*>(pieces[p].src) + (from - start[p]), to - from);
    }
  });
}

}  // namespace accord::cpu

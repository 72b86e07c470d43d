// Element-wise kernels on host memory (see kernels.h for the contract).
//
// Every kernel has the same shape: dispatch once on dtype (and op) to a tight loop over
// one C++ type, and let forRanges() split that loop across oneTBB workers when the
// buffer is large. The loops themselves are in loops.h, the float32 and float64 ones
// also compiled for AVX2 and AVX-512 (loops.cc). float16 and bfloat16 go through float
// in small stack blocks, with the conversion itself in half.cc (F16C when available).
#include "ops/cpu/kernels.h"

#include "ops/cpu/half.h"
#include "ops/cpu/loops.h"

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

using loops::reduceBlock;
using loops::scaleBlock;

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

// Tag for bool, stored as one byte holding 0 or 1 (as PyTorch and NumPy store it).
struct Logical {};

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Float16Codec> || std::is_same_v<T, BFloat16Codec>;
template <class T>
constexpr bool kIsLogical = std::is_same_v<T, Logical>;
template <class T>
using Storage = std::conditional_t<kIsHalf<T>, std::uint16_t,
                                   std::conditional_t<kIsLogical<T>, std::uint8_t, T>>;

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
    case DType::Int16: return fn.template operator()<std::int16_t>();
    case DType::UInt16: return fn.template operator()<std::uint16_t>();
    case DType::Bool: return fn.template operator()<Logical>();
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
    case ReduceOp::Adasum:  // adasum(a, 0) = a
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

// One dtype's elements as stored (T: the C++ type or 16-bit codec, S: its storage):
// reduced or scaled through float for the 16-bit formats, else by the loops directly.
template <class T, bool kIntoIn = false>
void reduceStored(std::conditional_t<kIntoIn, const Storage<T>, Storage<T>>* acc,
                  std::conditional_t<kIntoIn, Storage<T>, const Storage<T>>* in, std::size_t n,
                  ReduceOp op) {
  if constexpr (kIsHalf<T>)
    reduceHalf<T, kIntoIn>(acc, in, n, op);
  else if constexpr (kIsLogical<T>)
    loops::reduceLogicalLoop<kIntoIn>(acc, in, n, op);
  else
    reduceBlock<T, kIntoIn>(acc, in, n, op);
}

template <class T>
void scaleStored(Storage<T>* data, std::size_t n, double factor, double divisor) {
  if constexpr (kIsHalf<T>)
    scaleHalf<T>(data, n, static_cast<float>(factor / divisor));
  else if constexpr (kIsLogical<T>)
    throw InvalidArgument("cpu kernel: bool tensors cannot be scaled");  // refused at submission
  else
    scaleBlock(data, n, factor, divisor);
}

// body(first, n) over [0, count) in blocks of 8 KiB, the blocks split across threads as
// forRanges() splits a loop. 8 KiB per operand: an accumulator, an input and a mirror
// fit in a 32 KiB L1 with room to spare, so a pass that scales or copies what a
// reduction just wrote reads it from L1, and the per-block dispatch stays well under
// 1% of the work.
template <class Body>
void forL1Blocks(std::size_t count, std::size_t elem_bytes, const Body& body) {
  const std::size_t step = 8 * 1024 / elem_bytes;
  forRanges(count, elem_bytes, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t b = lo; b < hi; b += step) body(b, std::min(step, hi - b));
  });
}

}  // namespace

void reduce(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op) {
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    auto* a = static_cast<S*>(acc);
    const auto* b = static_cast<const S*>(in);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      reduceStored<T>(a + lo, b + lo, hi - lo, op);
    });
  });
}

void scale(void* data, std::size_t count, DType dtype, double factor, double divisor) {
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    auto* d = static_cast<S*>(data);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      scaleStored<T>(d + lo, hi - lo, factor, divisor);
    });
  });
}

void reduceScaleMirror(void* acc, std::span<const void* const> ins, std::size_t count, DType dtype,
                       ReduceOp op, double factor, double divisor, void* mirror) {
  const bool scaled = !(factor == 1.0 && divisor == 1.0);
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    auto* a = static_cast<S*>(acc);
    auto* m = static_cast<S*>(mirror);
    forL1Blocks(count, sizeof(S), [&](std::size_t b, std::size_t n) {
      for (const void* in : ins) reduceStored<T>(a + b, static_cast<const S*>(in) + b, n, op);
      if (scaled) scaleStored<T>(a + b, n, factor, divisor);
      if (m) std::memcpy(m + b, a + b, n * sizeof(S));
    });
  });
}

void reduceScaleFrom(const void* first, std::span<const void* const> ins, std::size_t count,
                     DType dtype, ReduceOp op, double factor, double divisor, void* out) {
  const bool scaled = !(factor == 1.0 && divisor == 1.0);
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    const auto* f = static_cast<const S*>(first);
    auto* o = static_cast<S*>(out);
    forL1Blocks(count, sizeof(S), [&](std::size_t b, std::size_t n) {
      std::memcpy(o + b, f + b, n * sizeof(S));
      for (const void* in : ins) reduceStored<T>(o + b, static_cast<const S*>(in) + b, n, op);
      if (scaled) scaleStored<T>(o + b, n, factor, divisor);
    });
  });
}

void reduceScaleInto(const void* acc, void* inout, std::size_t count, DType dtype, ReduceOp op,
                     double factor, double divisor) {
  const bool scaled = !(factor == 1.0 && divisor == 1.0);
  visitDType(dtype, [&]<class T>() {
    using S = Storage<T>;
    const auto* a = static_cast<const S*>(acc);
    auto* x = static_cast<S*>(inout);
    forL1Blocks(count, sizeof(S), [&](std::size_t b, std::size_t n) {
      reduceStored<T, true>(a + b, x + b, n, op);
      if (scaled) scaleStored<T>(x + b, n, factor, divisor);
    });
  });
}

namespace {

constexpr std::size_t kDotBlock = 4096;  // elements per partial sum

// Adds a block's products to eight partial sums per quantity, so the loop vectorizes
// without reassociating a sum (which would make the bits depend on the compiler).
template <class F>
void addDots(const F* a, const F* b, std::size_t n, double (&s)[3][8]) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const double x = a[i + l], y = b[i + l];
      s[0][l] += x * y;
      s[1][l] += x * x;
      s[2][l] += y * y;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const double x = a[i], y = b[i];
    s[0][l] += x * y;
    s[1][l] += x * x;
    s[2][l] += y * y;
  }
}

template <class T>
AdasumDots dotsOfBlock(const Storage<T>* a, const Storage<T>* b, std::size_t n) {
  double s[3][8] = {};
  if constexpr (kIsHalf<T>) {
    float fa[kHalfBlock], fb[kHalfBlock];
    for (std::size_t off = 0; off < n; off += kHalfBlock) {
      const std::size_t m = std::min(kHalfBlock, n - off);
      T::toFloat(a + off, fa, m);
      T::toFloat(b + off, fb, m);
      addDots(fa, fb, m, s);
    }
  } else {
    addDots(a, b, n, s);
  }
  AdasumDots d;
  for (int l = 0; l < 8; ++l) {
    d.ab += s[0][l];
    d.aa += s[1][l];
    d.bb += s[2][l];
  }
  return d;
}

template <class T>
constexpr bool kAdasumType = kIsHalf<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

// Calls fn.operator()<T>() for the floating-point dtypes, which Adasum takes.
template <class Fn>
void visitAdasumType(DType dtype, Fn&& fn) {
  visitDType(dtype, [&]<class T>() {
    if constexpr (kAdasumType<T>)
      fn.template operator()<T>();
    else
      throw InvalidArgument(std::string("cpu kernel: Adasum needs a floating-point dtype, got ") +
                            dtype_name(dtype));
  });
}

}  // namespace

AdasumDots adasumDots(const void* a, const void* b, std::size_t count, DType dtype) {
  AdasumDots total;
  visitAdasumType(dtype, [&]<class T>() {
    using S = Storage<T>;
    const auto* x = static_cast<const S*>(a);
    const auto* y = static_cast<const S*>(b);
    const std::size_t blocks = (count + kDotBlock - 1) / kDotBlock;
    std::vector<AdasumDots> part(blocks);
    forRanges(blocks, kDotBlock * sizeof(S), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t k = lo; k < hi; ++k) {
        const std::size_t at = k * kDotBlock;
        part[k] = dotsOfBlock<T>(x + at, y + at, std::min(kDotBlock, count - at));
      }
    });
    for (const AdasumDots& p : part) {
      total.ab += p.ab;
      total.aa += p.aa;
      total.bb += p.bb;
    }
  });
  return total;
}

AdasumWeights adasumWeights(const AdasumDots& d) {
  constexpr double kTiny = std::numeric_limits<double>::min();
  AdasumWeights w;
  if (d.aa >= kTiny) w.a = 1.0 - d.ab / (2.0 * d.aa);
  if (d.bb >= kTiny) w.b = 1.0 - d.ab / (2.0 * d.bb);
  return w;
}

void adasumCombine(const void* a, const void* b, void* out, std::size_t count, DType dtype,
                   const AdasumWeights& w) {
  visitAdasumType(dtype, [&]<class T>() {
    using S = Storage<T>;
    const auto* x = static_cast<const S*>(a);
    const auto* y = static_cast<const S*>(b);
    auto* z = static_cast<S*>(out);
    forRanges(count, sizeof(S), [&](std::size_t lo, std::size_t hi) {
      if constexpr (kIsHalf<T>) {
        float fa[kHalfBlock], fb[kHalfBlock];
        for (std::size_t off = lo; off < hi; off += kHalfBlock) {
          const std::size_t m = std::min(kHalfBlock, hi - off);
          T::toFloat(x + off, fa, m);
          T::toFloat(y + off, fb, m);
          for (std::size_t i = 0; i < m; ++i)
            fa[i] = static_cast<float>(w.a * fa[i] + w.b * static_cast<double>(fb[i]));
          T::fromFloat(fa, z + off, m);
        }
      } else {
        for (std::size_t i = lo; i < hi; ++i)
          z[i] = static_cast<T>(w.a * x[i] + w.b * static_cast<double>(y[i]));
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
    else if constexpr (kIsLogical<T>)
      value = op == ReduceOp::Min || op == ReduceOp::Product;  // and: 1; or: 0
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

// Helpers for the multi-rank tests: dtype conversion, test values, buffers, handles.
#include "mpi_test.h"

#include <accord/error.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace accord_test {

// ---- float16 / bfloat16 ---------------------------------------------------------------

std::uint16_t floatToHalf(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t f_exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (f_exp == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int exp = static_cast<int>(f_exp) - 127 + 15;
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow: inf
  if (exp <= 0) {                                                     // half subnormal
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exp: right
  return static_cast<std::uint16_t>(half);
}

float halfToFloat(std::uint16_t bits) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  std::uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                              : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  float out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}

std::uint16_t floatToBFloat16(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  if (std::isnan(value)) return 0x7fc0;
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

float bfloat16ToFloat(std::uint16_t bits) {
  const std::uint32_t x = static_cast<std::uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}

namespace {
// Tests store only integral values in integer dtypes: truncation is exact (and much
// cheaper than llround on big buffers).
template <class T>
void storeInt(void* base, std::int64_t i, double value) {
  static_cast<T*>(base)[i] = static_cast<T>(value);
}
}  // namespace

void storeValue(DType dtype, void* base, std::int64_t i, double value) {
  switch (dtype) {
    case DType::UInt8: return storeInt<std::uint8_t>(base, i, value);
    case DType::Int8: return storeInt<std::int8_t>(base, i, value);
    case DType::Int32: return storeInt<std::int32_t>(base, i, value);
    case DType::Int64: return storeInt<std::int64_t>(base, i, value);
    case DType::Float16:
      static_cast<std::uint16_t*>(base)[i] = floatToHalf(static_cast<float>(value));
      return;
    case DType::BFloat16:
      static_cast<std::uint16_t*>(base)[i] = floatToBFloat16(static_cast<float>(value));
      return;
    case DType::Float32: static_cast<float*>(base)[i] = static_cast<float>(value); return;
    case DType::Float64: static_cast<double*>(base)[i] = value; return;
    case DType::Int16: return storeInt<std::int16_t>(base, i, value);
    case DType::UInt16: return storeInt<std::uint16_t>(base, i, value);
    case DType::Bool: return storeInt<std::uint8_t>(base, i, value != 0);
  }
}

double loadValue(DType dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case DType::UInt8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::Int8: return static_cast<const std::int8_t*>(base)[i];
    case DType::Int32: return static_cast<const std::int32_t*>(base)[i];
    case DType::Int64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case DType::Float16: return halfToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BFloat16: return bfloat16ToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::Float32: return static_cast<const float*>(base)[i];
    case DType::Float64: return static_cast<const double*>(base)[i];
    case DType::Int16: return static_cast<const std::int16_t*>(base)[i];
    case DType::UInt16: return static_cast<const std::uint16_t*>(base)[i];
    case DType::Bool: return static_cast<const std::uint8_t*>(base)[i];
  }
  return 0;
}

bool isSigned(DType dtype) {
  return dtype != DType::UInt8 && dtype != DType::UInt16 && dtype != DType::Bool;
}

// ---- test values ------------------------------------------------------------------------

std::vector<std::int64_t> testSizes(DType dtype) {
  const auto element = static_cast<std::int64_t>(accord::dtype_size(dtype));
  return {0, 1, 1023, kAboveFusionBytes / element + 3};
}

double fillValue(DType dtype, ReduceOp op, int rank, std::int64_t i) {
  if (op == ReduceOp::Product) {
    // |product| over 4 ranks <= 16 (signed) or 81 (uint8): fits int8/uint8, exact in bf16.
    static constexpr double kSigned[] = {1, -1, 2, -2};
    static constexpr double kUnsigned[] = {1, 2, 3};
    return isSigned(dtype) ? kSigned[(i + rank) % 4] : kUnsigned[(i + rank) % 3];
  }
  // In [-5, 5] (signed) or [0, 10]: sums over 4 ranks fit int8/uint8 and bf16 exactly.
  const double v = static_cast<double>((i * 7 + rank * 3) % 11);
  return isSigned(dtype) ? v - 5 : v;
}

double reducedValue(DType dtype, ReduceOp op, const std::vector<int>& ranks, std::int64_t i) {
  double acc = fillValue(dtype, op, ranks.at(0), i);
  for (std::size_t k = 1; k < ranks.size(); ++k) {
    const double v = fillValue(dtype, op, ranks[k], i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc += v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
      case ReduceOp::Product: acc *= v; break;
    }
  }
  return op == ReduceOp::Average ? acc / static_cast<double>(ranks.size()) : acc;
}

double tagValue(DType dtype, int a, int b, std::int64_t i) {
  // < 100: fits int8/uint8; small integers are exact in bfloat16.
  (void)dtype;
  return static_cast<double>((a * 37 + b * 11 + i * 3) % 100);
}

Tolerance toleranceFor(DType dtype, ReduceOp op) {
  if (op != ReduceOp::Average) return {};  // sums/products of small integers are exact
  switch (dtype) {
    case DType::Float16: return {1e-3, 2e-3};
    case DType::BFloat16: return {1e-2, 1.6e-2};
    case DType::Float32: return {1e-6, 1e-6};
    case DType::Float64: return {1e-12, 1e-12};
    default: return {0.999, 0};  // integer division: floor, truncation or rounding
  }
}

std::vector<int> allRanks(int size) {
  std::vector<int> ranks(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

// ---- buffers --------------------------------------------------------------------------

Buffer::Buffer(DType dtype, Shape shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      bytes_(static_cast<std::size_t>(accord::num_elements(shape_)) * accord::dtype_size(dtype)) {}

accord::TensorView Buffer::view() {
  accord::TensorView v;
  v.data = bytes_.data();
  v.dtype = dtype_;
  v.shape = shape_;
  v.device = accord::Device::cpu();
  return v;
}

void Buffer::fill(const std::function<double(std::int64_t)>& value, std::int64_t period) {
  const std::int64_t n = numel();
  const std::int64_t computed = period > 0 ? std::min(n, period) : n;
  for (std::int64_t i = 0; i < computed; ++i) set(i, value(i));
  // Doubling copies of the first period: a 9 MiB buffer in ~17 memcpy calls.
  const std::size_t total = bytes_.size();
  std::size_t have = static_cast<std::size_t>(computed) * accord::dtype_size(dtype_);
  while (have < total) {
    const std::size_t chunk = std::min(have, total - have);
    std::memcpy(bytes_.data() + have, bytes_.data(), chunk);
    have += chunk;
  }
}

accord::Allocator allocatorAt(void* data, DType dtype) {
  return [data, dtype](const Shape& shape) {
    accord::TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.shape = shape;
    return v;
  };
}

accord::Allocator Output::allocator() {
  return [this](const Shape& shape) {
    ++calls_;
    shape_ = shape;
    // 0xAB: elements the collective forgets to write show up as wrong values.
    bytes_.assign(
        static_cast<std::size_t>(accord::num_elements(shape)) * accord::dtype_size(dtype_),
        std::byte{0xAB});
    accord::TensorView v;
    v.data = bytes_.data();
    v.dtype = dtype_;
    v.shape = shape;
    return v;
  };
}

std::string compareElements(DType dtype, const void* data, std::int64_t n,
                            const std::function<double(std::int64_t)>& expected, Tolerance tol) {
  std::ostringstream out;
  std::int64_t bad = 0, checked = 0;
  // Above 1 Mi elements: every element of the first and last 64 Ki (fusion-buffer
  // edges, the tail of a chunk) and every 61st in between (61 is prime: no aliasing
  // with power-of-two chunk sizes). Checking all of a 9 MiB tensor costs more than the
  // collective itself on 4 ranks sharing 2 cores.
  constexpr std::int64_t kFull = 1 << 20, kEdge = 1 << 16, kStride = 61;
  for (std::int64_t i = 0; i < n; ++i) {
    if (n > kFull && i >= kEdge && i < n - kEdge && i % kStride != 0) {
      i = std::min(n - kEdge, (i / kStride + 1) * kStride) - 1;
      continue;
    }
    ++checked;
    const double want = expected(i);
    const double got = loadValue(dtype, data, i);
    if (std::fabs(got - want) <= tol.abs + tol.rel * std::fabs(want)) continue;
    if (bad < 5) out << " [" << i << "] got " << got << " expected " << want << ";";
    ++bad;
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(checked) + " checked " +
         accord::dtype_name(dtype) + " elements (of " + std::to_string(n) + ") wrong:" + out.str();
}

// ---- handles ----------------------------------------------------------------------------

Outcome classify(std::exception_ptr error) {
  if (!error) return {"ok", ""};
  try {
    std::rethrow_exception(error);
  } catch (const accord::InvalidArgument& e) {
    return {"InvalidArgument", e.what()};
  } catch (const accord::NotInitialized& e) {
    return {"NotInitialized", e.what()};
  } catch (const accord::MismatchError& e) {
    return {"MismatchError", e.what()};
  } catch (const accord::CommError& e) {
    return {"CommError", e.what()};
  } catch (const accord::Timeout& e) {
    return {"Timeout", e.what()};
  } catch (const accord::ShutDown& e) {
    return {"ShutDown", e.what()};
  } catch (const accord::Error& e) {
    return {"Error", e.what()};
  } catch (const std::exception& e) {
    return {"std::exception", e.what()};
  } catch (...) {
    return {"unknown", "(not a std::exception)"};
  }
}

void awaitDone(const accord::Handle& handle, const std::string& what) {
  static const double limit = [] {
    const char* s = std::getenv("ACCORD_TEST_WAIT_SECONDS");
    return s ? std::atof(s) : 60.0;
  }();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  auto nap = std::chrono::microseconds(20);
  while (!handle.poll()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "[rank %d] '%s' did not complete within %.0f s: aborting the job\n",
                   worldRank(), what.c_str(), limit);
      std::fflush(stderr);
      int initialized = 0, finalized = 0;
      MPI_Initialized(&initialized);
      MPI_Finalized(&finalized);
      if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
      std::abort();
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(2000));
  }
}

Outcome finish(const accord::Handle& handle, const std::string& what) {
  if (!handle.valid()) return {"invalid-handle", what + ": the collective returned no handle"};
  awaitDone(handle, what);
  return attempt([&] { handle.wait(); });
}

Outcome attempt(const std::function<void()>& call) {
  try {
    call();
  } catch (...) {
    return classify(std::current_exception());
  }
  return {"ok", ""};
}

Outcome attemptSubmit(const std::function<accord::Handle()>& submit, const std::string& what) {
  accord::Handle handle;
  Outcome immediate = attempt([&] { handle = submit(); });
  if (!immediate.ok()) return immediate;
  Outcome later = finish(handle, what);
  return {"handle:" + later.kind, later.message};
}

std::string describe(const Outcome& outcome, const std::string& what) {
  if (outcome.ok()) return "";
  return what + ": " + outcome.kind + ": " + outcome.message;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
std::string str(DType dtype) { return accord::dtype_name(dtype); }
std::string str(ReduceOp op) { return accord::reduce_op_name(op); }

int worldRank() {
  static int cached = -1;
  if (cached >= 0) return cached;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &cached);
  return cached;
}

std::int64_t rowsFor(std::int64_t rows, int rank, int n) {
  return rows / n + (rank < rows % n ? 1 : 0);
}

std::int64_t firstRow(std::int64_t rows, int rank, int n) {
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += rowsFor(rows, r, n);
  return first;
}

}  // namespace accord_test

// Shared helpers for the multi-rank tests (run under mpirun, one file per collective).
//
// Every rank runs the same Catch2 test cases in the same order, so every collective is
// issued on every rank. Checks never change control flow (CHECK, not REQUIRE), waits
// carry a deadline (a handle that never completes aborts the job with its name instead
// of hanging until CTest's timeout), and main() reduces the failure count across ranks.
//
// Expected values are computed here, independently of the runtime: each rank fills
// element i with fillValue(dtype, op, rank, i), small integers that are exact in every
// dtype (bfloat16 included) and whose sums and products over 4 ranks stay in range.
#pragma once

#include <accord/accord.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accord_test {

using accord::DType;
using accord::ReduceOp;
using accord::Shape;

// Bool reduces as logic, which these tests' values do not model: tests/bindings/python
// covers it.
inline constexpr DType kAllDTypes[] = {DType::UInt8,   DType::Int8,    DType::Int16,
                                       DType::UInt16,  DType::Int32,   DType::Int64,
                                       DType::Float16, DType::BFloat16, DType::Float32,
                                       DType::Float64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min,
                                       ReduceOp::Max, ReduceOp::Product};
inline constexpr DType kFloatDTypes[] = {DType::Float16, DType::BFloat16, DType::Float32,
                                         DType::Float64};

// Bytes of a tensor that must not fit in one fusion buffer. 9 MiB is far above the
// default ACCORD_FUSION_THRESHOLD (64 KiB) and ACCORD_CHUNK_BYTES, so it is reduced in
// place in several pieces, while keeping 4 ranks on 2 cores fast.
inline constexpr std::int64_t kAboveFusionBytes = 9 << 20;
// Element counts every collective is run with: empty, one, odd, above the threshold.
std::vector<std::int64_t> testSizes(DType dtype);

// ---- main -------------------------------------------------------------------------

struct MainOptions {
  // The application initializes MPI (MPI_THREAD_MULTIPLE) before accord::init and
  // finalizes it after accord::shutdown; false leaves both to Accord.
  bool app_inits_mpi = true;
  // Environment set before accord::init (e.g. ACCORD_STALL_CHECK_TIME).
  std::vector<std::pair<std::string, std::string>> env;
  // Run before accord::init / after accord::shutdown; return the number of failures.
  std::function<int()> before_init;
  std::function<int()> after_shutdown;
  // Starts Accord in place of accord::init() (over a communicator, say).
  std::function<void()> init;
};
// MPI init, accord::init, the Catch session, accord::shutdown, the failure count
// reduced across ranks, MPI_Finalize. Arguments "--env NAME=VALUE" set environment
// variables before init (how CTest runs one binary with a small fusion threshold).
int runMain(int argc, char** argv, const MainOptions& options = {});

// ---- float16 / bfloat16 (exact for small integers) -----------------------------------

std::uint16_t floatToHalf(float value);
float halfToFloat(std::uint16_t bits);
std::uint16_t floatToBFloat16(float value);
float bfloat16ToFloat(std::uint16_t bits);

// Element i of a buffer of `dtype`, read or written as a double.
void storeValue(DType dtype, void* base, std::int64_t i, double value);
double loadValue(DType dtype, const void* base, std::int64_t i);

bool isSigned(DType dtype);  // every dtype but UInt8

// ---- test values ------------------------------------------------------------------

// What rank `rank` puts in element i for a reduction with `op`; periodic in i with
// period kFillPeriod (so big buffers are filled by copying one period).
inline constexpr std::int64_t kFillPeriod = 132;  // lcm(11, 4, 3)
double fillValue(DType dtype, ReduceOp op, int rank, std::int64_t i);
// The exact result of reducing fillValue over `ranks` (Average: the exact quotient).
double reducedValue(DType dtype, ReduceOp op, const std::vector<int>& ranks, std::int64_t i);
// A value that is distinct per (a, b, i), exact in every dtype: for data movement.
double tagValue(DType dtype, int a, int b, std::int64_t i);

struct Tolerance {
  double abs = 0;
  double rel = 0;
};
// Exact for integer results; integer Average may round either way (integer division);
// floating-point Average allows the dtype's rounding.
Tolerance toleranceFor(DType dtype, ReduceOp op);

std::vector<int> allRanks(int size);  // {0, 1, ..., size-1}

// A reduce-scatter's rows for `rank` of `n` (the first rows % n ranks one more), and the
// first of them: computed here, independently of accord::reducescatter_rows.
std::int64_t rowsFor(std::int64_t rows, int rank, int n);
std::int64_t firstRow(std::int64_t rows, int rank, int n);

// ---- buffers ------------------------------------------------------------------------

// An owned tensor; view() is what a collective gets.
class Buffer {
 public:
  Buffer(DType dtype, Shape shape);
  accord::TensorView view();
  std::int64_t numel() const { return accord::num_elements(shape_); }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  void set(std::int64_t i, double value) { storeValue(dtype_, bytes_.data(), i, value); }
  double get(std::int64_t i) const { return loadValue(dtype_, bytes_.data(), i); }
  // period > 0 promises value(i + period) == value(i): one period is computed and copied.
  void fill(const std::function<double(std::int64_t)>& value, std::int64_t period = 0);
  const void* data() const { return bytes_.data(); }

 private:
  DType dtype_;
  Shape shape_;
  std::vector<std::byte> bytes_;
};

// An output allocator that hands out `data` (of the caller's, large enough) as `dtype`
// in whatever shape the collective asks for: an output placed by hand, even inside an
// input.
accord::Allocator allocatorAt(void* data, DType dtype);

// The output of allgather / alltoall / reducescatter. allocator() hands the runtime a
// view of this object's storage; keep the Output alive (and unmoved) until the handle
// completes. The runtime calls the allocator on its background thread; the handle's
// completion orders that before the test's reads.
class Output {
 public:
  explicit Output(DType dtype) : dtype_(dtype) {}
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  accord::Allocator allocator();
  int calls() const { return calls_; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return accord::num_elements(shape_); }
  double get(std::int64_t i) const { return loadValue(dtype_, bytes_.data(), i); }
  const void* data() const { return bytes_.data(); }

 private:
  DType dtype_;
  Shape shape_;
  std::vector<std::byte> bytes_;
  int calls_ = 0;
};

// "" when data[i] matches expected(i) for every i < n within `tol`; otherwise the first
// few mismatches and the total count, ready for INFO().
std::string compareElements(DType dtype, const void* data, std::int64_t n,
                            const std::function<double(std::int64_t)>& expected,
                            Tolerance tol = {});

// ---- handles ------------------------------------------------------------------------

// How a handle (or a call) ended: "ok", or the exception's class name
// ("InvalidArgument", "MismatchError", "Timeout", "ShutDown", "NotInitialized",
// "CommError", "Error", "std::exception"), with its message.
struct Outcome {
  std::string kind;
  std::string message;
  bool ok() const { return kind == "ok"; }
};
Outcome classify(std::exception_ptr error);
// Polls `handle` until it completes; aborts the job (MPI_Abort) with `what` when it
// does not within the deadline (ACCORD_TEST_WAIT_SECONDS, default 60 s).
void awaitDone(const accord::Handle& handle, const std::string& what);
// awaitDone, then wait() classified.
Outcome finish(const accord::Handle& handle, const std::string& what);
// Runs `call` (e.g. a collective that should throw at once) and classifies it.
Outcome attempt(const std::function<void()>& call);
// Runs a collective that is expected to be rejected at once. When it throws, the
// outcome is the exception; when it returns a handle instead, the handle is finished
// (its buffers live on the caller's stack) and the kind is "handle:<kind>".
Outcome attemptSubmit(const std::function<accord::Handle()>& submit, const std::string& what);
// "" when the outcome is ok, else "<what>: <kind>: <message>" for INFO().
std::string describe(const Outcome& outcome, const std::string& what);

bool contains(const std::string& haystack, const std::string& needle);
std::string str(DType dtype);
std::string str(ReduceOp op);

// Global MPI rank of this process, valid before accord::init (0 when MPI is down).
int worldRank();

}  // namespace accord_test

// DType -> MPI_Datatype and (ReduceOp, DType) -> MPI_Op, plus the custom 16-bit ops.
#include "ops/mpi/mpi_types.h"

#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_check.h"

#include <array>
#include <string>

namespace accord {
namespace {

// The ops a 16-bit float can need: Average reduces as Sum.
constexpr std::array<ReduceOp, 4> kHalfOps = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max,
                                              ReduceOp::Product};

int halfOpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      return 0;
    case ReduceOp::Min:
      return 1;
    case ReduceOp::Max:
      return 2;
    case ReduceOp::Product:
      return 3;
  }
  throw InvalidArgument("unknown reduce op " + std::to_string(static_cast<int>(op)));
}

// MPI calls this with pieces of the two operands; it must not throw across the C
// boundary, and it cannot: dtype and op are fixed, valid template arguments.
template <DType D, ReduceOp O>
void halfReduceFunction(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  cpu::reduce(inout, in, static_cast<std::size_t>(*len), D, O);
}

template <DType D>
constexpr std::array<MPI_User_function*, 4> kHalfFunctions = {
    &halfReduceFunction<D, ReduceOp::Sum>, &halfReduceFunction<D, ReduceOp::Min>,
    &halfReduceFunction<D, ReduceOp::Max>, &halfReduceFunction<D, ReduceOp::Product>};

// [0] float16, [1] bfloat16; touched only by the background thread.
std::array<std::array<MPI_Op, 4>, 2> g_half_ops = {};
bool g_half_ops_created = false;

}  // namespace

MPI_Datatype mpiDatatype(DType dtype) {
  switch (dtype) {
    case DType::UInt8: return MPI_UINT8_T;
    case DType::Int8: return MPI_INT8_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::Float16:
    case DType::BFloat16: return MPI_UINT16_T;  // reduced only through the custom ops
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
  }
  throw InvalidArgument("no MPI datatype for dtype " + std::to_string(static_cast<int>(dtype)));
}

MPI_Op mpiOp(ReduceOp op, DType dtype) {
  if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    initMpiOps();
    return g_half_ops[dtype == DType::Float16 ? 0 : 1][halfOpIndex(op)];
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Product: return MPI_PROD;
  }
  throw InvalidArgument("no MPI_Op for reduce op " + std::to_string(static_cast<int>(op)));
}

void initMpiOps() {
  if (g_half_ops_created) return;
  for (std::size_t i = 0; i < kHalfOps.size(); ++i) {
    ACCORD_MPI_CHECK(MPI_Op_create(kHalfFunctions<DType::Float16>[i], 1, &g_half_ops[0][i]));
    ACCORD_MPI_CHECK(MPI_Op_create(kHalfFunctions<DType::BFloat16>[i], 1, &g_half_ops[1][i]));
  }
  g_half_ops_created = true;
}

void freeMpiOps() {
  if (!g_half_ops_created) return;
  g_half_ops_created = false;
  for (auto& per_dtype : g_half_ops)
    for (MPI_Op& op : per_dtype)
      if (op != MPI_OP_NULL) ACCORD_MPI_CHECK(MPI_Op_free(&op));  // sets op to MPI_OP_NULL
}

}  // namespace accord

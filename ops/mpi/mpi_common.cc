// Shared helpers of the MPI ops (see mpi_common.h).
#include "ops/mpi/mpi_common.h"

#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_check.h"
#include "ops/mpi/mpi_types.h"
#include "ops/mpi/shared_memory.h"

#include <algorithm>
#include <climits>
#include <numeric>

namespace accord::mpi {
namespace {

alignas(64) char g_dummy[64];

std::size_t chunkElements(const ExecContext& ctx, std::size_t elem_bytes) {
  const std::size_t chunk = ctx.config ? ctx.config->chunk_bytes : 0;
  const std::size_t elems = chunk == 0 ? INT_MAX : std::max<std::size_t>(1, chunk / elem_bytes);
  return std::min<std::size_t>(elems, INT_MAX);
}

// Calls f(offset, n) over [0, count) in the fewest pieces of at most `step`, all of
// nearly equal size: 1.5 chunks go as two 0.75-chunk calls, not a full and a half one.
template <typename F>
void forEachPiece(std::size_t count, std::size_t step, F f) {
  const std::size_t pieces = (count + step - 1) / step;
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t lo = count * i / pieces, hi = count * (i + 1) / pieces;
    f(lo, static_cast<int>(hi - lo));
  }
}

}  // namespace

void* nonNull(void* p) { return p ? p : g_dummy; }
const void* nonNull(const void* p) { return p ? p : g_dummy; }

std::string describe(const Response& response) {
  std::string out = responseTypeName(response.type);
  for (std::size_t i = 0; i < response.names.size(); ++i)
    out += (i ? ", '" : " '") + response.names[i] + "'";
  return out;
}

std::string describeTensor(const Response& response, std::size_t i) {
  return std::string(responseTypeName(response.type)) + " '" + response.names.at(i) + "'";
}

std::size_t rowBytes(const Shape& shape, DType dtype) {
  std::int64_t elems = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) elems *= shape[d];
  return static_cast<std::size_t>(elems) * dtype_size(dtype);
}

void checkInput(const Response& response, std::size_t i, const TensorEntry& entry,
                std::size_t bytes) {
  const TensorView& t = entry.tensor;
  if (t.dtype != response.dtype || t.bytes() != bytes || (bytes > 0 && t.data == nullptr))
    throw InvalidArgument(describeTensor(response, i) + ": local input is " + dtype_name(t.dtype) +
                          shape_string(t.shape) + " (" + std::to_string(t.bytes()) +
                          " bytes), the negotiated response needs " + dtype_name(response.dtype) +
                          " with " + std::to_string(bytes) + " bytes");
}

TensorView allocateOutput(const Response& response, std::size_t i, TensorEntry& entry,
                          const Shape& shape) {
  if (!entry.output)
    throw InvalidArgument(describeTensor(response, i) + ": no output allocator was given");
  TensorView out = entry.output(shape);
  const std::size_t need =
      static_cast<std::size_t>(num_elements(shape)) * dtype_size(response.dtype);
  if (out.dtype != response.dtype || out.bytes() < need || (need > 0 && out.data == nullptr))
    throw InvalidArgument(
        describeTensor(response, i) + ": the output allocator returned " + dtype_name(out.dtype) +
        shape_string(out.shape) + (out.data ? "" : " with no storage") + ", expected " +
        dtype_name(response.dtype) + shape_string(shape) + " (" + std::to_string(need) + " bytes)");
  return out;
}

void chunkedAllreduce(const ExecContext& ctx, void* data, std::size_t count, DType dtype,
                      ReduceOp op, const Scaling& pre, const Scaling& post) {
  if (ctx.shm) return ctx.shm->allreduce(data, count, dtype, op, pre, post);
  // Every rank holds the same response, so all of them make the same sequence of calls.
  const std::size_t elem = dtype_size(dtype);
  const std::size_t step = chunkElements(ctx, elem);
  const MPI_Datatype type = mpiDatatype(dtype);
  const MPI_Op mpi_op = mpiOp(op, dtype);
  forEachPiece(count, step, [&](std::size_t off, int n) {
    char* piece = static_cast<char*>(data) + off * elem;
    applyScaling(pre, piece, n, dtype);
    ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, piece, n, type, mpi_op, ctx.comm));
    applyScaling(post, piece, n, dtype);
  });
}

void chunkedBroadcast(const ExecContext& ctx, void* data, std::size_t bytes, int root) {
  const std::size_t step = chunkElements(ctx, 1);
  forEachPiece(bytes, step, [&](std::size_t off, int n) {
    ACCORD_MPI_CHECK(MPI_Bcast(static_cast<char*>(data) + off, n, MPI_BYTE, root, ctx.comm));
  });
}

Scaling preScaling(const Response& response) { return {response.prescale, 1.0}; }

Scaling postScaling(const Response& response, int set_size) {
  // Average divides after the sum; folding it into the postscale pass saves a pass.
  return {response.postscale, response.op == ReduceOp::Average ? double(set_size) : 1.0};
}

void applyScaling(const Scaling& s, void* data, std::size_t count, DType dtype) {
  if (!s.isOne() && count > 0) cpu::scale(data, count, dtype, s.factor, s.divisor);
}

ByteLayout::ByteLayout(const std::vector<std::size_t>& byte_counts,
                       const std::vector<std::size_t>& byte_displs, const std::string& what) {
  // The largest unit that divides every count and displacement keeps counts small.
  std::size_t unit = 0;
  for (std::size_t c : byte_counts) unit = std::gcd(unit, c);
  for (std::size_t d : byte_displs) unit = std::gcd(unit, d);
  if (unit == 0) unit = 1;
  for (std::size_t i = 0; i < byte_counts.size(); ++i) {
    const std::size_t c = byte_counts[i] / unit, d = byte_displs[i] / unit;
    if (c > INT_MAX || d > INT_MAX)
      throw InvalidArgument(what + ": rank " + std::to_string(i) + " moves " +
                            std::to_string(byte_counts[i]) + " bytes at offset " +
                            std::to_string(byte_displs[i]) + ", which MPI's int counts cannot "
                            "express even in units of " + std::to_string(unit) +
                            " bytes; split the tensor into smaller ones");
    counts.push_back(static_cast<int>(c));
    displs.push_back(static_cast<int>(d));
  }
  if (unit > INT_MAX)
    throw InvalidArgument(what + ": every rank's share is a multiple of " + std::to_string(unit) +
                          " bytes, too large for one MPI datatype; split the tensor");
  if (unit > 1) {
    ACCORD_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &type));
    derived_ = true;
    ACCORD_MPI_CHECK(MPI_Type_commit(&type));
  }
}

ByteLayout::~ByteLayout() {
  if (derived_) MPI_Type_free(&type);  // nothing useful to do with a failure here
}

}  // namespace accord::mpi

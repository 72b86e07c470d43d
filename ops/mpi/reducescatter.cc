// Reducescatter on host memory with MPI.
//
// Every rank holds the same input shape; rank r receives reducescatter_rows(rows, r, n)
// rows of the reduced tensor (the first ranks one more when rows do not divide). MPI_
// Reduce_scatter wants each rank's block contiguous, which a lone tensor already is,
// so it goes straight from the input to the output. A fused group is packed rank-major
// (rank 0's rows of every tensor, then rank 1's, ...) into the fusion buffer, reduced
// with one call into a receive region after it, and unpacked. We also pack when a
// prescale is requested (the input is not ours to modify) and on a joined rank (it
// contributes the neutral element). Average and postscale are one pass over the result.
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_check.h"
#include "ops/mpi/mpi_common.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/mpi_types.h"

#include <climits>

namespace accord {
namespace {

// Where each tensor's rows go, in elements.
struct Plan {
  std::vector<std::size_t> row_elems;           // per tensor
  std::vector<std::vector<std::int64_t>> rows;  // [t][r]: rows rank r receives
  std::vector<std::vector<std::int64_t>> first; // [t][r]: its first row
  std::vector<int> recv_counts;                 // per rank, elements of all tensors
  std::size_t total = 0;                        // elements of the whole send buffer
};

Plan makePlan(const Response& response, int size) {
  Plan plan;
  const std::size_t n = response.names.size();
  std::vector<std::size_t> per_rank(size, 0);
  for (std::size_t t = 0; t < n; ++t) {
    const Shape& shape = response.shapes[t];
    if (shape.empty())
      throw InvalidArgument(mpi::describeTensor(response, t) + ": needs at least one dimension");
    plan.row_elems.push_back(mpi::rowBytes(shape, response.dtype) / dtype_size(response.dtype));
    plan.rows.emplace_back(size);
    plan.first.emplace_back(size);
    std::int64_t row = 0;
    for (int r = 0; r < size; ++r) {
      plan.rows[t][r] = reducescatter_rows(shape[0], r, size);
      plan.first[t][r] = row;
      row += plan.rows[t][r];
      per_rank[r] += plan.rows[t][r] * plan.row_elems[t];
    }
    plan.total += shape[0] * plan.row_elems[t];
  }
  for (int r = 0; r < size; ++r) {
    if (per_rank[r] > INT_MAX)
      throw InvalidArgument(mpi::describe(response) + ": rank " + std::to_string(r) +
                            " would receive " + std::to_string(per_rank[r]) +
                            " elements, more than MPI_Reduce_scatter's int counts allow");
    plan.recv_counts.push_back(static_cast<int>(per_rank[r]));
  }
  return plan;
}

class MpiReducescatter final : public Op {
 public:
  explicit MpiReducescatter(FusionBuffer& buffer) : buffer_(buffer) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Reducescatter && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const Plan plan = makePlan(response, ctx.size);
    std::vector<TensorView> outputs(entries.size());
    for (std::size_t t = 0; t < entries.size(); ++t) {
      if (!entries[t]) continue;
      mpi::checkInput(response, t, *entries[t], response.tensorBytes(t));
      Shape shape = response.shapes[t];
      shape[0] = plan.rows[t][ctx.rank];
      outputs[t] = mpi::allocateOutput(response, t, *entries[t], shape);
    }
    if (plan.total == 0) return;  // every rank knows: nothing to reduce
    const bool direct = entries.size() == 1 && entries[0] && response.prescale == 1.0;
    if (direct)
      reduce(ctx, response, plan, entries[0]->tensor.data, outputs[0].data);
    else
      reducePacked(ctx, response, plan, entries, outputs);
  }

 private:
  void reduce(const ExecContext& ctx, const Response& response, const Plan& plan,
              const void* send, void* recv) {
    ACCORD_MPI_CHECK(MPI_Reduce_scatter(mpi::nonNull(send), mpi::nonNull(recv),
                                        plan.recv_counts.data(), mpiDatatype(response.dtype),
                                        mpiOp(response.op, response.dtype), ctx.comm));
    mpi::applyScaling(mpi::postScaling(response, ctx.size), recv,
                      plan.recv_counts[ctx.rank], response.dtype);
  }

  void reducePacked(const ExecContext& ctx, const Response& response, const Plan& plan,
                    std::vector<TensorEntry*>& entries, std::vector<TensorView>& outputs) {
    const DType dtype = response.dtype;
    const std::size_t elem = dtype_size(dtype);
    const std::size_t send_bytes = alignUp(plan.total * elem);
    char* send = buffer_.reserve(send_bytes + plan.recv_counts[ctx.rank] * elem);
    char* recv = send + send_bytes;

    std::vector<cpu::CopyPiece> in, out;
    std::size_t offset = 0;  // elements into the send buffer
    for (int r = 0; r < ctx.size; ++r) {
      for (std::size_t t = 0; t < entries.size(); ++t) {
        const std::size_t count = plan.rows[t][r] * plan.row_elems[t];
        char* dst = send + offset * elem;
        if (entries[t] && count > 0) {
          const char* src = static_cast<const char*>(entries[t]->tensor.data);
          in.push_back({dst, src + plan.first[t][r] * plan.row_elems[t] * elem, count * elem});
        } else if (!entries[t]) {
          cpu::fillNeutral(dst, count, dtype, response.op);
        }
        if (r == ctx.rank && entries[t] && count > 0)
          out.push_back({outputs[t].data, recv + (offset - sendOffsetOfRank(plan, r)) * elem,
                         count * elem});
        offset += count;
      }
    }
    cpu::parallelCopy(in);
    if (response.prescale != 1.0)
      for (const cpu::CopyPiece& piece : in)
        mpi::applyScaling(mpi::preScaling(response), piece.dst, piece.bytes / elem, dtype);
    reduce(ctx, response, plan, send, recv);
    cpu::parallelCopy(out);
  }

  static std::size_t sendOffsetOfRank(const Plan& plan, int r) {
    std::size_t offset = 0;
    for (int q = 0; q < r; ++q) offset += plan.recv_counts[q];
    return offset;
  }

  FusionBuffer& buffer_;
};

}  // namespace

std::unique_ptr<Op> makeMpiReducescatter(FusionBuffer& buffer) {
  return std::make_unique<MpiReducescatter>(buffer);
}

}  // namespace accord

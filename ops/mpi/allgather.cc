// Allgather on host memory with MPI.
//
// Ranks contribute different numbers of rows (response.rank_rows[t * size + r]), so
// this is MPI_Allgatherv over bytes. A lone tensor gathers straight into its output.
// A fused group gathers once through the fusion buffer, laid out rank-major (rank 0's
// rows of every tensor, then rank 1's, ...): each rank's contribution is then one
// contiguous block, which Allgatherv requires, and the call runs in place. Afterwards
// every tensor's output is assembled from the ranks' blocks with one parallel copy.
// A joined rank contributes the rows the response assigns it (zero in practice) as
// zeros and discards what it receives.
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_check.h"
#include "ops/mpi/mpi_common.h"
#include "ops/mpi/mpi_ops.h"

#include <cstring>

namespace accord {
namespace {

class MpiAllgather final : public Op {
 public:
  explicit MpiAllgather(FusionBuffer& buffer) : buffer_(buffer) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Allgather && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const std::size_t n = response.names.size();
    if (response.rank_rows.size() != n * ctx.size)
      throw InvalidArgument(mpi::describe(response) + ": rank_rows has " +
                            std::to_string(response.rank_rows.size()) + " values, expected " +
                            std::to_string(n * ctx.size));
    // bytes[t][r]: what rank r contributes to tensor t.
    std::vector<std::vector<std::size_t>> bytes(n, std::vector<std::size_t>(ctx.size));
    std::vector<TensorView> outputs(n);
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t row = mpi::rowBytes(response.shapes[t], response.dtype);
      for (int r = 0; r < ctx.size; ++r) {
        const std::int64_t rows = response.rank_rows[t * ctx.size + r];
        if (rows < 0)
          throw InvalidArgument(mpi::describeTensor(response, t) + ": rank " + std::to_string(r) +
                                " has " + std::to_string(rows) + " rows");
        bytes[t][r] = static_cast<std::size_t>(rows) * row;
      }
      if (!entries[t]) continue;
      mpi::checkInput(response, t, *entries[t], bytes[t][ctx.rank]);
      outputs[t] = mpi::allocateOutput(response, t, *entries[t], response.shapes[t]);
    }
    if (n == 1 && entries[0])
      gatherDirect(ctx, response, bytes[0], entries[0]->tensor.data, outputs[0].data);
    else
      gatherFused(ctx, response, bytes, entries, outputs);
  }

 private:
  static void gatherDirect(const ExecContext& ctx, const Response& response,
                           const std::vector<std::size_t>& bytes, const void* in, void* out) {
    std::vector<std::size_t> displs(ctx.size, 0);
    for (int r = 1; r < ctx.size; ++r) displs[r] = displs[r - 1] + bytes[r - 1];
    if (displs.back() + bytes.back() == 0) return;  // every rank knows: nothing to move
    const mpi::ByteLayout layout(bytes, displs, mpi::describe(response));
    ACCORD_MPI_CHECK(MPI_Allgatherv(mpi::nonNull(in), layout.counts[ctx.rank], layout.type,
                                    mpi::nonNull(out), layout.counts.data(),
                                    layout.displs.data(), layout.type, ctx.comm));
  }

  void gatherFused(const ExecContext& ctx, const Response& response,
                   const std::vector<std::vector<std::size_t>>& bytes,
                   std::vector<TensorEntry*>& entries, std::vector<TensorView>& outputs) {
    const std::size_t n = entries.size();
    // at[t][r]: where rank r's rows of tensor t sit in the fused buffer.
    std::vector<std::vector<std::size_t>> at(n, std::vector<std::size_t>(ctx.size));
    std::vector<std::size_t> block(ctx.size, 0), displs(ctx.size, 0);
    std::size_t offset = 0;
    for (int r = 0; r < ctx.size; ++r) {
      displs[r] = offset;
      for (std::size_t t = 0; t < n; ++t) {
        at[t][r] = offset;
        offset += bytes[t][r];
      }
      block[r] = offset - displs[r];
    }
    if (offset == 0) return;
    char* fused = buffer_.reserve(offset);

    std::vector<cpu::CopyPiece> in, out;
    for (std::size_t t = 0; t < n; ++t) {
      char* mine = fused + at[t][ctx.rank];
      if (entries[t])
        in.push_back({mine, entries[t]->tensor.data, bytes[t][ctx.rank]});
      else if (bytes[t][ctx.rank] > 0)
        std::memset(mine, 0, bytes[t][ctx.rank]);
      if (!entries[t]) continue;
      std::size_t dst = 0;
      for (int r = 0; r < ctx.size; ++r) {
        out.push_back({static_cast<char*>(outputs[t].data) + dst, fused + at[t][r], bytes[t][r]});
        dst += bytes[t][r];
      }
    }
    cpu::parallelCopy(in);
    const mpi::ByteLayout layout(block, displs, mpi::describe(response));
    ACCORD_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, fused,
                                    layout.counts.data(), layout.displs.data(), layout.type,
                                    ctx.comm));
    cpu::parallelCopy(out);
  }

  FusionBuffer& buffer_;
};

}  // namespace

std::unique_ptr<Op> makeMpiAllgather(FusionBuffer& buffer) {
  return std::make_unique<MpiAllgather>(buffer);
}

}  // namespace accord

// Allgather on host memory, as a ring (ring.h).
//
// Ranks contribute different numbers of rows (response.rank_rows[t * size + r]). A
// lone tensor is gathered straight into its output: this rank's rows are copied into
// place and the ring fills in the rest. A fused group goes through the fusion buffer,
// laid out rank-major (rank 0's rows of every tensor, then rank 1's, ...) so that each
// rank's contribution is one block; afterwards every tensor's output is assembled from
// the ranks' blocks with one parallel copy. A joined rank contributes the rows the
// response assigns it (zero in practice) as zeros and discards what it receives, as
// does a rank whose output allocator failed, whose handle then fails.
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_common.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/ring.h"

#include <cstring>

namespace accord {
namespace {

class MpiAllgather final : public Op {
 public:
  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Allgather && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const std::size_t n = response.names.size();
    const int size = ctx.size();
    // bytes[t][r]: what rank r contributes to tensor t.
    const auto bytes = mpi::allgatherBytes(response, size);
    if (n == 1)
      gatherDirect(ctx, response, bytes[0], entries[0]);
    else
      gatherFused(ctx, response, bytes, entries);
  }

 private:
  static void gatherDirect(ExecContext& ctx, const Response& response,
                           const std::vector<std::size_t>& bytes, TensorEntry* entry) {
    mpi::Blocks blocks;
    std::size_t total = 0;
    for (std::size_t b : bytes) {
      blocks.offset.push_back(total);
      blocks.bytes.push_back(b);
      total += b;
    }
    const std::size_t mine = bytes[ctx.rank()];
    const void* in = nullptr;
    void* out;
    if (entry && mpi::prepareLocal(*entry, [&] { mpi::checkInput(response, 0, *entry, mine); })) {
      in = entry->tensor.data;
      out = mpi::outputOrSpare(ctx, response, 0, *entry, response.shapes[0]);
    } else {
      out = ctx.spare.reserve(total);
    }
    if (total == 0) return;  // every rank knows: nothing to move
    char* own = static_cast<char*>(out) + blocks.offset[ctx.rank()];
    if (in && mine > 0)
      std::memcpy(own, in, mine);
    else if (mine > 0)
      std::memset(own, 0, mine);
    mpi::ringAllgather(ctx, out, blocks, mpi::describe(response));
  }

  static void gatherFused(ExecContext& ctx, const Response& response,
                          const std::vector<std::vector<std::size_t>>& bytes,
                          std::vector<TensorEntry*>& entries) {
    const std::size_t n = entries.size();
    const int size = ctx.size();
    // at[t][r]: where rank r's rows of tensor t sit in the fused buffer.
    std::vector<std::vector<std::size_t>> at(n, std::vector<std::size_t>(size));
    mpi::Blocks blocks;
    std::size_t offset = 0;
    for (int r = 0; r < size; ++r) {
      blocks.offset.push_back(offset);
      for (std::size_t t = 0; t < n; ++t) {
        at[t][r] = offset;
        offset += bytes[t][r];
      }
      blocks.bytes.push_back(offset - blocks.offset[r]);
    }
    // Each local tensor checked and its output made, also where no rank sends a row.
    const auto prepare = [&](std::size_t t, bool& local) -> void* {
      TensorEntry* e = entries[t];
      local = e && mpi::prepareLocal(
                       *e, [&] { mpi::checkInput(response, t, *e, bytes[t][ctx.rank()]); });
      void* output = nullptr;
      if (local)
        mpi::prepareLocal(
            *e, [&] { output = mpi::allocateOutput(response, t, *e, response.shapes[t]).data; });
      return output;
    };
    if (offset == 0) {  // every rank knows: nothing to move
      for (std::size_t t = 0; t < n; ++t) {
        bool local = false;
        prepare(t, local);
      }
      return;
    }
    char* fused = ctx.fusion.reserve(offset);

    std::vector<cpu::CopyPiece> in, out;
    for (std::size_t t = 0; t < n; ++t) {
      char* mine = fused + at[t][ctx.rank()];
      bool local = false;
      void* output = prepare(t, local);
      if (local)
        in.push_back({mine, entries[t]->tensor.data, bytes[t][ctx.rank()]});
      else if (bytes[t][ctx.rank()] > 0)
        std::memset(mine, 0, bytes[t][ctx.rank()]);
      if (!output) continue;  // joined, or no output: the others still get our rows
      std::size_t dst = 0;
      for (int r = 0; r < size; ++r) {
        out.push_back({static_cast<char*>(output) + dst, fused + at[t][r], bytes[t][r]});
        dst += bytes[t][r];
      }
    }
    cpu::parallelCopy(in);
    mpi::ringAllgather(ctx, fused, blocks, mpi::describe(response));
    cpu::parallelCopy(out);
  }
};

}  // namespace

std::unique_ptr<Op> makeMpiAllgather() { return std::make_unique<MpiAllgather>(); }

}  // namespace accord

// Allgather on host memory: through the shared-memory window when the set's ranks share
// this host (SharedMemory::allgather), else as a ring (ring.h). Both gather in place,
// each rank's contribution at its block of one buffer.
//
// Ranks contribute different numbers of rows (response.rank_rows[t * size + r]). A
// lone tensor is gathered straight into its output: this rank's rows are copied into
// place (unless the input already is that place: an in-place allgather, as the sharded
// optimizer does into each parameter) and the ring fills in the rest. A fused group of
// one host's ranks is gathered where its tensors lie (the window's spread form): this
// rank's rows published from its inputs, every peer's collected into the outputs.
// Otherwise it goes through the fusion buffer, laid out rank-major (rank 0's rows of
// every tensor, then rank 1's, ...) so that each rank's contribution is one block;
// afterwards every tensor's output is assembled from the ranks' blocks with one
// parallel copy. A joined rank contributes the rows the response assigns it (zero in
// practice) as zeros and discards what it receives, as does a rank whose output
// allocator failed, whose handle then fails.
#include "ops/common/checks.h"
#include "ops/common/fused_layout.h"
#include "ops/common/layouts.h"
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/ring.h"
#include "ops/shm/shared_memory.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace accord::mpi {

namespace {

// On entry block rank() of `data` holds this rank's contribution; on return every block
// holds its owner's.
void gatherBlocks(Context& ctx, void* data, const std::vector<Region>& blocks,
                  const std::string& what) {
  if (ctx.shm) {
    shm::SharedMemory::Blocks b;
    for (const Region& r : blocks) {
      b.first.push_back(r.at);
      b.count.push_back(r.bytes);
    }
    ctx.shm->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
    return ctx.shm->allgather(data, b, what);
  }
  Blocks b;
  for (const Region& r : blocks) {
    b.offset.push_back(r.at);
    b.bytes.push_back(r.bytes);
  }
  ringAllgather(ctx, data, b, what);
}

// A lone tensor, gathered straight into its output.
void gatherDirect(Context& ctx, const Response& response, const std::vector<std::size_t>& bytes,
                  TensorEntry* entry) {
  const FusedGather plan = planFusedGather({bytes}, ctx.size());
  const std::size_t mine = bytes[ctx.rank()];
  const void* in = nullptr;
  void* out;
  if (localInput(response, 0, entry, mine)) {
    in = entry->tensor.data;
    out = outputOrSpare(ctx.spare, response, 0, *entry, response.shapes[0]);
  } else {
    out = ctx.spare.reserve(plan.total);
  }
  if (plan.total == 0) return;  // every rank knows: nothing to move
  char* own = static_cast<char*>(out) + plan.blocks[ctx.rank()].at;
  if (in && mine > 0) {
    if (in != own) std::memmove(own, in, mine);  // equal: gathered in place; may overlap
  } else if (mine > 0)
    std::memset(own, 0, mine);
  gatherBlocks(ctx, out, plan.blocks, describe(response));
}

// A fused group through the shared-memory window, gathered where the tensors lie
// (SharedMemory's spread form) instead of through the fusion buffer: this rank's rows
// are published from its inputs and every peer's rows collected straight into the
// outputs. Every tensor local with its output made; false (nothing done) where an
// input shares memory with what the gather writes, other than an input that already is
// its own rows' place in its output (gathered in place, as the sharded optimizer does).
bool gatherSpread(Context& ctx, const Response& response,
                  const std::vector<std::vector<std::size_t>>& bytes,
                  std::vector<TensorEntry*>& entries, const std::vector<char*>& outputs,
                  const FusedGather& plan) {
  const int me = ctx.rank();
  const auto size = static_cast<std::size_t>(ctx.size());
  shm::Spread mine;
  std::vector<shm::Spread> into(size);
  std::vector<cpu::CopyPiece> own;  // inputs not already in place
  std::vector<Span> read, written;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    char* input = static_cast<char*>(entries[t]->tensor.data);
    mine.add(input, bytes[t][me]);
    const auto in = reinterpret_cast<std::uintptr_t>(input);
    read.push_back({in, in + bytes[t][me]});
    for (std::size_t r = 0; r < size; ++r) {
      char* at = outputs[t] + plan.dst[t][r];
      const auto out = reinterpret_cast<std::uintptr_t>(at);
      into[r].add(at, bytes[t][r]);
      if (static_cast<int>(r) != me) {
        written.push_back({out, out + bytes[t][r]});
      } else if (at != input) {
        own.push_back({at, input, bytes[t][r]});
        written.push_back({out, out + bytes[t][r]});
      }
    }
  }
  if (anyOverlap(std::move(read), written)) return false;
  ctx.shm->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
  ctx.shm->allgather(mine, into, describe(response));
  cpu::parallelCopy(own);
  return true;
}

// A fused group, rank-major in the fusion buffer (fused_layout.h).
void gatherFused(Context& ctx, const Response& response,
                 const std::vector<std::vector<std::size_t>>& bytes,
                 std::vector<TensorEntry*>& entries) {
  const std::size_t n = entries.size();
  const int me = ctx.rank();
  const FusedGather plan = planFusedGather(bytes, ctx.size());
  // Each local tensor checked and its output made, also where no rank sends a row.
  std::vector<bool> local(n);
  std::vector<char*> outputs(n, nullptr);
  for (std::size_t t = 0; t < n; ++t) {
    TensorEntry* e = entries[t];
    local[t] = localInput(response, t, e, bytes[t][me]);
    if (local[t])
      prepareLocal(*e, [&] {
        outputs[t] = static_cast<char*>(allocateOutput(response, t, *e, response.shapes[t]).data);
      });
  }
  if (plan.total == 0) return;  // every rank knows: nothing to move
  const bool whole = std::all_of(local.begin(), local.end(), [](bool l) { return l; }) &&
                     std::none_of(outputs.begin(), outputs.end(), [](char* o) { return !o; });
  if (ctx.shm && whole && gatherSpread(ctx, response, bytes, entries, outputs, plan)) return;
  char* fused = ctx.fusion.reserve(plan.total);

  std::vector<cpu::CopyPiece> in, out;
  for (std::size_t t = 0; t < n; ++t) {
    char* mine = fused + plan.at[t][me];
    if (local[t])
      in.push_back({mine, entries[t]->tensor.data, bytes[t][me]});
    else if (bytes[t][me] > 0)
      std::memset(mine, 0, bytes[t][me]);
    if (!outputs[t]) continue;  // joined, or no output: the others still get our rows
    for (int r = 0; r < ctx.size(); ++r)
      out.push_back({outputs[t] + plan.dst[t][r], fused + plan.at[t][r], bytes[t][r]});
  }
  cpu::parallelCopy(in);
  gatherBlocks(ctx, fused, plan.blocks, describe(response));
  cpu::parallelCopy(out);
}

class AllgatherOp final : public Op {
 public:
  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Allgather && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& exec, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    Context ctx = contextOf(exec);
    // bytes[t][r]: what rank r contributes to tensor t.
    const auto bytes = allgatherBytes(response, ctx.size());
    if (response.names.size() == 1)
      gatherDirect(ctx, response, bytes[0], entries[0]);
    else
      gatherFused(ctx, response, bytes, entries);
  }
};

}  // namespace

std::unique_ptr<Op> makeAllgather() { return std::make_unique<AllgatherOp>(); }

}  // namespace accord::mpi

// Allreduce on host memory.
//
// A lone tensor, or a fused group bigger than the fusion threshold, is reduced in place
// in the application's buffer: copying it would cost more than the call it saves. A
// fused group is reduced once: through the shared-memory window where its tensors lie
// (the window's spread form), otherwise copied into the fusion buffer (in parallel),
// reduced and copied back. Either way the buffer is reduced in pieces of
// ACCORD_CHUNK_BYTES, each of which stays in cache between arriving and being passed
// on: through the shared-memory window when the set's ranks share this host, else over
// MPI as a ring (ring.h) or, when small, by recursive doubling (doubling.h), or, under
// ACCORD_HIERARCHICAL_ALLREDUCE across hosts, through both (hierarchical.h).
//
// Adasum, which is not element-wise, has an algorithm of its own (adasum.h).
//
// A joined rank (null entry) contributes the op's neutral element from scratch space
// in the fusion buffer and throws the result away. Prescale runs on the inputs only
// (scaling a neutral 1 or +inf would change it); postscale and Average's division run
// on each rank's reduced block before it is passed around, in the same pass as the
// block's last reduction (the ring's last step, or the shared-memory reduce): there is
// no separate pass over the data for them.
#include "ops/common/checks.h"
#include "ops/common/fused_layout.h"
#include "ops/common/scaling.h"
#include "ops/cpu/kernels.h"
#include "ops/mpi/adasum.h"
#include "ops/mpi/doubling.h"
#include "ops/mpi/hierarchical.h"
#include "ops/mpi/link.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/ring.h"
#include "ops/shm/shared_memory.h"
#include "runtime/timeline.h"

#include <algorithm>
#include <cstdint>

namespace accord::mpi {

namespace {

const char* reduceStep(const Context& ctx) {
  return ctx.shm         ? kShmAllreduceStep
         : ctx.hierarchy ? kHierarchicalAllreduceStep
                         : kMpiAllreduceStep;
}

// Reduces `count` elements in place, in the fewest near-equal pieces of at most
// ACCORD_CHUNK_BYTES (1.5 chunks go as two 0.75-chunk pieces, not a full and a half).
void reduceInPieces(Context& ctx, void* data, std::size_t count, DType dtype, ReduceOp op,
                    const Scaling& pre, const Scaling& post, const std::string& what) {
  if (ctx.shm) {
    ctx.shm->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
    return ctx.shm->allreduce(data, count, dtype, op, pre, post, what);
  }
  if (ctx.hierarchy) return ctx.hierarchy->allreduce(ctx, data, count, dtype, op, pre, post, what);
  const std::size_t elem = dtype_size(dtype);
  const std::size_t step = std::max<std::size_t>(1, ctx.config.chunk_bytes / elem);
  const std::size_t pieces = (count + step - 1) / step;
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t lo = count * i / pieces, hi = count * (i + 1) / pieces;
    char* piece = static_cast<char*>(data) + lo * elem;
    applyScaling(pre, piece, hi - lo, dtype);
    if (preferDoubling((hi - lo) * elem, ctx.link)) {
      doublingAllreduce(ctx, piece, hi - lo, dtype, op, post, what);
      continue;
    }
    const Blocks blocks = evenBlocks(hi - lo, elem, ctx.size());
    ringReduceScatter(ctx, piece, blocks, piece + blocks.offset[ctx.rank()], dtype, op, post, what);
    ringAllgather(ctx, piece, blocks, what);
  }
}

// A lone tensor, reduced where it lies.
void reduceInPlace(Context& ctx, const Response& response, std::size_t i, TensorEntry* entry) {
  const std::size_t bytes = response.tensorBytes(i);
  const std::size_t count = bytes / dtype_size(response.dtype);
  if (count == 0) return;  // same on every rank: nothing to exchange
  void* data = nullptr;
  Scaling pre;
  // Every rank scales the result, a joined one too: the ring and the shared-memory
  // allreduce leave each rank to scale its own block of it for everyone.
  const Scaling post = postScaling(response, ctx.size());
  if (localInput(response, i, entry, bytes)) {
    data = entry->tensor.data;
    pre = preScaling(response);
  } else {
    data = ctx.fusion.reserve(bytes);
    cpu::fillNeutral(data, count, response.dtype, response.op);
  }
  timelineStep(reduceStep(ctx));
  reduceInPieces(ctx, data, count, response.dtype, response.op, pre, post,
                 describeTensor(response, i));
}

// A fused group through the shared-memory window, reduced where its tensors lie
// (SharedMemory's spread form): the same pieces and arithmetic as packed back to back
// in the fusion buffer, without the copies in and out (with a fusion threshold of tens
// of megabytes, as Horovod's, those took longer than the reduction itself;
// docs/performance.md). Every tensor local and none sharing memory with another; false
// (nothing done) otherwise. Ranks may decide differently: both ways run the same
// pieces, blocks and rounds.
bool reduceSpread(Context& ctx, const Response& response, std::vector<TensorEntry*>& entries,
                  const std::vector<bool>& local) {
  if (!ctx.shm) return false;
  if (!std::all_of(local.begin(), local.end(), [](bool l) { return l; })) return false;
  shm::Spread data;
  std::vector<Span> spans;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    char* at = static_cast<char*>(entries[i]->tensor.data);
    data.add(at, response.tensorBytes(i));
    const auto p = reinterpret_cast<std::uintptr_t>(at);
    spans.push_back({p, p + response.tensorBytes(i)});
  }
  if (anyOverlap(std::move(spans))) return false;
  timelineStep(reduceStep(ctx));
  ctx.shm->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
  ctx.shm->allreduce(data, response.dtype, response.op, preScaling(response),
                     postScaling(response, ctx.size()), describe(response));
  return true;
}

// A fused group, through the fusion buffer: tensors back to back (one dtype, so every
// offset is element-aligned), laid out by the shared planner (fused_layout.h).
// `local`: localInputs(response, entries).
void reduceFused(Context& ctx, const Response& response, std::vector<TensorEntry*>& entries,
                 const std::vector<bool>& local) {
  const DType dtype = response.dtype;
  const std::size_t elem = dtype_size(dtype);
  std::vector<std::size_t> bytes(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) bytes[i] = response.tensorBytes(i);
  const FusedReduction plan = planFusedReduction(bytes, local, elem, elem, 1);
  char* fused = ctx.fusion.reserve(plan.used);

  std::vector<cpu::CopyPiece> in, out;
  for (std::size_t i : plan.copied) {
    in.push_back({fused + plan.offset[i], entries[i]->tensor.data, plan.bytes[i]});
    out.push_back({entries[i]->tensor.data, fused + plan.offset[i], plan.bytes[i]});
  }
  timelineStep(kCopyInStep);
  cpu::parallelCopy(in);
  for (const cpu::CopyPiece& piece : in)
    applyScaling(preScaling(response), piece.dst, piece.bytes / elem, dtype);
  for (const Region& r : plan.neutral)
    cpu::fillNeutral(fused + r.at, r.bytes / elem, dtype, response.op);

  // Scaling the whole buffer is one pass; the joined ranks' regions are discarded.
  timelineStep(reduceStep(ctx));
  reduceInPieces(ctx, fused, plan.count, dtype, response.op, Scaling{},
                 postScaling(response, ctx.size()), describe(response));
  timelineStep(kCopyOutStep);
  cpu::parallelCopy(out);
}

class AllreduceOp final : public Op {
 public:
  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Allreduce && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& exec, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    Context ctx = contextOf(exec);
    if (response.op == ReduceOp::Adasum) return adasumAllreduce(ctx, response, entries);
    if (response.names.size() == 1 || response.totalBytes() > ctx.config.fusion_threshold) {
      for (std::size_t i = 0; i < response.names.size(); ++i)
        reduceInPlace(ctx, response, i, entries[i]);
    } else {
      const std::vector<bool> local = localInputs(response, entries);  // checked once
      if (!reduceSpread(ctx, response, entries, local)) reduceFused(ctx, response, entries, local);
    }
  }
};

}  // namespace

std::unique_ptr<Op> makeAllreduce() { return std::make_unique<AllreduceOp>(); }

}  // namespace accord::mpi

// Reducescatter on host memory: through the shared-memory window when the set's ranks
// share this host (SharedMemory::reduceScatter), else as a ring (ring.h).
//
// Every rank holds the same input shape; rank r receives reducescatter_rows(rows, r, n)
// rows of the reduced tensor (the first ranks one more when rows do not divide). Both
// transports want rank r's rows as block r, which a lone tensor already is, so it is
// reduced straight from the input into the output. Through the window a fused group is
// too: each block is read from the tensors where they lie and reduced into the outputs
// (the window's spread form). Over the ring it is packed rank-major (rank 0's rows of
// every tensor, then rank 1's, ...) into the fusion buffer, reduced into a region after
// it, and unpacked. We also pack on a joined rank (it contributes the neutral element),
// where an output lies over an input, and, for the ring, when a prescale is requested
// (the input is not ours to modify; the shared-memory transport scales its copies in
// the window).
// Average and postscale are applied as each result block is completed.
#include "ops/common/checks.h"
#include "ops/common/fused_layout.h"
#include "ops/common/layouts.h"
#include "ops/common/scaling.h"
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/ring.h"
#include "ops/shm/shared_memory.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace accord::mpi {

namespace {

using Plan = ScatterPlan;

// Block r of `input` (elements [first[r], first[r] + count[r])) reduced over the ranks
// into `output` on rank r, `pre` applied to the inputs. Through the shared-memory window,
// or as a ring in pieces of at most ACCORD_CHUNK_BYTES per block, so that the ring's
// temporaries stay small and in cache; the ring takes inputs already prescaled.
void reduceInPieces(Context& ctx, const Response& response, const char* input,
                    const std::vector<std::size_t>& first, const std::vector<std::size_t>& count,
                    char* output, const Scaling& pre = {}) {
  if (ctx.shm) {
    ctx.shm->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
    ctx.shm->reduceScatter(input, output, response.dtype, response.op, pre,
                           postScaling(response, ctx.size()), {first, count}, describe(response));
    return;
  }
  if (!pre.isOne()) throw Error("reducescatter: the ring takes prescaled inputs only");
  const std::size_t elem = dtype_size(response.dtype);
  const std::size_t largest = *std::max_element(count.begin(), count.end());
  const std::size_t step = std::max<std::size_t>(1, ctx.config.chunk_bytes / elem);
  const std::size_t pieces = std::max<std::size_t>(1, (largest + step - 1) / step);
  const Scaling post = postScaling(response, ctx.size());
  const std::size_t me = static_cast<std::size_t>(ctx.rank());
  for (std::size_t p = 0; p < pieces; ++p) {
    Blocks blocks;
    for (std::size_t r = 0; r < count.size(); ++r) {
      const std::size_t lo = count[r] * p / pieces, hi = count[r] * (p + 1) / pieces;
      blocks.offset.push_back((first[r] + lo) * elem);
      blocks.bytes.push_back((hi - lo) * elem);
    }
    char* out = output + count[me] * p / pieces * elem;
    ringReduceScatter(ctx, input, blocks, out, response.dtype, response.op, post,
                      describe(response));
  }
}

void reduceDirect(Context& ctx, const Response& response, const Plan& plan, const void* input,
                  void* output) {
  std::vector<std::size_t> first, count;
  for (int r = 0; r < ctx.size(); ++r) {
    first.push_back(plan.first[0][r] * plan.row_elems[0]);
    count.push_back(plan.per_rank[r]);
  }
  reduceInPieces(ctx, response, static_cast<const char*>(input), first, count,
                 static_cast<char*>(output), preScaling(response));
}

// Whether an output shares memory with an input: the spread path reads the inputs
// while it writes the outputs, so it keeps to groups where none does.
bool outputsOverlapInputs(const Response& response, const std::vector<TensorEntry*>& entries,
                          const std::vector<void*>& outputs, const Plan& plan, int me) {
  const std::size_t elem = dtype_size(response.dtype);
  std::vector<Span> read, written;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    const auto in = reinterpret_cast<std::uintptr_t>(entries[t]->tensor.data);
    read.push_back({in, in + response.tensorBytes(t)});
    const auto out = reinterpret_cast<std::uintptr_t>(outputs[t]);
    const auto rows = static_cast<std::size_t>(plan.rows[t][static_cast<std::size_t>(me)]);
    written.push_back({out, out + rows * plan.row_elems[t] * elem});
  }
  return anyOverlap(std::move(read), written);
}

// A fused group through the shared-memory window, read from the tensors and reduced
// into the outputs where they lie (SharedMemory's spread form): the same arithmetic as
// packing, without the copies into the fusion buffer and out of it, which took as long
// as the reduction (docs/performance.md).
void reduceSpread(Context& ctx, const Response& response, const Plan& plan,
                  std::vector<TensorEntry*>& entries, const std::vector<void*>& outputs) {
  const std::size_t elem = dtype_size(response.dtype);
  std::vector<shm::Spread> inputs(static_cast<std::size_t>(ctx.size()));
  shm::Spread output;
  for (int r = 0; r < ctx.size(); ++r)
    for (std::size_t t = 0; t < entries.size(); ++t) {
      const auto n = static_cast<std::size_t>(plan.rows[t][r]) * plan.row_elems[t] * elem;
      // Only read; Spread's pointers serve outputs too.
      char* input = const_cast<char*>(static_cast<const char*>(entries[t]->tensor.data));
      inputs[static_cast<std::size_t>(r)].add(
          input + static_cast<std::size_t>(plan.first[t][r]) * plan.row_elems[t] * elem, n);
      if (r == ctx.rank()) output.add(static_cast<char*>(outputs[t]), n);
    }
  ctx.shm->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
  ctx.shm->reduceScatter(inputs, output, response.dtype, response.op, preScaling(response),
                         postScaling(response, ctx.size()), describe(response));
}

void reducePacked(Context& ctx, const Response& response, const Plan& plan,
                  std::vector<TensorEntry*>& entries, const std::vector<bool>& local,
                  std::vector<void*>& outputs) {
  const DType dtype = response.dtype;
  const std::size_t elem = dtype_size(dtype);
  const std::size_t send_bytes = alignUp(plan.total * elem);
  char* send = ctx.fusion.reserve(send_bytes + plan.per_rank[ctx.rank()] * elem);
  char* recv = send + send_bytes;

  std::vector<cpu::CopyPiece> in, out;
  std::vector<std::size_t> first, count;
  std::size_t offset = 0;  // elements into the send buffer
  for (int r = 0; r < ctx.size(); ++r) {
    first.push_back(offset);
    count.push_back(plan.per_rank[r]);
    for (std::size_t t = 0; t < entries.size(); ++t) {
      const std::size_t n = plan.rows[t][r] * plan.row_elems[t];
      char* dst = send + offset * elem;
      if (local[t] && n > 0) {
        const char* src = static_cast<const char*>(entries[t]->tensor.data);
        in.push_back({dst, src + plan.first[t][r] * plan.row_elems[t] * elem, n * elem});
      } else if (!local[t]) {
        cpu::fillNeutral(dst, n, dtype, response.op);
      }
      // An output this rank failed to allocate is a shared stand-in: leave it alone.
      if (r == ctx.rank() && local[t] && !entries[t]->error && n > 0)
        out.push_back({outputs[t], recv + (offset - first[r]) * elem, n * elem});
      offset += n;
    }
  }
  cpu::parallelCopy(in);
  if (response.prescale != 1.0)
    for (const cpu::CopyPiece& piece : in)
      applyScaling(preScaling(response), piece.dst, piece.bytes / elem, dtype);
  reduceInPieces(ctx, response, send, first, count, recv);
  cpu::parallelCopy(out);
}

class ReducescatterOp final : public Op {
 public:
  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Reducescatter && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& exec, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    Context ctx = contextOf(exec);
    const Plan plan = reducescatterPlan(response, ctx.size());
    std::vector<void*> outputs(entries.size(), nullptr);
    std::vector<bool> local(entries.size(), false);
    for (std::size_t t = 0; t < entries.size(); ++t) {
      TensorEntry* e = entries[t];
      local[t] = localInput(response, t, e, response.tensorBytes(t));
      if (!local[t]) continue;
      Shape shape = response.shapes[t];
      shape[0] = plan.rows[t][ctx.rank()];
      outputs[t] = outputOrSpare(ctx.spare, response, t, *e, shape);
    }
    if (plan.total == 0) return;  // every rank knows: nothing to reduce
    // Packed where a rank contributes the neutral element for a tensor it lacks, where
    // an output lies over an input (the direct and spread paths read the inputs while
    // they write the outputs), and, for a fused group, where an output is a shared
    // stand-in for one that failed. Ranks may choose differently: every path runs the
    // same rounds.
    const bool apart = std::all_of(local.begin(), local.end(), [](bool l) { return l; }) &&
                       !outputsOverlapInputs(response, entries, outputs, plan, ctx.rank());
    if (entries.size() == 1 && apart && (ctx.shm || response.prescale == 1.0))
      return reduceDirect(ctx, response, plan, entries[0]->tensor.data, outputs[0]);
    const bool failed =
        std::any_of(entries.begin(), entries.end(), [](TensorEntry* e) { return e && e->error; });
    if (ctx.shm && apart && !failed)
      reduceSpread(ctx, response, plan, entries, outputs);
    else
      reducePacked(ctx, response, plan, entries, local, outputs);
  }
};

}  // namespace

std::unique_ptr<Op> makeReducescatter() { return std::make_unique<ReducescatterOp>(); }

}  // namespace accord::mpi

// Adasum allreduce (see adasum.h).
#include "ops/mpi/adasum.h"

#include "ops/common/checks.h"
#include "ops/common/scaling.h"
#include "ops/cpu/kernels.h"
#include "ops/mpi/link.h"
#include "runtime/timeline.h"

namespace accord::mpi {

namespace {

constexpr int kAdasumTag = 0x4144;

// The rounds, on `data` (the tensors at `offset`, back to back, `offset.back()` bytes).
void adasumRounds(Context& ctx, char* data, const std::vector<std::size_t>& offset, DType dtype,
                  const std::string& what) {
  Link& link = ctx.link;
  const int n = link.size(), r = link.rank();
  const std::size_t total = offset.back(), elem = dtype_size(dtype);
  if (n < 2 || total == 0) return;
  char* theirs = ctx.scratch.reserve(total);
  for (int mask = 1; mask < n; mask *= 2) {
    const int peer = r ^ mask;
    Requests requests;
    link.recv(requests, theirs, total, peer, kAdasumTag);
    link.send(requests, data, total, peer, kAdasumTag);
    link.await(requests, what, "exchange its partial Adasum", Patience::Data);
    const char* lower = r < peer ? data : theirs;
    const char* upper = r < peer ? theirs : data;
    for (std::size_t i = 0; i + 1 < offset.size(); ++i) {
      const std::size_t at = offset[i], count = (offset[i + 1] - at) / elem;
      if (count == 0) continue;
      const cpu::AdasumDots dots = cpu::adasumDots(lower + at, upper + at, count, dtype);
      cpu::adasumCombine(lower + at, upper + at, data + at, count, dtype,
                         cpu::adasumWeights(dots));
    }
  }
}

}  // namespace

void adasumAllreduce(Context& ctx, const Response& response, std::vector<TensorEntry*>& entries) {
  const DType dtype = response.dtype;
  const std::size_t elem = dtype_size(dtype);
  std::vector<std::size_t> offset(entries.size() + 1, 0);
  for (std::size_t i = 0; i < entries.size(); ++i)
    offset[i + 1] = offset[i] + response.tensorBytes(i);
  if (offset.back() == 0) return;  // the same on every rank: nothing to exchange
  const std::vector<bool> local = localInputs(response, entries);
  char* data = ctx.fusion.reserve(offset.back());

  std::vector<cpu::CopyPiece> in, out;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::size_t bytes = offset[i + 1] - offset[i];
    if (local[i]) {
      in.push_back({data + offset[i], entries[i]->tensor.data, bytes});
      out.push_back({entries[i]->tensor.data, data + offset[i], bytes});
    } else {
      cpu::fillNeutral(data + offset[i], bytes / elem, dtype, ReduceOp::Adasum);
    }
  }
  timelineStep("copy_in");
  cpu::parallelCopy(in);
  for (const cpu::CopyPiece& piece : in)
    applyScaling(preScaling(response), piece.dst, piece.bytes / elem, dtype);

  timelineStep("reduce_adasum");
  adasumRounds(ctx, data, offset, dtype, describe(response));
  applyScaling(postScaling(response, ctx.size()), data, offset.back() / elem, dtype);

  timelineStep("copy_out");
  cpu::parallelCopy(out);
}

}  // namespace accord::mpi

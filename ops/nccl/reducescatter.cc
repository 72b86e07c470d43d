// Reducescatter of CUDA tensors with NCCL.
//
// Rank r receives reducescatter_rows(rows, r, n) rows of the reduced tensor: the first
// ranks one more where the rows do not divide. ncclReduceScatter gives every rank the
// same count, so the input is packed rank-major (rank 0's rows of every tensor, then
// rank 1's, ...) into blocks of the largest rank's size, the shorter blocks padded with
// the op's neutral element, reduced into a region after the blocks, and this rank's
// rows copied out. A lone tensor whose rows divide evenly, with no prescale (the input
// is not ours to scale), is reduced straight from its input into its output.
//
// A rank whose input failed (or that has joined, which negotiation refuses today)
// contributes the neutral element; one whose output failed receives into scratch.
#include "ops/cuda/kernels.h"
#include "ops/nccl/nccl_common.h"
#include "ops/nccl/nccl_ops.h"

#include <algorithm>

namespace accord::nccl {

namespace {

using Plan = ScatterPlan;

void reduceDirect(Launch& l, const Plan& plan, const Reduction& red, void* output) {
  const Response& r = l.response;
  const std::size_t count = plan.per_rank[0];
  l.nccl([&](ncclComm_t comm) {
    return ncclReduceScatter(l.entries[0]->tensor.data, output, count, ncclType(r.dtype), red.op,
                             comm, l.stream);
  });
  if (!red.post.isOne())
    cuda::scale(output, count, r.dtype, red.post.factor, red.post.divisor, l.stream);
}

void reducePacked(Launch& l, const Plan& plan, const Reduction& red, const std::vector<bool>& local,
                  const std::vector<void*>& outputs) {
  const Response& r = l.response;
  const int size = l.ctx.size(), me = l.ctx.rank();
  const std::size_t elem = dtype_size(r.dtype);
  const std::size_t block = *std::max_element(plan.per_rank.begin(), plan.per_rank.end());
  const std::size_t send_bytes = alignUp(block * size * elem);
  char* send = l.device.fusion.reserve(send_bytes + block * elem, l.stream);
  char* recv = send + send_bytes;

  // Copy the inputs in, then scale them all at once, then write the neutral element
  // where nothing of ours goes (padding, failed inputs): scaling it would change it.
  std::vector<cuda::CopyPiece> in, out;
  std::vector<std::pair<std::size_t, std::size_t>> neutral;  // (element offset, count)
  for (int k = 0; k < size; ++k) {
    std::size_t at = static_cast<std::size_t>(k) * block;  // elements into `send`
    for (std::size_t t = 0; t < l.entries.size(); ++t) {
      const std::size_t n = plan.rows[t][k] * plan.row_elems[t];
      if (local[t] && n > 0) {
        const char* src = static_cast<const char*>(l.entries[t]->tensor.data);
        in.push_back(
            {send + at * elem, src + plan.first[t][k] * plan.row_elems[t] * elem, n * elem});
      } else if (n > 0) {
        neutral.emplace_back(at, n);
      }
      if (k == me && outputs[t] && n > 0)
        out.push_back({outputs[t], recv + (at - k * block) * elem, n * elem});
      at += n;
    }
    if (plan.per_rank[k] < block) neutral.emplace_back(at, block - plan.per_rank[k]);
  }
  cuda::batchedCopy(in, l.stream);
  const Scaling pre = preScaling(r);
  if (!pre.isOne()) cuda::scale(send, block * size, r.dtype, pre.factor, pre.divisor, l.stream);
  for (auto [at, n] : neutral) cuda::fillNeutral(send + at * elem, n, r.dtype, r.op, l.stream);
  l.nccl([&](ncclComm_t comm) {
    return ncclReduceScatter(send, recv, block, ncclType(r.dtype), red.op, comm, l.stream);
  });
  if (!red.post.isOne())
    cuda::scale(recv, plan.per_rank[me], r.dtype, red.post.factor, red.post.divisor, l.stream);
  cuda::batchedCopy(out, l.stream);
}

class ReducescatterOp final : public Op {
 public:
  explicit ReducescatterOp(std::shared_ptr<cuda::Devices> devices) : devices_(std::move(devices)) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Reducescatter &&
           response.device.type == DeviceType::CUDA && reducesOnNccl(response.dtype);
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const Plan plan = reducescatterPlan(response, ctx.size());
    run(devices_, ctx, response, entries, [&](Launch& l) {
      const std::size_t n = entries.size();
      std::vector<bool> local(n, false);
      std::vector<void*> outputs(n, nullptr);
      for (std::size_t t = 0; t < n; ++t) {
        local[t] = l.checkInput(t, response.tensorBytes(t));
        if (!local[t]) continue;
        Shape shape = response.shapes[t];
        shape[0] = plan.rows[t][ctx.rank()];
        // A failed output gets no copy: its stand-in is not needed.
        prepareLocal(*entries[t], [&] {
          outputs[t] = cuda::deviceOutput(response, t, *entries[t], shape, l.device.device);
        });
      }
      const bool even = std::all_of(plan.per_rank.begin(), plan.per_rank.end(),
                                    [&](std::size_t c) { return c == plan.per_rank[0]; });
      const std::size_t largest = *std::max_element(plan.per_rank.begin(), plan.per_rank.end());
      if (largest == 0) return;  // every rank knows: nothing to reduce
      const Reduction red = reductionFor(response, ctx.size());
      if (n == 1 && local[0] && outputs[0] && even && response.prescale == 1.0)
        reduceDirect(l, plan, red, outputs[0]);
      else
        reducePacked(l, plan, red, local, outputs);
    });
  }

 private:
  std::shared_ptr<cuda::Devices> devices_;
};

}  // namespace

std::unique_ptr<Op> makeReducescatter(std::shared_ptr<cuda::Devices> devices) {
  return std::make_unique<ReducescatterOp>(std::move(devices));
}

}  // namespace accord::nccl

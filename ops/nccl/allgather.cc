// Allgather of CUDA tensors with NCCL.
//
// Ranks contribute different numbers of rows (response.rank_rows[t * size + r]), which
// ncclAllGather cannot take: it moves equal blocks. So each rank's block is broadcast
// from that rank, all broadcasts in one group; where every block has the same size (the
// common case), one in-place ncclAllGather does it instead.
//
// A lone tensor is gathered straight into its output: this rank's rows are copied into
// their place and the others arrive around them. A fused group is laid out rank-major
// in the fusion buffer (rank 0's rows of every tensor, then rank 1's, ...), so each
// rank's contribution is one block; one batched copy fills this rank's block and one
// copies every tensor's rows out. A joined rank, or one whose input or output failed,
// contributes zeros for its rows (none, for a joined rank) and discards the result.
#include "ops/cuda/kernels.h"
#include "ops/nccl/nccl_common.h"
#include "ops/nccl/nccl_ops.h"

#include <algorithm>

namespace accord::nccl {

namespace {

// Exchanges the blocks of `base` (block r at offset[r], bytes[r] long, contiguous in
// rank order); this rank's block is in place already.
void exchangeBlocks(Launch& l, char* base, const std::vector<std::size_t>& offset,
                    const std::vector<std::size_t>& bytes) {
  const int size = l.ctx.size(), me = l.ctx.rank();
  const bool equal = std::all_of(bytes.begin(), bytes.end(), [&](auto b) { return b == bytes[0]; });
  if (equal && bytes[0] == 0) return;
  l.nccl([&](ncclComm_t comm) {
    if (equal) return ncclAllGather(base + offset[me], base, bytes[0], ncclUint8, comm, l.stream);
    for (int r = 0; r < size; ++r) {
      if (bytes[r] == 0) continue;
      const ncclResult_t result =
          ncclBroadcast(base + offset[r], base + offset[r], bytes[r], ncclUint8, r, comm, l.stream);
      if (result != ncclSuccess && result != ncclInProgress) return result;
    }
    return ncclSuccess;
  });
}

std::vector<std::size_t> blockOffsets(const FusedGather& plan) {
  std::vector<std::size_t> offset;
  for (const Region& b : plan.blocks) offset.push_back(b.at);
  return offset;
}

void gatherDirect(Launch& l, const std::vector<std::size_t>& bytes) {
  const int me = l.ctx.rank();
  const FusedGather plan = planFusedGather({bytes}, l.ctx.size());
  const bool input = l.checkInput(0, bytes[me]);
  char* out = static_cast<char*>(l.outputOrScratch(0, l.response.shapes[0]));
  if (plan.total == 0) return;
  char* own = out + plan.blocks[me].at;
  if (bytes[me] > 0) {
    if (input) {
      if (l.entries[0]->tensor.data != own)  // equal: gathered in place
        ACCORD_CUDA_CHECK(cudaMemcpyAsync(own, l.entries[0]->tensor.data, bytes[me],
                                          cudaMemcpyDeviceToDevice, l.stream));
    } else
      ACCORD_CUDA_CHECK(cudaMemsetAsync(own, 0, bytes[me], l.stream));
  }
  exchangeBlocks(l, out, blockOffsets(plan), bytes);
}

// Rank-major in the fusion buffer (fused_layout.h).
void gatherFused(Launch& l, const std::vector<std::vector<std::size_t>>& bytes) {
  const std::size_t n = l.entries.size();
  const int size = l.ctx.size(), me = l.ctx.rank();
  const FusedGather plan = planFusedGather(bytes, size);
  std::vector<char*> outputs(n, nullptr);
  std::vector<bool> input(n, false);
  for (std::size_t t = 0; t < n; ++t) {
    input[t] = l.checkInput(t, bytes[t][me]);
    // Without an output (joined, or it failed) the others still get our rows.
    if (input[t])
      prepareLocal(*l.entries[t], [&] {
        outputs[t] = static_cast<char*>(cuda::deviceOutput(l.response, t, *l.entries[t],
                                                           l.response.shapes[t], l.device.device));
      });
  }
  if (plan.total == 0) return;
  char* fused = l.device.fusion.reserve(plan.total, l.stream);
  std::vector<cuda::CopyPiece> in, out;
  for (std::size_t t = 0; t < n; ++t) {
    char* mine = fused + plan.at[t][me];
    if (input[t])
      in.push_back({mine, l.entries[t]->tensor.data, bytes[t][me]});
    else if (bytes[t][me] > 0)
      ACCORD_CUDA_CHECK(cudaMemsetAsync(mine, 0, bytes[t][me], l.stream));
    if (!outputs[t]) continue;
    for (int r = 0; r < size; ++r)
      out.push_back({outputs[t] + plan.dst[t][r], fused + plan.at[t][r], bytes[t][r]});
  }
  std::vector<std::size_t> block(size);
  for (int r = 0; r < size; ++r) block[r] = plan.blocks[r].bytes;
  cuda::batchedCopy(in, l.stream);
  exchangeBlocks(l, fused, blockOffsets(plan), block);
  cuda::batchedCopy(out, l.stream);
}

class AllgatherOp final : public Op {
 public:
  explicit AllgatherOp(std::shared_ptr<cuda::Devices> devices) : devices_(std::move(devices)) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Allgather && response.device.type == DeviceType::CUDA;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const std::size_t n = response.names.size();
    const int size = ctx.size();
    // bytes[t][r]: what rank r contributes to tensor t.
    const auto bytes = allgatherBytes(response, size);
    run(devices_, ctx, response, entries, [&](Launch& l) {
      if (n == 1)
        gatherDirect(l, bytes[0]);
      else
        gatherFused(l, bytes);
    });
  }

 private:
  std::shared_ptr<cuda::Devices> devices_;
};

}  // namespace

std::unique_ptr<Op> makeAllgather(std::shared_ptr<cuda::Devices> devices) {
  return std::make_unique<AllgatherOp>(std::move(devices));
}

}  // namespace accord::nccl

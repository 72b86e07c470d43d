// Broadcast of CUDA tensors with NCCL: in place from response.root, one ncclBroadcast
// per tensor, all in one group. A rank whose tensor does not match the response (its
// handle then fails) receives into scratch space; were it the root, it sends zeros.
// (A joined root is refused by negotiation.)
#include "ops/nccl/nccl_common.h"
#include "ops/nccl/nccl_ops.h"

namespace accord::nccl {

namespace {

class BroadcastOp final : public Op {
 public:
  explicit BroadcastOp(std::shared_ptr<cuda::Devices> devices) : devices_(std::move(devices)) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Broadcast && response.device.type == DeviceType::CUDA;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    if (response.root < 0 || response.root >= ctx.size())
      throw InvalidArgument(describe(response) + ": root rank " + std::to_string(response.root) +
                            " is outside the process set of " + std::to_string(ctx.size()) +
                            " ranks");
    run(devices_, ctx, response, entries, [&](Launch& l) {
      // Stand-ins are carved from one scratch region, reserved once.
      std::size_t scratch_bytes = 0;
      std::vector<bool> local(entries.size());
      for (std::size_t i = 0; i < entries.size(); ++i) {
        local[i] = l.checkInput(i, response.tensorBytes(i));
        if (!local[i]) scratch_bytes += alignUp(response.tensorBytes(i));
      }
      char* scratch = scratch_bytes ? l.device.scratch.reserve(scratch_bytes, l.stream) : nullptr;
      std::vector<std::pair<void*, std::size_t>> buffers;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::size_t bytes = response.tensorBytes(i);
        if (bytes == 0) continue;
        if (local[i]) {
          buffers.emplace_back(entries[i]->tensor.data, bytes);
          continue;
        }
        if (ctx.rank() == response.root)
          ACCORD_CUDA_CHECK(cudaMemsetAsync(scratch, 0, bytes, l.stream));
        buffers.emplace_back(scratch, bytes);
        scratch += alignUp(bytes);
      }
      // Alone, the root has it already.
      if (buffers.empty() || (ctx.size() == 1 && !ctx.config.nccl_alone)) return;
      l.nccl([&](ncclComm_t comm) {
        for (auto [data, bytes] : buffers) {
          const ncclResult_t result =
              ncclBroadcast(data, data, bytes, ncclUint8, response.root, comm, l.stream);
          if (result != ncclSuccess && result != ncclInProgress) return result;
        }
        return ncclSuccess;
      });
    });
  }

 private:
  std::shared_ptr<cuda::Devices> devices_;
};

}  // namespace

std::unique_ptr<Op> makeBroadcast(std::shared_ptr<cuda::Devices> devices) {
  return std::make_unique<BroadcastOp>(std::move(devices));
}

}  // namespace accord::nccl

// Alltoall of CUDA tensors with NCCL: every rank sends each peer its rows and receives
// the peer's, as one group of ncclSend/ncclRecv straight from the input to the output;
// this rank's own rows are a device-to-device copy.
//
// response.rank_rows is the split matrix, rows sent from src to dst at
// [src * size + dst], so both sides of every transfer know its size; transfers of
// zero bytes are left out on both. A rank whose input or output failed sends zeros and
// receives into scratch (negotiation refuses alltoall while a rank has joined).
#include "ops/nccl/nccl_common.h"
#include "ops/nccl/nccl_ops.h"

namespace accord::nccl {

namespace {


class AlltoallOp final : public Op {
 public:
  explicit AlltoallOp(std::shared_ptr<cuda::Devices> devices) : devices_(std::move(devices)) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Alltoall && response.device.type == DeviceType::CUDA;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const int n = ctx.size();
    if (response.names.size() != 1 || response.rank_rows.size() != std::size_t(n) * n)
      throw InvalidArgument(describe(response) + ": expected one tensor and a " +
                            std::to_string(n) + "x" + std::to_string(n) + " split matrix, got " +
                            std::to_string(response.names.size()) + " tensors and " +
                            std::to_string(response.rank_rows.size()) + " splits");
    const Exchange x = alltoallExchange(response, ctx.rank(), ctx.size());
    run(devices_, ctx, response, entries, [&](Launch& l) { exchange(l, x); });
  }

 private:
  static void exchange(Launch& l, const Exchange& x) {
    const int n = l.ctx.size(), me = l.ctx.rank();
    Shape shape = l.response.shapes[0].empty() ? Shape{0} : l.response.shapes[0];
    shape[0] = 0;
    for (std::int64_t rows : x.received_rows) shape[0] += rows;
    const char* in = nullptr;
    char* out = nullptr;
    if (l.checkInput(0, x.send_total)) {
      in = static_cast<const char*>(l.entries[0]->tensor.data);
      out = static_cast<char*>(l.outputOrScratch(0, shape));
      l.entries[0]->received_splits = x.received_rows;
    } else {
      char* scratch = l.device.scratch.reserve(alignUp(x.send_total) + x.recv_total, l.stream);
      if (x.send_total > 0) ACCORD_CUDA_CHECK(cudaMemsetAsync(scratch, 0, x.send_total, l.stream));
      in = scratch;
      out = scratch + alignUp(x.send_total);
    }
    if (x.send[me] > 0)
      ACCORD_CUDA_CHECK(cudaMemcpyAsync(out + x.recv_at[me], in + x.send_at[me], x.send[me],
                                        cudaMemcpyDeviceToDevice, l.stream));
    bool any = false;
    for (int r = 0; r < n; ++r) any = any || (r != me && (x.send[r] > 0 || x.recv[r] > 0));
    if (!any) return;
    l.nccl([&](ncclComm_t comm) {
      for (int k = 1; k < n; ++k) {
        const int peer = (me + k) % n;
        ncclResult_t result = ncclSuccess;
        if (x.send[peer] > 0)
          result = ncclSend(in + x.send_at[peer], x.send[peer], ncclUint8, peer, comm, l.stream);
        if (result != ncclSuccess && result != ncclInProgress) return result;
        if (x.recv[peer] > 0)
          result = ncclRecv(out + x.recv_at[peer], x.recv[peer], ncclUint8, peer, comm, l.stream);
        if (result != ncclSuccess && result != ncclInProgress) return result;
      }
      return ncclSuccess;
    });
  }

  std::shared_ptr<cuda::Devices> devices_;
};

}  // namespace

std::unique_ptr<Op> makeAlltoall(std::shared_ptr<cuda::Devices> devices) {
  return std::make_unique<AlltoallOp>(std::move(devices));
}

}  // namespace accord::nccl

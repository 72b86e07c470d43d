// Broadcast on host memory with MPI: in place from response.root (a rank of ctx.comm).
//
// Large tensors go in pieces of ACCORD_CHUNK_BYTES, like allreduce, which also keeps
// every call's count within MPI's int range. A joined rank receives into scratch
// space in the fusion buffer and discards it (zeros if it were ever the root).
#include "ops/mpi/mpi_common.h"
#include "ops/mpi/mpi_ops.h"

#include <cstring>

namespace accord {
namespace {

class MpiBroadcast final : public Op {
 public:
  explicit MpiBroadcast(FusionBuffer& buffer) : buffer_(buffer) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Broadcast && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    if (response.root < 0 || response.root >= ctx.size)
      throw InvalidArgument(mpi::describe(response) + ": root rank " +
                            std::to_string(response.root) + " is outside the process set of " +
                            std::to_string(ctx.size) + " ranks");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::size_t bytes = response.tensorBytes(i);
      void* data;
      if (entries[i]) {
        mpi::checkInput(response, i, *entries[i], bytes);
        data = entries[i]->tensor.data;
      } else {
        data = buffer_.reserve(bytes);
        if (ctx.rank == response.root) std::memset(data, 0, bytes);
      }
      mpi::chunkedBroadcast(ctx, data, bytes, response.root);
    }
  }

 private:
  FusionBuffer& buffer_;
};

}  // namespace

std::unique_ptr<Op> makeMpiBroadcast(FusionBuffer& buffer) {
  return std::make_unique<MpiBroadcast>(buffer);
}

}  // namespace accord

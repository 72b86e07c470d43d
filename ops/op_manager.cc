// OpManager: runs each negotiated response on the first backend op that accepts it.
//
// Ops are tried in registration order. Device backends (NCCL) must be registered
// before MPI, so that CUDA tensors go to them and host tensors fall through to MPI.
// The manager owns the fusion buffer the MPI ops share, so it persists across cycles.
// Barrier, Join, process-set changes and errors never arrive here: the controller
// completes those itself.
#include "ops/op.h"

#include "ops/fusion_buffer.h"
#include "ops/mpi/mpi_ops.h"

namespace accord {

struct OpManager::Impl {
  FusionBuffer buffer;
  std::vector<std::unique_ptr<Op>> ops;
};

OpManager::OpManager() : impl_(std::make_unique<Impl>()) {
  FusionBuffer& buffer = impl_->buffer;
  impl_->ops.push_back(makeMpiAllreduce(buffer));
  impl_->ops.push_back(makeMpiAllgather(buffer));
  impl_->ops.push_back(makeMpiBroadcast(buffer));
  impl_->ops.push_back(makeMpiAlltoall(buffer));
  impl_->ops.push_back(makeMpiReducescatter(buffer));
}

OpManager::~OpManager() = default;

void OpManager::execute(ExecContext& ctx, const Response& response,
                        std::vector<TensorEntry*>& entries) {
  const std::string what = std::string(responseTypeName(response.type)) + " response" +
                           (response.names.empty() ? "" : " '" + response.names[0] + "'");
  if (entries.size() != response.names.size() || response.shapes.size() != response.names.size())
    throw InvalidArgument(what + ": " + std::to_string(response.names.size()) + " names, " +
                          std::to_string(response.shapes.size()) + " shapes and " +
                          std::to_string(entries.size()) + " entries; they must match");
  switch (response.type) {
    case ResponseType::Barrier:
    case ResponseType::Join:
    case ResponseType::AddProcessSet:
    case ResponseType::RemoveProcessSet:
    case ResponseType::Error:
      throw InvalidArgument(what + ": the controller completes this response type itself; "
                            "it must not reach the OpManager");
    default:
      break;
  }
  for (const auto& op : impl_->ops) {
    if (op->enabled(response)) {
      op->execute(ctx, response, entries);
      return;
    }
  }
  throw InvalidArgument("no backend op is enabled for " + what + " on device " +
                        response.device.str() +
                        (response.device.type == DeviceType::CPU
                             ? ""
                             : " (device tensors need a build with a device backend, e.g. NCCL)"));
}

}  // namespace accord

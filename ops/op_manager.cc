// OpManager: the MPI backend (runtime/backend.h). Connects process sets and runs each
// negotiated response on the first registered op that accepts it.
//
// Ops are tried in registration order: the device ops (DeviceSupport) come before MPI,
// so that CUDA tensors go to them and host tensors fall through to MPI. The manager owns
// the buffers the ops share, so they persist across cycles: a training loop that fuses
// the same gradients every step allocates once. Barrier, Join, process-set changes and
// errors never arrive here: the runtime completes those itself.
#include "ops/cpu/kernels.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/mpi_transport.h"
#include "ops/op.h"

#include <algorithm>
#include <thread>

namespace accord {

namespace {

class OpManager final : public Backend {
 public:
  explicit OpManager(const Config& config) : config_(config), device_(makeDeviceSupport(config)) {
    if (device_) ops_ = device_->makeOps();
    ops_.push_back(makeMpiAllreduce());
    ops_.push_back(makeMpiAllgather());
    ops_.push_back(makeMpiBroadcast());
    ops_.push_back(makeMpiAlltoall());
    ops_.push_back(makeMpiReducescatter());
  }

  std::unique_ptr<SetTransport> connect(MPI_Comm comm, std::vector<int> global_ranks) override {
    return std::make_unique<mpi::MpiTransport>(comm, std::move(global_ranks), config_);
  }

  void execute(SetTransport& transport, const Response& response,
               std::vector<TensorEntry*>& entries) override;

  std::shared_ptr<void> deviceReady(const TensorView& tensor, void* stream,
                                    const std::string& what) override {
    if (!device_)
      throw InvalidArgument(what + ": tensor is on " + tensor.device.str() +
                            ", but this build of Accord has no GPU support (it was built "
                            "without the CUDA toolkit); expected cpu");
    return device_->ready(tensor, stream, what);
  }

 private:
  const Config& config_;
  // Declared before the ops, which may share its state: destroyed after them.
  std::unique_ptr<DeviceSupport> device_;
  std::vector<std::unique_ptr<Op>> ops_;
  FusionBuffer fusion_, scratch_, spare_;
};

void OpManager::execute(SetTransport& transport, const Response& response,
                        std::vector<TensorEntry*>& entries) {
  const std::string what = std::string(responseTypeName(response.type)) + " response" +
                           (response.names.empty() ? "" : " '" + response.names[0] + "'");
  if (entries.size() != response.names.size() || response.shapes.size() != response.names.size())
    throw InvalidArgument(what + ": " + std::to_string(response.names.size()) + " names, " +
                          std::to_string(response.shapes.size()) + " shapes and " +
                          std::to_string(entries.size()) + " entries; they must match");
  // Every transport this backend hands out is an MpiTransport.
  auto& mpi_transport = static_cast<mpi::MpiTransport&>(transport);
  mpi_transport.link().checkUsable();
  ExecContext ctx{
      mpi_transport.link(),      mpi_transport.shm(),      config_, fusion_, scratch_, spare_,
      mpi_transport.extension(), mpi_transport.hierarchy()};
  for (const auto& op : ops_) {
    if (op->enabled(response)) return op->execute(ctx, response, entries);
  }
  throw InvalidArgument("no backend op is enabled for " + what + " on device " +
                        response.device.str() +
                        (response.device.type == DeviceType::CPU
                             ? ""
                             : " (device tensors need a build with GPU support)"));
}

}  // namespace

std::unique_ptr<Backend> makeBackend(const Config& config, int ranks_per_host) {
  // Ranks sharing a host already fill its cores: more kernel threads per rank would
  // only preempt each other, and the ranks' communication.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu::setThreads(std::max(1, cores / std::max(1, ranks_per_host)));
  return std::make_unique<OpManager>(config);
}

}  // namespace accord

// The dispatcher: runtime/backend.h's Backend. Connects process sets (through the host
// transport) and runs each negotiated response on the first registered op that
// accepts it.
//
// Ops are tried in registration order: the device ops (DeviceSupport) come before the
// host ops, so that CUDA tensors go to them and host tensors fall through to MPI. The
// dispatcher owns the buffers the ops share, so they persist across cycles: a training
// loop that fuses the same gradients every step allocates once. Barrier, Join,
// process-set changes and errors never arrive here: the runtime completes those itself.
#include "ops/common/op.h"
#include "ops/cpu/kernels.h"

#include <accord/error.h>
#include <tbb/info.h>

#include <algorithm>
#include <thread>

namespace accord {

namespace {

class Dispatcher final : public Backend {
 public:
  explicit Dispatcher(const Config& config) : config_(config), device_(makeDeviceSupport(config)) {
    if (device_) ops_ = device_->makeOps(makeHostOp);
    for (ResponseType type : kDataResponses) ops_.push_back(makeHostOp(type));
  }

  std::unique_ptr<SetTransport> connect(MPI_Comm comm, std::vector<int> global_ranks) override {
    return connectHost(comm, std::move(global_ranks), config_);
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

  void deviceHome(Device device, const std::string& what) override {
    if (device_) device_->home(device, what);
  }

 private:
  const Config& config_;
  // Declared before the ops, which may share its state: destroyed after them.
  std::unique_ptr<DeviceSupport> device_;
  std::vector<std::unique_ptr<Op>> ops_;
  FusionBuffer fusion_, scratch_, spare_;
};

void Dispatcher::execute(SetTransport& transport, const Response& response,
                         std::vector<TensorEntry*>& entries) {
  const std::string what = std::string(responseTypeName(response.type)) + " response" +
                           (response.names.empty() ? "" : " '" + response.names[0] + "'");
  if (entries.size() != response.names.size() || response.shapes.size() != response.names.size())
    throw InvalidArgument(what + ": " + std::to_string(response.names.size()) + " names, " +
                          std::to_string(response.shapes.size()) + " shapes and " +
                          std::to_string(entries.size()) + " entries; they must match");
  // Every transport connect() hands out is one; checked all the same, since the
  // runtime holds it as a plain SetTransport.
  auto* set = dynamic_cast<OpTransport*>(&transport);
  if (!set)
    throw Error(what + ": the process set's transport was not made by this backend's connect()");
  set->checkUsable();
  ExecContext ctx{*set, config_, fusion_, scratch_, spare_};
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
  // only preempt each other, and the ranks' communication. A rank bound to fewer cores
  // (mpirun's --bind-to core, its default at 2 ranks or fewer) runs on those alone:
  // oneTBB's default concurrency is the size of its CPU affinity.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu::setThreads(
      std::max(1, std::min(tbb::info::default_concurrency(), cores / std::max(1, ranks_per_host))));
  return std::make_unique<Dispatcher>(config);
}

}  // namespace accord

// What every backend's ops share: the Op interface, the context an op runs with, the
// transport interface the dispatcher (dispatcher.cc) hands them, and the GPU support a
// build may add.
//
// The dispatcher implements runtime/backend.h's Backend: it connects process sets
// (through the host transport, over MPI) and hands every data response to the first
// registered op whose enabled() accepts it. The device ops (DeviceSupport: NCCL, or the
// host ops through pinned host memory) are registered before the host ops, so that CUDA
// tensors go to them and host tensors fall through.
#pragma once

#include "ops/common/fusion_buffer.h"
#include "ops/common/process_group.h"
#include "runtime/backend.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accord {

// What a device backend keeps per process set beside the host transport (NCCL's
// communicator). Created on the set's first device collective; destroyed with the
// set's transport, before the host transport's own state, and like it on every member
// in the same cycle.
class SetExtension {
 public:
  virtual ~SetExtension() = default;
};

// A process set's transport as every op sees it. The host transport (MPI) is the only
// implementation; ops that need more of it (its MPI link, shared-memory window)
// ask for that through a checked accessor of their own backend.
class OpTransport : public SetTransport {
 public:
  virtual ProcessGroup& group() = 0;
  // The set's device state, null until first use.
  virtual std::unique_ptr<SetExtension>& extension() = 0;
  // Throws the CommError that broke the transport, if any.
  virtual void checkUsable() const = 0;
};

// What an op runs with. Ranks are the process set's.
struct ExecContext {
  OpTransport& transport;
  const Config& config;
  FusionBuffer& fusion;   // fused tensors, packed layouts, a joined rank's neutral input
  FusionBuffer& scratch;  // the rings' temporaries
  FusionBuffer& spare;    // stands in for an output this rank failed to allocate
  int rank() const { return transport.group().rank(); }
  int size() const { return transport.group().size(); }
};

class Op {
 public:
  virtual ~Op() = default;
  virtual bool enabled(const Response& response) const = 0;
  // See Backend::execute for the contract on entries and errors.
  virtual void execute(ExecContext& ctx, const Response& response,
                       std::vector<TensorEntry*>& entries) = 0;
};

// The responses that reach a backend's ops (Backend::execute), in the order every
// backend registers its ops.
inline constexpr ResponseType kDataResponses[] = {ResponseType::Allreduce, ResponseType::Allgather,
                                                  ResponseType::Broadcast, ResponseType::Alltoall,
                                                  ResponseType::Reducescatter};

// The host op for a response type (host tensors, on the host transport): what the
// device ops fall back to where NCCL cannot take a response.
using HostOpFactory = std::function<std::unique_ptr<Op>(ResponseType)>;

// The host backend, which every build has: its transport of one process set
// (Backend::connect) and its op for each of kDataResponses (InvalidArgument for any
// other type). Defined by the MPI backend (its mpi_ops.cc), as makeDeviceSupport
// is by the GPU support: the dispatcher names no backend's folder.
std::unique_ptr<OpTransport> connectHost(MPI_Comm comm, std::vector<int> global_ranks,
                                         const Config& config);
std::unique_ptr<Op> makeHostOp(ResponseType type);

// What a build's GPU support adds to the dispatcher: the ops for device tensors, tried
// before the host ops, and the check and ready marker of a device tensor at submission
// (Backend::deviceReady). ops/cuda/ implements it where the CUDA toolkit was found;
// elsewhere makeDeviceSupport (ops/common/no_device.cc) returns nullptr and device
// tensors are refused at submission.
class DeviceSupport {
 public:
  virtual ~DeviceSupport() = default;
  virtual std::vector<std::unique_ptr<Op>> makeOps(const HostOpFactory& host) = 0;
  virtual std::shared_ptr<void> ready(const TensorView& tensor, void* stream,
                                      const std::string& what) = 0;
  // Backend::deviceHome.
  virtual void home(Device device, const std::string& what) = 0;
};
std::unique_ptr<DeviceSupport> makeDeviceSupport(const Config& config);

}  // namespace accord

// The MPI backend's ops: one per collective, each running negotiated responses of its
// type on host memory.
//
// The OpManager (op_manager.cc) implements runtime/backend.h's Backend: it connects
// process sets (MpiTransport) and hands every data response to the first registered
// op whose enabled() accepts it. The device ops (DeviceSupport: NCCL, or MPI through
// pinned host memory) are registered before these, so that CUDA tensors go to them and
// host tensors fall through to MPI.
#pragma once

#include "ops/fusion_buffer.h"
#include "runtime/backend.h"

#include <memory>
#include <string>
#include <vector>

namespace accord {

namespace mpi {
class Hierarchy;
class Link;
class SharedMemory;
}  // namespace mpi

// What a device backend keeps per process set beside its MPI link (NCCL's
// communicator). Created on the set's first device collective; destroyed with the
// set's transport, before its link, and like it on every member in the same cycle.
class SetExtension {
 public:
  virtual ~SetExtension() = default;
};

// What an op runs with. Ranks are the process set's.
struct ExecContext {
  mpi::Link& link;         // the set's communicator, with deadline-bounded waits
  mpi::SharedMemory* shm;  // set when every member shares this host (ACCORD_SHARED_MEMORY)
  const Config& config;
  FusionBuffer& fusion;   // fused tensors, packed layouts, a joined rank's neutral input
  FusionBuffer& scratch;  // the rings' temporaries
  FusionBuffer& spare;    // stands in for an output this rank failed to allocate
  std::unique_ptr<SetExtension>& extension;  // the set's device state, null until first use
  // Set when the set spans hosts evenly and ACCORD_HIERARCHICAL_ALLREDUCE is on: host
  // allreduces go through it instead of the flat ring.
  mpi::Hierarchy* hierarchy = nullptr;
  int rank() const;
  int size() const;
};

class Op {
 public:
  virtual ~Op() = default;
  virtual bool enabled(const Response& response) const = 0;
  // See Backend::execute for the contract on entries and errors.
  virtual void execute(ExecContext& ctx, const Response& response,
                       std::vector<TensorEntry*>& entries) = 0;
};

// What a build's GPU support adds to the OpManager: the ops for device tensors, tried
// before the MPI ops, and the check and ready marker of a device tensor at submission
// (Backend::deviceReady). ops/cuda/ implements it where the CUDA toolkit was found;
// elsewhere makeDeviceSupport (ops/no_device.cc) returns nullptr and device tensors
// are refused at submission.
class DeviceSupport {
 public:
  virtual ~DeviceSupport() = default;
  virtual std::vector<std::unique_ptr<Op>> makeOps() = 0;
  virtual std::shared_ptr<void> ready(const TensorView& tensor, void* stream,
                                      const std::string& what) = 0;
};
std::unique_ptr<DeviceSupport> makeDeviceSupport(const Config& config);

}  // namespace accord

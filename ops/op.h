// The MPI backend's ops: one per collective, each running negotiated responses of its
// type on host memory.
//
// The OpManager (op_manager.cc) implements runtime/backend.h's Backend: it connects
// process sets (MpiTransport) and hands every data response to the first registered
// op whose enabled() accepts it. A device backend (NCCL) would register its ops
// before these, so that CUDA tensors go to it and host tensors fall through to MPI.
#pragma once

#include "ops/fusion_buffer.h"
#include "runtime/backend.h"

#include <vector>

namespace accord {

namespace mpi {
class Link;
class SharedMemory;
}  // namespace mpi

// What an op runs with. Ranks are the process set's.
struct ExecContext {
  mpi::Link& link;         // the set's communicator, with deadline-bounded waits
  mpi::SharedMemory* shm;  // set when every member shares this host (ACCORD_SHARED_MEMORY)
  const Config& config;
  FusionBuffer& fusion;   // fused tensors, packed layouts, a joined rank's neutral input
  FusionBuffer& scratch;  // the rings' temporaries
  FusionBuffer& spare;    // stands in for an output this rank failed to allocate
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

}  // namespace accord

// The interface between the runtime and its communication backends in ops/.
//
// The runtime negotiates and sequences; a backend moves bytes. ops/ implements these
// classes and makeBackend(), while the runtime sees only this header: dependencies
// point one way, from ops/ to runtime/.
#pragma once

#include "runtime/channel.h"
#include "runtime/config.h"
#include "runtime/message.h"
#include "runtime/tensor_entry.h"

#include <accord/accord.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace accord {

// One process set's communication, on a rank that belongs to the set.
class SetTransport {
 public:
  // Frees the transport's resources, collectively over the set: every member destroys
  // it in the same cycle. After a communication failure the runtime never destroys a
  // transport: the other ranks may never take part in a collective free, and MPI may
  // still complete transfers into its buffers that it could not cancel.
  virtual ~SetTransport() = default;
  virtual NegotiationChannel& channel() = 0;
  virtual Transport kind() const = 0;
};

// Like transports, a backend is never destroyed after a communication failure: its
// staging buffers may still be written.
class Backend {
 public:
  virtual ~Backend() = default;

  // Collective over `comm`, which the transport owns from then on. `global_ranks[i]`
  // is the global rank of comm's rank i, for messages.
  virtual std::unique_ptr<SetTransport> connect(MPI_Comm comm, std::vector<int> global_ranks) = 0;

  // Runs one negotiated data response (allreduce, allgather, broadcast, alltoall,
  // reducescatter) over `transport`. entries[i] belongs to response.names[i]; it is
  // nullptr on a rank that has joined, which takes part with the op's neutral element
  // and discards the result. A local failure of one entry is recorded in its `error`
  // after the rank has still done its part. Throws CommError when the transport failed
  // (a peer stopped answering): the set is then unusable. Other exceptions fail only
  // this response's entries.
  virtual void execute(SetTransport& transport, const Response& response,
                       std::vector<TensorEntry*>& entries) = 0;

  // Application threads (thread-safe), at the submission of a tensor on a device:
  // checks that the build and the machine can take it (the device exists, the data is
  // that device's memory) and marks the point on `stream` (the application's
  // cudaStream_t; nullptr = the legacy default stream) after which the tensor is
  // ready; execute() waits for that point. Throws InvalidArgument, naming `what`, for a
  // tensor this backend cannot take.
  virtual std::shared_ptr<void> deviceReady(const TensorView& tensor, void* stream,
                                            const std::string& what) = 0;

  // Application threads, as this rank joins naming `device`: where its part of the
  // device collectives goes while it has no tensor of its own (join_async). Nothing by
  // default, and nothing in a build without GPU support; InvalidArgument, naming
  // `what`, for a device this process does not see.
  virtual void deviceHome(Device /*device*/, const std::string& /*what*/) {}
};

// The backends compiled into this build. `ranks_per_host` caps the threads of the
// element-wise kernels (ranks sharing a host share its cores).
std::unique_ptr<Backend> makeBackend(const Config& config, int ranks_per_host);

// What the ops linked into this build provide (build_features()): defined by the same
// choice of files that decides the ops (ops/common/no_device.cc, ops/cuda/, ops/nccl/).
bool deviceSupportBuilt();
bool ncclBuilt();
// cuda_device_count (accord.h), from the GPU support where it is built.
int cudaDevices(std::string* why);

}  // namespace accord

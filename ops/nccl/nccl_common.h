// What the NCCL ops share: dtype and op mapping, the set's communicator, and the run
// of one response from the ready events to the hand-over to the finalizer.
//
// Every op's execute() is one run(): the body launches kernels and NCCL calls on
// launch.stream, and never waits for the GPU. A failure of CUDA or NCCL inside the body
// leaves this rank unable to take part, so the set's communicator is aborted (the other
// members' finalizers then fail their collectives instead of waiting) and this rank's
// handles fail with the reason; host collectives and the MPI link are not affected.
#pragma once

#include "ops/common/checks.h"
#include "ops/common/fused_layout.h"
#include "ops/common/layouts.h"
#include "ops/common/scaling.h"
#include "ops/cuda/device_ops.h"
#include "ops/nccl/communicator.h"
#include "ops/nccl/hierarchy.h"
#include "ops/nccl/reduction.h"

#include <functional>
#include <memory>
#include <vector>

namespace accord::nccl {

ncclDataType_t ncclType(DType dtype);
// The NCCL operation and the scaling pass of a reducing response (reduction.h).
struct Reduction {
  ncclRedOp_t op = ncclSum;
  Scaling post;
};
Reduction reductionFor(const Response& response, int set_size);

// One response's launch on the set's communicator, device and runtime stream.
struct Launch {
  ExecContext& ctx;
  const Response& response;
  std::vector<TensorEntry*>& entries;
  Communicator& comm;
  cuda::DeviceContext& device;
  cudaStream_t stream;
  DeviceHierarchy* hierarchy = nullptr;  // ACCORD_HIERARCHICAL_ALLREDUCE, where it applies

  // Is entry i this rank's own, usable tensor? (Not joined, no local failure yet.)
  bool local(std::size_t i) const { return entries[i] && !entries[i]->error; }
  // localInput (checks.h) of entry i: false where it is not this rank's usable input.
  bool checkInput(std::size_t i, std::size_t bytes);
  // Entry i's device output (a stand-in from device.scratch when it cannot have one:
  // joined, or its allocator failed, which fails its handle).
  void* outputOrScratch(std::size_t i, const Shape& shape);
  // NCCL calls of this response, grouped; see Communicator::launch.
  void nccl(const std::function<ncclResult_t(ncclComm_t)>& calls);
};

using Body = std::function<void(Launch&)>;
// Prepares the launch (creates the set's communicator on its first device response,
// makes its device current, makes the runtime stream wait for the ready events), runs
// `body`, and hands the entries over to the finalizer.
void run(const std::shared_ptr<cuda::Devices>& devices, ExecContext& ctx, const Response& response,
         std::vector<TensorEntry*>& entries, const Body& body);

}  // namespace accord::nccl

// The host backend's ops, registered by the dispatcher: one per collective, each
// running negotiated responses of its type on host memory over the set's MPI link (or
// its shared-memory window). The device ops fall back to them through pinned host
// copies (ops/cuda/staging.cc), handed makeHostOp as a HostOpFactory.
//
// Each op runs only on the background thread, with the buffers ExecContext hands it
// and the set's host transport (context.h).
#pragma once

#include "ops/common/op.h"

#include <memory>

namespace accord::mpi {

std::unique_ptr<Op> makeAllreduce();
std::unique_ptr<Op> makeAllgather();
std::unique_ptr<Op> makeBroadcast();
std::unique_ptr<Op> makeAlltoall();
std::unique_ptr<Op> makeReducescatter();
// makeHostOp (ops/common/op.h), defined here, returns these by response type.

}  // namespace accord::mpi

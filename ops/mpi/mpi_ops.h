// Factories for the MPI (host memory) backend ops, registered by the OpManager.
//
// Each op accepts one response type on CPU tensors. They share the OpManager's fusion
// buffer, which outlives them; all of them run only on the background thread.
#pragma once

#include "ops/fusion_buffer.h"
#include "ops/op.h"

#include <memory>

namespace accord {

std::unique_ptr<Op> makeMpiAllreduce(FusionBuffer& buffer);
std::unique_ptr<Op> makeMpiAllgather(FusionBuffer& buffer);
std::unique_ptr<Op> makeMpiBroadcast(FusionBuffer& buffer);
std::unique_ptr<Op> makeMpiAlltoall(FusionBuffer& buffer);
std::unique_ptr<Op> makeMpiReducescatter(FusionBuffer& buffer);

}  // namespace accord

// Factories for the MPI (host memory) backend's ops, registered by the OpManager.
//
// Each op accepts one response type on CPU tensors and runs only on the background
// thread, with the buffers and the set's transport that ExecContext hands it.
#pragma once

#include "ops/op.h"

#include <memory>

namespace accord {

std::unique_ptr<Op> makeMpiAllreduce();
std::unique_ptr<Op> makeMpiAllgather();
std::unique_ptr<Op> makeMpiBroadcast();
std::unique_ptr<Op> makeMpiAlltoall();
std::unique_ptr<Op> makeMpiReducescatter();

}  // namespace accord

// Factories for the NCCL backend's ops: one per collective, each running negotiated
// responses of its type on CUDA tensors. cuda::makeNcclOps (nccl_common.cc) collects
// them; they come before the staged MPI ops, so they take every device response while
// ACCORD_NCCL=1.
#pragma once

#include "ops/cuda/device_ops.h"

#include <memory>

namespace accord::nccl {

std::unique_ptr<Op> makeNcclAllreduce(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeNcclAllgather(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeNcclBroadcast(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeNcclAlltoall(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeNcclReducescatter(std::shared_ptr<cuda::Devices> devices);

}  // namespace accord::nccl

// Factories for the NCCL backend's ops: one per collective, each running negotiated
// responses of its type on CUDA tensors. cuda::makeNcclOps (nccl_common.cc) collects
// them; they come before the staged host ops, so they take every device response they
// can while ACCORD_NCCL=1. The same names as the host ops' factories.
#pragma once

#include "ops/cuda/device_ops.h"

#include <memory>

namespace accord::nccl {

std::unique_ptr<Op> makeAllreduce(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeAllgather(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeBroadcast(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeAlltoall(std::shared_ptr<cuda::Devices> devices);
std::unique_ptr<Op> makeReducescatter(std::shared_ptr<cuda::Devices> devices);

}  // namespace accord::nccl

// Accord built with the CUDA toolkit but without NCCL: device tensors take the staged
// MPI path (see device_ops.h).
#include "ops/cuda/device_ops.h"

namespace accord::cuda {

std::vector<std::unique_ptr<Op>> makeNcclOps(std::shared_ptr<Devices>) { return {}; }

}  // namespace accord::cuda

namespace accord {
bool ncclBuilt() { return false; }
}  // namespace accord

// Kernels of the device fault test: a fill, and a fault that loses the CUDA context.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace accord_gpu {

// Sets `count` floats at `data` to `value`, on `stream`.
cudaError_t fill(float* data, std::size_t count, float value, cudaStream_t stream);
// Loads the trapping kernel now. CUDA loads a kernel at its first launch by default
// (CUDA_MODULE_LOADING=LAZY), and loading waits for the kernels already running: the
// trap would only come after the collective it is meant to stop.
cudaError_t prepareBreak();
// Launches a kernel that traps: once it runs, every CUDA call of this process fails
// ("unspecified launch failure").
cudaError_t breakContext(cudaStream_t stream);

}  // namespace accord_gpu

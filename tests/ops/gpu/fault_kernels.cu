// Kernels of the device fault test (test_device_fault.cc).
#include "fault_kernels.h"

namespace accord_gpu {

namespace {

__global__ void fillFloats(float* data, std::size_t count, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = value;
}

// Stops with a trap: the kernel fails, and with it the process's CUDA context (an
// illegal address may instead be served where the GPU shares the host's page tables).
__global__ void trap() { __trap(); }

}  // namespace

cudaError_t fill(float* data, std::size_t count, float value, cudaStream_t stream) {
  fillFloats<<<1024, 256, 0, stream>>>(data, count, value);
  return cudaGetLastError();
}

cudaError_t prepareBreak() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, trap);
}

cudaError_t breakContext(cudaStream_t stream) {
  trap<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

}  // namespace accord_gpu

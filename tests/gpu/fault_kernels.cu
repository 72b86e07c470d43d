// Kernels of the device fault test (test_device_fault.cc).
#include "fault_kernels.h"

namespace accord_gpu {

namespace {

__global__ void fillFloats(float* data, std::size_t count, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = value;
}

// Writes where no memory is: the kernel faults, and with it the process's CUDA context.
__global__ void writeNowhere(int* nowhere) { *reinterpret_cast<volatile int*>(nowhere) = 1; }

}  // namespace

cudaError_t fill(float* data, std::size_t count, float value, cudaStream_t stream) {
  fillFloats<<<1024, 256, 0, stream>>>(data, count, value);
  return cudaGetLastError();
}

cudaError_t breakContext(cudaStream_t stream) {
  writeNowhere<<<1, 1, 0, stream>>>(reinterpret_cast<int*>(std::uintptr_t{16}));
  return cudaGetLastError();
}

}  // namespace accord_gpu

// Catch2's runner for the GPU tests, after a check that a GPU is there: without one the
// whole executable reports "skipped" (exit 77, which CTest counts as skipped, not
// passed) and says why, so a CPU-only CI run shows the tests did not run.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("skipped: no GPU here (CUDA says: %s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 CUDA devices");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("GPU 0: %s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
  return Catch::Session().run(argc, argv);
}

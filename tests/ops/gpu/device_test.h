// Helpers for the multi-rank tests of collectives on CUDA tensors (run under mpirun,
// built on tests/support's helpers: the same fill values, checks and runner).
//
// The reference is the host path: each test runs every collective twice, on host
// buffers and on device copies of the same values, and compares the results bit for
// bit.
//
// Which GPU: with NCCL (ACCORD_NCCL unset or 1) every rank of a host needs a GPU of its
// own, unless each rank names a host of its own to NCCL (NCCL_HOSTID, which
// ci/nccl-one-gpu.sh sets per rank where a host has fewer GPUs than ranks): then ranks
// share GPUs, local rank l on GPU l % count. Without either, a run with more ranks than
// GPUs prints "skipped: needs N GPUs" and exits 77. With ACCORD_NCCL=0 (MPI through
// pinned memory) every rank uses GPU 0.
#pragma once

#include "mpi_test.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

namespace accord_gpu {

using accord_test::Buffer;
using accord_test::DType;
using accord_test::ReduceOp;
using accord_test::Shape;

// The GPU of this rank's tensors.
int device();
accord::Device accordDevice();

// Aborts the test (REQUIRE) with CUDA's message unless `status` is cudaSuccess.
void ok(cudaError_t status, const char* what);

// Device memory; freed by the destructor.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A device copy of a host Buffer (same dtype, shape and bytes).
class DeviceTensor {
 public:
  explicit DeviceTensor(const Buffer& host);
  accord::TensorView view() const;
  std::vector<std::byte> download() const;

 private:
  DType dtype_;
  Shape shape_;
  DeviceMemory memory_;
};

// The output of allgather / alltoall / reducescatter in device memory. Keep it alive
// (and unmoved) until the handle completes.
class DeviceOutput {
 public:
  explicit DeviceOutput(DType dtype) : dtype_(dtype) {}
  accord::Allocator allocator();
  const Shape& shape() const { return shape_; }
  int calls() const { return calls_; }
  std::vector<std::byte> download() const;

 private:
  DType dtype_;
  Shape shape_;
  std::unique_ptr<DeviceMemory> memory_;
  int calls_ = 0;
};

// "" when the device result equals the host result bit for bit; else the elements that
// differ, as values. Every device collective gives the host path's bits, Average
// included (ops/nccl/README.md, "Average").
std::string compareWithHost(DType dtype, const std::vector<std::byte>& device, const void* host,
                            std::int64_t count);

// Picks this rank's GPU and makes it current: 0; or, having printed why, 77 (skipped:
// no GPU, or NCCL with fewer GPUs than ranks and no NCCL_HOSTID) or 1 (an error).
int selectGpu();
// How a rank that selectGpu() skipped ends: 77 (CTest's skip) in a process of its own;
// under mpirun 0, since mpirun answers any other status with its kill sequence (two
// 1-second sleeps, Open MPI's odls_base_sigkill_timeout, on every such test of a
// machine without a GPU) and CTest reads the "skipped:" line there instead
// (SKIP_REGULAR_EXPRESSION).
int skippedExit();
// main() of a device test binary: selectGpu(), then accord_test::runMain.
int gpuTestMain(int argc, char** argv);

}  // namespace accord_gpu

// What accord-bench --device cuda's parts share: this rank's GPU, its stream and the
// benchmark's own NCCL communicator (Gpu), and the checks that end the run on a CUDA or
// NCCL error. device_bench.cc runs the parts; device_average_bench.cc is the Average
// study.
#pragma once

#include "bench_common.h"

#include <accord/accord.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace accord_bench {

[[noreturn]] inline void fail(const Bench& bench, const std::string& what) {
  std::fprintf(stderr, "[rank %d] accord-bench --device cuda: %s\n", bench.rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 5);
  std::abort();
}

inline void cudaOk(const Bench& bench, cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(bench, std::string(what) + ": " + cudaGetErrorString(status));
}

inline void ncclOk(const Bench& bench, ncclResult_t result, const char* what) {
  if (result != ncclSuccess) fail(bench, std::string(what) + ": " + ncclGetErrorString(result));
}

// This rank's GPU, a stream, and the benchmark's own NCCL communicator for the raw calls.
struct Gpu {
  const Bench& bench;
  int device = 0;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  std::string name;

  explicit Gpu(const Bench& b) : bench(b) {
    std::string why;
    const int count = accord::cuda_device_count(&why);
    if (count == 0)
      fail(bench, "no GPU that CUDA can use here (" + why +
                      "); accord-bench without --device measures host memory");
    MPI_Comm local;
    MPI_Comm_split_type(bench.comm, MPI_COMM_TYPE_SHARED, bench.rank, MPI_INFO_NULL, &local);
    int local_rank = 0, local_size = 1;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
    // Ranks share a GPU only where each names a host of its own to NCCL (NCCL_HOSTID, as
    // ci/nccl-one-gpu.sh sets it): correctness and the average study, not speed.
    if (local_size > count && !std::getenv("NCCL_HOSTID"))
      fail(bench, std::to_string(local_size) + " ranks share a host with " + std::to_string(count) +
                      " GPUs; NCCL needs one GPU per rank (or an NCCL_HOSTID per rank: run each "
                      "rank through ci/nccl-one-gpu.sh)");
    device = local_rank % count;
    cudaOk(bench, cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    cudaOk(bench, cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    name = prop.name;
    cudaOk(bench, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId id{};
    if (bench.rank == 0) ncclOk(bench, ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bench.comm);
    ncclOk(bench, ncclCommInitRank(&comm, bench.size, id, bench.rank), "ncclCommInitRank");
  }
  ~Gpu() {
    ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }

  void* alloc(std::size_t bytes) const {
    void* p = nullptr;
    cudaOk(bench, cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void zero(void* data, std::size_t bytes) const {
    cudaOk(bench, cudaMemsetAsync(data, 0, bytes, stream), "cudaMemsetAsync");
    cudaOk(bench, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  void rawAllreduce(void* data, std::size_t count, ncclDataType_t type) const {
    ncclOk(bench, ncclAllReduce(data, data, count, type, ncclSum, comm, stream), "ncclAllReduce");
    cudaOk(bench, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  accord::TensorView view(void* data, accord::DType dtype, std::int64_t count) const {
    return {data, dtype, {count}, accord::Device::cuda(device)};
  }
  accord::Handle accordAsync(void* data, accord::DType dtype, std::int64_t count,
                             const std::string& name, accord::ReduceOp op) const {
    accord::AllreduceOptions options;
    options.name = name;
    options.op = op;
    options.stream = stream;
    return accord::allreduce_async(view(data, dtype, count), options);
  }
  void accordAllreduce(void* data, std::int64_t count, const std::string& name) const {
    accordAsync(data, accord::DType::Float32, count, name, accord::ReduceOp::Sum).wait();
  }
};

// Average on NCCL, raw ncclAvg against Accord's, in time and in error
// (device_average_bench.cc).
void averageStudy(const Gpu& gpu, const Options& opt);

}  // namespace accord_bench

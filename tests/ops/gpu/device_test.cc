// Helpers of the device collective tests (see device_test.h).
#include "device_test.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace accord_gpu {

namespace {

int g_device = 0;

// Before MPI is up: the launcher's environment says how many ranks there are, and
// which of them share this host.
int envInt(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return fallback;
}

bool ncclWanted() {
  const char* v = std::getenv("ACCORD_NCCL");
  return !(v && std::string(v) == "0");
}

}  // namespace

int device() { return g_device; }
accord::Device accordDevice() { return accord::Device::cuda(g_device); }

void ok(cudaError_t status, const char* what) {
  INFO(what << ": " << cudaGetErrorString(status));
  REQUIRE(status == cudaSuccess);
}

// Also called from the runtime's background thread (DeviceOutput's allocator), where
// Catch's assertions must not run: a failure throws, and the runtime fails the handle.
DeviceMemory::DeviceMemory(std::size_t bytes) : bytes_(bytes) {
  const cudaError_t status = cudaMalloc(&data_, bytes == 0 ? 1 : bytes);
  if (status != cudaSuccess)
    throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) +
                             " bytes: " + cudaGetErrorString(status));
}

DeviceMemory::~DeviceMemory() { cudaFree(data_); }

DeviceTensor::DeviceTensor(const Buffer& host)
    : dtype_(host.dtype()),
      shape_(host.shape()),
      memory_(static_cast<std::size_t>(host.numel()) * accord::dtype_size(host.dtype())) {
  if (memory_.bytes() > 0)
    ok(cudaMemcpy(memory_.get(), host.data(), memory_.bytes(), cudaMemcpyHostToDevice), "upload");
}

accord::TensorView DeviceTensor::view() const {
  return {memory_.get(), dtype_, shape_, accordDevice()};
}

std::vector<std::byte> DeviceTensor::download() const {
  std::vector<std::byte> out(memory_.bytes());
  if (!out.empty())
    ok(cudaMemcpy(out.data(), memory_.get(), out.size(), cudaMemcpyDeviceToHost), "download");
  return out;
}

accord::Allocator DeviceOutput::allocator() {
  return [this](const Shape& shape) {
    ++calls_;
    shape_ = shape;
    memory_ = std::make_unique<DeviceMemory>(accord::num_bytes(shape, dtype_));
    return accord::TensorView{memory_->get(), dtype_, shape, accordDevice()};
  };
}

std::vector<std::byte> DeviceOutput::download() const {
  if (!memory_) return {};
  std::vector<std::byte> out(memory_->bytes());
  if (!out.empty())
    ok(cudaMemcpy(out.data(), memory_->get(), out.size(), cudaMemcpyDeviceToHost), "download");
  return out;
}

std::string compareWithHost(DType dtype, const std::vector<std::byte>& device, const void* host,
                            std::int64_t count) {
  const std::size_t bytes = static_cast<std::size_t>(count) * accord::dtype_size(dtype);
  if (device.size() < bytes)
    return "the device result has " + std::to_string(device.size()) + " bytes, expected " +
           std::to_string(bytes);
  if (bytes == 0 || std::memcmp(device.data(), host, bytes) == 0) return "";
  // Name the elements that differ, as values.
  std::string diff = accord_test::compareElements(
      dtype, device.data(), count,
      [&](std::int64_t i) { return accord_test::loadValue(dtype, host, i); });
  if (diff.empty()) {  // equal values, different bits (-0 and +0)
    const auto* h = static_cast<const std::byte*>(host);
    std::size_t at = 0;
    while (at < bytes && device[at] == h[at]) ++at;
    diff = "the values are equal but their bits differ, first at byte " + std::to_string(at);
  }
  return diff;
}

int selectGpu() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("skipped: no GPU here (CUDA says: %s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 CUDA devices");
    return 77;
  }
  const int ranks = envInt({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}, 1);
  const int local = envInt({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
  const int local_size = envInt({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, ranks);
  // NCCL puts two ranks of one host on one GPU only where each rank names a host of
  // its own (NCCL_HOSTID, set per rank by ci/nccl-one-gpu.sh).
  const bool shared = ncclWanted() && local_size > count && std::getenv("NCCL_HOSTID");
  if (ncclWanted() && local_size > count && !shared) {
    std::printf(
        "skipped: needs %d GPUs (NCCL cannot put two ranks of one host on one GPU unless "
        "each names its own host: run it through ci/nccl-one-gpu.sh); this machine has %d\n",
        local_size, count);
    return 77;
  }
  g_device = ncclWanted() ? local % count : 0;
  if (cudaSetDevice(g_device) != cudaSuccess) {
    std::printf("cannot use GPU %d\n", g_device);
    return 1;
  }
  if (local == 0) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, g_device);
    std::printf("%d rank(s), %s; rank with local rank 0 on GPU %d: %s\n", ranks,
                !ncclWanted() ? "MPI through pinned memory (ACCORD_NCCL=0)"
                : shared      ? "NCCL, the ranks sharing GPUs (socket transport)"
                              : "NCCL, one GPU per rank",
                g_device, prop.name);
  }
  return 0;
}

int skippedExit() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ? 0 : 77;
}

int gpuTestMain(int argc, char** argv) {
  if (const int status = selectGpu(); status != 0) return status == 77 ? skippedExit() : status;
  return accord_test::runMain(argc, argv);
}

}  // namespace accord_gpu

// The device ops: what they share (Devices) and their factories.
//
// Every CUDA response goes to an op from here: NCCL's where Accord was built with NCCL
// and ACCORD_NCCL=1, else the staged ops, which run the host ops on page-locked host
// copies of the tensors. Both launch their work on the runtime's stream of the device
// and leave the handles to the finalizer.
#pragma once

#include "ops/common/op.h"
#include "ops/cuda/device.h"
#include "ops/cuda/finalizer.h"

#include <atomic>
#include <map>
#include <memory>
#include <vector>

namespace accord::cuda {

class Devices {
 public:
  explicit Devices(const Config& config);
  Devices(const Devices&) = delete;
  Devices& operator=(const Devices&) = delete;

  const Config& config() const { return config_; }
  Finalizer& finalizer() { return finalizer_; }
  // Background thread: the context of `device`, created on first use.
  DeviceContext& context(int device);

  // Application threads record the device of each device tensor they submit. A rank
  // with no tensor of its own in a collective (it joined) does its part on the
  // device of its latest one (0 if it never submitted one).
  void noteDevice(int device) { home_.store(device, std::memory_order_relaxed); }
  int homeDevice() const { return std::max(0, home_.load(std::memory_order_relaxed)); }

 private:
  const Config& config_;
  std::map<int, std::unique_ptr<DeviceContext>> contexts_;
  std::atomic<int> home_{-1};
  // Declared after the contexts: destroyed first, so that everything in flight on
  // their streams has completed (or timed out) before their buffers go.
  Finalizer finalizer_;
};

// The device of the first local entry; else (joined) the home device.
int deviceOf(const Devices& devices, const std::vector<TensorEntry*>& entries);
// Waits on the runtime's stream for the application's ready events of the local
// entries; an entry on another device than `device` fails locally (its rank still
// takes part, with scratch space).
void waitUntilReady(const Response& response, int device, cudaStream_t stream,
                    std::vector<TensorEntry*>& entries);

// The output of entry i from its allocator (allocateOutput's checks), which must
// be memory of `device`; throws InvalidArgument naming the tensor otherwise.
void* deviceOutput(const Response& response, std::size_t i, TensorEntry& entry, const Shape& shape,
                   int device);

// ops/cuda/staging.cc: the host ops `host` makes, on page-locked host copies, for every
// response type.
std::vector<std::unique_ptr<Op>> makeStagedOps(std::shared_ptr<Devices> devices,
                                               const HostOpFactory& host);
// ops/nccl/ where NCCL was found; an empty list elsewhere (ops/cuda/no_nccl.cc).
std::vector<std::unique_ptr<Op>> makeNcclOps(std::shared_ptr<Devices> devices);

}  // namespace accord::cuda

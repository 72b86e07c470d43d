// Hierarchical allreduce of CUDA tensors (ACCORD_HIERARCHICAL_ALLREDUCE=1), for a
// process set whose hosts each hold the same number (>= 2) of its ranks.
//
// NCCL already picks rings and trees by topology, but one communicator over every GPU
// still sends 2(n-1)/n of the buffer through the network. Here, as on host memory
// (the MPI transport's hierarchy), each level does what it is good at:
//   1. ncclReduceScatter among the host's ranks (NVLink or PCIe): local rank l ends
//      with block l of the buffer reduced over its host;
//   2. ncclAllReduce of block l among the ranks with local rank l, one per host, so all
//      of a host's GPUs use the network at once, each for 1/local_size of the data
//      (NCCL here too: the block stays in device memory, never staged for MPI);
//   3. ncclAllGather of the blocks among the host's ranks.
// The three run in order on the runtime's stream of the device. The buffer is padded to
// a multiple of local_size elements (the padding holds the op's neutral element and is
// thrown away); Average is ncclAvg at both levels where the flat path would use it,
// which divides by local_size and then by the number of hosts.
//
// The two communicators join the set's own one in one watched group (nccl_common.cc):
// an asynchronous error or an abort on any of them stops all three, and the set's
// device collectives fail as they do when its one communicator breaks.
#pragma once

#include "ops/nccl/communicator.h"

#include <chrono>
#include <memory>

namespace accord {
struct Config;
}

namespace accord::nccl {

class DeviceHierarchy {
 public:
  // Collective over `set` (its split by host, then NCCL). nullptr (with a debug log saying why)
  // where the hierarchy does not apply: the setting is off, hosts hold different numbers of the
  // set's ranks, or, unless ACCORD_HIERARCHICAL_ALLREDUCE=2, all ranks share one host or each host
  // holds one.
  static std::unique_ptr<DeviceHierarchy> create(ProcessGroup& set, int device,
                                                 const Config& config);
  ~DeviceHierarchy();
  DeviceHierarchy(const DeviceHierarchy&) = delete;
  DeviceHierarchy& operator=(const DeviceHierarchy&) = delete;

  int localRank() const { return local_rank_; }
  int localSize() const { return local_size_; }
  Communicator& local() { return *local_; }  // steps 1 and 3
  Communicator& cross() { return *cross_; }  // step 2
  const std::shared_ptr<Communicator>& sharedLocal() const { return local_; }
  const std::shared_ptr<Communicator>& sharedCross() const { return cross_; }

 private:
  DeviceHierarchy() = default;

  int local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<ProcessGroup> host_group_, across_group_;
  std::shared_ptr<Communicator> local_, cross_;
};

}  // namespace accord::nccl

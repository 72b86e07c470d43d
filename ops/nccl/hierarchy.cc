// DeviceHierarchy (see hierarchy.h).
#include "ops/nccl/hierarchy.h"

#include "ops/mpi/hierarchical.h"
#include "ops/mpi/link.h"
#include "runtime/config.h"
#include "runtime/logging.h"

namespace accord::nccl {

std::unique_ptr<DeviceHierarchy> DeviceHierarchy::create(mpi::Link& set, int device,
                                                         const Config& config) {
  if (!config.hierarchical_allreduce) return nullptr;
  mpi::HostSplit split = mpi::splitByHost(set);
  const char* flat = nullptr;
  if (split.largest != split.smallest)
    flat = "its hosts hold different numbers of its ranks";
  else if (!config.hierarchical_everywhere && split.hosts < 2)
    flat = "all its ranks share one host";
  else if (!config.hierarchical_everywhere && split.local_size < 2)
    flat = "each host holds one of its ranks";
  if (flat) {
    MPI_Comm_free(&split.host);
    log().debug(
        "ACCORD_HIERARCHICAL_ALLREDUCE: CUDA tensors of a process set of {} ranks on {} "
        "hosts ({}..{} per host) reduce with one NCCL communicator: {}",
        set.size(), split.hosts, split.smallest, split.largest, flat);
    return nullptr;
  }
  std::unique_ptr<DeviceHierarchy> h(new DeviceHierarchy());
  h->local_rank_ = split.local_rank;
  h->local_size_ = split.local_size;
  auto host_ranks = mpi::globalRanksOf(split.host, set);
  h->host_link_ =
      std::make_unique<mpi::Link>(split.host, std::move(host_ranks), config.stall_shutdown_time);
  h->across_link_ = mpi::linkAcrossHosts(set, split, config.stall_shutdown_time);
  // Every member creates both in this order: the host's first, then the one across.
  h->local_ = Communicator::create(*h->host_link_, device, config.stall_shutdown_time);
  h->cross_ = Communicator::create(*h->across_link_, device, config.stall_shutdown_time);
  log().debug(
      "ACCORD_HIERARCHICAL_ALLREDUCE: CUDA tensors of a process set of {} ranks reduce in "
      "{} hosts x {} ranks",
      set.size(), split.hosts, split.local_size);
  return h;
}

// The communicators go first (in step with the other members), then the links.
DeviceHierarchy::~DeviceHierarchy() {
  cross_.reset();
  local_.reset();
}

}  // namespace accord::nccl

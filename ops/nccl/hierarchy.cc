// DeviceHierarchy (see hierarchy.h).
#include "ops/nccl/hierarchy.h"

#include "runtime/config.h"
#include "runtime/logging.h"

namespace accord::nccl {

namespace {

// Why the set reduces with one communicator, or nullptr where the hierarchy applies.
const char* flatBecause(const HostLayout& split, const Config& config) {
  if (split.largest != split.smallest) return "its hosts hold different numbers of its ranks";
  if (!config.hierarchical_everywhere && split.hosts < 2) return "all its ranks share one host";
  if (!config.hierarchical_everywhere && split.local_size < 2)
    return "each host holds one of its ranks";
  return nullptr;
}

}  // namespace

std::unique_ptr<DeviceHierarchy> DeviceHierarchy::create(ProcessGroup& set, int device,
                                                         const Config& config) {
  if (!config.hierarchical_allreduce) return nullptr;
  HostGroups groups = set.splitByHost(
      [&](const HostLayout& layout) { return flatBecause(layout, config) == nullptr; },
      config.stall_shutdown_time);
  const HostLayout& split = groups.layout;
  if (const char* flat = flatBecause(split, config)) {
    log().debug(
        "ACCORD_HIERARCHICAL_ALLREDUCE: CUDA tensors of a process set of {} ranks on {} "
        "hosts ({}..{} per host) reduce with one NCCL communicator: {}",
        set.size(), split.hosts, split.smallest, split.largest, flat);
    return nullptr;
  }
  std::unique_ptr<DeviceHierarchy> h(new DeviceHierarchy());
  h->local_rank_ = split.local_rank;
  h->local_size_ = split.local_size;
  h->host_group_ = std::move(groups.host);
  h->across_group_ = std::move(groups.across);
  // Every member creates both in this order: the host's first, then the one across.
  h->local_ = Communicator::create(*h->host_group_, device, config.stall_shutdown_time);
  h->cross_ = Communicator::create(*h->across_group_, device, config.stall_shutdown_time);
  log().debug(
      "ACCORD_HIERARCHICAL_ALLREDUCE: CUDA tensors of a process set of {} ranks reduce in "
      "{} hosts x {} ranks",
      set.size(), split.hosts, split.local_size);
  return h;
}

// The communicators go first (in step with the other members), then the groups.
DeviceHierarchy::~DeviceHierarchy() {
  cross_.reset();
  local_.reset();
}

}  // namespace accord::nccl

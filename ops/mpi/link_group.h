// A process set's MPI link as the ProcessGroup a device backend bootstraps its own
// communicators with (ops/common/process_group.h): the broadcast is point-to-point
// messages from rank 0 with the link's deadline-bounded waits, and the split by host
// builds the same sub-communicators the host hierarchy uses (hierarchical.h).
#pragma once

#include "ops/common/process_group.h"
#include "ops/mpi/link.h"

#include <memory>

namespace accord::mpi {

class LinkGroup final : public ProcessGroup {
 public:
  // Over a link someone else owns (the set's, in its transport).
  explicit LinkGroup(Link& link) : link_(link) {}
  // Over a link of its own (a group split off by host).
  explicit LinkGroup(std::unique_ptr<Link> link) : owned_(std::move(link)), link_(*owned_) {}

  int rank() const override { return link_.rank(); }
  int size() const override { return link_.size(); }
  int globalRank(int rank) const override { return link_.globalRank(rank); }
  void broadcast(void* data, std::size_t bytes, const std::string& what,
                 const std::string& subject) override;
  HostGroups splitByHost(const std::function<bool(const HostLayout&)>& split,
                         std::chrono::milliseconds timeout) override;

 private:
  std::unique_ptr<Link> owned_;
  Link& link_;
};

}  // namespace accord::mpi

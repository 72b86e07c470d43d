// The host transport of one process set: its MPI communicator as a Link, and,
// when every member shares this host, the shared-memory window; when the members span
// hosts evenly and ACCORD_HIERARCHICAL_ALLREDUCE is on, the per-host windows and
// cross-host links of the hierarchical allreduce.
//
// Negotiation goes through MpiChannel, or through SharedMemory's AND with MpiChannel's
// gather and broadcast when the window exists (the AND runs every cycle; the other two
// only when the response cache cannot answer). The host ops take link(), shm() and
// hierarchy() through contextOf (context.h); a device backend sees group() and keeps
// its own state in extension().
#pragma once

#include "ops/common/op.h"
#include "ops/mpi/hierarchical.h"
#include "ops/mpi/link.h"
#include "ops/mpi/link_group.h"
#include "ops/mpi/mpi_channel.h"
#include "ops/shm/shared_memory.h"

#include <memory>

namespace accord::mpi {

class MpiTransport final : public OpTransport {
 public:
  // Collective over `comm` (see Backend::connect).
  MpiTransport(MPI_Comm comm, std::vector<int> global_ranks, const Config& config);
  ~MpiTransport() override;

  NegotiationChannel& channel() override;
  Transport kind() const override;

  ProcessGroup& group() override { return group_; }
  std::unique_ptr<SetExtension>& extension() override { return extension_; }
  void checkUsable() const override { link_.checkUsable(); }

  Link& link() { return link_; }
  shm::SharedMemory* shm() { return shm_.get(); }
  Hierarchy* hierarchy() { return hierarchy_.get(); }

 private:
  class ShmChannel;

  Link link_;
  LinkGroup group_{link_};
  MpiChannel mpi_channel_;
  // Declared after link_: destroyed first, since the window lives on link_'s
  // communicator.
  std::unique_ptr<shm::SharedMemory> shm_;
  std::unique_ptr<ShmChannel> shm_channel_;
  std::unique_ptr<Hierarchy> hierarchy_;  // also on sub-communicators of link_
  // Declared last: a device backend's state (NCCL's communicator) goes first, since
  // it was set up over link_.
  std::unique_ptr<SetExtension> extension_;
};

}  // namespace accord::mpi

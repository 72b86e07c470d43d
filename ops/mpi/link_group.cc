// LinkGroup (see link_group.h).
#include "ops/mpi/link_group.h"

#include "ops/mpi/hierarchical.h"

namespace accord::mpi {

namespace {

// Apart from every collective's tags: only a device backend's bootstrap uses it.
constexpr int kGroupBroadcastTag = 0x4e43;

}  // namespace

void LinkGroup::broadcast(void* data, std::size_t bytes, const std::string& what,
                          const std::string& subject) {
  if (link_.rank() == 0) {
    Requests sends;
    for (int r = 1; r < link_.size(); ++r) link_.send(sends, data, bytes, r, kGroupBroadcastTag);
    link_.await(sends, what, ("receive " + subject).c_str(), Patience::Negotiation);
  } else {
    Requests receive;
    link_.recv(receive, data, bytes, 0, kGroupBroadcastTag);
    link_.await(receive, what, ("send " + subject).c_str(), Patience::Negotiation);
  }
}

HostGroups LinkGroup::splitByHost(const std::function<bool(const HostLayout&)>& split,
                                  std::chrono::milliseconds timeout) {
  HostSplit hosts = mpi::splitByHost(link_);
  HostGroups groups;
  groups.layout = {hosts.local_rank, hosts.local_size, hosts.hosts, hosts.smallest, hosts.largest};
  if (!split(groups.layout)) {
    MPI_Comm_free(&hosts.host);
    return groups;
  }
  auto host_ranks = globalRanksOf(hosts.host, link_);
  groups.host = std::make_unique<LinkGroup>(
      std::make_unique<Link>(hosts.host, std::move(host_ranks), timeout));
  groups.across = std::make_unique<LinkGroup>(linkAcrossHosts(link_, hosts, timeout));
  return groups;
}

}  // namespace accord::mpi

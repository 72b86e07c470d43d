// Hierarchical allreduce on host memory (ACCORD_HIERARCHICAL_ALLREDUCE=1), for a
// process set that spans hosts.
//
// A flat ring over all ranks sends 2(n-1)/n of the buffer through every link, and with
// ranks packed host by host the ring crosses between hosts on every host boundary: the
// slow network carries as much as the fast memory does. Here the work splits by what
// each level is good at:
//   1. inside each host, reduce-scatter through the shared-memory window: local rank l
//      ends with block l of the buffer reduced over its host;
//   2. across hosts, allreduce block l among the ranks with local rank l (one
//      communicator per local rank index, so all of a host's ranks use the network at
//      once, each for 1/local_size of the data), as the flat MPI path does it: a ring,
//      or recursive doubling for small blocks (doubling.h);
//   3. inside each host, allgather the blocks through the window.
// With the ring only 2(h-1)/h of a block, 1/local_size of the buffer, leaves each rank
// for the network. Every rank holds bit-identical results (each step computes every
// element once and copies it, or computes it alike on every rank); the order of the
// additions differs from the flat path's, so floating-point sums may differ from it in
// the last bits.
//
// Steps 1-3 run per piece of the shared-memory transport (shared_memory.h), which
// calls step 2 between its reduce and its gather. Every wait is deadline-bounded: the
// window's counters and the cross-host ring's Link both give up after
// ACCORD_STALL_SHUTDOWN_TIME and name the rank they waited for.
//
// Built only where it applies: every host holds the same number (>= 2) of the set's
// ranks, there are at least two hosts, and shared memory is on. Otherwise create()
// returns nullptr (with a debug log saying why) and the set reduces with the flat MPI
// ring. Uneven hosts fall back rather than being handled: their blocks would not line
// up across hosts.
#pragma once

#include "ops/mpi/context.h"
#include "ops/mpi/link.h"
#include "ops/shm/shared_memory.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace accord::mpi {

// How a set's ranks sit on hosts. Collective over set.comm(); the counts are the same on
// every rank, so every rank takes the same branch on them.
struct HostSplit {
  MPI_Comm host = MPI_COMM_NULL;  // this host's ranks of the set (the caller frees it)
  int local_rank = 0, local_size = 1;
  int hosts = 1;
  int smallest = 1, largest = 1;  // ranks on the emptiest and the fullest host
};
HostSplit splitByHost(const Link& set);
// The communicator of the set's ranks whose local rank is `split.local_rank`, one per
// host, as a Link (collective over set.comm()).
std::unique_ptr<Link> linkAcrossHosts(const Link& set, const HostSplit& split,
                                      std::chrono::milliseconds timeout);
// The global ranks of `sub`'s members, in `sub`'s rank order, for messages.
std::vector<int> globalRanksOf(MPI_Comm sub, const Link& set);

class Hierarchy {
 public:
  // Collective over set's communicator (link.comm()); every member takes the same branch.
  static std::unique_ptr<Hierarchy> create(Link& set, const Config& config);
  // Collective over the host's ranks (it frees the window).
  ~Hierarchy();
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;

  // In-place allreduce of `count` elements over every rank of the set. `ctx` is the
  // set's context (for its buffers); `post` includes Average's division by the set size.
  void allreduce(Context& ctx, void* data, std::size_t count, DType dtype, ReduceOp op,
                 const Scaling& pre, const Scaling& post, const std::string& what);

 private:
  Hierarchy() = default;

  MPI_Comm host_ = MPI_COMM_NULL;             // this host's ranks of the set; the window's
  std::unique_ptr<shm::SharedMemory> local_;  // steps 1 and 3
  std::unique_ptr<Link> across_;              // step 2: the ranks with this local rank
};

}  // namespace accord::mpi

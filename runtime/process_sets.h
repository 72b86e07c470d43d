// Process sets: subsets of ranks that negotiate and communicate on their own.
//
// Each set owns a communicator (created from the runtime's duplicate of
// MPI_COMM_WORLD), its response cache, its table of tensors waiting for negotiation
// and, on the set's rank 0, its coordinator. The global set (id 0) always exists.
//
// Thread boundary: the table's membership data (ids, ranks) is read by application
// threads under a shared lock; the negotiation state inside a ProcessSet is touched by
// the background thread only.
#pragma once

#include "handle_state.h"
#include "ops/mpi/shared_memory.h"
#include "ops/op.h"
#include "runtime/config.h"
#include "runtime/coordinator.h"
#include "runtime/response_cache.h"

#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace accord {

// A tensor this rank submitted and that is waiting for its response.
struct PendingTensor {
  Request request;
  TensorEntry entry;
  Clock::time_point submitted;
  bool sent = false;  // already sent to the coordinator (not answered from the cache)
};

struct ProcessSet {
  ProcessSetId id = kGlobalProcessSet;
  std::vector<int> ranks;  // global ranks, ascending
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;  // this rank within the set
  int size = 1;

  // Negotiation state (background thread only).
  std::unique_ptr<ResponseCache> cache;
  std::unique_ptr<Coordinator> coordinator;  // set's rank 0 only
  std::unordered_map<std::string, PendingTensor> pending;
  std::shared_ptr<detail::HandleState> join_handle;  // set while this rank has joined
  std::uint64_t next_seq = 0;
  // Negotiation and host-memory allreduce through shared memory when every member is on
  // this host; null when MPI does them (see ACCORD_SHARED_MEMORY). Freeing it is
  // collective over the set.
  std::unique_ptr<mpi::SharedMemory> shm;

  // `comm` is MPI_COMM_NULL on ranks outside the set; `my_rank` is this process's
  // global rank.
  static std::unique_ptr<ProcessSet> create(ProcessSetId id, std::vector<int> ranks,
                                            MPI_Comm comm, int my_rank,
                                            std::size_t cache_capacity);
};

// Gives `set` the shared-memory transport when ACCORD_SHARED_MEMORY allows it and all
// its members share this host: pieces of ACCORD_CHUNK_BYTES, the negotiation vector of
// the set's cache (controller.h), ACCORD_STALL_SHUTDOWN_TIME as deadline. Collective
// over the set's communicator; does nothing on ranks outside the set.
void attachSharedMemory(const Config& config, ProcessSet& set);

class ProcessSetTable {
 public:
  // Registers a set; `comm` is MPI_COMM_NULL on ranks outside it.
  void add(std::unique_ptr<ProcessSet> set);
  std::unique_ptr<ProcessSet> remove(ProcessSetId id);

  // Application threads: membership queries; throw InvalidArgument for unknown ids.
  std::vector<int> ranks(ProcessSetId id) const;
  bool included(ProcessSetId id) const;
  int rankIn(ProcessSetId id) const;  // -1 if not a member
  // Checks that the set exists and this rank is in it; returns (rank, size) in the set.
  std::pair<int, int> member(ProcessSetId id, const char* what) const;

  // Background thread: the sets this rank belongs to, in id order (every member walks
  // them in the same order, so blocking collectives on different sets cannot cross).
  std::vector<ProcessSet*> memberSets() const;
  ProcessSet* find(ProcessSetId id) const;
  ProcessSetId nextId() const;
  std::vector<std::unique_ptr<ProcessSet>> takeAll();

 private:
  mutable std::shared_mutex mu_;
  std::map<ProcessSetId, std::unique_ptr<ProcessSet>> sets_;
  ProcessSetId next_id_ = 0;
};

}  // namespace accord

// Process sets: subsets of ranks that negotiate and communicate on their own.
//
// On each member, a set owns its transport (the backend's communicator, and shared
// memory when every member shares this host), its response cache, its table of tensors
// waiting for negotiation and, on the set's rank 0, its coordinator. The global set
// (id 0) always exists.
//
// Thread boundary: the table's membership data (ids, ranks) is read by application
// threads under a shared lock; the negotiation state inside a ProcessSet is touched by
// the background thread only.
#pragma once

#include "runtime/backend.h"
#include "runtime/coordinator.h"
#include "runtime/handle_state.h"
#include "runtime/pending_tensors.h"
#include "runtime/response_cache.h"
#include "runtime/tensor_entry.h"

#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace accord {

struct ProcessSet {
  ProcessSetId id = kGlobalProcessSet;
  std::vector<int> ranks;  // global ranks, ascending
  int rank = -1;           // this rank within the set; -1 on ranks outside it
  int size = 1;
  // Fixed at creation, so application threads may read it while the background thread
  // works on the transport.
  Transport kind = Transport::Local;

  // Negotiation state (background thread only).
  std::unique_ptr<SetTransport> transport;  // null on ranks outside the set
  std::unique_ptr<ResponseCache> cache;
  std::unique_ptr<Coordinator> coordinator;  // set's rank 0 only
  PendingTensors pending;  // this rank's tensors waiting for, or in, their collective
  std::uint64_t next_seq = 0;
  Clock::time_point last_stall_report{};  // rate-limits this set's stall reports

  bool member() const { return rank >= 0; }

  // `transport` is null on ranks outside the set; `my_rank` is this process's global
  // rank.
  static std::unique_ptr<ProcessSet> create(ProcessSetId id, std::vector<int> ranks,
                                            std::unique_ptr<SetTransport> transport, int my_rank,
                                            std::size_t cache_capacity);
};

class ProcessSetTable {
 public:
  void add(std::unique_ptr<ProcessSet> set);
  std::unique_ptr<ProcessSet> remove(ProcessSetId id);

  // Application threads: membership queries; throw InvalidArgument for unknown ids, and
  // ShutDown once takeAll() emptied the table (a call that raced shutdown()).
  std::vector<int> ranks(ProcessSetId id) const;
  bool included(ProcessSetId id) const;
  int rankIn(ProcessSetId id) const;  // -1 if not a member
  // Checks that the set exists and this rank is in it; returns (rank, size) in the set.
  std::pair<int, int> member(ProcessSetId id, const char* what) const;
  Transport kind(ProcessSetId id) const;

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
  bool taken_ = false;  // by takeAll(), at shutdown
};

}  // namespace accord

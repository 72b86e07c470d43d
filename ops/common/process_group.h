// A process set's members as a backend with communicators of its own (NCCL) needs them
// to build those: who is who, a small message from the set's rank 0 to every member,
// and the members grouped by host.
//
// The host transport (over the set's MPI communicator) implements it, so a
// device backend bootstraps without knowing what carries the bytes. Every exchange has
// the set's deadline: a member that stops answering is named in a CommError rather
// than waited for.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace accord {

// How a set's members sit on hosts. The counts are the same on every member, so every
// member takes the same branch on them.
struct HostLayout {
  int local_rank = 0, local_size = 1;  // this member among its host's members
  int hosts = 1;
  int smallest = 1, largest = 1;  // members on the emptiest and the fullest host
};

class ProcessGroup;

// The groups a set splits into by host (null where not asked for).
struct HostGroups {
  HostLayout layout;
  std::unique_ptr<ProcessGroup> host;    // this host's members
  std::unique_ptr<ProcessGroup> across;  // the members with this local rank, one per host
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The global rank of member `rank`, for messages.
  virtual int globalRank(int rank) const = 0;

  // Collective: `bytes` bytes at `data` from member 0 to every member. On a timeout
  // throws CommError "<what>: rank 2 did not receive <subject> within 5 s (...)" (or
  // "send", on a member waiting for rank 0).
  virtual void broadcast(void* data, std::size_t bytes, const std::string& what,
                         const std::string& subject) = 0;

  // Collective: how the members sit on hosts; where `split(layout)` holds (decided from
  // the layout alone, so alike on every member), also the two groups of HostGroups,
  // whose waits give up after `timeout`.
  virtual HostGroups splitByHost(const std::function<bool(const HostLayout&)>& split,
                                 std::chrono::milliseconds timeout) = 0;
};

}  // namespace accord

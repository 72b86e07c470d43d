// A process set's MPI communicator as point-to-point links between its ranks, with
// waits that have a deadline and name the rank that stopped answering.
//
// Every exchange of Accord's MPI transport, negotiation and data alike, is built from
// non-blocking sends and receives (Irecv/Isend) grouped per step into Requests and
// waited for by Link::await. Blocking MPI collectives have no deadline and cannot be
// cancelled: a peer that freezes inside one would hold this rank for ever. Here a wait
// that sees no request complete for ACCORD_STALL_SHUTDOWN_TIME gives up, and because
// each request knows its peer the CommError names that rank, or rather, after a roll call
// among the ranks (roll_call.h), the ranks that really stopped: a peer the wait was
// stuck on may itself be waiting for one of them. The requests still
// outstanding are cancelled where MPI allows it (receives not yet matched); the rest
// are never freed, and neither is the memory they point to when it is Accord's own:
// after a failure the runtime never destroys a transport or the backend.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace accord::mpi {

class RollCall;

// The outstanding requests of one step, each with the peer (communicator rank) it
// exchanges with.
class Requests {
 public:
  void add(MPI_Request request, int peer, bool receive);
  bool empty() const { return requests_.empty(); }
  std::size_t size() const { return requests_.size(); }

 private:
  friend class Link;
  std::vector<MPI_Request> requests_;
  std::vector<int> peers_;
  std::vector<bool> receives_;
};

// How to wait. Negotiation: peers may be busy elsewhere for milliseconds (computing,
// sleeping between idle cycles), so after a short spin sleep in growing steps. Data:
// every peer has agreed to run this collective, so it arrives within microseconds
// unless descheduled; spin, then yield the core, and sleep only past a millisecond.
enum class Patience { Negotiation, Data };

class Link {
 public:
  // Takes ownership of `comm` (freed by the destructor). Collective over `comm`.
  // `global_ranks[i]` names comm rank i in messages; `timeout` 0 waits for ever.
  Link(MPI_Comm comm, std::vector<int> global_ranks, std::chrono::milliseconds timeout);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int globalRank(int rank) const { return global_ranks_[rank]; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Whether the ranks are on more than one host: messages then cross a network, whose
  // latency is many times a shared-memory copy's (doubling.h picks by it).
  bool spansHosts() const { return spans_hosts_; }

  // Posts the transfer of `bytes` bytes to / from communicator rank `peer`, as as many
  // messages as MPI's int counts need (both sides cut alike). Nothing for 0 bytes.
  void send(Requests& requests, const void* data, std::size_t bytes, int peer, int tag);
  void recv(Requests& requests, void* data, std::size_t bytes, int peer, int tag);

  // Waits for every request. When none completes for timeout(), gives up on the peers
  // still outstanding: cancels what MPI can cancel, calls the roll, marks the link
  // broken and throws CommError "<what>: rank 2 did not <step> within 5 s (...) and
  // stopped answering ..." naming the ranks that did not answer (describeStopped in
  // runtime/peer_watch.h). While it sleeps it answers other ranks' roll calls.
  void await(Requests& requests, const std::string& what, const char* step, Patience patience);

  // Throws the CommError that broke the link, if any.
  void checkUsable() const;
  // Marks the link broken with `message` and throws it as a CommError.
  [[noreturn]] void fail(const std::string& message);

 private:
  bool progress(Requests& requests, int& remaining);
  // The communicator ranks `requests` still waits for, ascending.
  std::vector<int> silentPeers(const Requests& requests) const;
  std::vector<int> globalRanks(const std::vector<int>& ranks) const;
  [[noreturn]] void giveUp(Requests& requests, const std::string& what, const char* step);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> global_ranks_;
  std::chrono::milliseconds timeout_;
  bool spans_hosts_ = false;
  std::string broken_;
  std::unique_ptr<RollCall> roll_call_;  // on a duplicate of comm_
};

// How long a roll call listens after a wait of `stall` gave up: a fraction of it, as
// survivors that are still waiting answer within a sleep of their wait, but at least
// long enough for a descheduled rank to be scheduled again.
std::chrono::milliseconds rollCallTime(std::chrono::milliseconds stall);

}  // namespace accord::mpi

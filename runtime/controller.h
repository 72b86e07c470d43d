// Negotiation of one process set for one cycle: the MPI transport around the pure
// coordinator and response cache.
//
// Every cycle each member contributes one bit vector to a bitwise-AND all-reduce, with
// W = the cache's activeWords() (the same on every rank):
//   word 0        flags (each bit means "true on every rank" after the AND)
//   words 1..W    cache hits: this rank has submitted the tensor in that slot
//   words W+1..2W valid bits: cleared by a rank whose request no longer matches the slot
//   words 2W+1..3W the complement of the hits, so that the AND also yields their OR
//   words 3W+1..4W carried (only where the channel carries): this rank's data for the
//                 slot rides in the same messages (channel.h, Carriage)
// In steady state that one all-reduce is the whole negotiation. Where it runs over MPI
// it also carries the data of small cached host allreduces (up to ACCORD_CARRY_BYTES in
// all per cycle, in slot order): a slot every rank carried is reduced by the time the
// AND returns, so the tensor's collective costs no message round of its own. Only when some rank
// has a request the cache cannot answer do the ranks gather serialized requests to the set's rank
// 0, which decides and broadcasts the new responses.
//
// The exchanges go through the set's NegotiationChannel (channel.h), whatever carries
// it; every wait there has a deadline.
#pragma once

#include "runtime/channel.h"
#include "runtime/config.h"
#include "runtime/process_sets.h"
#include "runtime/tensor_queue.h"

#include <string>
#include <utility>
#include <vector>

namespace accord {

struct Negotiated {
  std::vector<Response> responses;  // unfused, in execution order, identical on all ranks
  // Allreduces the negotiation itself carried out: their results are in the tensors,
  // only the handles remain to complete. Identical on all ranks.
  std::vector<Response> carried;
  bool shutdown = false;  // some rank asked to shut down
  // With `shutdown`, on the global set: the global ranks that asked, for the messages
  // of the collectives the shutdown leaves undone.
  std::vector<int> shut_down_by;
  bool anyone_pending = false;  // some rank may still wait for a collective after
                                // this cycle (conservative: true when unsure)
  // Failures of their own GPUs that ranks told this cycle: global rank, reason.
  std::vector<std::pair<int, std::string>> announced;
};

class Controller {
 public:
  explicit Controller(const Config& config) : config_(config) {}

  // Takes a freshly submitted op into the set's pending table.
  void admit(ProcessSet& set, QueuedOp op, Clock::time_point now);
  // `own_failure`: this rank's own GPU failure to tell the set's ranks ("" if none);
  // the AND's flags say whether any rank has one, and only then do the ranks exchange
  // them (Negotiated::announced).
  Negotiated negotiate(ProcessSet& set, bool want_shutdown, Clock::time_point now,
                       const std::string& own_failure = {});

 private:
  std::vector<Request> classify(ProcessSet& set, std::size_t w, std::vector<std::uint64_t>& bits,
                                std::size_t& hits, Clock::time_point now, Carriage* carriage);
  static void offerToCarry(const ProcessSet& set, std::uint32_t slot, TensorEntry& entry,
                           Carriage& carriage);
  void chooseCarried(std::vector<std::uint64_t>& bits, Carriage& carriage) const;
  void applyCacheVerdict(ProcessSet& set, std::size_t w, const std::vector<std::uint64_t>& bits,
                         bool carrying, Negotiated& out);
  std::vector<Response> gatherAndDecide(ProcessSet& set, const std::vector<Request>& to_send,
                                        Clock::time_point now);
  void reportStalls(ProcessSet& set, Clock::time_point now);
  static std::vector<std::pair<int, std::string>> exchangeFailures(ProcessSet& set,
                                                                   const std::string& own_failure);
  bool stallsExpired(const ProcessSet& set, Clock::time_point now) const;

  const Config& config_;
};

}  // namespace accord

// The negotiation channel: the three exchanges a negotiation cycle needs among the
// ranks of one process set.
//
// The controller negotiates through this interface only, so it has no transport
// branch and is unit-tested in one process with an in-memory channel. The backends
// in ops/ implement it over MPI point-to-point messages and, among ranks of one host,
// over a shared-memory window. Every call waits for the other ranks with a deadline
// (ACCORD_STALL_SHUTDOWN_TIME) and throws CommError naming the rank that stopped
// answering; after that the channel is broken and every later call throws at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accord {

// The longest vector the controller hands to bitwiseAnd with a response cache of
// `cache_capacity` entries: a flags word, then three words per 64 cache slots (see
// controller.h). Transports that size their buffers up front use this.
constexpr std::size_t negotiationWords(std::size_t cache_capacity) {
  return 1 + 3 * ((cache_capacity + 63) / 64);
}

class NegotiationChannel {
 public:
  virtual ~NegotiationChannel() = default;

  // In-place bitwise AND of `bits` over every rank of the set (the same length on
  // every rank).
  virtual void bitwiseAnd(std::vector<std::uint64_t>& bits) = 0;
  // Every rank's `mine` at the set's rank 0, in rank order; empty on other ranks.
  virtual std::vector<std::vector<std::uint8_t>> gatherToRoot(
      const std::vector<std::uint8_t>& mine) = 0;
  // Rank 0's `bytes` on every rank of the set.
  virtual void broadcastFromRoot(std::vector<std::uint8_t>& bytes) = 0;
  // True when a bitwiseAnd round waits for late ranks asleep, woken by their arrival
  // (no polling): a rank waiting for the others may then enter the next round at once
  // instead of pacing its cycles.
  virtual bool sleepsUntilJoined() const { return false; }
};

}  // namespace accord

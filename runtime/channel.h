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

#include <accord/accord.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace accord {

// The longest vector the controller hands to bitwiseAnd with a response cache of
// `cache_capacity` entries: a flags word, then three words per 64 cache slots (see
// controller.h). Transports that size their buffers up front use this.
constexpr std::size_t negotiationWords(std::size_t cache_capacity, bool carrying = false) {
  return 1 + (carrying ? 4 : 3) * ((cache_capacity + 63) / 64);
}

// One small cached allreduce whose data rides on the messages of a negotiation round
// (bitwiseAndCarrying below; the controller says which tensors qualify).
struct CarriedTensor {
  std::uint32_t slot = 0;  // its response cache slot
  void* data = nullptr;    // this rank's tensor: the input, and the result if it is carried
  std::size_t count = 0;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0;   // applied to the input
  double postscale = 1.0;  // applied to the result, divided by
  double divisor = 1.0;    // (the set size for Average)
};

struct Carriage {
  // The AND vector's words [word0, word0 + words) mark the carried slots: each rank sets
  // the bits of its `tensors`, and after the AND they mark the slots every rank carried.
  std::size_t word0 = 0, words = 0;
  std::vector<CarriedTensor> tensors;  // this rank's, in slot order
  // The bytes of any slot some rank may carry: the caches are identical, so a rank can
  // lay out what another sends without being told.
  std::function<std::size_t(std::uint32_t slot)> slot_bytes;
  // No rank carries more than this (each tensor rounded up by carriedFootprint), so
  // receive buffers can be sized for it. Must be the same on every rank.
  std::size_t max_bytes = 0;
};

// The room a carried tensor of `bytes` takes in a message: every tensor starts at a
// multiple of 64 bytes, so that any dtype sits aligned.
constexpr std::size_t carriedFootprint(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

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

  // Whether this channel implements bitwiseAndCarrying (the same answer on every rank).
  virtual bool carries() const { return false; }
  // The most bytes one round carries on this channel, below ACCORD_CARRY_BYTES where
  // carrying larger tensors costs more than it saves (the same on every rank).
  virtual std::size_t carryLimit() const { return SIZE_MAX; }
  // bitwiseAnd, and in the same messages the allreduce of the tensors every rank
  // carries: for the slots whose carried bit survives the AND, each tensor's `data`
  // holds the scaled result on return, identical on every rank; every other tensor is
  // left untouched, for the ordinary path.
  // A channel that does not carry ANDs alone and reports nothing carried.
  virtual void bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage) {
    bitwiseAnd(bits);
    for (std::size_t i = 0; i < carriage.words; ++i) bits[carriage.word0 + i] = 0;
  }
};

}  // namespace accord

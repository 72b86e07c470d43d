// SharedMemory's negotiation rounds (see shared_memory.h): the bitwise AND every cycle
// runs, and the same round carrying small cached allreduces.
//
// Round k writes this rank's slot k % 2: the bit vector, then, when carrying, this
// rank's carried inputs (prescaled) in slot order at carriedFootprint offsets. Every
// rank knows every other's layout from that rank's own carried bits and the response
// cache, which is identical everywhere. A slot is rewritten two rounds later, when its
// readers are done: a peer enters round k + 1 only after reading round k, and this rank
// waits for every peer's round k + 1 before it starts round k + 2.
#include "ops/shm/shared_memory.h"

#include "ops/shm/layout.h"

#include <accord/error.h>

#include <cstring>
#include <stdexcept>

namespace accord::shm {

namespace {

// A peer with nothing to do sleeps between cycles for up to 20 ms, and one still
// computing what it will submit takes as long as that takes: spin only as long as one
// that is already negotiating needs, then sleep on the futex until it arrives (in
// slices, to keep the stall deadline).
constexpr std::chrono::microseconds kSpin{50}, kFirstSleep{5}, kLongestSleep{100000};

}  // namespace

char* SharedMemory::beginRound(const std::vector<std::uint64_t>& bits, std::size_t extra) {
  if (!broken_.empty()) throw CommError(broken_);
  const std::size_t bytes = bits.size() * sizeof(std::uint64_t);
  if (bytes > negotiation_bytes_ || extra > negotiation_bytes_ - bytes)
    throw InvalidArgument("shared-memory negotiation: " + std::to_string(bits.size()) +
                          " words and " + std::to_string(extra) + " bytes do not fit the " +
                          std::to_string(negotiation_bytes_) + "-byte slot it was created for");
  char* slot = negotiationSlot(rank_, ++rounds_);
  std::memcpy(slot, bits.data(), bytes);
  return slot;
}

void SharedMemory::endRound(std::vector<std::uint64_t>& bits) {
  static constexpr Patience kPatience{kSpin, kSpin, kFirstSleep, kLongestSleep, true};
  advance(kRoundsCounter, rounds_);
  waitForPeers(kRoundsCounter, rounds_, kPatience);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto* theirs = reinterpret_cast<const std::uint64_t*>(negotiationSlot(r, rounds_));
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] &= theirs[i];
  }
}

void SharedMemory::bitwiseAnd(std::vector<std::uint64_t>& bits) {
  beginRound(bits, 0);
  endRound(bits);
}

void SharedMemory::bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage) {
  const std::size_t head = carriedFootprint(bits.size() * sizeof(std::uint64_t));
  layouts_.resize(size_);
  auto& mine = layouts_[rank_];
  const std::size_t my_end = carriedLayout(bits.data() + carriage.word0, carriage, head, mine);
  const auto& tensors = carriage.tensors;
  if (mine.size() != tensors.size() || my_end - head > carriage.max_bytes)
    throw std::logic_error("carried tensors disagree with their bits or exceed max_bytes");
  char* slot = beginRound(bits, head - bits.size() * sizeof(std::uint64_t) + carriage.max_bytes);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const CarriedTensor& t = tensors[i];
    std::memcpy(slot + mine[i].second, t.data, t.count * dtype_size(t.dtype));
    if (t.prescale != 1.0) cpu::scale(slot + mine[i].second, t.count, t.dtype, t.prescale);
  }
  endRound(bits);
  if (tensors.empty()) return;  // then nothing survived the AND either

  // Each peer's layout comes from the carried bits it wrote, before the AND.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto* theirs = reinterpret_cast<const std::uint64_t*>(negotiationSlot(r, rounds_));
    const std::size_t end = carriedLayout(theirs + carriage.word0, carriage, head, layouts_[r]);
    if (end - head > carriage.max_bytes)
      throw CommError("shared-memory negotiation: rank " +
                      std::to_string(options_.global_ranks[r]) + " carries " +
                      std::to_string(end - head) + " bytes of small allreduces in one round, " +
                      "more than the " + std::to_string(carriage.max_bytes) +
                      " every rank agreed on (ACCORD_CARRY_BYTES)");
  }
  // Every carried slot that survived is reduced from rank 0's copy onwards, so that every
  // rank does the same arithmetic in the same order.
  at_.assign(size_, 0);
  peers_.resize(size_ - 1);
  const std::uint64_t* survived = bits.data() + carriage.word0;
  for (std::size_t m = 0; m < mine.size(); ++m) {
    const std::uint32_t s = mine[m].first;
    if (!(survived[s / 64] >> (s % 64) & 1)) continue;
    for (int r = 0; r < size_; ++r) {
      auto& layout = layouts_[r];
      while (layout[at_[r]].first < s) ++at_[r];  // every rank carried it: it is there
      const char* copy = negotiationSlot(r, rounds_) + layout[at_[r]].second;
      if (r > 0) peers_[r - 1] = copy;
    }
    const CarriedTensor& t = tensors[m];
    const std::size_t bytes = t.count * dtype_size(t.dtype);
    carried_.resize(std::max(carried_.size(), bytes));
    std::memcpy(carried_.data(), negotiationSlot(0, rounds_) + layouts_[0][at_[0]].second, bytes);
    cpu::reduceScaleMirror(carried_.data(), peers_, t.count, t.dtype, t.op, t.postscale, t.divisor,
                           t.data);
  }
}

}  // namespace accord::shm

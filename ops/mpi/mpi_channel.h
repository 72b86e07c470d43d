// The negotiation channel over MPI point-to-point messages (see runtime/channel.h),
// for process sets whose ranks do not share one host, or with ACCORD_SHARED_MEMORY=0.
//
// AND: dissemination, ceil(log2 n) rounds of one send and one receive each. Across
// hosts (or on one host when ACCORD_CARRY_BYTES is set explicitly), where it carries
// small allreduces in its messages (bitwiseAndCarrying): recursive doubling when n is a
// power of two (the same rounds), otherwise through rank 0 and back. Gather:
// rank 0 receives from every rank separately, so a timeout names exactly the ranks
// missing. Broadcast: a binomial tree. Every wait is Link::await's, with the deadline.
#pragma once

#include "ops/mpi/link.h"
#include "runtime/channel.h"

#include <cstdint>
#include <vector>

namespace accord::mpi {

// Where each carried slot's data sits in a carrying negotiation's message: the slots
// marked in its carried bits (slot order), after the AND vector, each at a
// carriedFootprint.
struct Layout {
  std::vector<std::uint32_t> slots;
  std::vector<std::size_t> offset;
  std::size_t end = 0;
};

class MpiChannel final : public NegotiationChannel {
 public:
  // `carry_on_one_host`: carry also when the ranks share one host (carries()).
  MpiChannel(Link& link, bool carry_on_one_host)
      : link_(link), carry_on_one_host_(carry_on_one_host) {}

  void bitwiseAnd(std::vector<std::uint64_t>& bits) override;
  // Across hosts (on one host too where asked for), among a power-of-two number of
  // ranks or up to kMaxRootCarryRanks. A power of two pairs up for the data (rank r
  // with r ^ 2^k in round k), so every element is reduced once per round, lower rank's
  // operand first, and all ranks end with the same bits; the AND's dissemination would
  // count some twice. Other sizes go through rank 0 (carryThroughRoot).
  bool carries() const override;
  // Each round's message is the rank's AND vector followed by its partial results of
  // the carried slots (in slot order, at carriedFootprint offsets), sent in pieces of
  // at most kCarryPiece bytes so that each stays under a network transport's eager
  // limit. The receiver reads the sender's carried bits from the first piece and so
  // knows how long the rest is; what both carry is reduced, what only one carries is
  // dropped.
  void bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage) override;

  // Sets of other sizes carry through rank 0 only up to this many ranks: it sends and
  // receives a message per rank.
  static constexpr int kMaxRootCarryRanks = 8;
  std::vector<std::vector<std::uint8_t>> gatherToRoot(
      const std::vector<std::uint8_t>& mine) override;
  void broadcastFromRoot(std::vector<std::uint8_t>& bytes) override;

 private:
  struct Frames;
  Frames framesFor(const std::vector<std::uint64_t>& bits, const Carriage& carriage) const;
  Layout packMine(const std::vector<std::uint64_t>& bits, const Carriage& carriage, const Frames& f,
                  char* out) const;
  void sendFrame(Requests& requests, const char* frame, std::size_t length, const Frames& f,
                 int peer, int tag);
  Layout receiveRest(Requests& requests, char* frame, const Frames& f, const Carriage& carriage,
                     int peer, int tag);
  void carryThroughRoot(std::vector<std::uint64_t>& bits, Carriage& carriage);

  Link& link_;
  bool carry_on_one_host_;
  // Every message is sent from or received into one of these, never a local: after a
  // timeout its request stays with MPI, and a peer that wakes up later may still
  // complete it. The runtime then never destroys the transport, so these stay valid.
  std::vector<std::uint64_t> and_out_, and_in_;
  std::vector<std::uint64_t> frame_out_, frame_in_;  // carrying rounds (8-byte aligned)
  std::vector<std::vector<std::uint64_t>> root_in_;  // rank 0's, one per rank (carryThroughRoot)
  std::uint64_t length_ = 0;
  std::vector<std::uint64_t> lengths_;
  std::vector<std::uint8_t> bytes_;
  std::vector<std::vector<std::uint8_t>> parts_;
};

}  // namespace accord::mpi

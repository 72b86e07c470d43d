// MpiChannel (see mpi_channel.h).
#include "ops/mpi/mpi_channel.h"

#include "ops/mpi/tree.h"

#include <cstring>

namespace accord::mpi {

namespace {

// Tags on the set's own communicator: AND round k uses kAndTag + k (k < 64).
constexpr int kAndTag = 0x4143;
constexpr int kLengthTag = 0x4243, kBytesTag = 0x4244;
constexpr int kBroadcastLengthTag = 0x4245, kBroadcastBytesTag = 0x4246;

}  // namespace

// In round k every rank sends its partial result 2^k ranks ahead and ANDs in what
// arrives from 2^k ranks behind. AND is idempotent, so the overlapping contributions
// of a non-power-of-two size do no harm. A rank waits on one peer, which may itself
// wait on the one that stopped: Link's message says so.
void MpiChannel::bitwiseAnd(std::vector<std::uint64_t>& bits) {
  const int rank = link_.rank(), size = link_.size();
  const std::size_t bytes = bits.size() * sizeof(std::uint64_t);
  and_in_.resize(bits.size());
  for (int k = 0, distance = 1; distance < size; ++k, distance *= 2) {
    and_out_ = bits;
    const int from = (rank - distance + size) % size;
    Requests requests;
    link_.recv(requests, and_in_.data(), bytes, from, kAndTag + k);
    link_.send(requests, and_out_.data(), bytes, (rank + distance) % size, kAndTag + k);
    link_.await(requests, "negotiation", "answer a negotiation round", Patience::Negotiation);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] &= and_in_[i];
  }
}

std::vector<std::vector<std::uint8_t>> MpiChannel::gatherToRoot(
    const std::vector<std::uint8_t>& mine) {
  const int size = link_.size();
  if (link_.rank() != 0) {
    length_ = mine.size();
    bytes_ = mine;
    Requests requests;
    link_.send(requests, &length_, sizeof length_, 0, kLengthTag);
    link_.send(requests, bytes_.data(), bytes_.size(), 0, kBytesTag);
    link_.await(requests, "negotiation", "collect the requests", Patience::Negotiation);
    return {};
  }
  lengths_.assign(size, 0);
  Requests requests;
  for (int r = 1; r < size; ++r)
    link_.recv(requests, &lengths_[r], sizeof(std::uint64_t), r, kLengthTag);
  link_.await(requests, "negotiation", "send its requests", Patience::Negotiation);
  parts_.resize(size);
  parts_[0] = mine;
  for (int r = 1; r < size; ++r) {
    parts_[r].resize(lengths_[r]);
    link_.recv(requests, parts_[r].data(), parts_[r].size(), r, kBytesTag);
  }
  link_.await(requests, "negotiation", "send its requests", Patience::Negotiation);
  return std::move(parts_);
}

void MpiChannel::broadcastFromRoot(std::vector<std::uint8_t>& bytes) {
  const Tree tree = binomialTree(link_.rank(), link_.size(), 0);
  const char* step = "pass on the negotiated responses";
  Requests requests;
  if (tree.parent < 0) {
    length_ = bytes.size();
    bytes_ = bytes;
  } else {
    link_.recv(requests, &length_, sizeof length_, tree.parent, kBroadcastLengthTag);
    link_.await(requests, "negotiation", step, Patience::Negotiation);
    bytes_.resize(length_);
    link_.recv(requests, bytes_.data(), bytes_.size(), tree.parent, kBroadcastBytesTag);
    link_.await(requests, "negotiation", step, Patience::Negotiation);
  }
  for (int child : tree.children) {
    link_.send(requests, &length_, sizeof length_, child, kBroadcastLengthTag);
    link_.send(requests, bytes_.data(), bytes_.size(), child, kBroadcastBytesTag);
  }
  link_.await(requests, "negotiation", step, Patience::Negotiation);
  bytes = bytes_;
}

}  // namespace accord::mpi

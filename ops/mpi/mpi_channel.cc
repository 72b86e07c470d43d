// MpiChannel (see mpi_channel.h).
#include "ops/mpi/mpi_channel.h"

#include "ops/cpu/kernels.h"
#include "ops/mpi/tree.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace accord::mpi {

namespace {

// Tags on the set's own communicator: AND round k uses kAndTag + k (k < 64).
constexpr int kAndTag = 0x4143;
constexpr int kLengthTag = 0x4243, kBytesTag = 0x4244;
constexpr int kBroadcastLengthTag = 0x4245, kBroadcastBytesTag = 0x4246;

// The largest message of a carrying round: Open MPI's TCP transport sends up to 64 KiB
// (its header included) at once and anything larger only after a handshake, which
// would cost the carried allreduce the very round trip it saves.
constexpr std::size_t kCarryPiece = 32u << 10;

// Where each carried slot's data sits in a round's message: the slots marked in
// `carried` (slot order), from offset `head` on, each at a carriedFootprint.
struct Layout {
  std::vector<std::uint32_t> slots;
  std::vector<std::size_t> offset;
  std::size_t end = 0;
};

Layout layoutOf(const std::uint64_t* carried, std::size_t words, std::size_t head,
                const Carriage& carriage) {
  Layout layout;
  layout.end = head;
  for (std::size_t i = 0; i < words; ++i) {
    for (std::uint64_t x = carried[i]; x != 0; x &= x - 1) {
      const auto slot = static_cast<std::uint32_t>(i * 64 + std::countr_zero(x));
      layout.slots.push_back(slot);
      layout.offset.push_back(layout.end);
      layout.end += carriedFootprint(carriage.slot_bytes(slot));
    }
  }
  return layout;
}

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

bool MpiChannel::carries() const {
  // On one host Open MPI sends only 4 KiB eagerly and anything larger after a
  // handshake: there a carried tensor waits for the handshake instead of a round trip
  // it would save, and measured slower; only an explicit ACCORD_CARRY_BYTES asks for it.
  const int size = link_.size();
  return size > 1 && (size & (size - 1)) == 0 && (link_.spansHosts() || carry_on_one_host_);
}

void MpiChannel::bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage) {
  const int rank = link_.rank(), size = link_.size();
  const std::size_t head = carriedFootprint(bits.size() * sizeof(std::uint64_t));
  const std::size_t capacity = head + carriage.max_bytes;
  // The first piece holds the AND vector whole; its size does not depend on max_bytes,
  // so a rank set to carry more than this one fails with the message below.
  const std::size_t first = std::max(kCarryPiece, head);
  const std::size_t words = (std::max(capacity, first) + 7) / sizeof(std::uint64_t);
  frame_out_.resize(words);
  frame_in_.resize(words);
  char* out = reinterpret_cast<char*>(frame_out_.data());
  char* in = reinterpret_cast<char*>(frame_in_.data());
  const auto& tensors = carriage.tensors;

  Layout cur = layoutOf(bits.data() + carriage.word0, carriage.words, head, carriage);
  if (cur.slots.size() != tensors.size() || cur.end > capacity)
    throw std::logic_error("carried tensors disagree with their bits or exceed max_bytes");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const CarriedTensor& t = tensors[i];
    std::memcpy(out + cur.offset[i], t.data, t.count * dtype_size(t.dtype));
    if (t.prescale != 1.0) cpu::scale(out + cur.offset[i], t.count, t.dtype, t.prescale);
  }
  std::size_t length = cur.end;
  const char* step = "answer a negotiation round";

  for (int k = 0, distance = 1; distance < size; ++k, distance *= 2) {
    std::memcpy(out, bits.data(), bits.size() * sizeof(std::uint64_t));
    const int peer = rank ^ distance, tag = kAndTag + k;
    Requests head_request, rest;
    link_.recv(head_request, in, first, peer, tag);
    for (std::size_t at = 0; at < length;) {
      const std::size_t piece = std::min(at == 0 ? first : kCarryPiece, length - at);
      link_.send(rest, out + at, piece, peer, tag);
      at += piece;
    }
    link_.await(head_request, "negotiation", step, Patience::Negotiation);
    const auto* peer_bits = reinterpret_cast<const std::uint64_t*>(in);
    const Layout theirs = layoutOf(peer_bits + carriage.word0, carriage.words, head, carriage);
    if (theirs.end > capacity) {
      link_.fail(fmt::format(
          "negotiation: rank {} carries {} bytes of small allreduces in one round, more than "
          "this rank (rank {}) allows with ACCORD_CARRY_BYTES={}: set the same value on "
          "every rank",
          link_.globalRank(peer), theirs.end - head, link_.globalRank(rank), carriage.max_bytes));
    }
    for (std::size_t at = first; at < theirs.end; at += kCarryPiece)
      link_.recv(rest, in + at, std::min(kCarryPiece, theirs.end - at), peer, tag);
    link_.await(rest, "negotiation", step, Patience::Negotiation);

    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] &= peer_bits[i];
    // What both carry is reduced, the lower rank's partial as the left operand, and
    // packed to the front for the next round; the last round scales it into the tensor.
    const bool last = distance * 2 == size;
    Layout next;
    next.end = head;
    std::size_t j = 0, t = 0;
    for (std::size_t i = 0; i < cur.slots.size(); ++i) {
      const std::uint32_t slot = cur.slots[i];
      while (j < theirs.slots.size() && theirs.slots[j] < slot) ++j;
      if (j == theirs.slots.size() || theirs.slots[j] != slot) continue;
      while (tensors[t].slot < slot) ++t;
      const CarriedTensor& tensor = tensors[t];
      char* mine = out + cur.offset[i];
      char* their = in + theirs.offset[j];
      char* acc = rank < peer ? mine : their;
      const char* other = rank < peer ? their : mine;
      if (last) {
        const void* ins[] = {other};
        cpu::reduceScaleMirror(acc, ins, tensor.count, tensor.dtype, tensor.op, tensor.postscale,
                               tensor.divisor, tensor.data);
        continue;
      }
      cpu::reduce(acc, other, tensor.count, tensor.dtype, tensor.op);
      std::memmove(out + next.end, acc, tensor.count * dtype_size(tensor.dtype));
      next.slots.push_back(slot);
      next.offset.push_back(next.end);
      next.end += carriedFootprint(tensor.count * dtype_size(tensor.dtype));
    }
    cur = std::move(next);
    length = cur.end;
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

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
constexpr int kCarryUpTag = 0x4247, kCarryDownTag = 0x4248;

// The largest message of a carrying round: Open MPI's TCP transport sends up to 64 KiB
// (its header included) at once and anything larger only after a handshake, which
// would cost the carried allreduce the very round trip it saves.
constexpr std::size_t kCarryPiece = 32u << 10;

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
  const bool power_of_two = (size & (size - 1)) == 0;
  return size > 1 && (power_of_two || size <= kMaxRootCarryRanks) &&
         (link_.spansHosts() || carry_on_one_host_);
}

// The sizes of one carrying negotiation's messages (see mpi_channel.h).
struct MpiChannel::Frames {
  std::size_t head;      // the AND vector, rounded up to carriedFootprint
  std::size_t capacity;  // the longest message a rank may send
  std::size_t first;     // the first piece: the AND vector whole
  std::size_t words;     // a receive buffer, in uint64 words
};

MpiChannel::Frames MpiChannel::framesFor(const std::vector<std::uint64_t>& bits,
                                         const Carriage& carriage) const {
  Frames f;
  f.head = carriedFootprint(bits.size() * sizeof(std::uint64_t));
  f.capacity = f.head + carriage.max_bytes;
  // The first piece's size does not depend on max_bytes, so a rank set to carry more
  // than this one fails with receiveRest's message rather than MPI's truncation error.
  f.first = std::max(kCarryPiece, f.head);
  f.words = (std::max(f.capacity, f.first) + 7) / sizeof(std::uint64_t);
  return f;
}

// Writes the AND vector and this rank's carried inputs (prescaled) into `out`; returns
// their layout.
Layout MpiChannel::packMine(const std::vector<std::uint64_t>& bits, const Carriage& carriage,
                            const Frames& f, char* out) const {
  Layout mine = layoutOf(bits.data() + carriage.word0, carriage.words, f.head, carriage);
  const auto& tensors = carriage.tensors;
  if (mine.slots.size() != tensors.size() || mine.end > f.capacity)
    throw std::logic_error("carried tensors disagree with their bits or exceed max_bytes");
  std::memcpy(out, bits.data(), bits.size() * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const CarriedTensor& t = tensors[i];
    std::memcpy(out + mine.offset[i], t.data, t.count * dtype_size(t.dtype));
    if (t.prescale != 1.0) cpu::scale(out + mine.offset[i], t.count, t.dtype, t.prescale);
  }
  return mine;
}

void MpiChannel::sendFrame(Requests& requests, const char* frame, std::size_t length,
                           const Frames& f, int peer, int tag) {
  for (std::size_t at = 0; at < length;) {
    const std::size_t piece = std::min(at == 0 ? f.first : kCarryPiece, length - at);
    link_.send(requests, frame + at, piece, peer, tag);
    at += piece;
  }
}

// The first piece of `peer`'s frame has arrived in `frame`: its layout, with the
// receives of the rest posted into `requests`.
Layout MpiChannel::receiveRest(Requests& requests, char* frame, const Frames& f,
                               const Carriage& carriage, int peer, int tag) {
  const auto* peer_bits = reinterpret_cast<const std::uint64_t*>(frame);
  Layout theirs = layoutOf(peer_bits + carriage.word0, carriage.words, f.head, carriage);
  if (theirs.end > f.capacity) {
    link_.fail(fmt::format(
        "negotiation: rank {} carries {} bytes of small allreduces in one round, more than "
        "this rank (rank {}) allows with ACCORD_CARRY_BYTES={}: set the same value on "
        "every rank",
        link_.globalRank(peer), theirs.end - f.head, link_.globalRank(link_.rank()),
        carriage.max_bytes));
  }
  for (std::size_t at = f.first; at < theirs.end; at += kCarryPiece)
    link_.recv(requests, frame + at, std::min(kCarryPiece, theirs.end - at), peer, tag);
  return theirs;
}

void MpiChannel::bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage) {
  const int size = link_.size();
  if ((size & (size - 1)) != 0) return carryThroughRoot(bits, carriage);
  const int rank = link_.rank();
  const Frames f = framesFor(bits, carriage);
  frame_out_.resize(f.words);
  frame_in_.resize(f.words);
  char* out = reinterpret_cast<char*>(frame_out_.data());
  char* in = reinterpret_cast<char*>(frame_in_.data());
  const auto& tensors = carriage.tensors;
  Layout cur = packMine(bits, carriage, f, out);
  const char* step = "answer a negotiation round";

  for (int k = 0, distance = 1; distance < size; ++k, distance *= 2) {
    std::memcpy(out, bits.data(), bits.size() * sizeof(std::uint64_t));
    const int peer = rank ^ distance, tag = kAndTag + k;
    Requests head_request, rest;
    link_.recv(head_request, in, f.first, peer, tag);
    sendFrame(rest, out, cur.end, f, peer, tag);
    link_.await(head_request, "negotiation", step, Patience::Negotiation);
    const Layout theirs = receiveRest(rest, in, f, carriage, peer, tag);
    link_.await(rest, "negotiation", step, Patience::Negotiation);

    const auto* peer_bits = reinterpret_cast<const std::uint64_t*>(in);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] &= peer_bits[i];
    // What both carry is reduced, the lower rank's partial as the left operand, and
    // packed to the front for the next round; the last round scales it into the tensor.
    const bool last = distance * 2 == size;
    Layout next;
    next.end = f.head;
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
  }
}

// Not a power of two: every rank sends its frame to rank 0, which ANDs the vectors,
// reduces what every rank carries in rank order (so every rank gets the same bits) and
// scales it, and sends the result to every rank. Two network latencies, as the
// dissemination AND takes for 3 ranks and less than its three for 5 to 7.
void MpiChannel::carryThroughRoot(std::vector<std::uint64_t>& bits, Carriage& carriage) {
  const int rank = link_.rank(), size = link_.size();
  const Frames f = framesFor(bits, carriage);
  frame_out_.resize(f.words);
  char* out = reinterpret_cast<char*>(frame_out_.data());
  const auto& tensors = carriage.tensors;
  const Layout mine = packMine(bits, carriage, f, out);
  const char* step = "answer a negotiation round";

  if (rank != 0) {
    frame_in_.resize(f.words);
    char* in = reinterpret_cast<char*>(frame_in_.data());
    Requests head_request, rest;
    link_.recv(head_request, in, f.first, 0, kCarryDownTag);
    sendFrame(rest, out, mine.end, f, 0, kCarryUpTag);
    link_.await(head_request, "negotiation", step, Patience::Negotiation);
    const Layout result = receiveRest(rest, in, f, carriage, 0, kCarryDownTag);
    link_.await(rest, "negotiation", step, Patience::Negotiation);
    std::memcpy(bits.data(), in, bits.size() * sizeof(std::uint64_t));
    // The result's slots are a subset of this rank's own, in the same order.
    std::size_t t = 0;
    for (std::size_t i = 0; i < result.slots.size(); ++i) {
      while (tensors[t].slot < result.slots[i]) ++t;
      const CarriedTensor& tensor = tensors[t];
      std::memcpy(tensor.data, in + result.offset[i], tensor.count * dtype_size(tensor.dtype));
    }
    return;
  }

  // Rank 0: every other rank's frame, the first pieces first.
  root_in_.resize(size);
  std::vector<char*> in(size, nullptr);
  Requests heads, rest;
  for (int r = 1; r < size; ++r) {
    root_in_[r].resize(f.words);
    in[r] = reinterpret_cast<char*>(root_in_[r].data());
    link_.recv(heads, in[r], f.first, r, kCarryUpTag);
  }
  link_.await(heads, "negotiation", step, Patience::Negotiation);
  std::vector<Layout> theirs(size);
  for (int r = 1; r < size; ++r) theirs[r] = receiveRest(rest, in[r], f, carriage, r, kCarryUpTag);
  link_.await(rest, "negotiation", step, Patience::Negotiation);
  for (int r = 1; r < size; ++r) {
    const auto* peer_bits = reinterpret_cast<const std::uint64_t*>(in[r]);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] &= peer_bits[i];
  }
  // The result goes into this rank's own frame, packed to the front: a slot's place
  // there is never after its place as this rank's input, which it reads first.
  std::memcpy(out, bits.data(), bits.size() * sizeof(std::uint64_t));
  const Layout result = layoutOf(bits.data() + carriage.word0, carriage.words, f.head, carriage);
  std::vector<std::size_t> at(size, 0);  // per rank: the next of its slots to look at
  std::vector<const void*> ins(size - 1);
  std::size_t t = 0, m = 0;
  for (std::size_t i = 0; i < result.slots.size(); ++i) {
    const std::uint32_t slot = result.slots[i];
    while (mine.slots[m] < slot) ++m;
    for (int r = 1; r < size; ++r) {
      while (theirs[r].slots[at[r]] < slot) ++at[r];
      ins[r - 1] = in[r] + theirs[r].offset[at[r]];
    }
    while (tensors[t].slot < slot) ++t;
    const CarriedTensor& tensor = tensors[t];
    char* acc = out + mine.offset[m];
    cpu::reduceScaleMirror(acc, ins, tensor.count, tensor.dtype, tensor.op, tensor.postscale,
                           tensor.divisor, tensor.data);
    std::memmove(out + result.offset[i], acc, tensor.count * dtype_size(tensor.dtype));
  }
  Requests sends;
  for (int r = 1; r < size; ++r) sendFrame(sends, out, result.end, f, r, kCarryDownTag);
  link_.await(sends, "negotiation", "take the negotiated result", Patience::Negotiation);
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

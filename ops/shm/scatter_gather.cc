// SharedMemory's reduce-scatter and allgather (see shared_memory.h): the blocks go in
// rounds through the same data slot and counters as allreduce's pieces, each round one
// generation of the same count (shared_memory.cc says why they can interleave).
//
// Reduce-scatter round gen:
//   0. wait for every peer's collected >= gen - 1: nobody reads my slot any more
//   1. copy this round's piece of every peer's block into my slot, prescaled there when
//      a prescale is asked for (then my own piece too: the input is not ours to scale);
//      published = gen; wait for every peer's published >= gen
//   2. my piece = op(my contribution, each peer's copy of it, in rank order), scaled by
//      `post` and written straight into the output in one pass; collected = gen
// Nobody needs the others' results, so there is no reduced step and no collection: two
// waits for the slowest rank per round where an allreduce piece has three.
//
// Allgather round gen:
//   0. as above
//   1. copy this round's piece of my block into my slot; published = gen; wait for every
//      peer's published >= gen
//   2. copy every peer's piece out of its slot into place; collected = gen
//
// Every block's piece of a round lies at the same offset in every rank's slot: the
// pieces back to back in rank order, so a reader finds its piece without asking.
#include "ops/shm/shared_memory.h"

#include "ops/shm/layout.h"

#include <accord/error.h>

#include <algorithm>
#include <string>

namespace accord::shm {

namespace {

// A round of a reduce-scatter is as large as an allreduce piece, split into one piece
// per block, so it fits the data slot (two pieces: layout.h bounds a round's piece to
// two steps) and touches as much memory per wait as an allreduce piece.
std::size_t scatterStep(std::size_t piece_bytes, std::size_t elem, int ranks) {
  return std::max<std::size_t>(1, piece_bytes / (elem * static_cast<std::size_t>(ranks)));
}

// An allgather round publishes one piece per rank, of this many bytes per block.
std::size_t gatherStep(std::size_t piece_bytes, int ranks) {
  return std::max<std::size_t>(1, piece_bytes / static_cast<std::size_t>(ranks));
}

}  // namespace

void SharedMemory::reduceScatter(const void* input, void* output, DType dtype, ReduceOp op,
                                 const Scaling& pre, const Scaling& post, const Blocks& blocks,
                                 const std::string& what) {
  if (!broken_.empty()) throw CommError(broken_);
  const std::size_t elem = dtype_size(dtype);
  const auto ranks = static_cast<std::size_t>(size_);
  if (blocks.first.size() != ranks || blocks.count.size() != ranks)
    throw InvalidArgument("shared-memory reduce-scatter " + what + ": " +
                          std::to_string(blocks.count.size()) + " blocks for " +
                          std::to_string(size_) + " ranks");
  // A round of pieces of one element per block must still fit the slot (it does for
  // every piece size the settings allow, 4 KiB and up).
  if (2 * ranks * elem > 2 * slot_piece_bytes_)
    throw InvalidArgument("shared-memory reduce-scatter " + what + ": " + std::to_string(size_) +
                          " ranks do not fit " + std::to_string(slot_piece_bytes_) +
                          "-byte pieces: raise ACCORD_CHUNK_BYTES");
  const Rounds rounds(blocks.count, scatterStep(piece_bytes_, elem, size_));
  what_ = &what;
  for (std::size_t i = 0; i < rounds.rounds; ++i)
    scatterRound(static_cast<const char*>(input), static_cast<char*>(output), dtype, op, pre, post,
                 blocks, rounds, i);
  what_ = nullptr;
}

void SharedMemory::scatterRound(const char* input, char* output, DType dtype, ReduceOp op,
                                const Scaling& pre, const Scaling& post, const Blocks& blocks,
                                const Rounds& rounds, std::size_t round) {
  const std::size_t elem = dtype_size(dtype);
  const std::uint64_t gen = ++pieces_;
  slot_at_.assign(static_cast<std::size_t>(size_) + 1, 0);
  for (int r = 0; r < size_; ++r) slot_at_[r + 1] = slot_at_[r] + rounds.size(r, round);
  auto source = [&](int r) { return input + (blocks.first[r] + rounds.begin(r, round)) * elem; };
  auto inSlot = [&](int rank, int block) { return dataSlot(rank) + slot_at_[block] * elem; };
  const bool prescaled = !pre.isOne();

  // 0-1. Once the peers are done with my slot, publish the pieces they reduce.
  waitForPeers(kCollected, gen - 1, kDataPatience);
  collect_.clear();  // here: what to publish
  for (int r = 0; r < size_; ++r)
    if (r != rank_ || prescaled)
      collect_.push_back({inSlot(rank_, r), source(r), rounds.size(r, round) * elem});
  cpu::parallelCopy(collect_);
  if (prescaled) applyScaling(pre, dataSlot(rank_), slot_at_[size_], dtype);
  advance(kPublished, gen);
  waitForPeers(kPublished, gen, kDataPatience);

  // 2. Reduce my piece from my contribution and every peer's copy, in rank order.
  peers_.clear();
  for (int r = 0; r < size_; ++r)
    if (r != rank_) peers_.push_back(inSlot(r, rank_));
  const char* own = prescaled ? inSlot(rank_, rank_) : source(rank_);
  cpu::reduceScaleFrom(own, peers_, rounds.size(rank_, round), dtype, op, post.factor, post.divisor,
                       output + rounds.begin(rank_, round) * elem);
  advance(kCollected, gen);
}

void SharedMemory::allgather(void* data, const Blocks& blocks, const std::string& what) {
  if (!broken_.empty()) throw CommError(broken_);
  const auto ranks = static_cast<std::size_t>(size_);
  if (blocks.first.size() != ranks || blocks.count.size() != ranks)
    throw InvalidArgument("shared-memory allgather " + what + ": " +
                          std::to_string(blocks.count.size()) + " blocks for " +
                          std::to_string(size_) + " ranks");
  const Rounds rounds(blocks.count, gatherStep(piece_bytes_, size_));
  what_ = &what;
  for (std::size_t i = 0; i < rounds.rounds; ++i)
    gatherRound(static_cast<char*>(data), blocks, rounds, i);
  what_ = nullptr;
}

void SharedMemory::gatherRound(char* data, const Blocks& blocks, const Rounds& rounds,
                               std::size_t round) {
  const std::uint64_t gen = ++pieces_;
  auto at = [&](int r) { return data + blocks.first[r] + rounds.begin(r, round); };

  // 0-1. Once the peers are done with my slot, publish my piece.
  waitForPeers(kCollected, gen - 1, kDataPatience);
  const cpu::CopyPiece publish[] = {{dataSlot(rank_), at(rank_), rounds.size(rank_, round)}};
  cpu::parallelCopy(publish);
  advance(kPublished, gen);
  waitForPeers(kPublished, gen, kDataPatience);

  // 2. Collect every peer's piece into place.
  collect_.clear();
  for (int r = 0; r < size_; ++r)
    if (r != rank_) collect_.push_back({at(r), dataSlot(r), rounds.size(r, round)});
  cpu::parallelCopy(collect_);
  advance(kCollected, gen);
}

}  // namespace accord::shm

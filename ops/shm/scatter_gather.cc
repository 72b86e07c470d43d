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
#include <utility>
#include <vector>

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
  if (blocks.first.size() != blocks.count.size())
    throw InvalidArgument("shared-memory reduce-scatter " + what + ": " +
                          std::to_string(blocks.first.size()) + " block starts for " +
                          std::to_string(blocks.count.size()) + " lengths");
  const std::size_t elem = dtype_size(dtype);
  // Only read: the spread's pointers are not const because outputs use the same type.
  char* in = const_cast<char*>(static_cast<const char*>(input));
  std::vector<Spread> inputs;
  for (std::size_t r = 0; r < blocks.count.size(); ++r)
    inputs.emplace_back(in + blocks.first[r] * elem, blocks.count[r] * elem);
  const std::size_t mine = static_cast<std::size_t>(rank_) < blocks.count.size()
                               ? blocks.count[static_cast<std::size_t>(rank_)] * elem
                               : 0;
  reduceScatter(inputs, Spread(static_cast<char*>(output), mine), dtype, op, pre, post, what);
}

void SharedMemory::reduceScatter(const std::vector<Spread>& inputs, const Spread& output,
                                 DType dtype, ReduceOp op, const Scaling& pre, const Scaling& post,
                                 const std::string& what) {
  if (!broken_.empty()) throw CommError(broken_);
  const std::size_t elem = dtype_size(dtype);
  const auto ranks = static_cast<std::size_t>(size_);
  if (inputs.size() != ranks)
    throw InvalidArgument("shared-memory reduce-scatter " + what + ": " +
                          std::to_string(inputs.size()) + " blocks for " + std::to_string(size_) +
                          " ranks");
  if (output.bytes() != inputs[static_cast<std::size_t>(rank_)].bytes())
    throw InvalidArgument("shared-memory reduce-scatter " + what + ": an output of " +
                          std::to_string(output.bytes()) + " bytes for a block of " +
                          std::to_string(inputs[static_cast<std::size_t>(rank_)].bytes()));
  // A round of pieces of one element per block must still fit the slot (it does for
  // every piece size the settings allow, 4 KiB and up).
  if (2 * ranks * elem > 2 * slot_piece_bytes_)
    throw InvalidArgument("shared-memory reduce-scatter " + what + ": " + std::to_string(size_) +
                          " ranks do not fit " + std::to_string(slot_piece_bytes_) +
                          "-byte pieces: raise ACCORD_CHUNK_BYTES");
  std::vector<std::size_t> lengths;  // elements
  for (const Spread& block : inputs) lengths.push_back(block.bytes() / elem);
  const Rounds rounds(std::move(lengths), scatterStep(piece_bytes_, elem, size_));
  what_ = &what;
  for (std::size_t i = 0; i < rounds.rounds; ++i)
    scatterRound(inputs, output, dtype, op, pre, post, rounds, i);
  what_ = nullptr;
}

void SharedMemory::scatterRound(const std::vector<Spread>& inputs, const Spread& output,
                                DType dtype, ReduceOp op, const Scaling& pre, const Scaling& post,
                                const Rounds& rounds, std::size_t round) {
  const std::size_t elem = dtype_size(dtype);
  const std::uint64_t gen = ++pieces_;
  slot_at_.assign(static_cast<std::size_t>(size_) + 1, 0);
  for (int r = 0; r < size_; ++r) slot_at_[r + 1] = slot_at_[r] + rounds.size(r, round) * elem;
  auto inSlot = [&](int rank, int block) { return dataSlot(rank) + slot_at_[block]; };
  // Block r's bytes in this round.
  auto lo = [&](int r) { return rounds.begin(r, round) * elem; };
  auto hi = [&](int r) { return rounds.begin(r, round + 1) * elem; };
  const bool prescaled = !pre.isOne();

  // 0-1. Once the peers are done with my slot, publish the pieces they reduce.
  waitForPeers(kCollected, gen - 1, kDataPatience);
  collect_.clear();  // here: what to publish
  for (int r = 0; r < size_; ++r)
    if (r != rank_ || prescaled)
      inputs[r].visit(lo(r), hi(r), [&](const char* at, std::size_t from, std::size_t n) {
        collect_.push_back({inSlot(rank_, r) + from, at, n});
      });
  cpu::parallelCopy(collect_);
  if (prescaled) applyScaling(pre, dataSlot(rank_), slot_at_[size_] / elem, dtype);
  advance(kPublished, gen);
  waitForPeers(kPublished, gen, kDataPatience);

  // 2. Reduce my piece from my contribution and every peer's copy, in rank order, into
  // the output: one call per stretch of both (a packed buffer is one stretch).
  peers_.clear();
  for (int r = 0; r < size_; ++r)
    if (r != rank_) peers_.push_back(inSlot(r, rank_));
  auto reduce = [&](const char* own, std::size_t from, std::size_t n, char* out) {
    peers_at_.clear();
    for (const void* peer : peers_) peers_at_.push_back(static_cast<const char*>(peer) + from);
    cpu::reduceScaleFrom(own, peers_at_, n / elem, dtype, op, post.factor, post.divisor, out);
  };
  const std::size_t begin = lo(rank_);
  output.visit(begin, hi(rank_), [&](char* out, std::size_t from, std::size_t n) {
    if (prescaled) return reduce(inSlot(rank_, rank_) + from, from, n, out);
    inputs[rank_].visit(begin + from, begin + from + n,
                        [&](const char* own, std::size_t within, std::size_t m) {
                          reduce(own, from + within, m, out + within);
                        });
  });
  advance(kCollected, gen);
}

void SharedMemory::allgather(void* data, const Blocks& blocks, const std::string& what) {
  if (blocks.first.size() != blocks.count.size())
    throw InvalidArgument("shared-memory allgather " + what + ": " +
                          std::to_string(blocks.first.size()) + " block starts for " +
                          std::to_string(blocks.count.size()) + " lengths");
  char* base = static_cast<char*>(data);
  std::vector<Spread> into;
  for (std::size_t r = 0; r < blocks.count.size(); ++r)
    into.emplace_back(base + blocks.first[r], blocks.count[r]);
  const Spread mine = static_cast<std::size_t>(rank_) < into.size()
                          ? into[static_cast<std::size_t>(rank_)]
                          : Spread();
  allgather(mine, into, what);
}

void SharedMemory::allgather(const Spread& mine, const std::vector<Spread>& into,
                             const std::string& what) {
  if (!broken_.empty()) throw CommError(broken_);
  const auto ranks = static_cast<std::size_t>(size_);
  if (into.size() != ranks)
    throw InvalidArgument("shared-memory allgather " + what + ": " + std::to_string(into.size()) +
                          " blocks for " + std::to_string(size_) + " ranks");
  if (mine.bytes() != into[static_cast<std::size_t>(rank_)].bytes())
    throw InvalidArgument("shared-memory allgather " + what + ": " + std::to_string(mine.bytes()) +
                          " bytes of this rank's for a block of " +
                          std::to_string(into[static_cast<std::size_t>(rank_)].bytes()));
  std::vector<std::size_t> lengths;
  for (const Spread& block : into) lengths.push_back(block.bytes());
  const Rounds rounds(std::move(lengths), gatherStep(piece_bytes_, size_));
  what_ = &what;
  for (std::size_t i = 0; i < rounds.rounds; ++i) gatherRound(mine, into, rounds, i);
  what_ = nullptr;
}

void SharedMemory::gatherRound(const Spread& mine, const std::vector<Spread>& into,
                               const Rounds& rounds, std::size_t round) {
  const std::uint64_t gen = ++pieces_;
  auto lo = [&](int r) { return rounds.begin(r, round); };
  auto hi = [&](int r) { return rounds.begin(r, round + 1); };

  // 0-1. Once the peers are done with my slot, publish my piece.
  waitForPeers(kCollected, gen - 1, kDataPatience);
  collect_.clear();  // here: what to publish
  mine.visit(lo(rank_), hi(rank_), [&](const char* at, std::size_t from, std::size_t n) {
    collect_.push_back({dataSlot(rank_) + from, at, n});
  });
  cpu::parallelCopy(collect_);
  advance(kPublished, gen);
  waitForPeers(kPublished, gen, kDataPatience);

  // 2. Collect every peer's piece into place.
  collect_.clear();
  for (int r = 0; r < size_; ++r)
    if (r != rank_)
      into[r].visit(lo(r), hi(r), [&](char* at, std::size_t from, std::size_t n) {
        collect_.push_back({at, dataSlot(r) + from, n});
      });
  cpu::parallelCopy(collect_);
  advance(kCollected, gen);
}

}  // namespace accord::shm

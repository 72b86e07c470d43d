// Where data lies in the shared-memory transport, as pure functions of sizes (unit-tested
// in tests/ops/unit/test_shm_layout.cc): how an allreduce is cut into pieces and each
// piece into one block per rank, and where each carried tensor lies in a negotiation slot.
#pragma once

#include "runtime/channel.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace accord::shm {

// A buffer of `count` elements in pieces of at most `step` elements, except that one of
// up to two steps goes whole (each piece costs three waits for the slowest rank). Piece
// i holds elements [pieceBegin(i), pieceBegin(i + 1)); pieces differ by at most one.
struct Pieces {
  std::size_t count = 0;
  std::size_t pieces = 1;
  Pieces(std::size_t count, std::size_t step);
  std::size_t begin(std::size_t piece) const { return count * piece / pieces; }
};

// One block per rank, of lengths that may differ (0 included), all cut into the same
// number of rounds, as a reduce-scatter or an allgather moves them: round i takes
// [begin(b, i), begin(b, i + 1)) of block b. The longest block is cut as Pieces cuts a
// buffer with `step`, every other one into as many near-equal pieces, so that no piece
// is longer than two steps, nor than one step when there are several rounds. Lengths
// count elements or bytes alike.
struct Rounds {
  std::vector<std::size_t> length;
  std::size_t rounds = 1;
  Rounds(std::vector<std::size_t> length, std::size_t step);
  std::size_t begin(int block, std::size_t round) const {
    return length[static_cast<std::size_t>(block)] * round / rounds;
  }
  std::size_t size(int block, std::size_t round) const {
    return begin(block, round + 1) - begin(block, round);
  }
};

// Where a block's bytes lie in memory, in stretches back to back: one stretch for a
// tensor or a packed buffer, one per tensor for a fused group reduced or gathered in
// place (each tensor's rows of one rank in turn), which spares the copies in and out of
// the fusion buffer. Stretch i holds the block's bytes [end(i - 1), end(i)).
class Spread {
 public:
  Spread() = default;
  Spread(char* at, std::size_t bytes) { add(at, bytes); }
  // The next `bytes` of the block, at `at`; an empty stretch is left out.
  void add(char* at, std::size_t bytes);
  std::size_t bytes() const { return end_.empty() ? 0 : end_.back(); }
  std::size_t stretches() const { return at_.size(); }
  // f(at, from, n) for each stretch's part of the block's bytes [lo, hi), in order: n
  // bytes at `at`, which are the range's bytes [from, from + n).
  template <class F>
  void visit(std::size_t lo, std::size_t hi, F&& f) const {
    std::size_t i =
        static_cast<std::size_t>(std::upper_bound(end_.begin(), end_.end(), lo) - end_.begin());
    for (std::size_t pos = lo; pos < hi; ++i) {
      const std::size_t begin = i == 0 ? 0 : end_[i - 1];
      const std::size_t stop = std::min(hi, end_[i]);
      f(at_[i] + (pos - begin), pos - lo, stop - pos);
      pos = stop;
    }
  }

 private:
  std::vector<char*> at_;
  std::vector<std::size_t> end_;
};

// Block `block` of `ranks` equal blocks of a piece of `count` elements: its first element
// (block == ranks gives the end). Blocks differ by at most one element.
inline std::size_t blockBegin(std::size_t count, int block, int ranks) {
  return count * static_cast<std::size_t>(block) / static_cast<std::size_t>(ranks);
}

// The carried slots that `words` (carriage.words of them) mark, in slot order, each with
// its offset in a negotiation slot whose carried data starts at `head`, into `out`;
// returns the end of the last (each tensor takes carriedFootprint of its bytes).
std::size_t carriedLayout(const std::uint64_t* words, const Carriage& carriage, std::size_t head,
                          std::vector<std::pair<std::uint32_t, std::size_t>>& out);

}  // namespace accord::shm

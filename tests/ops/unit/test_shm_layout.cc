// The shared-memory transport's layout (ops/shm/layout.h), in one process: pieces and
// blocks cover every element exactly once, and carried tensors lie where every rank
// computes them to lie.
#include "ops/shm/layout.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

using namespace accord;

TEST_CASE("shared memory: up to two steps go whole, more in near-equal pieces", "[shm]") {
  CHECK(shm::Pieces(0, 256).pieces == 1);
  CHECK(shm::Pieces(512, 256).pieces == 1);    // two steps: whole
  CHECK(shm::Pieces(513, 256).pieces == 3);    // just above: pieces of at most a step
  CHECK(shm::Pieces(1000, 0).pieces == 1000);  // a step of 0 counts as 1
  for (std::size_t count : {1u, 7u, 513u, 1000u, 4099u}) {
    for (std::size_t step : {1u, 3u, 256u, 1000u}) {
      const shm::Pieces p(count, step);
      CHECK(p.begin(0) == 0);
      CHECK(p.begin(p.pieces) == count);
      for (std::size_t i = 0; i < p.pieces; ++i) {
        const std::size_t n = p.begin(i + 1) - p.begin(i);
        CHECK(n >= count / p.pieces);
        CHECK(n <= count / p.pieces + 1);
        if (p.pieces > 1) CHECK(n <= step);
      }
    }
  }
}

TEST_CASE("shared memory: each rank's block of a piece, in order, nothing left out", "[shm]") {
  for (std::size_t count : {0u, 1u, 5u, 64u, 1001u}) {
    for (int ranks : {2, 3, 4, 7}) {
      CHECK(shm::blockBegin(count, 0, ranks) == 0);
      CHECK(shm::blockBegin(count, ranks, ranks) == count);
      for (int b = 0; b < ranks; ++b) {
        const std::size_t n =
            shm::blockBegin(count, b + 1, ranks) - shm::blockBegin(count, b, ranks);
        CHECK(n <= count / ranks + 1);
        CHECK(n >= count / ranks);
      }
    }
  }
}

TEST_CASE("shared memory: carried tensors in slot order at 64-byte offsets", "[shm]") {
  Carriage carriage;
  carriage.words = 2;
  // Slot s holds 10 * (s + 1) bytes.
  carriage.slot_bytes = [](std::uint32_t slot) { return std::size_t{10} * (slot + 1); };
  const std::uint64_t words[] = {(1ull << 3) | (1ull << 0), 1ull << 6};  // slots 0, 3, 70
  std::vector<std::pair<std::uint32_t, std::size_t>> layout;
  const std::size_t end = shm::carriedLayout(words, carriage, 128, layout);
  REQUIRE(layout.size() == 3);
  CHECK(layout[0] == std::pair<std::uint32_t, std::size_t>{0, 128});
  CHECK(layout[1] == std::pair<std::uint32_t, std::size_t>{3, 192});   // 10 B -> 64
  CHECK(layout[2] == std::pair<std::uint32_t, std::size_t>{70, 256});  // 40 B -> 64
  CHECK(end == 256 + 768);                                             // 710 B -> 768
  const std::uint64_t none[] = {0, 0};
  CHECK(shm::carriedLayout(none, carriage, 64, layout) == 64);
  CHECK(layout.empty());
}

TEST_CASE("shared memory: blocks of different lengths in the same rounds, pieces bounded",
          "[shm]") {
  const std::vector<std::vector<std::size_t>> cases = {
      {0, 0}, {1, 0, 1}, {5, 4, 4}, {0, 1000, 999}, {4099, 4098, 0, 4098}, {513, 2}, {7}};
  for (const auto& lengths : cases) {
    for (std::size_t step : {1u, 3u, 256u, 1000u}) {
      const shm::Rounds r(lengths, step);
      const std::size_t longest = *std::max_element(lengths.begin(), lengths.end());
      CHECK(r.rounds == shm::Pieces(longest, step).pieces);
      for (int b = 0; b < static_cast<int>(lengths.size()); ++b) {
        CHECK(r.begin(b, 0) == 0);
        CHECK(r.begin(b, r.rounds) == lengths[b]);
        for (std::size_t i = 0; i < r.rounds; ++i) {
          INFO("block " << b << " of length " << lengths[b] << ", step " << step << ", round " << i
                        << " of " << r.rounds);
          CHECK(r.begin(b, i) <= r.begin(b, i + 1));
          CHECK(r.size(b, i) <= (r.rounds > 1 ? step : 2 * step));
        }
      }
    }
  }
}

TEST_CASE("shared memory: a spread visits each byte of a range once, in order", "[shm]") {
  // Stretches of 3, 0 (left out), 5 and 1 bytes at scattered places of one buffer.
  std::vector<char> memory(64);
  char* base = memory.data();
  shm::Spread s;
  s.add(base + 40, 3);
  s.add(base + 10, 0);
  s.add(base + 0, 5);
  s.add(base + 20, 1);
  REQUIRE(s.bytes() == 9);
  // Where the block's byte i lies.
  const std::vector<char*> where = {base + 40, base + 41, base + 42, base + 0, base + 1,
                                    base + 2,  base + 3,  base + 4,  base + 20};
  for (std::size_t lo = 0; lo <= 9; ++lo) {
    for (std::size_t hi = lo; hi <= 9; ++hi) {
      std::vector<char*> seen;
      std::size_t next = 0;  // each call starts where the one before ended
      s.visit(lo, hi, [&](char* at, std::size_t from, std::size_t n) {
        CHECK(from == next);
        CHECK(n > 0);
        for (std::size_t i = 0; i < n; ++i) seen.push_back(at + i);
        next = from + n;
      });
      INFO("bytes [" << lo << ", " << hi << ")");
      CHECK(seen == std::vector<char*>(where.begin() + lo, where.begin() + hi));
    }
  }
  CHECK(shm::Spread().bytes() == 0);
  CHECK(shm::Spread(base, 7).bytes() == 7);
}

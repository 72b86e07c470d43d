#include "ops/shm/layout.h"

#include <algorithm>
#include <utility>

namespace accord::shm {

Pieces::Pieces(std::size_t count, std::size_t step) : count(count) {
  step = std::max<std::size_t>(step, 1);
  pieces = count <= 2 * step ? 1 : (count + step - 1) / step;
}

Rounds::Rounds(std::vector<std::size_t> lengths, std::size_t step) : length(std::move(lengths)) {
  const std::size_t longest = length.empty() ? 0 : *std::max_element(length.begin(), length.end());
  rounds = Pieces(longest, step).pieces;
}

void Spread::add(char* at, std::size_t bytes) {
  if (bytes == 0) return;
  at_.push_back(at);
  end_.push_back(this->bytes() + bytes);
}

std::size_t carriedLayout(const std::uint64_t* words, const Carriage& carriage, std::size_t head,
                          std::vector<std::pair<std::uint32_t, std::size_t>>& out) {
  out.clear();
  std::size_t end = head;
  for (std::size_t i = 0; i < carriage.words; ++i) {
    for (std::uint64_t x = words[i]; x != 0; x &= x - 1) {
      const auto slot = static_cast<std::uint32_t>(i * 64 + __builtin_ctzll(x));
      out.emplace_back(slot, end);
      end += carriedFootprint(carriage.slot_bytes(slot));
    }
  }
  return end;
}

}  // namespace accord::shm

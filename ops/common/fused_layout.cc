// The fused-layout planner (see fused_layout.h).
#include "ops/common/fused_layout.h"

#include <accord/error.h>

#include <algorithm>
#include <string>

namespace accord {

namespace {

std::size_t roundUp(std::size_t n, std::size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

FusedReduction planFusedReduction(const std::vector<std::size_t>& bytes,
                                  const std::vector<bool>& local, std::size_t elem,
                                  std::size_t alignment, std::size_t multiple) {
  if (elem == 0 || alignment == 0 || alignment % elem != 0 || multiple == 0 ||
      local.size() != bytes.size())
    throw InvalidArgument("fused layout: " + std::to_string(bytes.size()) + " tensors, " +
                          std::to_string(local.size()) + " local flags, element of " +
                          std::to_string(elem) + " bytes, alignment " + std::to_string(alignment) +
                          ", multiple " + std::to_string(multiple));
  const std::size_t n = bytes.size();
  FusedReduction plan;
  plan.bytes = bytes;
  plan.offset.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i] % elem != 0)
      throw InvalidArgument("fused layout: tensor " + std::to_string(i) + " has " +
                            std::to_string(bytes[i]) + " bytes, not whole elements of " +
                            std::to_string(elem));
    plan.offset[i] = plan.used;
    plan.used += roundUp(bytes[i], alignment);
    if (bytes[i] == 0) continue;
    if (local[i])
      plan.copied.push_back(i);
    else
      plan.neutral.push_back({plan.offset[i], bytes[i]});
  }
  plan.count = roundUp(plan.used / elem, multiple);
  if (plan.count * elem > plan.used)
    plan.neutral.push_back({plan.used, plan.count * elem - plan.used});
  return plan;
}

FusedGather planFusedGather(const std::vector<std::vector<std::size_t>>& bytes, int size) {
  const std::size_t n = bytes.size();
  FusedGather plan;
  plan.at.assign(n, std::vector<std::size_t>(size));
  plan.dst.assign(n, std::vector<std::size_t>(size));
  for (std::size_t t = 0; t < n; ++t) {
    if (bytes[t].size() != static_cast<std::size_t>(size))
      throw InvalidArgument("fused layout: tensor " + std::to_string(t) + " has " +
                            std::to_string(bytes[t].size()) + " ranks' sizes, expected " +
                            std::to_string(size));
    for (int r = 1; r < size; ++r) plan.dst[t][r] = plan.dst[t][r - 1] + bytes[t][r - 1];
  }
  for (int r = 0; r < size; ++r) {
    const std::size_t start = plan.total;
    for (std::size_t t = 0; t < n; ++t) {
      plan.at[t][r] = plan.total;
      plan.total += bytes[t][r];
    }
    plan.blocks.push_back({start, plan.total - start});
  }
  return plan;
}

bool anyOverlap(std::vector<Span> read, const std::vector<Span>& written) {
  std::erase_if(read, [](const Span& s) { return s.end <= s.begin; });
  std::sort(read.begin(), read.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  // reach[i]: the furthest end of read[0..i] (the spans may overlap each other).
  std::vector<std::uintptr_t> reach(read.size());
  for (std::size_t i = 0; i < read.size(); ++i)
    reach[i] = std::max(read[i].end, i > 0 ? reach[i - 1] : 0);
  for (const Span& w : written) {
    if (w.end <= w.begin) continue;
    // Of the spans that begin before w ends, does any end after w begins?
    const auto before = std::partition_point(read.begin(), read.end(),
                                             [&](const Span& r) { return r.begin < w.end; });
    const auto n = static_cast<std::size_t>(before - read.begin());
    if (n > 0 && reach[n - 1] > w.begin) return true;
  }
  return false;
}

bool anyOverlap(std::vector<Span> spans) {
  std::erase_if(spans, [](const Span& s) { return s.end <= s.begin; });
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  // Sorted by start, some two share a byte exactly when some span starts before the one
  // before it ends (if i shares one with an earlier j, so does i - 1 with j or i).
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end) return true;
  return false;
}

}  // namespace accord

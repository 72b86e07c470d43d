// Adasum allreduce (see adasum.h).
#include "ops/mpi/adasum.h"

#include "ops/common/checks.h"
#include "ops/common/scaling.h"
#include "ops/cpu/kernels.h"
#include "ops/mpi/link.h"
#include "runtime/timeline.h"

#include <algorithm>

namespace accord::mpi {

namespace {

constexpr int kHalfTag = 0x4144, kDotsTag = 0x4145, kGatherTag = 0x4146;

struct Segment {
  std::size_t lo = 0, hi = 0;  // elements
  std::size_t size() const { return hi - lo; }
};

void exchange(Link& link, const void* mine, std::size_t send_bytes, void* theirs,
              std::size_t recv_bytes, int peer, int tag, const std::string& what,
              const char* step) {
  Requests requests;
  link.recv(requests, theirs, recv_bytes, peer, tag);
  link.send(requests, mine, send_bytes, peer, tag);
  link.await(requests, what, step, Patience::Data);
}

// The rounds on `data`, `bound` holding the tensors' first elements and, last, the end.
void adasumRounds(Context& ctx, char* data, const std::vector<std::size_t>& bound, DType dtype,
                  const std::string& what) {
  Link& link = ctx.link;
  const int n = link.size(), r = link.rank();
  const std::size_t elem = dtype_size(dtype), tensors = bound.size() - 1;
  Segment held{0, bound.back()};
  if (n < 2 || held.size() == 0) return;
  char* theirs = ctx.scratch.reserve((held.size() - held.size() / 2) * elem);
  std::vector<double> dots(3 * tensors), peer_dots(3 * tensors);
  std::vector<Segment> before;  // the segment held before each round, to gather back
  for (int mask = 1; mask < n; mask *= 2) {
    const int peer = r ^ mask;
    const bool lower = r < peer;
    const std::size_t mid = held.lo + held.size() / 2;
    const Segment keep = lower ? Segment{held.lo, mid} : Segment{mid, held.hi};
    const Segment give = lower ? Segment{mid, held.hi} : Segment{held.lo, mid};
    exchange(link, data + give.lo * elem, give.size() * elem, theirs, keep.size() * elem, peer,
             kHalfTag, what, "exchange half of its partial Adasum");
    before.push_back(held);
    held = keep;
    // The lower group's partial is the first operand on every rank.
    const char* a = lower ? data + keep.lo * elem : theirs;
    const char* b = lower ? theirs : data + keep.lo * elem;
    auto piece = [&](std::size_t t) {
      return Segment{std::max(bound[t], keep.lo), std::min(bound[t + 1], keep.hi)};
    };
    for (std::size_t t = 0; t < tensors; ++t) {
      const Segment p = piece(t);
      cpu::AdasumDots d;
      if (p.lo < p.hi) {
        const std::size_t at = (p.lo - keep.lo) * elem;
        d = cpu::adasumDots(a + at, b + at, p.size(), dtype);
      }
      dots[3 * t] = d.ab;
      dots[3 * t + 1] = d.aa;
      dots[3 * t + 2] = d.bb;
    }
    // Summed over the group of 2 * mask ranks that hold the tensors' pieces.
    for (int m = 1; m <= mask; m *= 2) {
      exchange(link, dots.data(), dots.size() * sizeof(double), peer_dots.data(),
               peer_dots.size() * sizeof(double), r ^ m, kDotsTag, what,
               "exchange its Adasum dot products");
      for (std::size_t j = 0; j < dots.size(); ++j) dots[j] += peer_dots[j];
    }
    for (std::size_t t = 0; t < tensors; ++t) {
      const Segment p = piece(t);
      if (p.lo >= p.hi) continue;
      const std::size_t at = (p.lo - keep.lo) * elem;
      const cpu::AdasumWeights w =
          cpu::adasumWeights({dots[3 * t], dots[3 * t + 1], dots[3 * t + 2]});
      cpu::adasumCombine(a + at, b + at, data + p.lo * elem, p.size(), dtype, w);
    }
  }
  for (int mask = n / 2; mask >= 1; mask /= 2) {
    const Segment whole = before.back();
    before.pop_back();
    const Segment other = held.lo == whole.lo ? Segment{held.hi, whole.hi}
                                              : Segment{whole.lo, held.lo};
    exchange(link, data + held.lo * elem, held.size() * elem, data + other.lo * elem,
             other.size() * elem, r ^ mask, kGatherTag, what, "gather the Adasum result");
    held = whole;
  }
}

}  // namespace

void adasumAllreduce(Context& ctx, const Response& response, std::vector<TensorEntry*>& entries) {
  const DType dtype = response.dtype;
  const std::size_t elem = dtype_size(dtype);
  std::vector<std::size_t> bound(entries.size() + 1, 0);
  for (std::size_t i = 0; i < entries.size(); ++i)
    bound[i + 1] = bound[i] + response.tensorBytes(i) / elem;
  if (bound.back() == 0) return;  // the same on every rank: nothing to exchange
  const std::vector<bool> local = localInputs(response, entries);
  const std::string what = describe(response);
  const Scaling pre = preScaling(response), post = postScaling(response, ctx.size());

  if (entries.size() == 1 && local[0]) {  // a lone tensor: where it lies
    char* data = static_cast<char*>(entries[0]->tensor.data);
    applyScaling(pre, data, bound.back(), dtype);
    timelineStep(kAdasumStep);
    adasumRounds(ctx, data, bound, dtype, what);
    applyScaling(post, data, bound.back(), dtype);
    return;
  }
  char* data = ctx.fusion.reserve(bound.back() * elem);
  std::vector<cpu::CopyPiece> in, out;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    char* at = data + bound[i] * elem;
    const std::size_t count = bound[i + 1] - bound[i];
    if (local[i]) {
      in.push_back({at, entries[i]->tensor.data, count * elem});
      out.push_back({entries[i]->tensor.data, at, count * elem});
    } else {
      cpu::fillNeutral(at, count, dtype, ReduceOp::Adasum);
    }
  }
  timelineStep(kCopyInStep);
  cpu::parallelCopy(in);
  for (const cpu::CopyPiece& piece : in) applyScaling(pre, piece.dst, piece.bytes / elem, dtype);
  timelineStep(kAdasumStep);
  adasumRounds(ctx, data, bound, dtype, what);
  applyScaling(post, data, bound.back(), dtype);
  timelineStep(kCopyOutStep);
  cpu::parallelCopy(out);
}

}  // namespace accord::mpi

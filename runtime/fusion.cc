// Fusion planning (fusion.h): one left-to-right pass that merges neighbours.
//
// Only neighbours merge, so the plan keeps the negotiated order (which every rank
// shares) and is a pure function of the list. A response is never split: a grouped
// allreduce arrives already fused and may only grow by whole neighbours, and a
// response over the threshold simply finds no partner. Allgather responses merge their
// rank_rows too, which stays correct because rank_rows is tensor-major.
#include "runtime/fusion.h"

#include <cmath>

namespace accord {

namespace {

bool sameScale(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void append(Response& into, Response&& from) {
  into.names.insert(into.names.end(), std::make_move_iterator(from.names.begin()),
                    std::make_move_iterator(from.names.end()));
  into.shapes.insert(into.shapes.end(), std::make_move_iterator(from.shapes.begin()),
                     std::make_move_iterator(from.shapes.end()));
  into.rank_rows.insert(into.rank_rows.end(), from.rank_rows.begin(), from.rank_rows.end());
}

}  // namespace

bool fusible(const Response& a, const Response& b) {
  if (a.type != b.type || a.dtype != b.dtype || a.device != b.device) return false;
  switch (a.type) {
    case ResponseType::Allgather:
      return true;  // no op, no scaling
    case ResponseType::Allreduce:
    case ResponseType::Reducescatter:
      return a.op == b.op && sameScale(a.prescale, b.prescale) &&
             sameScale(a.postscale, b.postscale);
    default:
      return false;
  }
}

std::vector<Response> planFusion(std::vector<Response> responses, std::size_t threshold_bytes) {
  if (threshold_bytes == 0 || responses.size() < 2) return responses;
  std::vector<Response> plan;
  plan.reserve(responses.size());
  std::size_t bytes = 0;  // payload of plan.back()
  for (Response& r : responses) {
    std::size_t next = r.totalBytes();
    // Written as a subtraction so that two huge payloads cannot overflow the sum.
    if (!plan.empty() && fusible(plan.back(), r) && bytes <= threshold_bytes &&
        next <= threshold_bytes - bytes) {
      append(plan.back(), std::move(r));
      bytes += next;
    } else {
      plan.push_back(std::move(r));
      bytes = next;
    }
  }
  return plan;
}

}  // namespace accord

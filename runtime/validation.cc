// Validation: turns every rank's request for one name into the response all ranks
// execute, or into an error that names the tensor, the ranks and both values.
//
// Validation compares every rank's request with the lowest rank's, field by field in
// a fixed order (type first, since a different type makes the rest meaningless), and
// reports the first field that differs with both ranks and both values. Device is
// compared by kind only: rank 0 on cuda:0 and rank 1 on cuda:1 is the normal
// one-GPU-per-process layout.

#include "runtime/validation.h"

#include <accord/error.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace accord {

namespace detail {


bool isTensorOp(RequestType t) {
  return t == RequestType::Allreduce || t == RequestType::Allgather ||
         t == RequestType::Broadcast || t == RequestType::Alltoall ||
         t == RequestType::Reducescatter;
}
bool reduces(RequestType t) {
  return t == RequestType::Allreduce || t == RequestType::Reducescatter;
}
// Only these split the first dimension, so only there may it differ between ranks.
bool firstDimVaries(RequestType t) {
  return t == RequestType::Allgather || t == RequestType::Alltoall;
}
// A joined rank cannot stand in for these: they need every rank's own participation.
bool needsEveryRank(RequestType t) {
  return t == RequestType::Barrier || t == RequestType::AddProcessSet ||
         t == RequestType::RemoveProcessSet;
}

std::string number(double v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that round-trips
  return std::string(buf, res.ptr);
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

// "rank 2" or "ranks 2,3".
std::string ranksPhrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankList(ranks);
}

std::string prefix(const Request& r) {
  return describeCollective(requestTypeName(r.type), r.name) + ": ";
}

Response errorResponse(const std::string& name, std::string message, Response::ErrorKind kind) {
  Response e;
  e.type = ResponseType::Error;
  e.names = {name};
  e.error = std::move(message);
  e.error_kind = kind;
  return e;
}

bool sameScale(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

Shape tail(const Shape& s) { return s.empty() ? s : Shape(s.begin() + 1, s.end()); }

// One field that every rank's request must agree on: which types it applies to,
// whether two requests agree on it, and how a request's value reads in a message.
struct Field {
  bool (*applies)(RequestType);
  bool (*same)(const Request&, const Request&);
  std::string (*show)(const Request&);
  bool first_dim_note = false;  // say that the first dimension may differ, where it may
};

// Every signature field but the name (the key) has a row below, or a check of its own
// (alltoall's splits, per rank, in alltoallMatrix): a new field needs one too.
static_assert(fieldCount<RequestSignature>() == 12, "compare the new field across ranks");

const Field kFields[] = {
    {[](RequestType) { return true; },
     [](const Request& a, const Request& b) { return a.type == b.type; },
     [](const Request& r) { return std::string("type ") + requestTypeName(r.type); }},
    {isTensorOp, [](const Request& a, const Request& b) { return a.dtype == b.dtype; },
     [](const Request& r) { return std::string("dtype ") + dtype_name(r.dtype); }},
    {isTensorOp, [](const Request& a, const Request& b) { return a.device.type == b.device.type; },
     [](const Request& r) { return "device " + r.device.str(); }},
    {reduces, [](const Request& a, const Request& b) { return a.op == b.op; },
     [](const Request& r) { return std::string("op ") + reduce_op_name(r.op); }},
    {reduces, [](const Request& a, const Request& b) { return sameScale(a.prescale, b.prescale); },
     [](const Request& r) { return "prescale " + number(r.prescale); }},
    {reduces,
     [](const Request& a, const Request& b) { return sameScale(a.postscale, b.postscale); },
     [](const Request& r) { return "postscale " + number(r.postscale); }},
    {[](RequestType t) { return t == RequestType::Broadcast; },
     [](const Request& a, const Request& b) { return a.root == b.root; },
     [](const Request& r) { return "root " + std::to_string(r.root); }},
    {isTensorOp,
     [](const Request& a, const Request& b) {
       return firstDimVaries(a.type) ? tail(a.shape) == tail(b.shape) : a.shape == b.shape;
     },
     [](const Request& r) { return "shape " + shape_string(r.shape); }, true},
    {isTensorOp,
     [](const Request& a, const Request& b) {
       return a.group == b.group && a.group_size == b.group_size;
     },
     [](const Request& r) {
       return r.group.empty() ? std::string("no group")
                              : "group '" + std::string(callerName(requestTypeName(r.type), r.group)) +
                                    "' of " + std::to_string(r.group_size);
     }},
    {[](RequestType t) {
       return t == RequestType::AddProcessSet || t == RequestType::RemoveProcessSet;
     },
     [](const Request& a, const Request& b) { return a.splits == b.splits; },
     [](const Request& r) {
       return (r.type == RequestType::AddProcessSet ? "ranks " : "process set ") +
              shape_string(r.splits);
     }},
};

// The first disagreement with the lowest rank's request, or "" when all agree.
std::string disagreement(const std::vector<const Request*>& reqs) {
  const Request& ref = *reqs.front();
  for (const Field& f : kFields) {
    if (!f.applies(ref.type)) continue;
    for (const Request* r : reqs) {
      if (f.same(ref, *r)) continue;
      std::string msg = prefix(ref) + "rank " + std::to_string(ref.rank) + " sent " + f.show(ref) +
                        ", rank " + std::to_string(r->rank) + " sent " + f.show(*r);
      if (f.first_dim_note && firstDimVaries(ref.type))
        msg += " (all dimensions but the first must agree)";
      return msg;
    }
  }
  return "";
}

// Checks each request on its own: ranks, dimensions, root, grouping.
std::string checkEach(const std::vector<const Request*>& reqs, int set_size) {
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = *reqs[i];
    std::string at = prefix(r) + "rank " + std::to_string(r.rank);
    if (r.rank < 0 || r.rank >= set_size)
      return at + " is not a rank of the process set of size " + std::to_string(set_size);
    if (i > 0 && reqs[i - 1]->rank == r.rank) return at + " sent it twice";
    if (!isTensorOp(r.type)) continue;
    if (std::any_of(r.shape.begin(), r.shape.end(), [](std::int64_t d) { return d < 0; }))
      return at + " sent shape " + shape_string(r.shape) + " with a negative dimension";
    if (r.shape.empty() && (firstDimVaries(r.type) || r.type == RequestType::Reducescatter))
      return at + " sent a scalar, but " + requestTypeName(r.type) +
             " needs at least one dimension";
    if (r.type == RequestType::Broadcast && (r.root < 0 || r.root >= set_size))
      return at + " sent root " + std::to_string(r.root) +
             ", which is not a rank of the process set of size " + std::to_string(set_size);
    if (!r.group.empty() && (!groupable(r.type) || r.group_size < 1))
      return at + " sent group '" + std::string(callerName(requestTypeName(r.type), r.group)) +
             "' of " + std::to_string(r.group_size) +
             ": only allreduce, allgather and reducescatter can be grouped, with at least one "
             "tensor";
  }
  return "";
}

// Alltoall: each rank's splits must describe its own first dimension. Empty splits
// mean equal parts. Fills the split matrix row of each rank (joined ranks: zeros).
std::string alltoallMatrix(const std::vector<const Request*>& reqs, int n,
                           std::vector<std::int64_t>& m) {
  m.assign(static_cast<std::size_t>(n) * n, 0);
  for (const Request* r : reqs) {
    std::string at = prefix(*r) + "rank " + std::to_string(r->rank) + " sent ";
    std::int64_t rows = r->shape.front();
    std::vector<std::int64_t> splits = r->splits;
    if (splits.empty()) {
      if (rows % n != 0)
        return at + "no splits, and its first dimension " + std::to_string(rows) +
               " does not divide into " + std::to_string(n) + " equal parts";
      splits.assign(n, rows / n);
    }
    if (splits.size() != static_cast<std::size_t>(n))
      return at + std::to_string(splits.size()) + " splits for a process set of size " +
             std::to_string(n);
    if (std::any_of(splits.begin(), splits.end(), [](std::int64_t s) { return s < 0; }))
      return at + "splits " + shape_string(splits) + " with a negative entry";
    std::int64_t sum = 0;
    bool overflow = false;  // huge splits could wrap around to exactly `rows`
    for (std::int64_t s : splits) overflow = __builtin_add_overflow(sum, s, &sum) || overflow;
    if (overflow) return at + "splits " + shape_string(splits) + " whose sum overflows an int64";
    if (sum != rows)
      return at + "splits " + shape_string(splits) + " that sum to " + std::to_string(sum) +
             ", but its first dimension is " + std::to_string(rows);
    std::copy(splits.begin(), splits.end(), m.begin() + static_cast<std::ptrdiff_t>(r->rank) * n);
  }
  return "";
}

// Allgather: the output's first dimension is the sum of every rank's, which can
// overflow, or make a buffer too large to exist, even though each rank's own shape fit.
std::string gatheredShape(const Request& ref, Response& out) {
  std::int64_t rows = 0;
  for (std::int64_t r : out.rank_rows) {
    if (__builtin_add_overflow(rows, r, &rows))
      return prefix(ref) + "the ranks' first dimensions " + shape_string(out.rank_rows) +
             " sum past what an int64 can count";
  }
  out.shapes[0][0] = rows;
  try {
    num_bytes(out.shapes[0], out.dtype);
  } catch (const InvalidArgument& e) {
    return prefix(ref) + "the gathered " + e.what();
  }
  return "";
}

// Process-set membership: a non-empty list of distinct ranks of this set.
std::string checkProcessSet(const Request& r, int set_size) {
  if (r.type == RequestType::RemoveProcessSet) {
    if (r.splits.size() != 1 || r.splits[0] <= 0)
      return prefix(r) + "expected the id of an added process set, got " + shape_string(r.splits);
    return "";
  }
  if (r.splits.empty()) return prefix(r) + "the list of ranks is empty";
  std::vector<std::int64_t> sorted = r.splits;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() >= set_size)
    return prefix(r) + "ranks " + shape_string(r.splits) + " include " +
           std::to_string(sorted.front() < 0 ? sorted.front() : sorted.back()) +
           ", which is not a rank of the process set of size " + std::to_string(set_size);
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end())
    return prefix(r) + "ranks " + shape_string(r.splits) + " list rank " + std::to_string(*dup) +
           " twice";
  return "";
}

// A joined rank stands in only for an allreduce, contributing the op's neutral element.
// Every other collective fails on the ranks that submitted it, at once, as in Horovod:
// scripts written for it catch that error and join in turn, and would wait forever if
// an allgather went ahead without the joined rank's rows (or a broadcast without it).
std::string checkJoined(const Request& ref, const std::vector<bool>& joined) {
  std::vector<int> ranks;
  for (std::size_t r = 0; r < joined.size(); ++r)
    if (joined[r]) ranks.push_back(static_cast<int>(r));
  if (ranks.empty() || ref.type == RequestType::Allreduce) return "";
  std::string what = requestTypeName(ref.type);
  if (ref.type == RequestType::Broadcast && ref.root >= 0 &&
      static_cast<std::size_t>(ref.root) < joined.size() && joined[ref.root])
    return prefix(ref) + "root rank " + std::to_string(ref.root) +
           " has joined; broadcast is not supported while a rank has joined";
  return prefix(ref) + ranksPhrase(ranks) + (ranks.size() == 1 ? " has" : " have") + " joined; " +
         what + " is not supported while a rank has joined (only allreduce is)";
}

// Every rank either sent a request or has joined (where joining can stand in for it).
std::string checkParticipation(const std::vector<const Request*>& reqs, int set_size,
                               const std::vector<bool>& joined, std::vector<bool>& gone) {
  const Request& ref = *reqs.front();
  std::vector<bool> sent(set_size, false);
  for (const Request* r : reqs) sent[r->rank] = true;
  gone.assign(set_size, false);
  for (int r = 0; r < set_size; ++r) {
    gone[r] = r < static_cast<int>(joined.size()) && joined[r] && !sent[r];
    if (!sent[r] && (!gone[r] || needsEveryRank(ref.type)))
      return prefix(ref) + "rank " + std::to_string(r) + " sent no request" +
             (gone[r] ? "; every rank must take part, joined or not" : " and has not joined");
  }
  return "";
}

// The index i of a member named "<group>.<i>" (canonical decimal), or -1.
int memberIndex(std::string_view name, const std::string& group) {
  if (name.size() <= group.size() + 1 || !name.starts_with(group) || name[group.size()] != '.')
    return -1;
  std::string_view suffix = name.substr(group.size() + 1);
  int index = -1;
  auto [end, ec] = std::from_chars(suffix.data(), suffix.data() + suffix.size(), index);
  bool canonical = ec == std::errc() && end == suffix.data() + suffix.size() &&
                   std::to_string(index) == suffix;  // "g.01" would alias "g.1"
  return canonical ? index : -1;
}


}  // namespace detail

using namespace detail;


Response buildResponse(const std::vector<Request>& requests, int set_size,
                       const std::vector<bool>& joined) {
  if (requests.empty()) throw InvalidArgument("buildResponse: no requests");
  std::vector<const Request*> reqs;
  for (const Request& r : requests) reqs.push_back(&r);
  std::stable_sort(reqs.begin(), reqs.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  const Request& ref = *reqs.front();
  auto invalid = [&](std::string m) {
    return errorResponse(ref.name, std::move(m), Response::ErrorKind::Invalid);
  };

  if (std::string m = checkEach(reqs, set_size); !m.empty()) return invalid(m);
  if (std::string m = disagreement(reqs); !m.empty())
    return errorResponse(ref.name, m, Response::ErrorKind::Mismatch);
  std::vector<bool> gone;  // joined and silent for this name
  if (std::string m = checkParticipation(reqs, set_size, joined, gone); !m.empty())
    return invalid(m);
  if (std::string m = checkJoined(ref, gone); !m.empty()) return invalid(m);

  Response out;
  // The enums share their first values and names (asserted in message.cc).
  out.type = static_cast<ResponseType>(ref.type);
  out.names = {ref.name};
  if (isTensorOp(ref.type)) {
    out.dtype = ref.dtype;
    out.device = ref.device;
    out.shapes = {ref.shape};
  }
  if (reduces(ref.type)) {
    out.op = ref.op;
    out.prescale = ref.prescale;
    out.postscale = ref.postscale;
  }
  switch (ref.type) {
    case RequestType::Broadcast:
      out.root = ref.root;
      break;
    case RequestType::Allgather:
      out.rank_rows.assign(set_size, 0);
      for (const Request* r : reqs) out.rank_rows[r->rank] = r->shape.front();
      if (std::string m = gatheredShape(ref, out); !m.empty()) return invalid(m);
      break;
    case RequestType::Alltoall:
      if (std::string m = alltoallMatrix(reqs, set_size, out.rank_rows); !m.empty())
        return invalid(m);
      out.shapes[0][0] = 0;
      break;
    case RequestType::AddProcessSet:
    case RequestType::RemoveProcessSet:
      if (std::string m = checkProcessSet(ref, set_size); !m.empty()) return invalid(m);
      out.rank_rows = ref.splits;
      std::sort(out.rank_rows.begin(), out.rank_rows.end());
      break;
    default:
      break;
  }
  return out;
}


}  // namespace accord

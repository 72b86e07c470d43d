// Rank 0's negotiation logic: the message table, validation, readiness and ordering.
//
// Everything here is a function of the requests received, never of the order they
// arrived in within a cycle: requests are kept sorted by rank, the table by name, and
// ready responses are sorted by (submission counter of the lowest-ranked submitter,
// name). That is what lets every test replay a cycle in any order and get the same
// list, and what keeps the response order independent of network timing.
//
// Validation of the requests themselves lives in validation.cc.
#include "runtime/coordinator.h"
#include "runtime/validation.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace accord {

using namespace detail;

std::string formatStallReport(const std::vector<StallReport>& stalls, int set_size) {
  std::string out;
  for (const StallReport& s : stalls) {
    std::vector<int> submitted;
    for (int r = 0; r < set_size; ++r)
      if (std::find(s.missing_ranks.begin(), s.missing_ranks.end(), r) == s.missing_ranks.end())
        submitted.push_back(r);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(s.waiting).count());
    if (!out.empty()) out += '\n';
    out += describeCollective(requestTypeName(s.type), s.name) + " waited " + secs + " s for ";
    out +=
        s.missing_ranks.empty() ? "the other tensors of its group" : ranksPhrase(s.missing_ranks);
    if (!submitted.empty()) out += " (submitted by " + ranksPhrase(submitted) + ")";
    // A barrier or a change of process sets, which a joined rank cannot stand in for.
    if (!s.joined_ranks.empty())
      out += "; " + ranksPhrase(s.joined_ranks) + (s.joined_ranks.size() == 1 ? " has" : " have") +
             " joined, and a " + requestTypeName(s.type) + " needs every rank, joined or not";
    for (const std::string& other : s.instead) out += "; " + other + " under that name instead";
  }
  return out;
}

// ---- Coordinator ------------------------------------------------------------------

struct Coordinator::Ready {
  std::uint64_t seq;  // submission counter of the lowest-ranked submitter
  std::string name;
  Response response;
};

Coordinator::Coordinator(int set_size)
    : set_size_(set_size),
      joined_(set_size > 0 ? set_size : 0, false),
      join_names_(set_size > 0 ? set_size : 0) {
  if (set_size <= 0)
    throw InvalidArgument("Coordinator: process set size " + std::to_string(set_size));
}

// Removes the name from the table and fails it on every rank: a consistent failure
// beats pairing the surviving requests with the wrong ones.
void Coordinator::fail(const Request& request, const std::string& message) {
  table_.erase(request.name);
  errors_.push_back(errorResponse(request.name, message, Response::ErrorKind::Invalid));
}

void Coordinator::add(const std::vector<Request>& requests, Clock::time_point now) {
  std::vector<std::string> failed;  // later requests for these names are dropped this call
  std::vector<const Request*> joins;
  for (const Request& r : requests) {
    if (std::find(failed.begin(), failed.end(), r.name) != failed.end()) continue;
    if (r.rank < 0 || r.rank >= set_size_) {
      fail(r, prefix(r) + "request from rank " + std::to_string(r.rank) +
                  ", which is not a rank of the process set of size " + std::to_string(set_size_));
      failed.push_back(r.name);
    } else if (r.type == RequestType::Join) {
      joins.push_back(&r);
    } else {
      auto [it, created] = table_.try_emplace(r.name);
      auto& reqs = it->second.requests;
      if (created) it->second.first_seen = now;
      auto pos = std::lower_bound(reqs.begin(), reqs.end(), r.rank,
                                  [](const Request& a, int rank) { return a.rank < rank; });
      if (pos != reqs.end() && pos->rank == r.rank) {
        fail(r, prefix(r) + "rank " + std::to_string(r.rank) +
                    " submitted it again before the first one completed");
        failed.push_back(r.name);
      } else {
        reqs.insert(pos, r);
      }
    }
  }
  // Ranks joining in the same cycle count as joining in rank order, so "last to join"
  // does not depend on the order the requests were gathered in.
  std::sort(joins.begin(), joins.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  for (const Request* j : joins) {
    joined_[j->rank] = true;
    join_names_[j->rank] = j->name;
    last_joined_ = j->rank;
  }
}

std::vector<bool> Coordinator::joinedFor(const Entry& entry) const {
  std::vector<bool> gone = joined_;
  for (const Request& r : entry.requests) gone[r.rank] = false;
  return gone;
}

std::vector<int> Coordinator::missingRanks(const Entry& entry) const {
  bool every = needsEveryRank(entry.requests.front().type);
  std::vector<bool> sent(set_size_, false);
  for (const Request& r : entry.requests) sent[r.rank] = true;
  std::vector<int> missing;
  for (int r = 0; r < set_size_; ++r)
    if (!sent[r] && (every || !joined_[r])) missing.push_back(r);
  return missing;
}

bool Coordinator::isReady(const Entry& entry) const {
  return entry.requests.size() == static_cast<std::size_t>(set_size_) ||
         missingRanks(entry).empty();
}

std::vector<Response> Coordinator::takeReady() {
  std::vector<Response> out = std::move(errors_);
  errors_.clear();
  std::vector<Ready> ready;
  std::map<std::string, std::vector<std::string>> groups;  // group -> its ready members
  for (auto it = table_.begin(); it != table_.end();) {
    const Request& first = it->second.requests.front();
    if (!isReady(it->second)) {
      ++it;
    } else if (!first.group.empty() && groupable(first.type)) {
      groups[first.group].push_back(it->first);
      ++it;
    } else {
      ready.push_back({first.seq, it->first,
                       buildResponse(it->second.requests, set_size_, joinedFor(it->second))});
      it = table_.erase(it);
    }
  }
  for (const auto& [group, members] : groups) takeGroup(group, members, ready);
  std::sort(ready.begin(), ready.end(), [](const Ready& a, const Ready& b) {
    return a.seq != b.seq ? a.seq < b.seq : a.name < b.name;
  });
  for (Ready& r : ready) out.push_back(std::move(r.response));

  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    Response join;
    join.type = ResponseType::Join;
    join.root = last_joined_;
    for (const std::string& name : join_names_)
      if (std::find(join.names.begin(), join.names.end(), name) == join.names.end())
        join.names.push_back(name);
    out.push_back(std::move(join));
    joined_.assign(set_size_, false);
    join_names_.assign(set_size_, "");
    last_joined_ = -1;
  }
  return out;
}

// A group (allreduce, allgather, reducescatter) is one handle: it waits until every
// member is ready, then goes out as one fused response (members by index, not by name:
// "g.10" follows "g.9"), or fails as a whole.
void Coordinator::takeGroup(const std::string& group, const std::vector<std::string>& members,
                            std::vector<Ready>& out) {
  const std::int32_t size = table_.at(members.front()).requests.front().group_size;
  if (failGroupSizeMismatch(group, members, out)) return;
  // (index, name) of the well-named members; sized by what arrived, never by the
  // claimed group size, which a corrupt request could make huge.
  std::vector<std::pair<int, const std::string*>> indexed;
  for (const std::string& name : members) {
    const Request& first = table_.at(name).requests.front();
    int index = memberIndex(name, group);
    if (index >= 0 && index < size && first.group_size == size) {
      indexed.emplace_back(index, &name);
      continue;
    }
    const std::string shown(callerName(requestTypeName(first.type), group));
    out.push_back({first.seq, name,
                   errorResponse(name,
                                 prefix(first) + "is not a member of group '" + shown + "' of " +
                                     std::to_string(size) + " (members are named '" + shown +
                                     ".0' to '" + shown + "." + std::to_string(size - 1) + "')",
                                 Response::ErrorKind::Invalid)});
    table_.erase(name);
  }
  // Canonical names: distinct names have distinct indices, so a full count is a full group.
  if (indexed.size() != static_cast<std::size_t>(size)) return;
  std::sort(indexed.begin(), indexed.end());
  std::vector<const std::string*> by_index;
  for (const auto& [index, name] : indexed) by_index.push_back(name);

  Ready fused{UINT64_MAX, *by_index.front(), {}};
  for (const std::string* name : by_index) {
    const Entry& e = table_.at(*name);
    fused.seq = std::min(fused.seq, e.requests.front().seq);
    Response r = buildResponse(e.requests, set_size_, joinedFor(e));
    const Response& head = fused.response;
    if (r.type != ResponseType::Error && name != by_index.front() &&
        (r.dtype != head.dtype || r.device != head.device || r.op != head.op ||
         !sameScale(r.prescale, head.prescale) || !sameScale(r.postscale, head.postscale))) {
      const char* type = requestTypeName(e.requests.front().type);
      r = errorResponse(
          *name,
          prefix(e.requests.front()) + "group '" + std::string(callerName(type, group)) +
              "' mixes " + dtype_name(head.dtype) + " " + reduce_op_name(head.op) + " on " +
              head.device.str() + " ('" + std::string(callerName(type, head.names.front())) +
              "') with " + dtype_name(r.dtype) + " " + reduce_op_name(r.op) +
              " on " + r.device.str() +
              "; the tensors of a group are fused into one buffer and must share dtype, "
              "device, op and scale factors",
          Response::ErrorKind::Invalid);
    }
    if (r.type == ResponseType::Error) {
      fused.response = std::move(r);  // the first failing member fails the group
      break;
    }
    if (name == by_index.front()) {
      fused.response = std::move(r);
    } else {  // as fusion merges neighbours; an allgather's rank_rows are tensor-major
      fused.response.shapes.push_back(r.shapes.front());
      fused.response.rank_rows.insert(fused.response.rank_rows.end(), r.rank_rows.begin(),
                                      r.rank_rows.end());
    }
  }
  fused.response.names.clear();  // success or failure, it names every member
  for (const std::string* name : by_index) fused.response.names.push_back(*name);
  for (const std::string* name : by_index) table_.erase(*name);
  out.push_back(std::move(fused));
}

// Ranks that grouped a different number of tensors under one name can never complete
// the group: the short rank never sends the extra members. Every member a rank sent
// says how many it grouped, so the first member every rank sent is enough to tell,
// and the whole group (ready or not) fails at once instead of stalling.
bool Coordinator::failGroupSizeMismatch(const std::string& group,
                                        const std::vector<std::string>& members,
                                        std::vector<Ready>& out) {
  const auto& requests = table_.at(members.front()).requests;
  const Request& head = requests.front();
  auto other = std::find_if(requests.begin(), requests.end(), [&](const Request& r) {
    return r.group_size != head.group_size;
  });
  if (other == requests.end()) return false;
  Ready failed{head.seq, members.front(),
               errorResponse(members.front(),
                             "grouped " + std::string(requestTypeName(head.type)) + " '" +
                                 std::string(callerName(requestTypeName(head.type), group)) +
                                 "': rank " +
                                 std::to_string(head.rank) + " sent " +
                                 std::to_string(head.group_size) + " tensors, rank " +
                                 std::to_string(other->rank) + " sent " +
                                 std::to_string(other->group_size),
                             Response::ErrorKind::Mismatch)};
  failed.response.names.clear();
  for (auto it = table_.begin(); it != table_.end();) {
    if (it->second.requests.front().group != group) {
      ++it;
      continue;
    }
    failed.response.names.push_back(it->first);
    it = table_.erase(it);
  }
  out.push_back(std::move(failed));
  return true;
}

std::vector<StallReport> Coordinator::stalled(Clock::time_point now, Clock::duration age) const {
  std::vector<StallReport> out;
  for (const auto& [name, entry] : table_) {
    Clock::duration waited = now - entry.first_seen;
    if (waited < age) continue;
    StallReport report{name, missingRanks(entry), {}, waited, entry.requests.front().type, {}, {}};
    for (int r : report.missing_ranks)
      if (joined_[r]) report.joined_ranks.push_back(r);
    out.push_back(std::move(report));
  }
  if (out.empty()) return out;
  // The names as their callers wrote them, to find a missing rank's other collective.
  auto caller = [](const std::string& name, const Entry& entry) {
    return callerName(requestTypeName(entry.requests.front().type), name);
  };
  std::map<std::string_view, std::vector<const std::string*>> by_caller;
  for (const auto& [name, entry] : table_) by_caller[caller(name, entry)].push_back(&name);
  for (StallReport& report : out) {
    for (const std::string* other : by_caller[caller(report.name, table_.at(report.name))]) {
      if (*other == report.name) continue;
      std::vector<int> ranks;
      for (const Request& r : table_.at(*other).requests)
        if (std::find(report.missing_ranks.begin(), report.missing_ranks.end(), r.rank) !=
            report.missing_ranks.end())
          ranks.push_back(r.rank);
      if (ranks.empty()) continue;
      const RequestType type = table_.at(*other).requests.front().type;
      report.instead.push_back(ranksPhrase(ranks) + " submitted " +
                               describeCollective(requestTypeName(type), *other));
      report.partners.push_back(*other);
    }
  }
  return out;
}

// A stalled member fails its whole group: the group shares one handle, and the other
// members could never complete without it. So does a collective that waits for ranks
// which submitted a stalled one under the same caller's name (the other side of the
// same confusion, maybe submitted a moment later): it fails now with its own report,
// rather than a cycle later without the other side to name.
std::vector<Response> Coordinator::expireStalled(Clock::time_point now, Clock::duration age) {
  std::vector<Response> out;
  std::vector<StallReport> expiring = stalled(now, age);
  if (expiring.empty()) return out;
  std::set<std::string> names;
  for (const StallReport& s : expiring) names.insert(s.name);
  for (StallReport& s : stalled(now, Clock::duration::zero())) {
    if (names.count(s.name)) continue;
    for (const std::string& partner : s.partners) {
      if (names.count(partner)) {
        expiring.push_back(std::move(s));
        break;
      }
    }
  }
  std::map<std::string, std::string> failed_groups;  // group -> the member that stalled
  for (const StallReport& s : expiring) {
    const Request& first = table_.at(s.name).requests.front();
    if (!first.group.empty()) failed_groups.emplace(first.group, s.name);
    out.push_back(
        errorResponse(s.name,
                      formatStallReport({s}, set_size_) +
                          "; gave up (ACCORD_STALL_SHUTDOWN_TIME): every rank of the process "
                          "set must submit each collective",
                      Response::ErrorKind::Stall));
    table_.erase(s.name);
  }
  for (auto it = table_.begin(); it != table_.end();) {
    const Request& first = it->second.requests.front();
    auto group = failed_groups.find(first.group);
    if (first.group.empty() || group == failed_groups.end()) {
      ++it;
      continue;
    }
    const char* type = requestTypeName(first.type);
    out.push_back(errorResponse(it->first,
                                prefix(first) + "group '" +
                                    std::string(callerName(type, group->first)) +
                                    "' failed because its tensor '" +
                                    std::string(callerName(type, group->second)) + "' stalled",
                                Response::ErrorKind::Stall));
    it = table_.erase(it);
  }
  return out;
}

bool Coordinator::empty() const {
  return table_.empty() && errors_.empty() &&
         std::none_of(joined_.begin(), joined_.end(), [](bool j) { return j; });
}

}  // namespace accord

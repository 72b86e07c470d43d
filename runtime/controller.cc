#include "controller.h"

#include "runtime/logging.h"
#include "runtime/timeline.h"
#include "runtime/wire.h"

#include <algorithm>
#include <bit>
#include <set>

namespace accord {

namespace {

// Flag bits of word 0. After the AND each reads "on every rank".
constexpr std::uint64_t kNothingToSend = 1u << 0;
constexpr std::uint64_t kNoShutdown = 1u << 1;
// Everything this rank has pending is offered as a cache hit this cycle: if every rank
// offers the same hits, nothing is left pending after the cycle.
constexpr std::uint64_t kOnlyHitsPending = 1u << 2;
// No rank has a failure of its own GPU to tell (Controller::exchangeFailures).
constexpr std::uint64_t kNoFailureToTell = 1u << 3;

void setBit(std::vector<std::uint64_t>& v, std::size_t word0, std::uint32_t bit) {
  v[word0 + bit / 64] |= std::uint64_t{1} << (bit % 64);
}
void clearBit(std::vector<std::uint64_t>& v, std::size_t word0, std::uint32_t bit) {
  v[word0 + bit / 64] &= ~(std::uint64_t{1} << (bit % 64));
}

// Messages about a process set other than the global one count ranks within the set;
// this says so, with the global ranks they stand for.
std::string setRanksNote(const ProcessSet& set) {
  if (set.id == kGlobalProcessSet) return "";
  return " (ranks within process set " + std::to_string(set.id) + ", whose ranks 0.." +
         std::to_string(set.size - 1) + " are global ranks " +
         shape_string(Shape(set.ranks.begin(), set.ranks.end())) + ")";
}

bool cacheable(const Response& r) {
  switch (r.type) {
    case ResponseType::Allreduce:
    case ResponseType::Allgather:
    case ResponseType::Broadcast:
    case ResponseType::Alltoall:
    case ResponseType::Reducescatter:
      return r.names.size() == 1;
    default:
      return false;
  }
}

// What the coordinator answers with several names, other than a failure, is a group
// (fusion comes later, in the executor's plan): the response types of the requests
// groupable() admits.
bool isGroup(const Response& r) {
  return r.names.size() > 1 && (r.type == ResponseType::Allreduce ||
                                r.type == ResponseType::Allgather ||
                                r.type == ResponseType::Reducescatter);
}

// A group's fused response, cut back into one response per member as the cache holds
// them: on later steps the members are answered from the cache and fused again as
// neighbours (classify() offers them only all together). An allgather's rank_rows are
// tensor-major, `set_size` per member.
std::vector<Response> members(const Response& group, int set_size) {
  std::vector<Response> out;
  for (std::size_t i = 0; i < group.names.size(); ++i) {
    Response r = group;
    r.names = {group.names[i]};
    r.shapes = {group.shapes.at(i)};
    if (!group.rank_rows.empty()) {
      const auto from = group.rank_rows.begin() + static_cast<std::ptrdiff_t>(i * set_size);
      r.rank_rows.assign(from, from + set_size);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

void Controller::admit(ProcessSet& set, QueuedOp op, Clock::time_point now) {
  op.request.rank = set.rank;
  op.request.seq = set.next_seq++;
  Timeline& timeline = Timeline::instance();
  if (timeline.active() && op.request.type != RequestType::Join) {
    const std::vector<std::string> names{op.request.name};
    std::vector<std::string> renamed;
    const auto& track = Timeline::tracksOf(set.id, names, renamed);
    // `now` is the cycle's start: a tensor submitted after it (while the queue was being
    // drained) starts negotiating when it was submitted, not before its own queue span.
    const auto negotiating = std::max(now, op.enqueued);
    timeline.tensorSpan(track.front(), kQueuePhase, op.enqueued, negotiating);
    timeline.tensorsPhase(track, negotiatePhaseName(op.request.type), negotiating);
  }
  set.pending.admit(std::move(op.request), std::move(op.entry), now);
}

// Decides, per pending tensor, whether the cache answers it (hit bit) or it must go to
// the coordinator. A hit that waits too long is demoted to a regular request so that
// the coordinator's stall inspector sees it.
std::vector<Request> Controller::classify(ProcessSet& set, std::size_t w,
                                          std::vector<std::uint64_t>& bits, std::size_t& hits,
                                          Clock::time_point now, Carriage* carriage) {
  const auto demote_after =
      std::min<Clock::duration>(std::chrono::seconds(1), config_.stall_check_time / 2);
  // Each unsent tensor is looked up once. A group goes whole, as hits or as requests: the
  // coordinator releases a group once every member reached it, so members answered by
  // the cache would leave the rest waiting there. A rank's members arrive in one push,
  // so they are classified together.
  struct Looked {
    PendingTensor* p;
    ResponseCache::Lookup found;
    bool hit;
  };
  std::vector<Looked> looked;
  looked.reserve(set.pending.size());
  std::set<std::string> whole;  // groups with a member the cache cannot answer now
  for (auto& [name, p] : set.pending) {
    if (p.sent) continue;
    const auto found = set.cache->lookup(p.request);
    const bool hit =
        found.status == ResponseCache::Status::Hit && now - p.submitted < demote_after;
    if (!hit && !p.request.group.empty()) whole.insert(p.request.group);
    looked.push_back({&p, found, hit});
  }
  std::vector<Request> to_send;
  for (auto& [p, found, hit] : looked) {
    if (hit && (p->request.group.empty() || !whole.contains(p->request.group))) {
      setBit(bits, 1, found.slot);
      ++hits;
      if (carriage) offerToCarry(set, found.slot, p->entry, *carriage);
      continue;
    }
    if (found.status != ResponseCache::Status::Miss) clearBit(bits, 1 + w, found.slot);
    to_send.push_back(p->request);
    p->sent = true;
  }
  // Deterministic message content regardless of hash-map order.
  std::sort(to_send.begin(), to_send.end(),
            [](const Request& a, const Request& b) { return a.seq < b.seq; });
  if (set.pending.joined()) {  // a joined rank agrees to every cached tensor
    std::fill(bits.begin() + 1, bits.begin() + 1 + w, ~std::uint64_t{0});
  }
  // The complement of the hits: its AND is the complement of the hits' OR.
  for (std::size_t i = 0; i < w; ++i) bits[1 + 2 * w + i] = ~bits[1 + i];
  if (carriage) chooseCarried(bits, *carriage);
  return to_send;
}

// A hit whose cached response is a host allreduce is a candidate for carrying; not an
// Adasum, which the channels' element-wise reduction cannot compute.
void Controller::offerToCarry(const ProcessSet& set, std::uint32_t slot, TensorEntry& entry,
                              Carriage& carriage) {
  const Response& r = set.cache->response(slot);
  if (r.type != ResponseType::Allreduce || r.device.type != DeviceType::CPU ||
      r.op == ReduceOp::Adasum)
    return;
  const std::size_t bytes = r.tensorBytes(0);
  // A tensor that does not fit its response takes the ordinary path, which reports it;
  // so does an empty one, which has nothing to carry (and may have no data pointer).
  if (entry.tensor.dtype != r.dtype || entry.tensor.bytes() != bytes) return;
  if (bytes == 0 || entry.tensor.data == nullptr) return;
  CarriedTensor t;
  t.slot = slot;
  t.data = entry.tensor.data;
  t.count = bytes / dtype_size(r.dtype);
  t.dtype = r.dtype;
  t.op = r.op;
  t.prescale = r.prescale;
  t.postscale = r.postscale;
  t.divisor = r.op == ReduceOp::Average ? static_cast<double>(set.size) : 1.0;
  carriage.tensors.push_back(t);
}

// Keeps the candidates, in slot order, while they fit in carry_bytes, and marks them.
void Controller::chooseCarried(std::vector<std::uint64_t>& bits, Carriage& carriage) const {
  auto& tensors = carriage.tensors;
  std::sort(tensors.begin(), tensors.end(),
            [](const CarriedTensor& a, const CarriedTensor& b) { return a.slot < b.slot; });
  std::size_t used = 0, kept = 0;
  for (const CarriedTensor& t : tensors) {
    const std::size_t room = carriedFootprint(t.count * dtype_size(t.dtype));
    if (used + room > carriage.max_bytes) continue;
    used += room;
    setBit(bits, carriage.word0, t.slot);
    tensors[kept++] = t;
  }
  tensors.resize(kept);
}

// Calls f(slot) for every slot whose bit in words [word0, word0 + words) equals `value`,
// in slot order. Only the words that hold such a bit are scanned bit by bit: the cache
// slots themselves are large and cold, so touching all of them costs microseconds.
template <typename F>
void forEachBit(const std::vector<std::uint64_t>& v, std::size_t word0, std::size_t words,
                bool value, F f) {
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t x = value ? v[word0 + i] : ~v[word0 + i];
    while (x) {
      f(static_cast<std::uint32_t>(i * 64 + std::countr_zero(x)));
      x &= x - 1;
    }
  }
}

// Applies the AND-reduced bits: erase invalidated slots, then emit the common hits in
// slot order. Every rank runs this on the same bits, so the caches stay identical.
void Controller::applyCacheVerdict(ProcessSet& set, std::size_t w,
                                   const std::vector<std::uint64_t>& bits, bool carrying,
                                   Negotiated& out) {
  auto& cache = *set.cache;
  forEachBit(bits, 1 + w, w, false, [&](std::uint32_t slot) {
    if (cache.contains(slot)) cache.erase(slot);
  });
  auto carried = [&](std::uint32_t slot) {
    const std::size_t word = 1 + 3 * w + slot / 64;
    return carrying && (bits[word] >> (slot % 64) & 1) != 0;
  };
  forEachBit(bits, 1, w, true, [&](std::uint32_t slot) {
    if (cache.contains(slot)) {
      cache.touch(slot);
      (carried(slot) ? out.carried : out.responses).push_back(cache.response(slot));
    }
  });
}

Negotiated Controller::negotiate(ProcessSet& set, bool want_shutdown, Clock::time_point now,
                                 const std::string& own_failure) {
  const std::size_t w = set.cache->activeWords();
  NegotiationChannel& channel = set.transport->channel();
  // The same decision on every rank: the settings agree, the caches are identical, and
  // every rank of the set has the same kind of channel.
  const bool carrying = config_.carry_bytes > 0 && w > 0 && channel.carries();
  std::vector<std::uint64_t> bits(1 + (carrying ? 4 : 3) * w, 0);
  std::fill(bits.begin() + 1 + w, bits.begin() + 1 + 2 * w, ~std::uint64_t{0});
  Carriage carriage;
  if (carrying) {
    carriage.word0 = 1 + 3 * w;
    carriage.words = w;
    carriage.max_bytes = std::min<std::size_t>(config_.carry_bytes, channel.carryLimit());
    carriage.slot_bytes = [&cache = *set.cache](std::uint32_t slot) -> std::size_t {
      if (!cache.contains(slot))
        throw CommError("negotiation: a rank carried data for response cache slot " +
                        std::to_string(slot) + ", which this rank's cache does not hold");
      return cache.response(slot).tensorBytes(0);
    };
  }
  std::size_t hits = 0;
  std::vector<Request> to_send = classify(set, w, bits, hits, now, carrying ? &carriage : nullptr);

  std::uint64_t flags = 0;
  const bool rank0_must_speak = set.coordinator && stallsExpired(set, now);
  if (to_send.empty() && !rank0_must_speak) flags |= kNothingToSend;
  if (!want_shutdown) flags |= kNoShutdown;
  if (hits == set.pending.size()) flags |= kOnlyHitsPending;
  if (own_failure.empty()) flags |= kNoFailureToTell;
  bits[0] = flags;

  if (carrying) {
    channel.bitwiseAndCarrying(bits, carriage);
  } else {
    channel.bitwiseAnd(bits);
  }

  Negotiated out;
  out.shutdown = !(bits[0] & kNoShutdown);
  // Once a job, on the global set, whose ranks all reach this point in the same cycle.
  if (out.shutdown && set.id == kGlobalProcessSet)
    for (const auto& [rank, _] : exchangeFailures(set, want_shutdown ? "shutdown" : ""))
      if (set.size > 1 || want_shutdown) out.shut_down_by.push_back(rank);
  // Something stays pending after this cycle unless every rank offered exactly the same
  // hits (their AND equals their OR) and had nothing else pending or to send.
  bool same_hits = true;
  for (std::size_t i = 0; i < w && same_hits; ++i) same_hits = bits[1 + i] == ~bits[1 + 2 * w + i];
  out.anyone_pending = !(bits[0] & kOnlyHitsPending) || !(bits[0] & kNothingToSend) || !same_hits;
  applyCacheVerdict(set, w, bits, carrying, out);
  if (!(bits[0] & kNoFailureToTell)) out.announced = exchangeFailures(set, own_failure);
  if (!(bits[0] & kNothingToSend)) {
    auto fresh = gatherAndDecide(set, to_send, now);
    for (auto& r : fresh) {
      if (cacheable(r)) {
        const Request* held = set.pending.find(r.names[0]);
        set.cache->put(r, held ? std::optional<Request>(*held) : std::nullopt);
      } else if (isGroup(r)) {  // on every rank alike, joined or not: the caches agree
        for (const Response& m : members(r, set.size)) {
          const Request* own = set.pending.find(m.names[0]);
          if (cacheable(m)) set.cache->put(m, own ? std::optional<Request>(*own) : std::nullopt);
        }
      }
      out.responses.push_back(std::move(r));
    }
  }
  if (set.coordinator) reportStalls(set, now);
  return out;
}

// Only in a cycle where some rank has a failure to tell (rare): every rank's text to
// the set's rank 0, and the non-empty ones, with their global ranks, back to everyone.
std::vector<std::pair<int, std::string>> Controller::exchangeFailures(
    ProcessSet& set, const std::string& own_failure) {
  if (set.size == 1) return {{set.ranks[0], own_failure}};
  NegotiationChannel& channel = set.transport->channel();
  const std::vector<std::uint8_t> mine(own_failure.begin(), own_failure.end());
  // Rank 0 packs (global rank, length, text) for each rank that told one.
  std::vector<std::uint8_t> told;
  const auto all = channel.gatherToRoot(mine);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const auto rank = static_cast<std::uint32_t>(set.ranks[r]);
    const auto length = static_cast<std::uint32_t>(all[r].size());
    for (std::uint32_t word : {rank, length})
      for (int b = 0; b < 4; ++b) told.push_back(static_cast<std::uint8_t>(word >> (8 * b)));
    told.insert(told.end(), all[r].begin(), all[r].end());
  }
  channel.broadcastFromRoot(told);
  std::vector<std::pair<int, std::string>> out;
  auto word = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= std::uint32_t{told[at + b]} << (8 * b);
    return v;
  };
  for (std::size_t at = 0; at + 8 <= told.size();) {
    const std::uint32_t rank = word(at), length = word(at + 4);
    at += 8;
    if (length > told.size() - at) break;  // cannot happen: rank 0 wrote it just so
    out.emplace_back(static_cast<int>(rank),
                     std::string(told.begin() + static_cast<std::ptrdiff_t>(at),
                                 told.begin() + static_cast<std::ptrdiff_t>(at + length)));
    at += length;
  }
  return out;
}

std::vector<Response> Controller::gatherAndDecide(ProcessSet& set,
                                                  const std::vector<Request>& to_send,
                                                  Clock::time_point now) {
  const auto timeout = config_.stall_shutdown_time;
  NegotiationChannel& channel = set.transport->channel();
  auto parts = channel.gatherToRoot(encodeRequests(to_send));
  std::vector<std::uint8_t> reply;
  if (set.coordinator) {
    for (const auto& part : parts) set.coordinator->add(decodeRequests(part), now);
    ResponseList list;
    list.responses = set.coordinator->takeReady();
    if (timeout.count() > 0) {
      for (auto& e : set.coordinator->expireStalled(now, timeout)) {
        log().error("{}", e.error);
        list.responses.push_back(std::move(e));
      }
    }
    for (auto& r : list.responses)
      if (r.type == ResponseType::Error) r.error += setRanksNote(set);
    reply = encodeResponses(list);
  }
  channel.broadcastFromRoot(reply);
  return decodeResponses(reply).responses;
}

bool Controller::stallsExpired(const ProcessSet& set, Clock::time_point now) const {
  if (config_.stall_shutdown_time.count() <= 0) return false;
  return !set.coordinator->stalled(now, config_.stall_shutdown_time).empty();
}

void Controller::reportStalls(ProcessSet& set, Clock::time_point now) {
  // Per set: one set's report must not silence another's.
  if (now - set.last_stall_report < config_.stall_check_time) return;
  auto stalls = set.coordinator->stalled(now, config_.stall_check_time);
  if (stalls.empty()) return;
  set.last_stall_report = now;
  log().warn("process set {}: tensors waiting for other ranks{}:\n{}", set.id, setRanksNote(set),
             formatStallReport(stalls, set.size));
}

}  // namespace accord

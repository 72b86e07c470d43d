// The response cache (response_cache.h).
//
// Every rank must end up with the same slot for the same name, since slots are the
// bit positions the ranks AND together. So slot choice depends only on the sequence
// of put/touch/erase calls: a new name takes the lowest free slot, and a full cache
// evicts the least recently used entry and reuses its slot.
#include "runtime/response_cache.h"

#include <accord/error.h>

#include <algorithm>

namespace accord {

namespace {

bool cacheable(ResponseType t) {
  return t == ResponseType::Allreduce || t == ResponseType::Allgather ||
         t == ResponseType::Broadcast || t == ResponseType::Alltoall ||
         t == ResponseType::Reducescatter;
}

}  // namespace

ResponseCache::ResponseCache(std::size_t capacity) : capacity_(capacity), slots_(capacity) {
  if (capacity > UINT32_MAX) {
    throw InvalidArgument("response cache capacity " + std::to_string(capacity) +
                          " exceeds the 32-bit slot numbers");
  }
}

// A slot cached on a rank that had joined holds no request to compare with, so the
// tensor cannot be trusted to match: Invalid makes every rank renegotiate it once.
ResponseCache::Lookup ResponseCache::lookup(const Request& request) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return {};
  const Slot& slot = slots_[it->second];
  // The signature's own ==: rank and seq, which differ per rank and per submission, sit
  // outside it, and every field inside it is compared, including any added later.
  const RequestSignature& wanted = request;
  bool hit = slot.local.has_value() && *slot.local == wanted;
  return {hit ? Status::Hit : Status::Invalid, it->second};
}

void ResponseCache::put(const Response& response, const std::optional<Request>& local) {
  if (capacity_ == 0 || !cacheable(response.type) || response.names.size() != 1) return;
  std::uint32_t index;
  if (auto it = by_name_.find(response.names.front()); it != by_name_.end()) {
    index = it->second;  // re-negotiated: keep the slot, refresh the contents
    lru_.erase(slots_[index].lru_pos);
  } else {
    if (by_name_.size() == capacity_) erase(lru_.back());
    index = 0;
    while (slots_[index].used) ++index;  // lowest free slot; puts are rare, a scan is fine
    by_name_.emplace(response.names.front(), index);
  }
  Slot& slot = slots_[index];
  in_use_end_ = std::max<std::size_t>(in_use_end_, index + 1);
  slot.used = true;
  slot.response = response;
  if (local)
    slot.local = static_cast<const RequestSignature&>(*local);  // the envelope is not kept
  else
    slot.local.reset();
  lru_.push_front(index);
  slot.lru_pos = lru_.begin();
}

void ResponseCache::touch(std::uint32_t slot) {
  if (!contains(slot)) {
    throw InvalidArgument("response cache: touch of empty slot " + std::to_string(slot));
  }
  lru_.splice(lru_.begin(), lru_, slots_[slot].lru_pos);
}

// Erasing an empty slot is a no-op: every rank erases a slot whenever any rank
// invalidated it, and two ranks may invalidate the same slot in one cycle.
void ResponseCache::erase(std::uint32_t slot) {
  if (!contains(slot)) return;
  Slot& s = slots_[slot];
  by_name_.erase(s.response.names.front());
  lru_.erase(s.lru_pos);
  s = Slot{};
  while (in_use_end_ > 0 && !slots_[in_use_end_ - 1].used) --in_use_end_;
}

bool ResponseCache::contains(std::uint32_t slot) const {
  return slot < capacity_ && slots_[slot].used;
}

const Response& ResponseCache::response(std::uint32_t slot) const {
  if (!contains(slot)) {
    throw InvalidArgument("response cache: slot " + std::to_string(slot) + " is empty");
  }
  return slots_[slot].response;
}

}  // namespace accord

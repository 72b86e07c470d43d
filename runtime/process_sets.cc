#include "process_sets.h"

#include <accord/error.h>

#include <algorithm>
#include <mutex>

namespace accord {

std::unique_ptr<ProcessSet> ProcessSet::create(ProcessSetId id, std::vector<int> ranks,
                                               std::unique_ptr<SetTransport> transport, int my_rank,
                                               std::size_t cache_capacity) {
  auto set = std::make_unique<ProcessSet>();
  set->id = id;
  set->size = static_cast<int>(ranks.size());
  auto it = std::find(ranks.begin(), ranks.end(), my_rank);
  set->rank = it == ranks.end() || !transport ? -1 : static_cast<int>(it - ranks.begin());
  set->ranks = std::move(ranks);
  if (transport) set->kind = transport->kind();
  set->transport = std::move(transport);
  set->cache = std::make_unique<ResponseCache>(cache_capacity);
  if (set->rank == 0) set->coordinator = std::make_unique<Coordinator>(set->size);
  return set;
}

void ProcessSetTable::add(std::unique_ptr<ProcessSet> set) {
  std::unique_lock lock(mu_);
  next_id_ = std::max(next_id_, set->id + 1);
  sets_[set->id] = std::move(set);
}

std::unique_ptr<ProcessSet> ProcessSetTable::remove(ProcessSetId id) {
  std::unique_lock lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return nullptr;
  auto set = std::move(it->second);
  sets_.erase(it);
  return set;
}

static const ProcessSet& lookup(const std::map<ProcessSetId, std::unique_ptr<ProcessSet>>& sets,
                                ProcessSetId id, bool taken) {
  auto it = sets.find(id);
  if (it == sets.end() && taken) throw ShutDown("Accord has shut down");
  if (it == sets.end()) {
    throw InvalidArgument("process set " + std::to_string(id) +
                          " does not exist (never added, or removed)");
  }
  return *it->second;
}

std::vector<int> ProcessSetTable::ranks(ProcessSetId id) const {
  std::shared_lock lock(mu_);
  return lookup(sets_, id, taken_).ranks;
}

bool ProcessSetTable::included(ProcessSetId id) const {
  std::shared_lock lock(mu_);
  return lookup(sets_, id, taken_).member();
}

int ProcessSetTable::rankIn(ProcessSetId id) const {
  std::shared_lock lock(mu_);
  const auto& set = lookup(sets_, id, taken_);
  return set.rank;
}

std::pair<int, int> ProcessSetTable::member(ProcessSetId id, const char* what) const {
  std::shared_lock lock(mu_);
  const auto& set = lookup(sets_, id, taken_);
  if (!set.member()) {
    throw InvalidArgument(std::string(what) + ": this rank is not a member of process set " +
                          std::to_string(id));
  }
  return {set.rank, set.size};
}

std::vector<ProcessSet*> ProcessSetTable::memberSets() const {
  std::shared_lock lock(mu_);
  std::vector<ProcessSet*> out;
  for (const auto& [id, set] : sets_) {
    if (set->member()) out.push_back(set.get());
  }
  return out;
}

Transport ProcessSetTable::kind(ProcessSetId id) const {
  std::shared_lock lock(mu_);
  const auto& set = lookup(sets_, id, taken_);
  if (!set.member()) {
    throw InvalidArgument("process_set_transport: this rank is not a member of process set " +
                          std::to_string(id));
  }
  return set.kind;
}

ProcessSet* ProcessSetTable::find(ProcessSetId id) const {
  std::shared_lock lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

ProcessSetId ProcessSetTable::nextId() const {
  std::shared_lock lock(mu_);
  return next_id_;
}

std::vector<std::unique_ptr<ProcessSet>> ProcessSetTable::takeAll() {
  std::unique_lock lock(mu_);
  std::vector<std::unique_ptr<ProcessSet>> out;
  for (auto& [id, set] : sets_) out.push_back(std::move(set));
  sets_.clear();
  taken_ = true;
  return out;
}

}  // namespace accord

// PeerWatch (see peer_watch.h).
#include "runtime/peer_watch.h"

#include <algorithm>
#include <cstdio>

namespace accord {

namespace {

std::string listRanks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

PeerWatch& PeerWatch::instance() {
  static PeerWatch watch;
  return watch;
}

void PeerWatch::waiting(Clock::time_point since, const std::vector<int>& global_ranks,
                        const char* step) {
  std::lock_guard<std::mutex> lock(mu_);
  since_ = since;
  waited_for_ = global_ranks;
  step_ = step;
  published_.store(true, std::memory_order_release);
}

void PeerWatch::waitEnded() {
  if (!published_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  published_.store(false, std::memory_order_release);
  waited_for_.clear();
}

void PeerWatch::ownFailure(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (own_failure_.empty()) own_failure_ = reason;
}

std::string PeerWatch::takeOwnFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  if (own_told_ || own_failure_.empty()) return "";
  own_told_ = true;
  return own_failure_;
}

void PeerWatch::announced(int global_rank, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [rank, text] : announced_)
    if (rank == global_rank) return;
  announced_.emplace_back(global_rank, reason);
}

std::string PeerWatch::suspects(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [rank, reason] : announced_)
    out += (out.empty() ? "" : "; ") + listRanks({rank}) + " reported that its GPU failed: " + reason;
  if (published_.load(std::memory_order_relaxed) && !waited_for_.empty() &&
      now - since_ >= kSuspectAfter) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f",
                  std::chrono::duration<double>(now - since_).count());
    const bool one = waited_for_.size() == 1;
    out += (out.empty() ? "" : "; ") + listRanks(waited_for_) + " did not " + step_ +
           " in the last " + seconds + " s (" +
           (one ? "it, or a rank it waits for in turn, has died or hangs)"
                : "they, or ranks they wait for in turn, have died or hang)");
  }
  return out;
}

void PeerWatch::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  published_.store(false, std::memory_order_release);
  waited_for_.clear();
  own_failure_.clear();
  own_told_ = false;
  announced_.clear();
}

}  // namespace accord

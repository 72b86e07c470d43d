// PeerWatch (see peer_watch.h).
#include "runtime/peer_watch.h"

#include "runtime/logging.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>

namespace accord {

namespace {

std::string listRanks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

bool holds(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

// Who waits for whom, as far as this rank knows (its own wait and each answer),
// followed from this rank: each rank reached, with the rank that waits for it. Breadth
// first, so the chain back from any rank is a shortest one.
std::map<int, int> followWaits(const RollCallFinding& f) {
  std::map<int, const std::vector<int>*> waits;
  for (const auto& [rank, theirs] : f.answers) waits[rank] = &theirs;
  waits[f.me] = &f.waited_for;
  std::map<int, int> came_from{{f.me, f.me}};
  std::deque<int> queue{f.me};
  while (!queue.empty()) {
    const int at = queue.front();
    queue.pop_front();
    const auto it = waits.find(at);
    if (it == waits.end()) continue;  // a rank that did not answer: its waits are unknown
    for (int next : *it->second) {
      if (came_from.count(next)) continue;
      came_from[next] = at;
      queue.push_back(next);
    }
  }
  return came_from;
}

// {me, 3, 2}: this rank waits for rank 3, which waits for rank 2.
std::vector<int> chainTo(const std::map<int, int>& came_from, int me, int rank) {
  std::vector<int> chain{rank};
  for (int r = rank; r != me; r = came_from.at(r)) chain.insert(chain.begin(), came_from.at(r));
  return chain;
}

std::string undecided(const RollCallFinding& f, const std::string& step, const std::string& limit,
                      std::chrono::milliseconds round) {
  const bool one = f.waited_for.size() == 1;
  std::string out = listRanks(f.waited_for) + " did not " + step + limit +
                    ", and a roll call could not tell which rank stopped: ";
  if (f.stopped.empty())
    out += "every rank answered within " + secondsText(round) + " s";
  else
    out += "the ranks waited for answered within " + secondsText(round) + " s, and none of them " +
           "waits for " + listRanks(f.stopped) + ", which did not";
  return out + ". " +
         (one ? "It, or a rank it waits for in turn, hangs"
              : "They, or ranks they wait for in turn, hang") +
         " outside Accord's waits. Accord cannot go on; every pending and later collective fails";
}

}  // namespace

std::string describeStopped(const RollCallFinding& f, const std::string& step,
                            std::chrono::milliseconds stall, std::chrono::milliseconds round) {
  const std::string limit = " within " + secondsText(stall) + " s (ACCORD_STALL_SHUTDOWN_TIME)";
  // Blamed: the silent ranks this rank's wait leads to. A silent rank no wait leads to
  // may be alive but busy outside Accord's MPI waits (a shared-memory wait, say), so it
  // is only mentioned.
  const std::map<int, int> came_from = followWaits(f);
  std::vector<int> blamed, aside, direct, indirect;
  for (int r : f.stopped) (came_from.count(r) ? blamed : aside).push_back(r);
  if (blamed.empty()) return undecided(f, step, limit, round);
  for (int r : blamed) (holds(f.waited_for, r) ? direct : indirect).push_back(r);

  std::string out;
  if (!direct.empty()) {
    out = listRanks(direct) + " did not " + step + limit + " and stopped answering: " +
          (direct.size() == 1 ? "it has died or hangs" : "they have died or hang");
    if (!indirect.empty()) out += "; " + listRanks(indirect) + " also stopped answering";
  } else {
    out = listRanks(blamed) + " stopped answering: " +
          (blamed.size() == 1 ? "it has died or hangs" : "they have died or hang");
  }
  std::vector<int> survivors{f.me};
  for (const auto& [rank, theirs] : f.answers) survivors.push_back(rank);
  std::sort(survivors.begin(), survivors.end());
  if (survivors.size() > 1)
    out += "; " + listRanks(survivors) + " still answer";
  else if (f.size > 2)
    out += " (no other rank answered a roll call within " + secondsText(round) +
           " s: this rank may be the one cut off)";
  if (!aside.empty() && survivors.size() > 1)
    out += " (" + listRanks(aside) + " did not answer either, though no rank waits for " +
           (aside.size() == 1 ? "it" : "them") + ")";
  if (direct.empty()) {
    out += ". This rank waited for " + listRanks(f.waited_for) + " to " + step + limit;
    std::vector<int> chain;
    for (int r : blamed) {
      std::vector<int> c = chainTo(came_from, f.me, r);
      if (chain.empty() || c.size() < chain.size()) chain = std::move(c);
    }
    for (std::size_t i = 1; i + 1 < chain.size(); ++i) {
      out += i == 1 ? ", and in turn " + listRanks({chain[i]}) + " waits for "
                    : ", " + listRanks({chain[i]}) + " for ";
      out += listRanks({chain[i + 1]});
    }
  }
  return out + ". Accord cannot go on without " + (blamed.size() == 1 ? "it" : "them") +
         "; every pending and later collective fails";
}

PeerWatch& PeerWatch::instance() {
  static PeerWatch watch;
  return watch;
}

void PeerWatch::waiting(Clock::time_point since, const std::vector<int>& global_ranks,
                        const char* step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    since_ = since;
    waited_for_ = global_ranks;
    step_ = step;
    published_.store(true, std::memory_order_release);
  }
  if (const WaitingHook hook = hook_.load(std::memory_order_acquire)) hook(since, global_ranks);
}

void PeerWatch::waitEnded() {
  if (!published_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  published_.store(false, std::memory_order_release);
  waited_for_.clear();
}

void PeerWatch::rollCalled(const std::vector<int>& stopped, const std::vector<int>& answering) {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = stopped;
  answering_ = answering;
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
  if (!stopped_.empty()) {
    // Found by asking every rank: better than whom a wait happened to be stuck on.
    out += (out.empty() ? "" : "; ") + listRanks(stopped_) + " stopped answering";
    if (answering_.size() > 1) out += " (" + listRanks(answering_) + " still answer)";
  } else if (published_.load(std::memory_order_relaxed) && !waited_for_.empty() &&
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
  stopped_.clear();
  answering_.clear();
  own_failure_.clear();
  own_told_ = false;
  announced_.clear();
}

}  // namespace accord

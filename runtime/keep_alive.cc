// keepAlive (see keep_alive.h).
#include "runtime/keep_alive.h"

#include <mutex>
#include <vector>

namespace accord {

namespace {

struct KeptAlive {
  std::mutex mu;
  std::vector<std::shared_ptr<void>> objects;
};

// Allocated once and never deleted: destroying it at exit would destroy the objects
// too, while MPI may still use them. The static pointer keeps the list reachable.
KeptAlive& keptAlive() {
  static KeptAlive* const kept = new KeptAlive;
  return *kept;
}

}  // namespace

void keepAlive(std::shared_ptr<void> object) {
  if (!object) return;
  auto& kept = keptAlive();
  std::lock_guard<std::mutex> lock(kept.mu);
  kept.objects.push_back(std::move(object));
}

}  // namespace accord

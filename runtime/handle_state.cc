// Handle completion: the runtime's cycle calls completePart()/fail(); application
// threads wait in wait(), briefly running cycles themselves or yielding, then on the
// condition variable.
#include "handle_state.h"

#include <algorithm>
#include <thread>

#include <unistd.h>

namespace accord::detail {

namespace {

int g_forked_from = 0;  // the pid that called init(), in a process forked from it

// A small collective completes within microseconds of being submitted; a thread that
// went to sleep at once would add a scheduler wake-up (several microseconds) to each
// one. For this long the waiter yields the core instead, which costs nothing when no
// other thread wants it, and then sleeps.
constexpr auto kWaitSpin = std::chrono::microseconds(50);
// A cycle run inline returns when every rank has reached it: within the 20 ms an idle
// rank sleeps between cycles, and only later where a rank stopped answering. A wait
// shorter than this stays within its timeout instead, leaving the cycle to the
// background thread.
constexpr auto kInlineFrom = std::chrono::milliseconds(100);

std::atomic<InlineCycle> g_inline_cycle{nullptr};

}  // namespace

void setInlineCycle(InlineCycle cycle) { g_inline_cycle.store(cycle, std::memory_order_release); }

void markForkedFrom(int owner) { g_forked_from = owner; }
bool forked() { return g_forked_from != 0; }

std::string forkedError(const char* what) {
  return std::string(what) + ": this process (pid " + std::to_string(getpid()) +
         ") is a fork of process " + std::to_string(g_forked_from) +
         ", which called accord::init(); Accord's runtime (its background thread and MPI) "
         "belongs to that process and cannot be used here. Fork before init() (call init() "
         "in the parent after forking), or start processes that need Accord with the "
         "'spawn' method instead of fork";
}

void HandleState::completePart() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return;
    if (--pending > 0) return;
    finished = true;
    settled.store(true, std::memory_order_release);
  }
  cv.notify_all();
}

void HandleState::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return;
    error = std::move(e);
    finished = true;
    settled.store(true, std::memory_order_release);
  }
  cv.notify_all();
}

bool HandleState::done() const {
  std::lock_guard<std::mutex> lock(mu);
  return finished;
}

void HandleState::yieldAwhile(std::chrono::microseconds longest) const {
  const auto until = std::chrono::steady_clock::now() + std::min(longest, kWaitSpin);
  const InlineCycle cycle =
      longest >= kInlineFrom ? g_inline_cycle.load(std::memory_order_acquire) : nullptr;
  while (!settled.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    if (!cycle || !cycle()) std::this_thread::yield();
  }
}

void HandleState::wait() const {
  yieldAwhile(std::chrono::microseconds::max());
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return finished; });
  if (error) std::rethrow_exception(error);
}

bool HandleState::waitFor(std::chrono::milliseconds timeout) const {
  // now() + milliseconds::max() overflows the clock's nanoseconds into the past: a
  // timeout past the clock's range waits for as long as the clock can count.
  const auto now = std::chrono::steady_clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::time_point::max() - now);
  timeout = std::min(timeout, room);
  const auto deadline = now + timeout;
  yieldAwhile(timeout);
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_until(lock, deadline, [this] { return finished; })) return false;
  if (error) std::rethrow_exception(error);
  return true;
}

void HandleState::partLaunched(std::shared_ptr<void> event) {
  {
    std::lock_guard<std::mutex> lock(mu);
    device_event = std::move(event);
    if (--unlaunched > 0) return;
  }
  cv.notify_all();
}

void* HandleState::waitLaunched() const {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return finished || unlaunched <= 0; });
  if (error || unlaunched > 0) return nullptr;
  return device_event.get();
}

}  // namespace accord::detail

namespace accord {

namespace {
// In a forked child only a collective that had finished before the fork can answer:
// nothing there would ever complete the others.
const detail::HandleState& checked(const std::shared_ptr<detail::HandleState>& state) {
  if (!state) throw InvalidArgument("operation on an empty accord::Handle");
  if (detail::forked() && !state->settled.load(std::memory_order_acquire))
    throw NotInitialized(detail::forkedError("accord::Handle"));
  return *state;
}
}  // namespace

bool Handle::poll() const { return checked(state_).done(); }
void Handle::wait() const { checked(state_).wait(); }
bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  return checked(state_).waitFor(timeout);
}

const std::vector<std::int64_t>& Handle::received_splits() const {
  const auto& s = checked(state_);
  s.wait();
  return s.received_splits;
}

int Handle::last_joined_rank() const {
  const auto& s = checked(state_);
  s.wait();
  return s.last_joined_rank;
}

void* Handle::cuda_event() const { return checked(state_).waitLaunched(); }

}  // namespace accord

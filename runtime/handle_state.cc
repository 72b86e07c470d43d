// Handle completion: the background thread calls completePart()/fail(); application
// threads block in wait() on the condition variable (never a spin).
#include "handle_state.h"

namespace accord::detail {

void HandleState::completePart() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return;
    if (--pending > 0) return;
    finished = true;
  }
  cv.notify_all();
}

void HandleState::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return;
    error = std::move(e);
    finished = true;
  }
  cv.notify_all();
}

bool HandleState::done() const {
  std::lock_guard<std::mutex> lock(mu);
  return finished;
}

void HandleState::wait() const {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return finished; });
  if (error) std::rethrow_exception(error);
}

bool HandleState::waitFor(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, timeout, [this] { return finished; })) return false;
  if (error) std::rethrow_exception(error);
  return true;
}

}  // namespace accord::detail

namespace accord {

namespace {
const detail::HandleState& checked(const std::shared_ptr<detail::HandleState>& state) {
  if (!state) throw InvalidArgument("operation on an empty accord::Handle");
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

ProcessSetId Handle::process_set() const {
  const auto& s = checked(state_);
  s.wait();
  return s.process_set;
}

}  // namespace accord

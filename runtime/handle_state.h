// The shared state behind a Handle.
//
// Thread boundary: the background thread completes or fails the state; application
// threads poll or wait on it. A grouped collective shares one state across all its
// tensors and completes when the last one does.
//
// Device collectives are completed by the backend's finalizer thread instead (see
// TensorEntry::backend_completes). Before that, the background thread reports each
// part as launched on the GPU with the event that completes with it: cuda_event()
// waits for that, not for completion. All parts of one handle run on one device and
// its one runtime stream, in order, so the event of the last part launched covers
// them all.
#pragma once

#include <accord/accord.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace accord::detail {

// A process forked after init() holds a copy of the runtime without its threads: a
// collective or wait there would wait forever for a background thread that only the
// parent has. api.cc's pthread_atfork handler marks the child; from then on, every
// public call there throws NotInitialized naming `owner`, the process that called
// init(). Read without a lock: set in the child while it has one thread.
void markForkedFrom(int owner);
bool forked();
// The error for `what` (e.g. "accord::allreduce") in such a child.
std::string forkedError(const char* what);

// Runs one cycle of the runtime on the calling thread when the background thread is
// between cycles, and says whether it did (background_loop.cc sets it at start, when
// ACCORD_INLINE_CYCLES allows). wait() calls it while it spins: a small collective then
// completes on the thread that waits for it, without the two thread switches of a
// hand-off to the background thread and back, which cost more than the collective
// itself where both threads share one core.
using InlineCycle = bool (*)();
void setInlineCycle(InlineCycle cycle);

struct HandleState {
  explicit HandleState(int parts = 1) : pending(parts), unlaunched(parts) {}

  // One part finished; the state completes when no part is pending.
  void completePart();
  // Fails the whole state (the first error wins); later parts are ignored.
  void fail(std::exception_ptr error);
  bool done() const;
  // Both yield the core for a moment (handle_state.cc), then block on the condition
  // variable; both rethrow the failure.
  void wait() const;
  bool waitFor(std::chrono::milliseconds timeout) const;  // false on timeout

  // One part was launched on a device stream; `event` (get(): the cudaEvent_t) completes
  // with it and with every part launched before it.
  void partLaunched(std::shared_ptr<void> event);
  // Blocks until every part was launched or the state finished; the last part's event,
  // or nullptr when the state failed or no part ran on a device.
  void* waitLaunched() const;

  // Runs inline cycles or yields until finished, for at most `longest` and at most the
  // spin handle_state.cc allows (a cycle started within it runs to its end).
  void yieldAwhile(std::chrono::microseconds longest) const;

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  int pending;
  int unlaunched;  // parts not yet launched on a device stream
  bool finished = false;
  std::atomic<bool> settled{false};  // finished, readable without the lock
  std::exception_ptr error;
  std::shared_ptr<void> device_event;  // keeps the event of the last part launched alive

  // Results (written by the background thread before completion).
  std::vector<std::int64_t> received_splits;
  int last_joined_rank = -1;
  ProcessSetId process_set = kGlobalProcessSet;
};

}  // namespace accord::detail

// The shared state behind a Handle.
//
// Thread boundary: the background thread completes or fails the state; application
// threads poll or wait on it. A grouped collective shares one state across all its
// tensors and completes when the last one does.
#pragma once

#include <accord/accord.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

namespace accord::detail {

struct HandleState {
  explicit HandleState(int parts = 1) : pending(parts) {}

  // One part finished; the state completes when no part is pending.
  void completePart();
  // Fails the whole state (the first error wins); later parts are ignored.
  void fail(std::exception_ptr error);
  bool done() const;
  void wait() const;  // blocks on the condition variable; rethrows the failure
  bool waitFor(std::chrono::milliseconds timeout) const;  // false on timeout

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  int pending;
  bool finished = false;
  std::exception_ptr error;

  // Results (written by the background thread before completion).
  std::vector<std::int64_t> received_splits;
  int last_joined_rank = -1;
  ProcessSetId process_set = kGlobalProcessSet;
};

}  // namespace accord::detail

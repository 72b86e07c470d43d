// The hand-off between application threads and the background thread.
//
// Thread boundary: any application thread push()es; only the background thread (the
// thread running a cycle, runtime.h) drain()s and release()s. A name may be in flight
// once per process set: pushing it again before its collective completes is an
// immediate InvalidArgument, because two live requests with one name could pair with
// the wrong requests on other ranks.
#pragma once

#include "runtime/message.h"
#include "runtime/tensor_entry.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace accord {

struct QueuedOp {
  ProcessSetId process_set = kGlobalProcessSet;
  Request request;
  TensorEntry entry;
  std::chrono::steady_clock::time_point enqueued{};  // for the timeline's QUEUE phase
};

class TensorQueue {
 public:
  // Throws InvalidArgument if any name is already in flight in its process set, or
  // ShutDown once the queue is closed. All ops of one push (a grouped collective) are
  // accepted or rejected together.
  void push(std::vector<QueuedOp> ops);
  std::vector<QueuedOp> drain();
  // The collective `name` completed: its name may be submitted again.
  void release(ProcessSetId set, const std::string& name);

  // Background thread: waits until work arrives, a shutdown is requested, or `timeout`;
  // for the first `yielding` of it by yielding the core, then asleep.
  void waitForWork(std::chrono::microseconds timeout,
                   std::chrono::microseconds yielding = std::chrono::microseconds(0));
  bool hasWork() const;

  void requestShutdown();
  bool shutdownRequested() const;
  // After the loop ends, pushes fail with this reason (a ShutDown or the loop's error).
  void close(std::exception_ptr reason);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<QueuedOp> ops_;
  std::atomic<bool> queued_{false};  // !ops_.empty() || shutdown_requested_, lock-free
  std::set<std::pair<ProcessSetId, std::string>> in_flight_;
  bool shutdown_requested_ = false;
  std::exception_ptr closed_;
};

}  // namespace accord

#include "tensor_queue.h"

#include <accord/error.h>

#include <algorithm>
#include <thread>

namespace accord {

void TensorQueue::push(std::vector<QueuedOp> ops) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) std::rethrow_exception(closed_);
    for (const auto& op : ops) {
      if (in_flight_.count({op.process_set, op.request.name})) {
        throw InvalidArgument(describeCollective(requestTypeName(op.request.type),
                                                 op.request.name) +
                              ": a collective with this name is already in flight on this "
                              "rank; wait for it before submitting the name again");
      }
    }
    for (auto& op : ops) {
      in_flight_.insert({op.process_set, op.request.name});
      ops_.push_back(std::move(op));
    }
    queued_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

std::vector<QueuedOp> TensorQueue::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<QueuedOp> out;
  out.swap(ops_);
  queued_.store(shutdown_requested_, std::memory_order_relaxed);
  return out;
}

void TensorQueue::release(ProcessSetId set, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase({set, name});
}

void TensorQueue::waitForWork(std::chrono::microseconds timeout,
                              std::chrono::microseconds yielding) {
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::min(timeout, yielding);
  while (!queued_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  timeout -= std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  if (timeout.count() <= 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !ops_.empty() || shutdown_requested_; });
}

bool TensorQueue::hasWork() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !ops_.empty();
}

void TensorQueue::requestShutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
    queued_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

bool TensorQueue::shutdownRequested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_requested_;
}

void TensorQueue::close(std::exception_ptr reason) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = std::move(reason);
}

}  // namespace accord

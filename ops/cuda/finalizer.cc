// The finalizer thread (see finalizer.h).
#include "ops/cuda/finalizer.h"

#include "ops/common/checks.h"
#include "ops/cuda/device.h"
#include "runtime/logging.h"
#include "runtime/peer_watch.h"

#include <accord/error.h>

#include <algorithm>

namespace accord::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// After the last completion or launch, poll flat out this long (a small collective
// takes tens of microseconds, and each microsecond of polling delay is latency the
// caller sees; with nothing in flight, this is how long a new launch is picked up
// without a wake-up), then sleep in growing steps up to 100 us: a large collective is
// noticed within 100 us of its end, at 10,000 polls a second while it runs.
constexpr auto kSpin = std::chrono::microseconds(200);
constexpr auto kFirstSleep = std::chrono::microseconds(10);
constexpr auto kMaxSleep = std::chrono::microseconds(100);
// How long a failed collective's handles wait for the GPU to finish what was queued
// with it, at most (and no longer than ACCORD_STALL_SHUTDOWN_TIME).
constexpr auto kGrace = std::chrono::milliseconds(10000);
// How long a failed collective's handles wait for the runtime to learn which rank is to
// blame, at most: past PeerWatch::kSuspectAfter, so that a rank that died when the
// collective failed is named; well within the second that failures may take past
// ACCORD_STALL_SHUTDOWN_TIME.
constexpr auto kAttribution = std::chrono::milliseconds(500);
static_assert(kAttribution > PeerWatch::kSuspectAfter);

}  // namespace

Finalizer::Finalizer(std::chrono::milliseconds timeout)
    : timeout_(timeout), thread_([this] { run(); }) {}

Finalizer::~Finalizer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Finalizer::add(Launched launched) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_[launched.comm.get()];
    ++added_;
    items_.push_back({std::move(launched), Clock::now(), {}, {}});
  }
  wake_.notify_all();
}

bool Finalizer::drain(const Watched* comm, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return drained_.wait_until(lock, deadline, [&] {
    auto it = in_flight_.find(comm);
    return it == in_flight_.end() || it->second == 0;
  });
}

// Completed, failed (for good, with the handles failed) or still pending.
Finalizer::Outcome Finalizer::poll(Item& item, Clock::time_point now) {
  Launched& l = item.launched;
  const cudaEvent_t done = eventOf(l.done);
  if (item.failure.empty()) {
    std::string reason = l.comm ? l.comm->broken() : std::string();
    if (reason.empty()) {
      const cudaError_t status = cudaEventQuery(done);
      if (status == cudaSuccess) {
        finish(item, nullptr);
        return Outcome::Completed;
      }
      if (status != cudaErrorNotReady) {
        reason = std::string("the GPU reported an error: ") + cudaGetErrorString(status);
        item.own = true;
        noteIfContextLost(status, l.what);
      } else {
        // Not an error, but the runtime may keep it as this thread's last one, which
        // the next kernel launch's check would then report as its own.
        cudaGetLastError();
        if (l.comm) reason = l.comm->asyncError();
      }
      if (reason.empty() && timeout_.count() > 0 && now - item.since >= timeout_) {
        reason = "did not complete on cuda:" + std::to_string(l.device) + " within " +
                 secondsText(timeout_) +
                 " s (ACCORD_STALL_SHUTDOWN_TIME): a rank of the process set has died or "
                 "hangs, or the GPU stopped";
      }
      if (reason.empty()) return Outcome::Pending;
      log().error("{}: {}", l.what, reason);
      // Every other collective on the communicator fails with this one's reason.
      if (l.comm) l.comm->abort(l.what + " " + reason);
    }
    item.failure = std::move(reason);
    item.failed_at = now;
  }
  // What was queued with the collective (scaling, copies out) may still read or write
  // the caller's tensors: its handles fail once the GPU is through it (an aborted
  // communicator's kernels return at once), or when a GPU that stopped has had its grace.
  const auto grace =
      timeout_.count() > 0 ? std::min<std::chrono::milliseconds>(timeout_, kGrace) : kGrace;
  const cudaError_t status = cudaEventQuery(done);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    if (now - item.failed_at < grace) return Outcome::Pending;
  }
  // NCCL does not say which rank broke the collective; what the runtime knows of the
  // other ranks may (PeerWatch). It may take a moment to know it: a negotiation round
  // must first have waited long enough for a rank that died, or a rank whose GPU
  // failed must have told it. Not for this rank's own failure.
  std::string who = item.own ? std::string() : PeerWatch::instance().suspects(now);
  if (who.empty() && !item.own && now - item.failed_at < kAttribution) return Outcome::Pending;
  finish(item, std::make_exception_ptr(
                   CommError(l.what + ": " + item.failure + (who.empty() ? "" : "; " + who))));
  return Outcome::Failed;
}

void Finalizer::finish(Item& item, std::exception_ptr error) {
  for (auto& part : item.launched.parts) {
    if (error)
      part.handle->fail(error);
    else if (part.error)
      part.handle->fail(part.error);
    else
      part.handle->completePart();
  }
}

void Finalizer::run() {
  std::unique_lock<std::mutex> lock(mu_);
  auto last_progress = Clock::now();
  auto sleep = kFirstSleep;
  std::uint64_t seen = added_;
  for (;;) {
    if (added_ != seen) {  // a new launch: it may complete within microseconds
      seen = added_;
      last_progress = Clock::now();
      sleep = kFirstSleep;
    }
    if (items_.empty()) {
      if (stopping_) return;
      // Right after a completion the next collective often follows within microseconds
      // (a training step's stream of small ones): keep polling for it a while rather
      // than sleep, since waking a sleeping thread costs about as long again.
      if (Clock::now() - last_progress < kSpin) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        continue;
      }
      wake_.wait(lock, [&] { return stopping_ || !items_.empty(); });
      last_progress = Clock::now();
      sleep = kFirstSleep;
      continue;
    }
    // Poll without the lock, so that the background thread can add meanwhile; items
    // added during the pass queue up behind the ones polled.
    std::deque<Item> polling;
    polling.swap(items_);
    lock.unlock();
    std::vector<std::pair<const Watched*, int>> finished;  // communicator, device
    std::deque<Item> pending;
    const auto now = Clock::now();
    for (Item& item : polling) {
      const int device = item.launched.device;
      // Collectives on one device finish in order: each one's time counts from the
      // completion of the one before it, not from its launch.
      if (auto it = last_done_.find(device); it != last_done_.end())
        item.since = std::max(item.since, it->second);
      Outcome outcome = Outcome::Pending;
      try {
        DeviceGuard guard(device);
        outcome = poll(item, now);
      } catch (const std::exception& e) {  // the guard itself failed: the device is gone
        finish(item, std::make_exception_ptr(CommError(item.launched.what + ": " + e.what())));
        outcome = Outcome::Failed;
      }
      if (outcome == Outcome::Pending) {
        pending.push_back(std::move(item));
        continue;
      }
      if (outcome == Outcome::Completed) last_done_[device] = Clock::now();
      finished.emplace_back(item.launched.comm.get(), device);
    }
    // Drop the finished items (and their references to communicators) before drain()
    // can see them gone: the owner of a communicator frees it after drain() returns.
    polling.clear();
    lock.lock();
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) items_.push_front(std::move(*it));
    for (const auto& [comm, device] : finished) --in_flight_[comm];
    if (!finished.empty()) {
      drained_.notify_all();
      last_progress = Clock::now();
      sleep = kFirstSleep;
      continue;
    }
    if (Clock::now() - last_progress < kSpin) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    wake_.wait_for(lock, sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

void completeWhenReady(Finalizer& finalizer, int device, const Response& response,
                       std::vector<TensorEntry*>& entries) {
  const std::string what = describe(response);
  DeviceGuard guard(device);
  for (TensorEntry* e : entries) {
    e->handle->partLaunched(e->ready);
    // Ready already (the application's stream was idle at submission, say): the
    // executor completes it at once, without a trip through the finalizer's thread.
    const cudaError_t status = cudaEventQuery(eventOf(e->ready));
    if (status == cudaSuccess) continue;
    if (status == cudaErrorNotReady) cudaGetLastError();  // no error, but kept as the last
    Launched launched;
    launched.what = what;
    launched.device = device;
    launched.done = e->ready;
    launched.parts.push_back({e->handle, nullptr});
    e->backend_completes = true;
    finalizer.add(std::move(launched));
  }
}

void completeWhenDone(Finalizer& finalizer, int device, cudaStream_t stream,
                      const Response& response, std::vector<TensorEntry*>& entries,
                      std::shared_ptr<Watched> comm) {
  Launched launched;
  launched.what = describe(response);
  launched.device = device;
  launched.done = makeEvent();
  launched.comm = std::move(comm);
  ACCORD_CUDA_CHECK(cudaEventRecord(eventOf(launched.done), stream));
  for (TensorEntry* e : entries) {
    if (!e || e->backend_completes) continue;
    if (response.type == ResponseType::Alltoall && !e->error)
      e->handle->received_splits = e->received_splits;
    e->handle->partLaunched(launched.done);
    launched.parts.push_back({e->handle, e->error});
    e->backend_completes = true;
  }
  if (launched.parts.empty()) return;  // joined: nothing of ours to complete
  finalizer.add(std::move(launched));
}

}  // namespace accord::cuda

// Communicator (see communicator.h).
#include "ops/nccl/communicator.h"

#include "ops/common/checks.h"
#include "ops/cuda/device.h"
#include "runtime/logging.h"

#include <accord/error.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace accord::nccl {

namespace {

using Clock = std::chrono::steady_clock;

// What rank 0 sends each member: whether it got an id, and the id.
struct IdMessage {
  std::int32_t ok = 0;
  ncclUniqueId id{};
};

}  // namespace

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) throw CommError(std::string(what) + ": " + errorText(result, nullptr));
}

std::string errorText(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(" (") + last + ")";
  return text;
}

std::shared_ptr<Communicator> Communicator::create(ProcessGroup& group, int device,
                                                   std::chrono::milliseconds timeout) {
  std::vector<int> ranks;
  for (int r = 0; r < group.size(); ++r) ranks.push_back(group.globalRank(r));
  std::shared_ptr<Communicator> comm(
      new Communicator(device, "process set of global ranks " + joinRanks(ranks), timeout));

  // The unique id, from the set's rank 0 to everyone. A rank 0 that cannot get one
  // still answers, so that nobody waits for it.
  IdMessage message;
  std::string failure;
  const std::string what = "NCCL communicator of the " + comm->name();
  if (group.rank() == 0) {
    const ncclResult_t result = ncclGetUniqueId(&message.id);
    message.ok = result == ncclSuccess;
    if (!message.ok) failure = "ncclGetUniqueId failed: " + errorText(result, nullptr);
  }
  group.broadcast(&message, sizeof message, what, "NCCL's unique id");
  if (group.rank() != 0 && !message.ok)
    failure = "the set's rank 0 could not get an NCCL unique id";
  if (!failure.empty()) {
    comm->broken_ = "creating the " + what + " failed: " + failure;
    comm->is_broken_.store(true, std::memory_order_release);
    log().error("{}", comm->broken_);
    return comm;
  }
  comm->join(group.size(), message.id, group.rank());
  return comm;
}

void Communicator::join(int nranks, const ncclUniqueId& id, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  cuda::DeviceGuard guard(device_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const std::string what =
      "creating the NCCL communicator of the " + name_ + " on cuda:" + std::to_string(device_);
  ncclResult_t result = ncclCommInitRankConfig(&comm_, nranks, id, rank, &config);
  bool timed_out = false;
  if (comm_ && (result == ncclSuccess || result == ncclInProgress))
    result = settle(result, timed_out);
  if (result == ncclSuccess) return;
  abortLocked(what + (timed_out ? " did not finish within " + secondsText(timeout_) +
                                      " s (ACCORD_STALL_SHUTDOWN_TIME): a member has died or "
                                      "hangs, or is not creating it"
                                : " failed: " + errorText(result, comm_)));
}

ncclResult_t Communicator::settle(ncclResult_t result, bool& timed_out) {
  const auto start = Clock::now();
  auto sleep = std::chrono::microseconds(10);
  while (result == ncclInProgress) {
    const ncclResult_t polled = ncclCommGetAsyncError(comm_, &result);
    if (polled != ncclSuccess) return polled;
    if (result != ncclInProgress) break;
    const auto waited = Clock::now() - start;
    if (timeout_.count() > 0 && waited >= timeout_) {
      timed_out = true;
      return ncclInProgress;
    }
    // Launches settle within microseconds once connected; connecting to a peer the
    // first time, or creating the communicator, takes up to seconds.
    if (waited < std::chrono::microseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
  return result;
}

void Communicator::launch(const std::function<ncclResult_t(ncclComm_t)>& calls,
                          const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) throw CommError(what + ": " + broken_);
  ncclResult_t result = ncclGroupStart();
  if (result == ncclSuccess) {
    ncclResult_t called = ncclSuccess;
    try {
      called = calls(comm_);
    } catch (const std::exception& e) {
      // Never leave the thread inside a group (NCCL would defer every later call of
      // it); and what was enqueued may not be what the other ranks enqueue, so the
      // communicator cannot go on.
      ncclGroupEnd();
      abortLocked(what + ": its launch failed: " + e.what());
      throw;
    }
    const ncclResult_t ended = ncclGroupEnd();
    // An error inside the group wins over the group's own answer.
    result = called != ncclSuccess && called != ncclInProgress ? called : ended;
  }
  bool timed_out = false;
  if (result == ncclInProgress) result = settle(result, timed_out);
  if (result == ncclSuccess) return;
  const std::string reason = timed_out ? "NCCL did not launch it within " + secondsText(timeout_) +
                                             " s (ACCORD_STALL_SHUTDOWN_TIME): a member of the " +
                                             name_ + " has died or hangs"
                                       : "NCCL failed to launch it: " + errorText(result, comm_);
  abortLocked(what + ": " + reason);
  throw CommError(what + ": " + reason);
}

std::string Communicator::asyncError() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return "";  // a launch is settling: ask again on the next poll
  if (!broken_.empty()) return broken_;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = ncclCommGetAsyncError(comm_, &state);
  if (polled != ncclSuccess) return "ncclCommGetAsyncError failed: " + errorText(polled, comm_);
  if (state == ncclSuccess || state == ncclInProgress) return "";
  return "NCCL reported an asynchronous error on the " + name_ + ": " + errorText(state, comm_);
}

void Communicator::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  abortLocked(reason);
}

void Communicator::abortLocked(const std::string& reason) {
  if (broken_.empty()) {
    broken_ = reason;
    is_broken_.store(true, std::memory_order_release);
    log().error(
        "{}; the NCCL communicator is aborted, device collectives of the {} fail from "
        "now on",
        reason, name_);
  }
  if (!comm_) return;
  try {
    cuda::DeviceGuard guard(device_);
    ncclCommAbort(comm_);
  } catch (const std::exception&) {
    ncclCommAbort(comm_);  // the device could not be made current: abort anyway
  }
  comm_ = nullptr;
}

std::string Communicator::broken() const {
  if (!is_broken_.load(std::memory_order_acquire)) return "";
  std::lock_guard<std::mutex> lock(mu_);  // held only briefly once broken
  return broken_;
}

Communicator::~Communicator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!comm_) return;  // aborted: NCCL has freed it
  try {
    cuda::DeviceGuard guard(device_);
    bool timed_out = false;
    ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclSuccess || result == ncclInProgress) result = settle(result, timed_out);
    if (result == ncclSuccess) {
      ncclCommDestroy(comm_);
      comm_ = nullptr;
      return;
    }
    log().warn("freeing the NCCL communicator of the {}: {}; aborting it", name_,
               timed_out ? "members did not finish within the timeout" : errorText(result, comm_));
  } catch (const std::exception& e) {
    log().warn("freeing the NCCL communicator of the {}: {}; aborting it", name_, e.what());
  }
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace accord::nccl

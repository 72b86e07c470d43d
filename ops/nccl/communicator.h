// One process set's NCCL communicator on this rank.
//
// Created on the set's first device collective, on every member in the same response:
// the set's rank 0 asks NCCL for a unique id and sends it to the others through the
// set's ProcessGroup (with its deadline-bounded waits), then every member joins a
// non-blocking communicator (config.blocking = 0) and polls ncclCommGetAsyncError for
// at most ACCORD_STALL_SHUTDOWN_TIME. Non-blocking, because a blocking NCCL call that
// waits for a dead peer never returns: here every call returns at once, and every wait
// for NCCL is a poll with that deadline.
//
// A communicator that NCCL could not create, that failed, or that timed out is aborted
// (ncclCommAbort) and stays broken: the device collectives of its set fail at once
// with the reason, on this rank, while host collectives and the host transport go on. Other
// members find out through their own polls and deadlines.
//
// Thread boundary: the background thread creates the communicator and launches
// collectives on it; the finalizer polls its asynchronous error and aborts it. Every
// NCCL call on it holds mu_, so two threads never call NCCL on it at once; none of
// those calls blocks for long (non-blocking communicator, bounded polls). A launch may
// hold it for seconds while NCCL connects to a peer the first time: the finalizer's
// polls (asyncError, broken) then answer "nothing yet" rather than wait for it, so
// that it goes on completing the collectives of other sets. Its abort() does wait for
// such a launch, which the same timeout bounds (and which aborts on it itself).
#pragma once

#include "ops/common/process_group.h"
#include "ops/cuda/finalizer.h"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace accord::nccl {

// Throws CommError("<call> at <file>:<line>: <NCCL's message>") unless `call` succeeded.
#define ACCORD_NCCL_CHECK(call) \
  ::accord::nccl::check((call), #call " at " __FILE__ ":" ACCORD_NCCL_STRINGIFY(__LINE__))
#define ACCORD_NCCL_STRINGIFY2(x) #x
#define ACCORD_NCCL_STRINGIFY(x) ACCORD_NCCL_STRINGIFY2(x)
void check(ncclResult_t result, const char* what);
// NCCL's name for `result`, with its last error message where it has one.
std::string errorText(ncclResult_t result, ncclComm_t comm);

class Communicator final : public cuda::Watched {
 public:
  // Collective over `group`'s ranks. Returns a broken communicator when NCCL fails or
  // does not finish in time; throws CommError only when the group itself fails (a
  // member stopped answering: the set's transport is then broken).
  static std::shared_ptr<Communicator> create(ProcessGroup& group, int device,
                                              std::chrono::milliseconds timeout);
  // Flushes and frees the communicator in step with the other members
  // (ncclCommFinalize, ncclCommDestroy), within the timeout; aborts it after that.
  ~Communicator() override;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int device() const { return device_; }
  // "process set of global ranks 0, 1" for messages.
  const std::string& name() const { return name_; }

  // Runs `calls` on the communicator inside ncclGroupStart/ncclGroupEnd and waits until
  // NCCL has launched everything on `stream` (a non-blocking communicator may answer
  // ncclInProgress first, e.g. while it connects to a peer the first time), within
  // the timeout. On failure or timeout aborts the communicator and throws CommError
  // naming `what`; when it is broken already, throws at once.
  void launch(const std::function<ncclResult_t(ncclComm_t)>& calls, const std::string& what);

  std::string asyncError() override;
  void abort(const std::string& reason) override;
  std::string broken() const override;

 private:
  Communicator(int device, std::string name, std::chrono::milliseconds timeout)
      : device_(device), name_(std::move(name)), timeout_(timeout) {}
  void join(int nranks, const ncclUniqueId& id, int rank);
  // Polls ncclCommGetAsyncError until the state is not ncclInProgress, or the timeout.
  ncclResult_t settle(ncclResult_t result, bool& timed_out);
  void abortLocked(const std::string& reason);

  const int device_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  ncclComm_t comm_ = nullptr;  // null once aborted
  std::string broken_;
  std::atomic<bool> is_broken_{false};  // broken_ is set (read without mu_)
};

}  // namespace accord::nccl

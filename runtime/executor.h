// Runs the negotiated responses of one process set on this rank.
//
// Plans fusion over the unfused response list (deterministic, so every rank groups the
// same tensors), hands data collectives to the backend (ops/common/dispatcher.cc) and
// completes or fails the handles. Process-set changes are only recorded here: the loop
// applies them after the cycle, when no set is being walked.
#pragma once

#include "runtime/backend.h"
#include "runtime/process_sets.h"
#include "runtime/tensor_queue.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace accord {

struct SetChange {
  ResponseType type = ResponseType::AddProcessSet;  // or RemoveProcessSet
  std::vector<int> ranks;                          // AddProcessSet
  ProcessSetId id = 0;                             // RemoveProcessSet
  std::shared_ptr<detail::HandleState> handle;     // null on a rank that did not ask
};

// What the executor tells the rest of the runtime, which it does not know itself.
struct ExecutorHooks {
  // A join completed on the set (before its handle completes).
  std::function<void(ProcessSetId)> joined;
  // A collective failed with Timeout (a stall: some ranks never submitted it), on every
  // rank of the set, the late ones too.
  std::function<void(const std::string& error)> timed_out;
};

class Executor {
 public:
  Executor(const Config& config, TensorQueue& queue, Backend& backend, ExecutorHooks hooks)
      : config_(config), queue_(queue), backend_(backend), hooks_(std::move(hooks)) {}

  // Takes the responses by value: fusion planning merges them in place. Throws
  // CommError when the set's transport failed: its pending handles of the failed
  // response have been failed, and the caller gives up on the runtime.
  void run(ProcessSet& set, std::vector<Response> responses,
           std::vector<SetChange>& changes);
  // Completes the handles of allreduces the negotiation carried out (Negotiated::carried).
  void completeCarried(ProcessSet& set, const std::vector<Response>& carried);

 private:
  // Removes this rank's tensors of `response` from the pending table and frees their
  // names for resubmission; nullopt where this rank has none (it has joined).
  std::vector<std::optional<PendingTensor>> take(ProcessSet& set, const Response& response);
  void runData(ProcessSet& set, const Response& response);
  void runControl(ProcessSet& set, const Response& response, std::vector<SetChange>& changes);

  const Config& config_;
  TensorQueue& queue_;
  Backend& backend_;
  ExecutorHooks hooks_;
};

// The exception a failed handle raises for an error response.
std::exception_ptr errorFor(const Response& response);

}  // namespace accord

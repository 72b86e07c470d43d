// The tensors one process set holds for this rank between submission and completion.
//
// A tensor enters when the background loop takes it from the queue (admit), waits while
// the set negotiates it (from the response cache, through the coordinator, or carried
// inside the negotiation itself), and leaves either when the executor runs its response
// (take) or when the set or the runtime gives up on it (failAll). A Join is held apart:
// while it is held this rank has joined the set and answers every other rank's
// collective with a neutral contribution.
//
// Thread boundary: background thread only. Application threads see the tensors only
// through their handles.
#pragma once

#include "runtime/message.h"
#include "runtime/tensor_entry.h"

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace accord {

using Clock = std::chrono::steady_clock;

// A tensor this rank submitted and that is waiting for its response.
struct PendingTensor {
  Request request;
  TensorEntry entry;
  Clock::time_point submitted;
  bool sent = false;  // already sent to the coordinator (not answered from the cache)
};

class PendingTensors {
 public:
  using Map = std::unordered_map<std::string, PendingTensor>;

  // Takes a freshly submitted tensor. A Join also makes this rank a joined member
  // until completeJoin. A name already held is refused: its handle fails at once (the
  // queue reserves names until they are taken, so this means a broken caller, and a
  // silently dropped entry would leave its handle waiting forever).
  void admit(Request request, TensorEntry entry, Clock::time_point now);

  // Removes the named tensor and hands it over; nullopt where this rank holds none
  // (it has joined, or the name was already taken).
  std::optional<PendingTensor> take(const std::string& name);

  // The request held under `name`, if any (the response cache keeps the local request
  // beside a response).
  const Request* find(const std::string& name) const;

  // The set's Join response arrived: drops every held Join request (their names may
  // differ per rank; one response answers all) and returns their names, then hands over
  // the join handle (null if this rank did not join).
  std::vector<std::string> takeJoinRequests();
  std::shared_ptr<detail::HandleState> completeJoin();

  // Empties the table and fails every held tensor and the join handle with
  // `reason(what)`, where `what` names the collective ("allreduce 'grad.w'", "join").
  // `release`, if given, is called with each name before its handle fails, so that a
  // thread woken by the failure may submit the same name again at once.
  using Reason = std::function<std::exception_ptr(const std::string& what)>;
  void failAll(const Reason& reason,
               const std::function<void(const std::string& name)>& release = {});

  bool joined() const { return join_handle_ != nullptr; }
  bool empty() const { return tensors_.empty(); }
  std::size_t size() const { return tensors_.size(); }

  // Negotiation walks the held tensors to classify them (and marks them `sent`); it
  // never adds or removes any.
  Map::iterator begin() { return tensors_.begin(); }
  Map::iterator end() { return tensors_.end(); }

 private:
  Map tensors_;
  std::shared_ptr<detail::HandleState> join_handle_;  // set while this rank has joined
};

}  // namespace accord

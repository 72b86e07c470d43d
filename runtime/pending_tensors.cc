#include "runtime/pending_tensors.h"

#include <accord/error.h>

namespace accord {

void PendingTensors::admit(Request request, TensorEntry entry, Clock::time_point now) {
  if (tensors_.count(request.name)) {
    entry.handle->fail(std::make_exception_ptr(InvalidArgument(
        describe(request) + ": a tensor of this name is already pending in this process set")));
    return;
  }
  if (request.type == RequestType::Join) join_handle_ = entry.handle;
  std::string name = request.name;
  tensors_.emplace(std::move(name), PendingTensor{std::move(request), std::move(entry), now});
}

std::optional<PendingTensor> PendingTensors::take(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  std::optional<PendingTensor> out(std::move(it->second));
  tensors_.erase(it);
  return out;
}

const Request* PendingTensors::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second.request;
}

std::vector<std::string> PendingTensors::takeJoinRequests() {
  std::vector<std::string> names;
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    if (it->second.request.type != RequestType::Join) {
      ++it;
      continue;
    }
    names.push_back(it->first);
    it = tensors_.erase(it);
  }
  return names;
}

std::shared_ptr<detail::HandleState> PendingTensors::completeJoin() {
  return std::move(join_handle_);
}

void PendingTensors::failAll(const Reason& reason,
                             const std::function<void(const std::string& name)>& release) {
  // Empty the table before failing anything: a thread woken by a failure may submit
  // again, and nothing it submits may meet this table's old entries.
  Map tensors = std::move(tensors_);
  tensors_.clear();
  auto join = std::move(join_handle_);
  for (auto& [name, p] : tensors) {
    if (release) release(name);
    // The join request's own handle is the join handle: failed once, below.
    if (p.request.type != RequestType::Join) p.entry.handle->fail(reason(describe(p.request)));
  }
  if (join) join->fail(reason("join"));
}

}  // namespace accord

#include "executor.h"

#include "runtime/fusion.h"
#include "runtime/logging.h"
#include "runtime/timeline.h"

#include <fmt/format.h>

namespace accord {

std::exception_ptr errorFor(const Response& response) {
  switch (response.error_kind) {
    case Response::ErrorKind::Mismatch:
      return std::make_exception_ptr(MismatchError(response.error));
    case Response::ErrorKind::Stall:
      return std::make_exception_ptr(Timeout(response.error));
    case Response::ErrorKind::Invalid:
      break;
  }
  return std::make_exception_ptr(InvalidArgument(response.error));
}

std::vector<std::optional<PendingTensor>> Executor::take(ProcessSet& set,
                                                         const Response& response) {
  std::vector<std::optional<PendingTensor>> out;
  out.reserve(response.names.size());
  for (const auto& name : response.names) {
    out.push_back(set.pending.take(name));
    // Free the name before completing the handle: a thread woken by the completion may
    // submit the same name at once.
    if (out.back()) queue_.release(set.id, name);
  }
  return out;
}

void Executor::run(ProcessSet& set, std::vector<Response> responses,
                   std::vector<SetChange>& changes) {
  for (const auto& response : planFusion(std::move(responses), config_.fusion_threshold)) {
    switch (response.type) {
      case ResponseType::Allreduce:
      case ResponseType::Allgather:
      case ResponseType::Broadcast:
      case ResponseType::Alltoall:
      case ResponseType::Reducescatter:
        runData(set, response);
        break;
      default:
        runControl(set, response, changes);
    }
  }
}

void Executor::completeCarried(ProcessSet& set, const std::vector<Response>& carried) {
  Timeline& timeline = Timeline::instance();
  const auto now = Clock::now();
  for (const auto& response : carried) {
    auto tensors = take(set, response);
    if (timeline.active()) {
      // The data moved inside the negotiation phase, which this ends.
      const std::string args =
          fmt::format("{{\"tensors\":1,\"bytes\":{},\"carried\":true}}", response.totalBytes());
      std::vector<std::string> renamed;
      const auto& tracks = Timeline::tracksOf(set.id, response.names, renamed);
      timeline.tensorsPhase(tracks, collectivePhaseName(response.type), now, args);
      timeline.tensorsDone(tracks, now);
    }
    for (auto& t : tensors) {
      if (t) t->entry.handle->completePart();
    }
  }
}

void Executor::runData(ProcessSet& set, const Response& response) {
  auto tensors = take(set, response);
  std::vector<TensorEntry*> entries;
  entries.reserve(tensors.size());
  for (auto& t : tensors) entries.push_back(t ? &t->entry : nullptr);
  if (!set.pending.joined()) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (!entries[i]) {
        log().error("{} was negotiated but this rank holds no such tensor",
                    describeCollective(responseTypeName(response.type), response.names[i]));
      }
    }
  }
  // An entry a backend took over (a device collective on the GPU) is completed by it,
  // even if execute throws afterwards: the GPU may still be using its buffers.
  auto failAll = [&](std::exception_ptr error) {
    for (auto* e : entries) {
      if (e && !e->backend_completes) e->handle->fail(error);
    }
  };
  Timeline& timeline = Timeline::instance();
  const bool traced = timeline.active();
  std::vector<std::string> renamed;  // the tracks where the set is not the global one
  const auto& tracks = traced ? Timeline::tracksOf(set.id, response.names, renamed) : renamed;
  if (traced) {
    const std::string args =
        fmt::format("{{\"tensors\":{},\"bytes\":{},\"group\":{}}}", response.names.size(),
                    response.totalBytes(), Timeline::quote(response.names.front()));
    timeline.tensorsPhase(tracks, collectivePhaseName(response.type), Clock::now(), args);
  }
  auto traceDone = [&] {
    if (!traced) return;
    timeline.tensorsDone(tracks, Clock::now());
  };
  try {
    TimelineScope scope(traced ? &tracks : nullptr);
    backend_.execute(*set.transport, response, entries);
  } catch (const CommError&) {
    traceDone();
    failAll(std::current_exception());
    throw;  // the transport is broken: the runtime cannot go on
  } catch (...) {
    // Identical on every rank, since every rank holds the same response: only this
    // response fails.
    traceDone();
    failAll(std::current_exception());
    return;
  }
  traceDone();
  for (auto* e : entries) {
    if (!e || e->backend_completes) continue;
    if (e->error) {  // this rank took part with scratch space; its own part failed
      e->handle->fail(e->error);
      continue;
    }
    if (response.type == ResponseType::Alltoall) e->handle->received_splits = e->received_splits;
    e->handle->completePart();
  }
}

void Executor::runControl(ProcessSet& set, const Response& response,
                          std::vector<SetChange>& changes) {
  auto tensors = take(set, response);
  if (Timeline::instance().active()) {
    std::vector<std::string> renamed;
    Timeline::instance().tensorsDone(Timeline::tracksOf(set.id, response.names, renamed),
                                     Clock::now());
  }
  std::shared_ptr<detail::HandleState> handle;
  if (!tensors.empty() && tensors[0]) handle = tensors[0]->entry.handle;
  switch (response.type) {
    case ResponseType::Error: {
      if (response.error_kind == Response::ErrorKind::Stall && hooks_.timed_out)
        hooks_.timed_out(response.error);
      auto error = errorFor(response);
      for (auto& t : tensors) {
        if (t) t->entry.handle->fail(error);
      }
      return;
    }
    case ResponseType::Join:
      // Every rank's join request is answered by this one response, whatever names the
      // coordinator put on it.
      for (const auto& name : set.pending.takeJoinRequests()) queue_.release(set.id, name);
      if (hooks_.joined) hooks_.joined(set.id);
      if (auto join = set.pending.completeJoin()) {
        join->last_joined_rank = response.root;
        join->completePart();
      }
      return;
    case ResponseType::AddProcessSet: {
      std::vector<int> ranks(response.rank_rows.begin(), response.rank_rows.end());
      changes.push_back({response.type, std::move(ranks), 0, handle});
      return;
    }
    case ResponseType::RemoveProcessSet:
      changes.push_back(
          {response.type, {}, static_cast<ProcessSetId>(response.rank_rows.at(0)), handle});
      return;
    default:  // Barrier: agreement was the whole point
      if (handle) handle->completePart();
  }
}

}  // namespace accord

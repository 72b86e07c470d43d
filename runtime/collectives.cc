// The public collectives. Every one of them goes through enqueue(): argument checks,
// name generation and the hand-off to the background thread live in one place.
#include "handle_state.h"
#include "request_checks.h"
#include "runtime.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <set>

namespace accord {

namespace {

struct Submission {
  Request request;
  TensorEntry entry;
};

std::string nameFor(Runtime& rt, ProcessSetId set, RequestType type, const std::string& name) {
  if (!name.empty()) return name;
  std::lock_guard<std::mutex> lock(rt.names_mu);
  auto n = rt.name_counters[{set, type}]++;
  return std::string(requestTypeName(type)) + ".noname." + std::to_string(n);
}

}  // namespace

void restartGeneratedNames(Runtime& rt, ProcessSetId set) {
  std::lock_guard<std::mutex> lock(rt.names_mu);
  for (auto& [key, next] : rt.name_counters)
    if (key.first == set) next = 0;
}

namespace {

// A refused submission must not use up a generated name: the ranks that did not refuse
// it would name their next unnamed collective differently, and the two would never
// pair. Gives the number back when the scope ends by an exception, unless another
// thread has taken one since (then the numbering depends on thread timing anyway).
class NameGuard {
 public:
  NameGuard(Runtime& rt, ProcessSetId set, RequestType type)
      : rt_(rt), key_{set, type}, exceptions_(std::uncaught_exceptions()) {
    std::lock_guard<std::mutex> lock(rt.names_mu);
    before_ = rt.name_counters[key_];
  }
  NameGuard(const NameGuard&) = delete;
  NameGuard& operator=(const NameGuard&) = delete;
  ~NameGuard() {
    if (std::uncaught_exceptions() <= exceptions_) return;  // submitted: the name is used
    std::lock_guard<std::mutex> lock(rt_.names_mu);
    auto& next = rt_.name_counters[key_];
    if (next == before_ + 1) next = before_;
  }

 private:
  Runtime& rt_;
  std::pair<ProcessSetId, RequestType> key_;
  int exceptions_;
  std::uint64_t before_ = 0;
};

// Builds the request every collective starts from; checks the process set. A device
// tensor is checked by the backend, which also marks where on `stream` it is ready.
Submission start(Runtime& rt, RequestType type, const std::string& name, ProcessSetId set,
                 const TensorView* tensor, void* stream = nullptr) {
  // Before a name is drawn: an unnamed collective refused here leaves the count alone.
  if (onBackgroundThread())
    throw InvalidArgument(std::string("accord::") + requestTypeName(type) +
                          ": called from an Allocator, inside Accord's background cycle, which "
                          "would wait on itself; an Allocator must only allocate");
  rt.sets.member(set, requestTypeName(type));
  Submission s;
  s.request.type = type;
  s.request.name = nameFor(rt, set, type, name);
  if (tensor) {
    s.request.dtype = tensor->dtype;
    s.request.shape = tensor->shape;
    s.request.device = tensor->device;
    s.entry.tensor = *tensor;
    checkTensor(s.request, *tensor);
    if (tensor->device.type != DeviceType::CPU)
      s.entry.ready = rt.backend->deviceReady(*tensor, stream, describe(s.request));
  }
  s.entry.name = s.request.name;
  return s;
}

// The application's allocator runs on the background thread, which then writes the
// result where it points, as memory of the input's device: host memory labelled
// cuda:0, or a device pointer labelled cpu, would be written with the wrong kind of
// copy (for a device pointer written by the CPU, a crash in that thread). So the view
// it returns must be on the input's device. Its own exceptions become InvalidArgument,
// Accord's error for an output this rank could not provide, keeping their message.
Allocator checkedOutput(Allocator allocate, const Request& r) {
  if (!allocate) throw InvalidArgument(describe(r) + ": no output allocator given");
  const std::string what = describe(r);
  const Device device = r.device;
  return [allocate = std::move(allocate), what, device](const Shape& shape) {
    TensorView out;
    try {
      out = allocate(shape);
    } catch (const Error&) {
      throw;  // already Accord's own (an Allocator that called back into Accord)
    } catch (const std::exception& e) {
      throw InvalidArgument(what + ": the output allocator failed: " + e.what());
    } catch (...) {
      throw InvalidArgument(what + ": the output allocator threw a non-std::exception");
    }
    if (!(out.device == device))
      throw InvalidArgument(what + ": the output allocator returned a tensor on " +
                            out.device.str() + ", expected " + device.str() +
                            " (the input's device)");
    return out;
  };
}

// The last check every request passes, whichever collective built it: the op is set
// after start() by the reducing collectives, and a value outside ReduceOp would
// otherwise surface on rank 0 as a corrupt message, blamed on rank 0.
std::shared_ptr<detail::HandleState> submit(Runtime& rt, ProcessSetId set,
                                            std::vector<Submission> subs) {
  for (const auto& s : subs) {
    if (std::string bad = invalidEnum(s.request.op); !bad.empty())
      throw InvalidArgument(describe(s.request) + ": " + bad);
    checkLogical(s.request);
    checkAdasum(s.request, rt.sets.member(set, requestTypeName(s.request.type)).second);
  }
  auto state = std::make_shared<detail::HandleState>(std::max<int>(1, subs.size()));
  if (subs.empty()) {
    state->completePart();
    return state;
  }
  std::vector<QueuedOp> ops;
  ops.reserve(subs.size());
  for (auto& s : subs) {
    s.entry.handle = state;
    ops.push_back(
        {set, std::move(s.request), std::move(s.entry), std::chrono::steady_clock::now()});
  }
  rt.queue.push(std::move(ops));
  return state;
}

Handle enqueue(Runtime& rt, ProcessSetId set, std::vector<Submission> subs) {
  return Handle(submit(rt, set, std::move(subs)));
}

// What the reducing collectives (allreduce, reducescatter) add to a request.
void setReduction(Submission& s, const ReductionOptions& o) {
  s.request.op = o.op;
  s.request.prescale = o.prescale;
  s.request.postscale = o.postscale;
  checkScale(s.request, o.prescale, "prescale");
  checkScale(s.request, o.postscale, "postscale");
}

Submission allreduceSubmission(Runtime& rt, const TensorView& t, const AllreduceOptions& o,
                               const std::string& name) {
  auto s = start(rt, RequestType::Allreduce, name, o.process_set, &t, o.stream);
  setReduction(s, o);
  return s;
}

void requireRows(const Request& r) {
  if (r.shape.empty()) {
    throw InvalidArgument(describe(r) +
                          ": needs a tensor with at least one dimension (got a scalar)");
  }
}

Submission allgatherSubmission(Runtime& rt, const TensorView& input, Allocator output,
                               const AllgatherOptions& o, const std::string& name) {
  auto s = start(rt, RequestType::Allgather, name, o.process_set, &input, o.stream);
  requireRows(s.request);
  s.entry.output = checkedOutput(std::move(output), s.request);
  return s;
}

Submission reducescatterSubmission(Runtime& rt, const TensorView& input, Allocator output,
                                   const ReducescatterOptions& o, const std::string& name) {
  auto s = start(rt, RequestType::Reducescatter, name, o.process_set, &input, o.stream);
  requireRows(s.request);
  s.entry.output = checkedOutput(std::move(output), s.request);
  setReduction(s, o);
  return s;
}

// A group: member i is named "<group>.<i>" and carries the group's name and size, so
// that the coordinator releases the members together, as one fused response, or fails
// them together. One dtype and device, as one fusion buffer needs.
template <class Member>
Handle enqueueGroup(Runtime& rt, RequestType type, const std::vector<TensorView>& tensors,
                    const CollectiveOptions& options, Member member) {
  NameGuard names(rt, options.process_set, type);
  const std::string group = nameFor(rt, options.process_set, type, options.name);
  for (const auto& t : tensors) {
    if (t.dtype != tensors.front().dtype || !(t.device == tensors.front().device)) {
      std::string what = describeCollective(requestTypeName(type), group);
      if (!what.starts_with("grouped ")) what = "grouped " + what;
      throw InvalidArgument(
          what + ": mixes " + dtype_name(tensors.front().dtype) + " on " +
          tensors.front().device.str() + " with " + dtype_name(t.dtype) + " on " + t.device.str() +
          "; a group is fused into one buffer and needs one dtype and device");
    }
  }
  std::vector<Submission> subs;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto s = member(i, group + "." + std::to_string(i));
    s.request.group = group;
    s.request.group_size = static_cast<std::int32_t>(tensors.size());
    subs.push_back(std::move(s));
  }
  return enqueue(rt, options.process_set, std::move(subs));
}

void requireOutputs(const char* what, std::size_t inputs, std::size_t outputs) {
  if (inputs != outputs)
    throw InvalidArgument(std::string(what) + ": " + std::to_string(inputs) + " inputs but " +
                          std::to_string(outputs) + " output allocators (one per input)");
}

}  // namespace

Handle allreduce_async(TensorView tensor, const AllreduceOptions& options) {
  auto& rt = runtime("accord::allreduce");
  NameGuard names(rt, options.process_set, RequestType::Allreduce);
  std::vector<Submission> subs;
  subs.push_back(allreduceSubmission(rt, tensor, options, options.name));
  return enqueue(rt, options.process_set, std::move(subs));
}

void allreduce(TensorView tensor, const AllreduceOptions& options) {
  allreduce_async(std::move(tensor), options).wait();
}

Handle grouped_allreduce_async(std::vector<TensorView> tensors, const AllreduceOptions& options) {
  auto& rt = runtime("accord::grouped_allreduce");
  return enqueueGroup(rt, RequestType::Allreduce, tensors, options,
                      [&](std::size_t i, const std::string& name) {
                        return allreduceSubmission(rt, tensors[i], options, name);
                      });
}

void grouped_allreduce(std::vector<TensorView> tensors, const AllreduceOptions& options) {
  grouped_allreduce_async(std::move(tensors), options).wait();
}

Handle allgather_async(TensorView input, Allocator output, const AllgatherOptions& options) {
  auto& rt = runtime("accord::allgather");
  NameGuard names(rt, options.process_set, RequestType::Allgather);
  std::vector<Submission> subs;
  subs.push_back(allgatherSubmission(rt, input, std::move(output), options, options.name));
  return enqueue(rt, options.process_set, std::move(subs));
}

void allgather(TensorView input, Allocator output, const AllgatherOptions& options) {
  allgather_async(std::move(input), std::move(output), options).wait();
}

Handle grouped_allgather_async(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                               const AllgatherOptions& options) {
  auto& rt = runtime("accord::grouped_allgather");
  requireOutputs("accord::grouped_allgather", inputs.size(), outputs.size());
  return enqueueGroup(rt, RequestType::Allgather, inputs, options,
                      [&](std::size_t i, const std::string& name) {
                        return allgatherSubmission(rt, inputs[i], std::move(outputs[i]), options,
                                                   name);
                      });
}

void grouped_allgather(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                       const AllgatherOptions& options) {
  grouped_allgather_async(std::move(inputs), std::move(outputs), options).wait();
}

Handle broadcast_async(TensorView tensor, const BroadcastOptions& options) {
  auto& rt = runtime("accord::broadcast");
  NameGuard names(rt, options.process_set, RequestType::Broadcast);
  auto s =
      start(rt, RequestType::Broadcast, options.name, options.process_set, &tensor, options.stream);
  const int set_size = rt.sets.member(options.process_set, "broadcast").second;
  if (options.root < 0 || options.root >= set_size) {
    throw InvalidArgument(describe(s.request) + ": root rank " + std::to_string(options.root) +
                          " is outside the process set (expected 0.." +
                          std::to_string(set_size - 1) + ")");
  }
  s.request.root = options.root;
  std::vector<Submission> subs;
  subs.push_back(std::move(s));
  return enqueue(rt, options.process_set, std::move(subs));
}

void broadcast(TensorView tensor, const BroadcastOptions& options) {
  broadcast_async(std::move(tensor), options).wait();
}

Handle alltoall_async(TensorView input, Allocator output, const AlltoallOptions& options) {
  auto& rt = runtime("accord::alltoall");
  NameGuard names(rt, options.process_set, RequestType::Alltoall);
  auto s =
      start(rt, RequestType::Alltoall, options.name, options.process_set, &input, options.stream);
  requireRows(s.request);
  s.entry.output = checkedOutput(std::move(output), s.request);
  const int n = rt.sets.member(options.process_set, "alltoall").second;
  const std::int64_t rows = input.shape[0];
  std::vector<std::int64_t> splits = options.splits;
  if (splits.empty()) {
    if (rows % n != 0) {
      throw InvalidArgument(describe(s.request) + ": first dimension " + std::to_string(rows) +
                            " does not divide evenly among " + std::to_string(n) +
                            " ranks; pass splits");
    }
    splits.assign(n, rows / n);
  }
  const bool negative = std::any_of(splits.begin(), splits.end(), [](auto v) { return v < 0; });
  std::int64_t sum = 0;
  bool overflow = false;  // huge splits could wrap around to exactly `rows`
  for (auto v : splits) overflow = __builtin_add_overflow(sum, v, &sum) || overflow;
  if (static_cast<int>(splits.size()) != n || negative || overflow || sum != rows) {
    throw InvalidArgument(describe(s.request) + ": splits must be " + std::to_string(n) +
                          " non-negative row counts summing to the first dimension " +
                          std::to_string(rows) + " (got " + shape_string(splits) + ")");
  }
  s.request.splits = splits;
  s.entry.splits = std::move(splits);
  std::vector<Submission> subs;
  subs.push_back(std::move(s));
  return enqueue(rt, options.process_set, std::move(subs));
}

std::vector<std::int64_t> alltoall(TensorView input, Allocator output,
                                   const AlltoallOptions& options) {
  return alltoall_async(std::move(input), std::move(output), options).received_splits();
}

Handle reducescatter_async(TensorView input, Allocator output,
                           const ReducescatterOptions& options) {
  auto& rt = runtime("accord::reducescatter");
  NameGuard names(rt, options.process_set, RequestType::Reducescatter);
  std::vector<Submission> subs;
  subs.push_back(reducescatterSubmission(rt, input, std::move(output), options, options.name));
  return enqueue(rt, options.process_set, std::move(subs));
}

void reducescatter(TensorView input, Allocator output, const ReducescatterOptions& options) {
  reducescatter_async(std::move(input), std::move(output), options).wait();
}

Handle grouped_reducescatter_async(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                                   const ReducescatterOptions& options) {
  auto& rt = runtime("accord::grouped_reducescatter");
  requireOutputs("accord::grouped_reducescatter", inputs.size(), outputs.size());
  return enqueueGroup(rt, RequestType::Reducescatter, inputs, options,
                      [&](std::size_t i, const std::string& name) {
                        return reducescatterSubmission(rt, inputs[i], std::move(outputs[i]),
                                                       options, name);
                      });
}

void grouped_reducescatter(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                           const ReducescatterOptions& options) {
  grouped_reducescatter_async(std::move(inputs), std::move(outputs), options).wait();
}

Handle barrier_async(ProcessSetId process_set) {
  auto& rt = runtime("accord::barrier");
  std::vector<Submission> subs;
  subs.push_back(start(rt, RequestType::Barrier, "", process_set, nullptr));
  return enqueue(rt, process_set, std::move(subs));
}

void barrier(ProcessSetId process_set) { barrier_async(process_set).wait(); }

Handle join_async(ProcessSetId process_set) {
  auto& rt = runtime("accord::join");
  std::vector<Submission> subs;
  subs.push_back(start(rt, RequestType::Join, "join", process_set, nullptr));
  return enqueue(rt, process_set, std::move(subs));
}

int join(ProcessSetId process_set) { return join_async(process_set).last_joined_rank(); }

Handle join_async(ProcessSetId process_set, Device device) {
  auto& rt = runtime("accord::join");
  if (device.type != DeviceType::CPU) rt.backend->deviceHome(device, "join");
  return join_async(process_set);
}

int join(ProcessSetId process_set, Device device) {
  return join_async(process_set, device).last_joined_rank();
}

ProcessSetId add_process_set(std::vector<int> ranks) {
  auto& rt = runtime("accord::add_process_set");
  std::sort(ranks.begin(), ranks.end());
  const bool bad = ranks.empty() || ranks.front() < 0 || ranks.back() >= rt.size ||
                   std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end();
  if (bad) {
    throw InvalidArgument(
        "add_process_set: ranks " + shape_string(Shape(ranks.begin(), ranks.end())) +
        " must be distinct ranks in 0.." + std::to_string(rt.size - 1) + " (at least one)");
  }
  auto s = start(rt, RequestType::AddProcessSet, "", kGlobalProcessSet, nullptr);
  s.request.splits.assign(ranks.begin(), ranks.end());
  std::vector<Submission> subs;
  subs.push_back(std::move(s));
  auto state = submit(rt, kGlobalProcessSet, std::move(subs));
  state->wait();
  return state->process_set;
}

void remove_process_set(ProcessSetId id) {
  auto& rt = runtime("accord::remove_process_set");
  if (id == kGlobalProcessSet) {
    throw InvalidArgument("remove_process_set: the global process set (0) cannot be removed");
  }
  rt.sets.ranks(id);  // throws for an unknown id
  auto s = start(rt, RequestType::RemoveProcessSet, "", kGlobalProcessSet, nullptr);
  s.request.splits = {id};
  std::vector<Submission> subs;
  subs.push_back(std::move(s));
  enqueue(rt, kGlobalProcessSet, std::move(subs)).wait();
}

}  // namespace accord

// Shared pieces of the NCCL ops (see nccl_common.h).
#include "ops/nccl/nccl_common.h"

#include "ops/nccl/nccl_ops.h"
#include "runtime/logging.h"

#include <accord/error.h>

#include <iterator>

namespace accord::nccl {

namespace {

static_assert(kNumDTypes == 11, "map the new dtype to NCCL's below");

// Several communicators watched as one: an error or an abort on any stops them all.
class WatchedGroup final : public cuda::Watched {
 public:
  explicit WatchedGroup(std::vector<std::shared_ptr<Communicator>> comms)
      : comms_(std::move(comms)) {}
  std::string asyncError() override {
    for (auto& c : comms_)
      if (std::string e = c->asyncError(); !e.empty()) return e;
    return "";
  }
  void abort(const std::string& reason) override {
    for (auto& c : comms_) c->abort(reason);
  }
  std::string broken() const override {
    for (const auto& c : comms_)
      if (std::string b = c->broken(); !b.empty()) return b;
    return "";
  }

 private:
  std::vector<std::shared_ptr<Communicator>> comms_;
};

// A process set's NCCL state, kept in its transport (SetExtension): its communicator
// and, under ACCORD_HIERARCHICAL_ALLREDUCE, the two of its hierarchy.
class NcclSet final : public SetExtension {
 public:
  NcclSet(std::shared_ptr<cuda::Devices> devices, std::shared_ptr<Communicator> comm,
          std::unique_ptr<DeviceHierarchy> hierarchy)
      : devices_(std::move(devices)), comm_(std::move(comm)), hierarchy_(std::move(hierarchy)) {
    if (hierarchy_)
      watched_ = std::make_shared<WatchedGroup>(std::vector<std::shared_ptr<Communicator>>{
          comm_, hierarchy_->sharedLocal(), hierarchy_->sharedCross()});
    else
      watched_ = comm_;
  }

  // Every member removes the set (or shuts down) in the same cycle: let the set's
  // collectives in flight complete first, then free the communicators in step.
  ~NcclSet() override {
    const auto timeout = devices_->config().stall_shutdown_time;
    const auto deadline = timeout.count() > 0 ? std::chrono::steady_clock::now() + timeout
                                              : std::chrono::steady_clock::time_point::max();
    if (!devices_->finalizer().drain(watched_.get(), deadline))
      watched_->abort("the " + comm_->name() +
                      " was removed or shut down with device collectives still running");
    watched_.reset();
    hierarchy_.reset();
  }

  Communicator& comm() { return *comm_; }
  DeviceHierarchy* hierarchy() { return hierarchy_.get(); }
  // What the finalizer watches for this set's collectives.
  const std::shared_ptr<cuda::Watched>& watched() const { return watched_; }

 private:
  std::shared_ptr<cuda::Devices> devices_;  // outlives the communicator's collectives
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<DeviceHierarchy> hierarchy_;
  std::shared_ptr<cuda::Watched> watched_;
};

NcclSet& setState(const std::shared_ptr<cuda::Devices>& devices, ExecContext& ctx, int device) {
  std::unique_ptr<SetExtension>& extension = ctx.transport.extension();
  if (!extension) {
    // The hierarchy first: its split by host is a plain collective, with no deadline,
    // so it runs while every member is sure to reach it, before any exchange that can
    // time out on one rank (a communicator's unique id) and leave the others waiting.
    ProcessGroup& group = ctx.transport.group();
    auto hierarchy = DeviceHierarchy::create(group, device, ctx.config);
    auto comm = Communicator::create(group, device, ctx.config.stall_shutdown_time);
    extension = std::make_unique<NcclSet>(devices, std::move(comm), std::move(hierarchy));
  }
  // Only the NCCL ops put state into a transport's extension.
  auto* set = dynamic_cast<NcclSet*>(extension.get());
  if (!set) throw Error("NCCL: the process set's device state belongs to another backend");
  return *set;
}

void failLocal(std::vector<TensorEntry*>& entries, std::exception_ptr error) {
  for (TensorEntry* e : entries)
    if (e && !e->backend_completes && !e->error) e->error = error;
}

}  // namespace

ncclDataType_t ncclType(DType dtype) {
  switch (dtype) {
    case DType::UInt8:
      return ncclUint8;
    case DType::Int8:
      return ncclInt8;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int16:
    case DType::UInt16:
    case DType::Bool:
      break;  // no NCCL type: reduced through host memory (reducesOnNccl)
  }
  throw InvalidArgument(std::string("NCCL: no NCCL type for dtype ") + dtype_name(dtype));
}

Reduction reductionFor(const Response& response, int set_size) {
  const ReductionPlan plan = planReduction(response, set_size);
  static constexpr ncclRedOp_t kOps[] = {ncclSum, ncclMin, ncclMax, ncclProd, ncclAvg};
  static_assert(std::size(kOps) == static_cast<std::size_t>(ReduceKind::Average) + 1);
  return {kOps[static_cast<int>(plan.op)], plan.post};
}

bool Launch::checkInput(std::size_t i, std::size_t bytes) {
  return localInput(response, i, entries[i], bytes);
}

void* Launch::outputOrScratch(std::size_t i, const Shape& shape) {
  void* out = nullptr;
  if (local(i) && prepareLocal(*entries[i], [&] {
        out = cuda::deviceOutput(response, i, *entries[i], shape, device.device);
      }))
    return out;
  return device.scratch.reserve(num_bytes(shape, response.dtype), stream);
}

void Launch::nccl(const std::function<ncclResult_t(ncclComm_t)>& calls) {
  comm.launch(calls, describe(response));
}

void run(const std::shared_ptr<cuda::Devices>& devices, ExecContext& ctx, const Response& response,
         std::vector<TensorEntry*>& entries, const Body& body) {
  // The communicator is collective over the set; a failing MPI link throws from here
  // as it would from any MPI exchange.
  NcclSet& set = setState(devices, ctx, cuda::deviceOf(*devices, entries));
  Communicator& comm = set.comm();
  const std::string what = describe(response);
  if (std::string reason = set.watched()->broken(); !reason.empty()) {
    failLocal(entries, std::make_exception_ptr(CommError(what + ": " + reason)));
    return;
  }
  try {
    cuda::DeviceGuard guard(comm.device());
    cuda::DeviceContext& device = devices->context(comm.device());
    cuda::waitUntilReady(response, comm.device(), device.stream, entries);
    Launch launch{ctx, response, entries, comm, device, device.stream, set.hierarchy()};
    body(launch);
    cuda::completeWhenDone(devices->finalizer(), comm.device(), device.stream, response, entries,
                           set.watched());
  } catch (const std::exception& e) {
    // This rank cannot do its part: abort, so that the other members' collectives fail
    // (their finalizers see the error or time out) rather than wait for it; where its
    // GPU is lost (NCCL's own error does not say so), the other ranks are told.
    cuda::noteIfContextLost(cudaPeekAtLastError(), what);
    set.watched()->abort(what + ": " + e.what());
    failLocal(entries, std::current_exception());
    // What was queued before the failure (a prescale in place, a copy out) may still
    // use the caller's tensors: the handles fail once the stream is through it.
    try {
      cuda::DeviceGuard guard(comm.device());
      cuda::completeWhenDone(devices->finalizer(), comm.device(),
                             devices->context(comm.device()).stream, response, entries, nullptr);
    } catch (const std::exception&) {
      // The GPU takes no more work (nothing queued runs after a sticky error): the
      // executor fails them now.
    }
  }
}

}  // namespace accord::nccl

namespace accord::cuda {

std::vector<std::unique_ptr<Op>> makeNcclOps(std::shared_ptr<Devices> devices) {
  // The library found at run time may be another than the headers' (a framework's
  // wheel, say); an older one may not know every field of the config Accord passes.
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess && version < NCCL_VERSION_CODE)
    log().warn(
        "NCCL {} is loaded, older than the NCCL {} Accord was built with; device "
        "collectives may fail",
        version, NCCL_VERSION_CODE);
  std::vector<std::unique_ptr<Op>> ops;
  ops.push_back(nccl::makeAllreduce(devices));
  ops.push_back(nccl::makeAllgather(devices));
  ops.push_back(nccl::makeBroadcast(devices));
  ops.push_back(nccl::makeAlltoall(devices));
  ops.push_back(nccl::makeReducescatter(devices));
  return ops;
}

}  // namespace accord::cuda

namespace accord {
bool ncclBuilt() { return true; }
}  // namespace accord

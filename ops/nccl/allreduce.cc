// Allreduce of CUDA tensors with NCCL.
//
// As on the host: a lone tensor, or a fused group bigger than the fusion threshold, is
// reduced in place in the application's buffer (ncclAllReduce, in place); a fused group
// is copied into the device's fusion buffer with one batched-copy launch, reduced with
// one ncclAllReduce and copied back with another launch. Tensors sit in the fusion
// buffer at 16-byte offsets, so that the batched copy moves 16-byte words wherever the
// application's pointers allow it; the gaps are reduced too and thrown away.
//
// Prescale scales this rank's inputs before the reduction, postscale (and Average's
// division where ncclAvg does not do it) scales the result: one cuda::scale launch
// each, none when the factor is 1. A joined rank, or a rank whose tensor does not
// match the response, contributes the op's neutral element from scratch space.
//
// Under ACCORD_HIERARCHICAL_ALLREDUCE, where the set's hosts hold several ranks each,
// every response takes three NCCL steps (hierarchy.h): in place for a lone tensor that
// splits evenly over the host's ranks, through the fusion buffer otherwise.
//
// In a set of one rank the reduction is the input itself: every tensor stays where it
// is, only the scaling runs, and NCCL is not called (nor the fusion buffer used);
// unscaled, nothing runs on the GPU and each handle completes on its tensor's ready
// event. ACCORD_NCCL=2 runs NCCL there anyway.
#include "ops/cuda/kernels.h"
#include "ops/nccl/nccl_common.h"
#include "ops/nccl/nccl_ops.h"

namespace accord::nccl {

namespace {

// Tensors' offsets in the fusion buffer: the batched copy's widest word.
constexpr std::size_t kFusedAlignment = 16;

// Tensor i's input for a reduction where it lies: the application's buffer, prescaled,
// or scratch space holding the op's neutral element where this rank has no usable
// tensor. count > 0.
void* inPlaceInput(Launch& l, std::size_t i, std::size_t count) {
  const Response& r = l.response;
  const std::size_t bytes = count * dtype_size(r.dtype);
  if (l.checkInput(i, bytes)) {
    void* data = l.entries[i]->tensor.data;
    const Scaling pre = preScaling(r);
    if (!pre.isOne()) cuda::scale(data, count, r.dtype, pre.factor, pre.divisor, l.stream);
    return data;
  }
  void* data = l.device.scratch.reserve(bytes, l.stream);
  cuda::fillNeutral(data, count, r.dtype, r.op, l.stream);
  return data;
}

// `exchange`: false in a set of one rank, where only the scaling is left to do.
void reduceInPlace(Launch& l, std::size_t i, const Reduction& red, bool exchange) {
  const Response& r = l.response;
  const std::size_t count = r.tensorBytes(i) / dtype_size(r.dtype);
  if (count == 0) return;  // the same on every rank: nothing to exchange
  void* data = inPlaceInput(l, i, count);
  if (exchange) {
    l.nccl([&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, ncclType(r.dtype), red.op, comm, l.stream);
    });
  }
  if (!red.post.isOne())
    cuda::scale(data, count, r.dtype, red.post.factor, red.post.divisor, l.stream);
}

// The response's tensors copied into the fusion buffer at 16-byte offsets with one
// launch, prescaled, with the op's neutral element where this rank has no usable tensor
// and in the padding that rounds the buffer up to a multiple of `multiple` elements.
struct Staged {
  char* fused = nullptr;
  std::size_t count = 0;             // elements, padding included
  std::vector<cuda::CopyPiece> out;  // the copies back
};

Staged stageIn(Launch& l, std::size_t multiple) {
  const Response& r = l.response;
  const std::size_t elem = dtype_size(r.dtype);
  std::vector<std::size_t> bytes(l.entries.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = r.tensorBytes(i);
  const FusedReduction plan =
      planFusedReduction(bytes, localInputs(r, l.entries), elem, kFusedAlignment, multiple);
  Staged s;
  s.count = plan.count;
  if (s.count == 0) return s;
  s.fused = l.device.fusion.reserve(s.count * elem, l.stream);

  std::vector<cuda::CopyPiece> in;
  for (std::size_t i : plan.copied) {
    void* data = l.entries[i]->tensor.data;
    in.push_back({s.fused + plan.offset[i], data, plan.bytes[i]});
    s.out.push_back({data, s.fused + plan.offset[i], plan.bytes[i]});
  }
  cuda::batchedCopy(in, l.stream);
  const Scaling pre = preScaling(r);
  // The whole buffer in one launch; the neutral regions are written after it.
  if (!pre.isOne())
    cuda::scale(s.fused, plan.used / elem, r.dtype, pre.factor, pre.divisor, l.stream);
  for (const Region& n : plan.neutral)
    cuda::fillNeutral(s.fused + n.at, n.bytes / elem, r.dtype, r.op, l.stream);
  return s;
}

void reduceFused(Launch& l, const Reduction& red) {
  const Response& r = l.response;
  Staged s = stageIn(l, 1);
  if (s.count == 0) return;
  l.nccl([&](ncclComm_t comm) {
    return ncclAllReduce(s.fused, s.fused, s.count, ncclType(r.dtype), red.op, comm, l.stream);
  });
  if (!red.post.isOne())
    cuda::scale(s.fused, s.count, r.dtype, red.post.factor, red.post.divisor, l.stream);
  cuda::batchedCopy(s.out, l.stream);
}

// Reduce-scatter inside the host, allreduce of this rank's block across hosts,
// allgather inside the host (hierarchy.h), over `count` elements at `data`, a multiple
// of the host's rank count; then the postscale.
void threeSteps(Launch& l, DeviceHierarchy& h, const Reduction& red, char* data,
                std::size_t count) {
  const Response& r = l.response;
  const std::size_t block = count / static_cast<std::size_t>(h.localSize());
  char* mine = data + static_cast<std::size_t>(h.localRank()) * block * dtype_size(r.dtype);
  const ncclDataType_t type = ncclType(r.dtype);
  const std::string what = describe(r);
  h.local().launch(
      [&](ncclComm_t comm) {
        return ncclReduceScatter(data, mine, block, type, red.op, comm, l.stream);
      },
      what + " (reduce-scatter inside the host)");
  h.cross().launch(
      [&](ncclComm_t comm) {
        return ncclAllReduce(mine, mine, block, type, red.op, comm, l.stream);
      },
      what + " (allreduce across hosts)");
  h.local().launch(
      [&](ncclComm_t comm) { return ncclAllGather(mine, data, block, type, comm, l.stream); },
      what + " (allgather inside the host)");
  if (!red.post.isOne())
    cuda::scale(data, count, r.dtype, red.post.factor, red.post.divisor, l.stream);
}

// A lone tensor whose elements split evenly over the host's ranks is reduced where it
// lies, as on the flat path; anything else goes through the fusion buffer, padded to a
// multiple of the host's rank count.
void reduceHierarchical(Launch& l, DeviceHierarchy& h, const Reduction& red) {
  const Response& r = l.response;
  const std::size_t parts = static_cast<std::size_t>(h.localSize());
  if (r.names.size() == 1) {
    const std::size_t count = r.tensorBytes(0) / dtype_size(r.dtype);
    if (count % parts == 0) {
      if (count == 0) return;  // the same on every rank: nothing to exchange
      threeSteps(l, h, red, static_cast<char*>(inPlaceInput(l, 0, count)), count);
      return;
    }
  }
  Staged s = stageIn(l, parts);
  if (s.count == 0) return;
  threeSteps(l, h, red, s.fused, s.count);
  cuda::batchedCopy(s.out, l.stream);
}

// Alone and unscaled, the result is the input as it is: nothing runs on the GPU, and
// each handle completes when its tensor is ready on the application's stream. False
// (the regular path) where any entry is not plainly local.
bool completeUnchanged(cuda::Devices& devices, ExecContext& ctx, const Response& r,
                       std::vector<TensorEntry*>& entries, const Reduction& red) {
  if (ctx.size() != 1 || ctx.config.nccl_alone || !red.post.isOne() || !preScaling(r).isOne())
    return false;
  const int device = cuda::deviceOf(devices, entries);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    if (!e || e->error || !e->ready || e->tensor.device.index != device) return false;
    if (!prepareLocal(*e, [&] { checkInput(r, i, *e, r.tensorBytes(i)); })) return false;
  }
  cuda::completeWhenReady(devices.finalizer(), device, r, entries);
  return true;
}

class AllreduceOp final : public Op {
 public:
  explicit AllreduceOp(std::shared_ptr<cuda::Devices> devices) : devices_(std::move(devices)) {}

  bool enabled(const Response& response) const override {
    // Adasum goes through the staged host op: it needs per-tensor dot products between
    // the exchanges, which NCCL's collectives do not offer.
    return response.type == ResponseType::Allreduce && response.device.type == DeviceType::CUDA &&
           reducesOnNccl(response.dtype) && response.op != ReduceOp::Adasum;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const Reduction red = reductionFor(response, ctx.size());
    if (completeUnchanged(*devices_, ctx, response, entries, red)) return;
    run(devices_, ctx, response, entries, [&](Launch& l) {
      const bool alone = ctx.size() == 1 && !ctx.config.nccl_alone;
      if (l.hierarchy && !alone) {
        reduceHierarchical(l, *l.hierarchy, red);
      } else if (alone || response.names.size() == 1 ||
                 response.totalBytes() > ctx.config.fusion_threshold) {
        for (std::size_t i = 0; i < response.names.size(); ++i) reduceInPlace(l, i, red, !alone);
      } else {
        reduceFused(l, red);
      }
    });
  }

 private:
  std::shared_ptr<cuda::Devices> devices_;
};

}  // namespace

std::unique_ptr<Op> makeAllreduce(std::shared_ptr<cuda::Devices> devices) {
  return std::make_unique<AllreduceOp>(std::move(devices));
}

}  // namespace accord::nccl

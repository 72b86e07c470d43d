// Device tensors without NCCL (a build without it, or ACCORD_NCCL=0): the host ops on
// page-locked host copies, so that the results are the host path's, bit for bit.
//
// One response at a time: the inputs are copied to the device's staging buffer on the
// runtime's stream (after the application's ready events), the background thread
// waits for the copies (deadline: ACCORD_STALL_SHUTDOWN_TIME), runs the host op on the
// copies as on CPU tensors (outputs into host vectors), and queues the copies back:
// in place for allreduce and broadcast, into the application's device outputs for the
// others. The handles complete through the finalizer when those copies are done, as
// for NCCL. This is also what runs multi-rank device tests on a machine with one GPU,
// where NCCL cannot put two ranks on one device.
#include "ops/common/checks.h"
#include "ops/common/fusion_buffer.h"
#include "ops/cuda/device_ops.h"

namespace accord::cuda {

namespace {

// Everything queued on the stream so far is done, or CommError after the deadline.
void drainStream(const DeviceContext& dc, const Config& config, const std::string& what) {
  auto event = makeEvent();
  ACCORD_CUDA_CHECK(cudaEventRecord(eventOf(event), dc.stream));
  waitEvent(eventOf(event), config.stall_shutdown_time, what);
}

bool inPlace(ResponseType type) {
  return type == ResponseType::Allreduce || type == ResponseType::Broadcast;
}

class StagedOp final : public Op {
 public:
  StagedOp(std::shared_ptr<Devices> devices, ResponseType type, std::unique_ptr<Op> host)
      : devices_(std::move(devices)), type_(type), host_(std::move(host)) {}

  bool enabled(const Response& response) const override {
    return response.type == type_ && response.device.type == DeviceType::CUDA;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override;

 private:
  std::shared_ptr<Devices> devices_;
  ResponseType type_;
  std::unique_ptr<Op> host_;
};

void StagedOp::execute(ExecContext& ctx, const Response& response,
                       std::vector<TensorEntry*>& entries) {
  const std::string what = describe(response);
  const int device = deviceOf(*devices_, entries);
  DeviceGuard guard(device);
  DeviceContext& dc = devices_->context(device);
  waitUntilReady(response, device, dc.stream, entries);
  const std::size_t n = entries.size();
  auto local = [&](std::size_t i) { return entries[i] && !entries[i]->error; };

  // Inputs back to back in the staging buffer. Growing it frees the old one, which the
  // last response's copies back may still read: let them finish first.
  std::vector<std::size_t> at(n, 0);
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!local(i)) continue;
    at[i] = total;
    total += alignUp(entries[i]->tensor.bytes());
  }
  if (total > dc.staging.capacity()) drainStream(dc, ctx.config, what);
  char* staging = dc.staging.reserve(total);
  for (std::size_t i = 0; i < n; ++i) {
    if (!local(i)) continue;
    TensorEntry& e = *entries[i];
    prepareLocal(e, [&] {
      if (e.tensor.bytes() > 0)
        ACCORD_CUDA_CHECK(cudaMemcpyAsync(staging + at[i], e.tensor.data, e.tensor.bytes(),
                                          cudaMemcpyDeviceToHost, dc.stream));
    });
  }
  // Also orders the host op's writes to the staging buffer after the last response's
  // copies back out of it.
  drainStream(dc, ctx.config, what);

  // The same response on host copies. An entry that failed already takes part as a
  // joined rank does (the op's neutral element, results discarded).
  Response host = response;
  host.device = Device::cpu();
  std::vector<TensorEntry> copies(n);
  std::vector<TensorEntry*> host_entries(n, nullptr);
  std::vector<std::vector<std::byte>> outputs(n);
  std::vector<Shape> output_shapes(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!local(i)) continue;
    TensorEntry& copy = copies[i];
    copy.name = entries[i]->name;
    copy.tensor = entries[i]->tensor;
    copy.tensor.data = staging + at[i];
    copy.tensor.device = Device::cpu();
    copy.splits = entries[i]->splits;
    if (!inPlace(response.type)) {
      copy.output = [&, i](const Shape& shape) {
        output_shapes[i] = shape;
        outputs[i].resize(num_bytes(shape, response.dtype));
        return TensorView{outputs[i].data(), response.dtype, shape, Device::cpu()};
      };
    }
    host_entries[i] = &copy;
  }
  host_->execute(ctx, host, host_entries);

  for (std::size_t i = 0; i < n; ++i) {
    if (!host_entries[i]) continue;
    TensorEntry& e = *entries[i];
    if (copies[i].error) {
      e.error = copies[i].error;
      continue;
    }
    e.received_splits = copies[i].received_splits;
    prepareLocal(e, [&] {
      if (inPlace(response.type)) {
        if (e.tensor.bytes() > 0)
          ACCORD_CUDA_CHECK(cudaMemcpyAsync(e.tensor.data, staging + at[i], e.tensor.bytes(),
                                            cudaMemcpyHostToDevice, dc.stream));
        return;
      }
      void* out = deviceOutput(response, i, e, output_shapes[i], device);
      // From pageable memory: returns once the bytes are on their way, so `outputs`
      // may go when this returns.
      if (!outputs[i].empty())
        ACCORD_CUDA_CHECK(cudaMemcpyAsync(out, outputs[i].data(), outputs[i].size(),
                                          cudaMemcpyHostToDevice, dc.stream));
    });
  }
  completeWhenDone(devices_->finalizer(), device, dc.stream, response, entries, nullptr);
}

}  // namespace

std::vector<std::unique_ptr<Op>> makeStagedOps(std::shared_ptr<Devices> devices,
                                               const HostOpFactory& host) {
  std::vector<std::unique_ptr<Op>> ops;
  for (ResponseType type : kDataResponses)
    ops.push_back(std::make_unique<StagedOp>(devices, type, host(type)));
  return ops;
}

}  // namespace accord::cuda

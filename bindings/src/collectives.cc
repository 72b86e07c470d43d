// The collectives as the Python package sees them: a tensor arrives as its data
// pointer, dtype code, shape and device (read by the framework layer from the tensor
// itself, so no framework is compiled in), and every call returns a PendingOp at once.
// Names, ops and ranks are checked by the runtime's own enqueue(), not again here.
#include "bindings.h"
#include "dlpack.h"
#include "pending.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace accord::python {

namespace {

// The Python side passes device -1 for host memory, a GPU ordinal otherwise, and for
// a GPU tensor the cudaStream_t (as an integer) its contents are ready on: the
// framework's current stream, which the runtime orders its own work after.
TensorView view(std::uintptr_t data, int dtype, Shape shape, int device) {
  return {reinterpret_cast<void*>(data), static_cast<DType>(dtype), std::move(shape),
          device < 0 ? Device::cpu() : Device::cuda(device)};
}

void* streamOf(std::uintptr_t stream) { return reinterpret_cast<void*>(stream); }

using TensorArgs = std::tuple<std::uintptr_t, int, Shape, int>;
// Memory the caller allocated for an output whose shape it worked out itself (GPU
// tensors: the framework's allocator, not Accord's host memory): data and shape.
using OutputArgs = std::optional<std::tuple<std::uintptr_t, Shape>>;

// The output: the caller's memory when given (its shape must be the negotiated one),
// else a Buffer Accord allocates into `slot`.
Allocator outputFor(const std::shared_ptr<OutputSlot>& slot, const TensorView& input,
                    const OutputArgs& out, const std::string& what) {
  if (!out) return allocateInto(slot, input.dtype);
  auto [data, shape] = *out;
  return [input, data, shape, what](const Shape& negotiated) {
    if (negotiated != shape)
      throw InvalidArgument(what + ": the output prepared for " + shape_string(shape) +
                            " does not fit the negotiated shape " + shape_string(negotiated));
    return TensorView{reinterpret_cast<void*>(data), input.dtype, negotiated, input.device};
  };
}

std::string called(const char* op, const std::string& name) {
  return name.empty() ? std::string(op) : std::string(op) + " '" + name + "'";
}

// The runtime's name of a named collective: the operation, a dot, the caller's name, as
// Horovod's Python layer names them, so that an allreduce and a broadcast may both be
// called "x" at once, and timelines read as Horovod's do. Unnamed ones ("") are named by
// the runtime, by count ("allreduce.noname.7").
std::string scoped(const char* op, const std::string& name) {
  return name.empty() ? name : std::string(op) + "." + name;
}

PendingOp allreduce(std::uintptr_t data, int dtype, Shape shape, int device,
                    const std::string& name, int op, double prescale, double postscale,
                    ProcessSetId set, std::uintptr_t stream) {
  AllreduceOptions o;
  o.stream = streamOf(stream);
  o.name = scoped("allreduce", name);
  o.op = static_cast<ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = set;
  return {allreduce_async(view(data, dtype, std::move(shape), device), o), nullptr};
}

PendingOp groupedAllreduce(const std::vector<TensorArgs>& tensors, const std::string& name, int op,
                           double prescale, double postscale, ProcessSetId set,
                           std::uintptr_t stream) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (const auto& [data, dtype, shape, device] : tensors)
    views.push_back(view(data, dtype, shape, device));
  AllreduceOptions o;
  o.name = scoped("grouped_allreduce", name);
  o.op = static_cast<ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = set;
  o.stream = streamOf(stream);
  return {grouped_allreduce_async(std::move(views), o), nullptr};
}

PendingOp allgather(std::uintptr_t data, int dtype, Shape shape, int device,
                    const std::string& name, ProcessSetId set, std::uintptr_t stream,
                    const OutputArgs& out) {
  auto slot = std::make_shared<OutputSlot>();
  AllgatherOptions o;
  o.name = scoped("allgather", name);
  o.process_set = set;
  o.stream = streamOf(stream);
  auto v = view(data, dtype, std::move(shape), device);
  return {allgather_async(v, outputFor(slot, v, out, called("allgather", name)), o), slot};
}

// The members of a grouped allgather or reducescatter: views, and each one's output
// (the caller's where given, else a slot of Accord's).
struct GroupArgs {
  std::vector<TensorView> views;
  std::vector<Allocator> outputs;
  std::vector<std::shared_ptr<OutputSlot>> slots;
};

GroupArgs groupArgs(const std::vector<TensorArgs>& tensors, const std::vector<OutputArgs>& outs,
                    const char* op, const std::string& name) {
  if (outs.size() != tensors.size())
    throw InvalidArgument(called(op, name) + ": " + std::to_string(tensors.size()) +
                          " tensors but " + std::to_string(outs.size()) + " outputs");
  GroupArgs g;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [data, dtype, shape, device] = tensors[i];
    g.views.push_back(view(data, dtype, shape, device));
    g.slots.push_back(outs[i] ? nullptr : std::make_shared<OutputSlot>());
    g.outputs.push_back(outputFor(g.slots.back(), g.views.back(), outs[i],
                                  called(op, name + "." + std::to_string(i))));
  }
  return g;
}

PendingOp groupedAllgather(const std::vector<TensorArgs>& tensors,
                           const std::vector<OutputArgs>& outs, const std::string& name,
                           ProcessSetId set, std::uintptr_t stream) {
  auto g = groupArgs(tensors, outs, "grouped_allgather", name);
  AllgatherOptions o;
  o.name = scoped("grouped_allgather", name);
  o.process_set = set;
  o.stream = streamOf(stream);
  return {grouped_allgather_async(std::move(g.views), std::move(g.outputs), o),
          std::move(g.slots)};
}

PendingOp groupedReducescatter(const std::vector<TensorArgs>& tensors,
                               const std::vector<OutputArgs>& outs, const std::string& name,
                               int op, double prescale, double postscale, ProcessSetId set,
                               std::uintptr_t stream) {
  auto g = groupArgs(tensors, outs, "grouped_reducescatter", name);
  ReducescatterOptions o;
  o.name = scoped("grouped_reducescatter", name);
  o.op = static_cast<ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = set;
  o.stream = streamOf(stream);
  return {grouped_reducescatter_async(std::move(g.views), std::move(g.outputs), o),
          std::move(g.slots)};
}

PendingOp broadcast(std::uintptr_t data, int dtype, Shape shape, int device,
                    const std::string& name, int root, ProcessSetId set, std::uintptr_t stream) {
  BroadcastOptions o;
  o.stream = streamOf(stream);
  o.name = scoped("broadcast", name);
  o.root = root;
  o.process_set = set;
  return {broadcast_async(view(data, dtype, std::move(shape), device), o), nullptr};
}

PendingOp alltoall(std::uintptr_t data, int dtype, Shape shape, int device,
                   std::vector<std::int64_t> splits, const std::string& name, ProcessSetId set,
                   std::uintptr_t stream, const OutputArgs& out) {
  auto slot = std::make_shared<OutputSlot>();
  AlltoallOptions o;
  o.name = scoped("alltoall", name);
  o.splits = std::move(splits);
  o.process_set = set;
  o.stream = streamOf(stream);
  auto v = view(data, dtype, std::move(shape), device);
  return {alltoall_async(v, outputFor(slot, v, out, called("alltoall", name)), o), slot};
}

PendingOp reducescatter(std::uintptr_t data, int dtype, Shape shape, int device,
                        const std::string& name, int op, double prescale, double postscale,
                        ProcessSetId set, std::uintptr_t stream, const OutputArgs& out) {
  auto slot = std::make_shared<OutputSlot>();
  ReducescatterOptions o;
  o.stream = streamOf(stream);
  o.name = scoped("reducescatter", name);
  o.op = static_cast<ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = set;
  auto v = view(data, dtype, std::move(shape), device);
  return {reducescatter_async(v, outputFor(slot, v, out, called("reducescatter", name)), o), slot};
}

}  // namespace

void defineCollectives(py::module_& m) {
  py::class_<PendingOp>(m, "PendingOp", "A submitted collective: poll() and wait() (GIL released).")
      .def("poll", &PendingOp::poll)
      .def("wait", &PendingOp::wait)
      .def("output", &PendingOp::output, py::arg("member") = 0,
           "The output Accord allocated (of a group's member), after wait().")
      .def("received_splits", &PendingOp::receivedSplits)
      .def("last_joined_rank", &PendingOp::lastJoinedRank)
      .def("cuda_event", &PendingOp::cudaEvent,
           "GPU tensors: the cudaEvent_t (an integer) that completes when the results are "
           "in place; 0 for host tensors.")
      .def("wait_on_stream", &PendingOp::waitOnStream, py::arg("stream"),
           "GPU tensors: makes the cudaStream_t `stream` (an integer) wait on the GPU for the "
           "results, without blocking; True. False for host tensors (after they completed) "
           "and for a collective that failed before its launch.");

  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "Buffer", py::buffer_protocol(),
                                              "Output memory owned by Accord.")
      .def_property_readonly("dtype", [](const Buffer& b) { return static_cast<int>(b.dtype()); })
      .def_property_readonly("shape", [](const Buffer& b) { return b.shape(); })
      .def("dlpack", [](std::shared_ptr<Buffer> b) { return toDLPack(std::move(b)); })
      .def_buffer([](Buffer& b) { return bufferInfo(b); });

  m.def("allreduce_async", &allreduce, py::arg("data"), py::arg("dtype"), py::arg("shape"),
        py::arg("device"), py::arg("name"), py::arg("op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("process_set"), py::arg("stream") = 0);
  m.def("grouped_allreduce_async", &groupedAllreduce, py::arg("tensors"), py::arg("name"),
        py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("process_set"),
        py::arg("stream") = 0);
  m.def("allgather_async", &allgather, py::arg("data"), py::arg("dtype"), py::arg("shape"),
        py::arg("device"), py::arg("name"), py::arg("process_set"), py::arg("stream") = 0,
        py::arg("out") = py::none());
  m.def("grouped_allgather_async", &groupedAllgather, py::arg("tensors"), py::arg("outs"),
        py::arg("name"), py::arg("process_set"), py::arg("stream") = 0);
  m.def("grouped_reducescatter_async", &groupedReducescatter, py::arg("tensors"),
        py::arg("outs"), py::arg("name"), py::arg("op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("process_set"), py::arg("stream") = 0);
  m.def("broadcast_async", &broadcast, py::arg("data"), py::arg("dtype"), py::arg("shape"),
        py::arg("device"), py::arg("name"), py::arg("root"), py::arg("process_set"),
        py::arg("stream") = 0);
  m.def("alltoall_async", &alltoall, py::arg("data"), py::arg("dtype"), py::arg("shape"),
        py::arg("device"), py::arg("splits"), py::arg("name"), py::arg("process_set"),
        py::arg("stream") = 0, py::arg("out") = py::none());
  m.def("reducescatter_async", &reducescatter, py::arg("data"), py::arg("dtype"), py::arg("shape"),
        py::arg("device"), py::arg("name"), py::arg("op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("process_set"), py::arg("stream") = 0,
        py::arg("out") = py::none());
  m.def("barrier_async", [](ProcessSetId set) { return PendingOp(barrier_async(set), nullptr); });
  m.def("join_async", [](ProcessSetId set, int device) {
    return PendingOp(join_async(set, device < 0 ? Device::cpu() : Device::cuda(device)), nullptr);
  }, py::arg("set"), py::arg("device") = -1);
  m.def("reducescatter_rows", &reducescatter_rows, py::arg("rows"), py::arg("rank"),
        py::arg("set_size"));
}

}  // namespace accord::python

#include "pending.h"

#include "errors.h"

#include <pybind11/pybind11.h>

#include <chrono>

namespace py = pybind11;

namespace accord::python {

void PendingOp::wait() const {
  try {
    waitSliced();
  } catch (const InvalidArgument& e) {
    throw InvalidCollective(e.what());
  }
}

void PendingOp::waitSliced() const {
  // 100 ms: Ctrl-C answers within a blink, and a wake-up ten times a second costs
  // nothing measurable against collectives that take that long.
  constexpr std::chrono::milliseconds kSlice{100};
  if (handle_.poll()) {
    handle_.wait();  // done already: skip releasing the GIL
    return;
  }
  while (true) {
    {
      py::gil_scoped_release release;
      if (handle_.wait_for(kSlice)) return;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

std::shared_ptr<Buffer> PendingOp::output(std::size_t i) const {
  handle_.wait();
  if (i >= outputs_.size() || !outputs_[i] || !outputs_[i]->buffer) {
    throw InvalidArgument("this collective has no output allocated by Accord" +
                          (outputs_.size() > 1 ? " for member " + std::to_string(i) : ""));
  }
  return outputs_[i]->buffer;
}

bool PendingOp::waitOnStream(std::uintptr_t stream) const {
  py::gil_scoped_release release;
  return handle_.wait_on_stream(reinterpret_cast<void*>(stream));
}

std::uintptr_t PendingOp::cudaEvent() const {
  py::gil_scoped_release release;
  return reinterpret_cast<std::uintptr_t>(handle_.cuda_event());
}

Allocator allocateInto(std::shared_ptr<OutputSlot> slot, DType dtype) {
  return [slot = std::move(slot), dtype](const Shape& shape) {
    // In the runtime's cycle (on the background thread, or on a waiting thread that has
    // released the GIL): plain C++ memory, no GIL.
    slot->buffer = std::make_shared<Buffer>(dtype, shape);
    return slot->buffer->view();
  };
}

}  // namespace accord::python

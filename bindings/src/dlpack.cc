#include "dlpack.h"

#include "dlpack_abi.h"

#include <accord/error.h>

#include <vector>

namespace accord::python {

namespace {

struct Export {
  std::shared_ptr<Buffer> buffer;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DLManagedTensor managed{};
};

DLDataType dlType(DType dtype) {
  const auto bits = static_cast<std::uint8_t>(8 * dtype_size(dtype));
  switch (dtype) {
    case DType::UInt8:
    case DType::UInt16:
      return {kDLUInt, bits, 1};
    // DLPack 0.x has no bool (PyTorch 1.13 refuses kDLBool): it goes as uint8, which
    // accord.torch views as bool again.
    case DType::Bool:
      return {kDLUInt, 8, 1};
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
      return {kDLInt, bits, 1};
    case DType::BFloat16:
      return {kDLBfloat, bits, 1};
    case DType::Float16:
    case DType::Float32:
    case DType::Float64:
      return {kDLFloat, bits, 1};
  }
  throw InvalidArgument("DLPack export: unknown dtype");
}

void deleteCapsule(PyObject* capsule) {
  // Consumed capsules were renamed by the consumer, which now owns the tensor.
  if (!PyCapsule_IsValid(capsule, kDLTensorCapsuleName)) return;
  auto* managed =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kDLTensorCapsuleName));
  managed->deleter(managed);
}

}  // namespace

pybind11::capsule toDLPack(std::shared_ptr<Buffer> buffer) {
  auto* e = new Export{};
  e->shape = buffer->shape();
  e->strides.assign(e->shape.size(), 1);
  for (std::size_t i = e->shape.size(); i-- > 1;) e->strides[i - 1] = e->strides[i] * e->shape[i];
  DLTensor& t = e->managed.dl_tensor;
  t.data = buffer->data();
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(e->shape.size());
  t.dtype = dlType(buffer->dtype());
  t.shape = e->shape.data();
  t.strides = e->strides.data();
  t.byte_offset = 0;
  e->buffer = std::move(buffer);
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<Export*>(self->manager_ctx);
  };
  PyObject* capsule = PyCapsule_New(&e->managed, kDLTensorCapsuleName, deleteCapsule);
  if (capsule == nullptr) {
    delete e;
    throw pybind11::error_already_set();
  }
  return pybind11::reinterpret_steal<pybind11::capsule>(capsule);
}

}  // namespace accord::python

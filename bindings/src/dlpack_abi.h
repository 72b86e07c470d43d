// The DLPack exchange structs (the unversioned ABI, DLPack 0.x), declared here so the
// bindings build without a DLPack package: the layout is the published standard that
// PyTorch, NumPy and others read, and must not change.
#pragma once

#include <cstdint>

namespace accord::python {

enum DLDeviceType : std::int32_t { kDLCPU = 1, kDLCUDA = 2 };

struct DLDevice {
  DLDeviceType device_type;
  std::int32_t device_id;
};

enum DLDataTypeCode : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };

struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null means compact row-major
  std::uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// A capsule holding an unconsumed DLManagedTensor is named this; the consumer renames
// it "used_dltensor" and takes over calling the deleter.
inline constexpr const char* kDLTensorCapsuleName = "dltensor";
inline constexpr const char* kUsedDLTensorCapsuleName = "used_dltensor";

}  // namespace accord::python

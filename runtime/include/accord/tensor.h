// Non-owning tensor views: what the application hands to a collective.
//
// Accord never owns application memory. A TensorView names a buffer, its element
// type, its shape and the device it lives on; the caller keeps the buffer alive until
// the collective's handle completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

enum class DType : std::uint8_t {
  UInt8,
  Int8,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  // Added later, at the end so that the values above (in messages between ranks, and
  // in the Python module) keep their meaning.
  Int16,
  UInt16,
  Bool,  // one byte, 0 or 1: Sum and Max are logical or, Min and Product logical and
};
// One past the last DType: the valid values are 0..kNumDTypes-1 (tensor.cc asserts this
// against the enumerators, so the two cannot drift apart).
inline constexpr int kNumDTypes = 11;

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
bool is_floating_point(DType dtype);

enum class DeviceType : std::uint8_t { CPU, CUDA };
inline constexpr int kNumDeviceTypes = 2;  // one past the last DeviceType (asserted in tensor.cc)

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // GPU ordinal; 0 for CPU

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceType::CUDA, index}; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:1"
};

using Shape = std::vector<std::int64_t>;

// Elements of `shape` (a scalar has one). Throws InvalidArgument naming the shape when a
// dimension is negative or the count does not fit an int64.
std::int64_t num_elements(const Shape& shape);
// num_elements(shape) * dtype_size(dtype). Throws InvalidArgument naming the shape when
// that exceeds PTRDIFF_MAX: no buffer can be larger, nor can offsets into it be formed.
std::size_t num_bytes(const Shape& shape, DType dtype);
std::string shape_string(const Shape& shape);  // "[4,3]"

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Shape shape;
  Device device;

  std::int64_t numel() const { return num_elements(shape); }
  std::size_t bytes() const { return num_bytes(shape, dtype); }
};

}  // namespace accord

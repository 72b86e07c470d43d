// Names and sizes of the value types in accord/tensor.h and accord/accord.h.
//
// These strings appear in every mismatch message ("rank 0 sent dtype float32"), so
// they use the spelling users know from PyTorch and NumPy. An enum value outside the
// known range can only come from a bug, a cast in the caller or a corrupt message:
// sizes throw (a wrong size would become a wild copy), names say "invalid-..." so the
// message still prints, and invalidEnum() says what submission rejects and why.
#include "runtime/message.h"

#include <accord/accord.h>
#include <accord/error.h>
#include <accord/tensor.h>

#include <cstdint>
#include <string>

namespace accord {

namespace {

std::string invalidValue(const char* what, int value) {
  return std::string("invalid ") + what + " " + std::to_string(value);
}

// Each switch names every enumerator, so -Wswitch flags one added without a name, and
// the static_asserts below then flag a kNum* constant that was not raised with it.
constexpr const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::UInt8:
      return "uint8";
    case DType::Int8:
      return "int8";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int16:
      return "int16";
    case DType::UInt16:
      return "uint16";
    case DType::Bool:
      return "bool";
  }
  return nullptr;
}

constexpr const char* deviceTypeName(DeviceType type) {
  switch (type) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::CUDA:
      return "cuda";
  }
  return nullptr;
}

constexpr const char* opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Average:
      return "average";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Product:
      return "product";
    case ReduceOp::Adasum:
      return "adasum";
  }
  return nullptr;
}

static_assert(detail::namedExactly(dtypeName, kNumDTypes), "kNumDTypes must count the DTypes");
static_assert(detail::namedExactly(deviceTypeName, kNumDeviceTypes),
              "kNumDeviceTypes must count the DeviceTypes");
static_assert(detail::namedExactly(opName, kNumReduceOps),
              "kNumReduceOps must count the ReduceOps");

// "" for a value of E, else e.g. "op 17 is not a ReduceOp (expected 0..4: sum, ...)".
template <typename E>
std::string outOfRange(E value, int count, const char* (*name)(E), const char* field,
                       const char* type) {
  const int v = static_cast<int>(value);
  if (v < count) return "";
  std::string names;
  for (int i = 0; i < count; ++i) names += std::string(i ? ", " : "") + name(static_cast<E>(i));
  return std::string(field) + " " + std::to_string(v) + " is not a " + type + " (expected 0.." +
         std::to_string(count - 1) + ": " + names + ")";
}

}  // namespace

std::string invalidEnum(DType dtype) {
  return outOfRange(dtype, kNumDTypes, dtypeName, "dtype", "DType");
}
std::string invalidEnum(DeviceType type) {
  return outOfRange(type, kNumDeviceTypes, deviceTypeName, "device type", "DeviceType");
}
std::string invalidEnum(ReduceOp op) {
  return outOfRange(op, kNumReduceOps, opName, "op", "ReduceOp");
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool:
      return 1;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
      return 8;
  }
  throw InvalidArgument(invalidValue("dtype", static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  const char* name = dtypeName(dtype);
  return name ? name : "invalid-dtype";
}

bool is_floating_point(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
    case DType::Float64:
      return true;
    default:
      return false;
  }
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU:
      return deviceTypeName(type);
    case DeviceType::CUDA:
      return std::string(deviceTypeName(type)) + ":" + std::to_string(index);
  }
  return invalidValue("device type", static_cast<int>(type));
}

// A scalar (empty shape) has one element. Negative dimensions never describe a real
// tensor, and a count past int64 would wrap (to 0: "empty"; or negative): both are
// rejected here, so that a byte count can never wrap around. A zero dimension makes
// any shape empty, however large the others.
std::int64_t num_elements(const Shape& shape) {
  bool empty = false;
  for (std::int64_t d : shape) {
    if (d < 0) throw InvalidArgument("shape " + shape_string(shape) + " has a negative dimension");
    empty = empty || d == 0;
  }
  if (empty) return 0;
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      throw InvalidArgument("shape " + shape_string(shape) +
                            " has more elements than an int64 can count");
    }
  }
  return n;
}

std::size_t num_bytes(const Shape& shape, DType dtype) {
  const std::int64_t n = num_elements(shape);
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(dtype)), &bytes) ||
      bytes > PTRDIFF_MAX) {
    throw InvalidArgument("shape " + shape_string(shape) + " of " + dtype_name(dtype) +
                          " has more bytes than a buffer can span (at most " +
                          std::to_string(PTRDIFF_MAX) + ")");
  }
  return static_cast<std::size_t>(bytes);
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

const char* reduce_op_name(ReduceOp op) {
  const char* name = opName(op);
  return name ? name : "invalid-op";
}

// rows = q * set_size + r: every rank gets q rows and the first r ranks one more, so
// block sizes differ by at most one and rank order matches row order.
std::int64_t reducescatter_rows(std::int64_t rows, int rank, int set_size) {
  if (set_size <= 0 || rank < 0 || rank >= set_size || rows < 0) {
    throw InvalidArgument("reducescatter_rows(rows=" + std::to_string(rows) + ", rank=" +
                          std::to_string(rank) + ", set_size=" + std::to_string(set_size) +
                          "): expected rows >= 0 and 0 <= rank < set_size");
  }
  return rows / set_size + (rank < rows % set_size ? 1 : 0);
}

}  // namespace accord

// The checks of a request before it is queued (request_checks.h).
#include "request_checks.h"

#include <accord/error.h>

#include <cmath>

namespace accord {

// Enums first: a byte count needs a valid dtype. Then the size, which must not wrap
// (a shape of 2^64 elements would otherwise pass as empty). All before anything is
// queued, so a bad tensor fails in the caller's thread and never reaches other ranks.
void checkTensor(const Request& r, const TensorView& t) {
  for (const std::string& bad : {invalidEnum(t.dtype), invalidEnum(t.device.type)})
    if (!bad.empty()) throw InvalidArgument(describe(r) + ": " + bad);
  std::size_t bytes = 0;
  try {
    bytes = t.bytes();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(describe(r) + ": " + e.what());
  }
  if (t.data == nullptr && bytes > 0) {
    throw InvalidArgument(describe(r) + ": data pointer is null for shape " +
                          shape_string(t.shape));
  }
}

void checkScale(const Request& r, double factor, const char* which) {
  if (!std::isfinite(factor)) {
    throw InvalidArgument(describe(r) + ": " + which + " factor " + std::to_string(factor) +
                          " is not finite");
  }
}

// Bool reduces as logic (Sum and Max: or; Min and Product: and), which has no average
// and no scale.
void checkLogical(const Request& r) {
  const bool reduces = r.type == RequestType::Allreduce || r.type == RequestType::Reducescatter;
  if (!reduces || r.dtype != DType::Bool) return;
  if (r.op == ReduceOp::Average)
    throw InvalidArgument(describe(r) + ": Average is not defined for bool tensors; use Sum or "
                          "Max (logical or), Min or Product (logical and), or convert to a "
                          "number type");
  if (r.prescale != 1.0 || r.postscale != 1.0)
    throw InvalidArgument(describe(r) + ": bool tensors cannot be scaled (prescale " +
                          std::to_string(r.prescale) + ", postscale " +
                          std::to_string(r.postscale) + ")");
}

// Adasum combines whole tensors of floating point in pairs of ranks, level by level: an
// allreduce only, and a power-of-two number of ranks (with others, the tree would weigh
// some ranks' tensors more than the rest).
void checkAdasum(const Request& r, int set_size) {
  if (r.op != ReduceOp::Adasum) return;
  if (r.type != RequestType::Allreduce)
    throw InvalidArgument(describe(r) + ": Adasum applies to allreduce only, not to " +
                          requestTypeName(r.type) + "; use Sum or Average");
  if (!is_floating_point(r.dtype))
    throw InvalidArgument(describe(r) + ": Adasum needs a floating-point tensor (float16, "
                          "bfloat16, float32, float64), got " + dtype_name(r.dtype));
  if (set_size < 1 || (set_size & (set_size - 1)) != 0)
    throw InvalidArgument(describe(r) + ": Adasum needs a power-of-two number of ranks, and the "
                          "process set has " + std::to_string(set_size) +
                          "; use Average, or a process set of 1, 2, 4, 8... ranks");
}

}  // namespace accord

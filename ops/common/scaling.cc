// Scaling around a reduction (see scaling.h).
#include "ops/common/scaling.h"

#include "ops/cpu/kernels.h"

namespace accord {

Scaling preScaling(const Response& response) { return {response.prescale, 1.0}; }

Scaling postScaling(const Response& response, int set_size) {
  // Average divides after the sum; folding it into the postscale pass saves a pass.
  return {response.postscale, response.op == ReduceOp::Average ? double(set_size) : 1.0};
}

void applyScaling(const Scaling& s, void* data, std::size_t count, DType dtype) {
  if (!s.isOne() && count > 0) cpu::scale(data, count, dtype, s.factor, s.divisor);
}

}  // namespace accord

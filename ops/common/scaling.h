// Scaling applied around a reduction, on every backend: the prescale on this rank's
// inputs, then the postscale divided by the set size for Average. Derived from the
// response alone, so that every backend scales alike; each applies it with its own
// kernel (applyScaling here for host memory, cuda::scale on a device).
#pragma once

#include "runtime/message.h"

#include <cstddef>

namespace accord {

// isOne() lets callers skip a pass that would multiply by 1.
struct Scaling {
  double factor = 1.0;
  double divisor = 1.0;
  bool isOne() const { return factor == 1.0 && divisor == 1.0; }
};
Scaling preScaling(const Response& response);
Scaling postScaling(const Response& response, int set_size);
// Scales `count` elements of host memory in place; nothing where s.isOne().
void applyScaling(const Scaling& s, void* data, std::size_t count, DType dtype);

}  // namespace accord

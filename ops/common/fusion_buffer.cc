// Growth policy of the fusion buffer (see fusion_buffer.h).
#include "ops/common/fusion_buffer.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>

namespace accord {

void FusionBuffer::Free::operator()(char* p) const {
  ::operator delete (p, std::align_val_t{kAlignment});
}

char* FusionBuffer::reserve(std::size_t bytes) {
  if (data_ && bytes <= capacity_) return data_.get();
  if (bytes > SIZE_MAX / 4)
    throw InvalidArgument("fusion buffer: " + std::to_string(bytes) + " bytes cannot be allocated");
  // Grow by at least half the current size so a slowly rising demand (a model whose
  // fused groups differ a little from step to step) reallocates O(log n) times, and
  // round to 4 KiB pages. The old contents are dropped before allocating the new
  // block, so peak memory is the new size rather than old + new.
  std::size_t grown = std::max(bytes, capacity_ + capacity_ / 2);
  grown = std::max<std::size_t>((grown + 4095) / 4096 * 4096, 4096);
  data_.reset();
  capacity_ = 0;
  try {
    data_.reset(static_cast<char*>(::operator new (grown, std::align_val_t{kAlignment})));
  } catch (const std::bad_alloc&) {
    throw Error("fusion buffer: cannot allocate " + std::to_string(grown) +
                " bytes of host memory (requested " + std::to_string(bytes) +
                "); lower ACCORD_FUSION_THRESHOLD or the tensor sizes");
  }
  capacity_ = grown;
  return data_.get();
}

}  // namespace accord

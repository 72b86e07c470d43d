#include "buffer.h"

#include <new>

namespace accord::python {

namespace {
// Cache-line alignment: the fast kernels and the frameworks' vectorized ops like it,
// and PyTorch asks no more of memory it did not allocate.
constexpr std::size_t kAlignment = 64;
}  // namespace

void Buffer::Free::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t(kAlignment));
}

Buffer::Buffer(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(num_bytes(shape_, dtype_)) {
  // Never a null pointer, even for an empty output: consumers of DLPack and of the
  // buffer protocol may treat null data as an error.
  data_.reset(static_cast<std::byte*>(
      ::operator new[](bytes_ == 0 ? kAlignment : bytes_, std::align_val_t(kAlignment))));
}

}  // namespace accord::python

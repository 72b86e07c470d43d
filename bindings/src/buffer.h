// Output memory that Accord allocates for a collective whose output size is known only
// after negotiation (allgather, alltoall, and reducescatter for uniformity).
//
// Thread boundary: the runtime's background thread calls the allocator and must never
// need the GIL, so the memory is plain C++ memory, allocated there. After wait(), Python
// takes it without a copy: as a DLPack capsule (PyTorch) or through the buffer
// protocol (NumPy); either keeps the Buffer alive for as long as the array lives.
#pragma once

#include <accord/tensor.h>

#include <cstddef>
#include <memory>

namespace accord::python {

class Buffer {
 public:
  Buffer(DType dtype, Shape shape);  // throws InvalidArgument for a shape that overflows
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  TensorView view() { return {data_.get(), dtype_, shape_, Device::cpu()}; }
  void* data() const { return data_.get(); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  DType dtype_;
  Shape shape_;
  std::size_t bytes_;
  std::unique_ptr<std::byte, Free> data_;
};

}  // namespace accord::python

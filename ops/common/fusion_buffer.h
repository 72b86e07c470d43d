// The persistent host staging buffer the host ops share.
//
// Fused tensors are copied into one contiguous region so that a single collective
// carries them all; joined ranks borrow a neutral-filled scratch region from it. The
// buffer lives as long as the dispatcher and only grows, so a training loop that fuses
// the same gradients every step allocates once. Only the background thread uses it.
#pragma once

#include <cstddef>
#include <memory>

namespace accord {

class FusionBuffer {
 public:
  // 64 bytes: a cache line, and the widest SIMD load (AVX-512), so kernels running on
  // the buffer never split a vector across lines at its start.
  static constexpr std::size_t kAlignment = 64;

  // A region of at least `bytes` bytes, valid until the next reserve(). Contents are
  // not preserved when the buffer grows. Never returns nullptr (even for 0 bytes), so
  // callers can hand it to MPI as a valid address.
  char* reserve(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> data_;
  std::size_t capacity_ = 0;
};

// Rounds `bytes` up to a multiple of FusionBuffer::kAlignment, so regions carved one
// after another from the buffer each start aligned.
constexpr std::size_t alignUp(std::size_t bytes) {
  return (bytes + FusionBuffer::kAlignment - 1) / FusionBuffer::kAlignment *
         FusionBuffer::kAlignment;
}

}  // namespace accord

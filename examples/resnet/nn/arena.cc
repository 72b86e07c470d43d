// Arenas: the trainer's parameters, gradients and activations each live in one
// contiguous allocation, so a whole kind can be zeroed, checkpointed or broadcast as a
// single buffer, and no layer allocates during a training step. Sizes come from a
// planning pass that runs the same take() sequence as the real one (see layers.h).
#include "nn/layers.h"

#include <accord/error.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace accord::nn {

namespace {
// 16 floats = 64 bytes: every piece starts on a cache line / AVX-512 vector boundary.
constexpr size_t kAlignFloats = 16;
size_t roundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
// Host arenas from this size on are mapped straight from the kernel: its pages are zero
// and take memory only once touched. A GPU run's host model plans the activations of
// the whole batch and touches little of them (ResNet-50 at batch 256: 26 GB, per rank).
constexpr size_t kMapAtLeast = size_t(1) << 20;
}  // namespace

Arena::~Arena() {
  if (base && release)
    release(base);
  else if (mapped)
    munmap(base, mapped);
  else
    std::free(base);
}

float* Arena::take(size_t n) {
  size_t size = roundUp(n);
  if (planning) {
    used += size;
    return nullptr;
  }
  if (used + size > capacity)
    throw Error("nn::Arena: out of space: taking " + std::to_string(n) + " floats with " +
                std::to_string(capacity - used) + " of " + std::to_string(capacity) +
                " left (the take() sequence differs from the planning pass)");
  float* p = base + used;
  used += size;
  return p;
}

void Arena::allocate() {
  if (!planning) throw Error("nn::Arena: allocate() called twice");
  size_t bytes = (used ? used : kAlignFloats) * sizeof(float);
  if (alloc) {
    base = alloc(bytes);
  } else if (bytes >= kMapAtLeast) {
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (reserve ? 0 : MAP_NORESERVE);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p != MAP_FAILED) {
      base = static_cast<float*>(p);  // zero pages, page-aligned
      mapped = bytes;
    }
  } else {
    base = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (base) std::memset(base, 0, bytes);
  }
  if (!base) throw Error("nn::Arena: cannot allocate " + std::to_string(bytes) + " bytes");
  capacity = used;
  used = 0;
  planning = false;
}

}  // namespace accord::nn

// Arenas: the trainer's parameters, gradients and activations each live in one
// contiguous allocation, so a whole kind can be zeroed, checkpointed or broadcast as a
// single buffer, and no layer allocates during a training step. Sizes come from a
// planning pass that runs the same take() sequence as the real one (see layers.h).
#include "nn/layers.h"

#include <accord/error.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace accord::nn {

namespace {
// 16 floats = 64 bytes: every piece starts on a cache line / AVX-512 vector boundary.
constexpr size_t kAlignFloats = 16;
size_t roundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
}  // namespace

Arena::~Arena() {
  if (base && release)
    release(base);
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
  } else {
    base = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!base) throw Error("nn::Arena: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(base, 0, bytes);
  }
  capacity = used;
  used = 0;
  planning = false;
}

}  // namespace accord::nn

// The one planner of fused layouts: where each tensor of a fused response sits in the
// fusion buffer, which bytes are copied in and out, and which regions hold the op's
// neutral element (or zeros) because this rank has no usable input there.
//
// Every backend lays a fused response out the same way; it differs only in how it
// copies and fills (cpu::parallelCopy and cpu::fillNeutral on the host, one batched
// launch each on a device) and in the alignment it asks for. The plan is a pure
// function of sizes and of which entries are local (localInputs, checks.h), so a unit
// test drives it in one process, and the ranks of a set agree on every offset because
// they agree on the response.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accord {

// A stretch of the fused buffer, in bytes.
struct Region {
  std::size_t at = 0;
  std::size_t bytes = 0;
  bool operator==(const Region&) const = default;
};

// Allreduce (and any reduction of tensors side by side): tensor i at offset[i], each
// offset a multiple of `alignment` bytes; the buffer reduced is `count` elements, which
// is the end of the last tensor (aligned) padded to a multiple of `multiple` elements.
// The gaps between tensors are reduced too and thrown away; they hold no one's data.
struct FusedReduction {
  std::vector<std::size_t> offset;  // [i]: tensor i's first byte
  std::vector<std::size_t> bytes;   // [i]: its size
  std::vector<std::size_t> copied;  // the local, non-empty tensors: copied in and back out
  std::vector<Region> neutral;      // regions to fill with the op's neutral element
  std::size_t used = 0;             // bytes up to the end of the last tensor, aligned
  std::size_t count = 0;            // elements to reduce, padding included
};
// `bytes[i]`: tensor i's size; `local[i]`: this rank has tensor i's input. `alignment`
// (bytes) must be a multiple of `elem`; `multiple` >= 1. InvalidArgument otherwise.
FusedReduction planFusedReduction(const std::vector<std::size_t>& bytes,
                                  const std::vector<bool>& local, std::size_t elem,
                                  std::size_t alignment, std::size_t multiple);

// Allgather of tensors fused rank-major: rank 0's rows of every tensor, then rank 1's,
// ..., so that each rank's contribution is one block of the buffer.
struct FusedGather {
  std::vector<std::vector<std::size_t>> at;   // [t][r]: rank r's rows of tensor t
  std::vector<std::vector<std::size_t>> dst;  // [t][r]: where they go in tensor t's output
  std::vector<Region> blocks;                 // [r]: rank r's contribution
  std::size_t total = 0;                      // bytes of the whole buffer
};
// `bytes[t][r]`: what rank r contributes to tensor t (allgatherBytes, layouts.h); every
// row holds `size` ranks.
FusedGather planFusedGather(const std::vector<std::vector<std::size_t>>& bytes, int size);

// Memory as addresses, [begin, end).
struct Span {
  std::uintptr_t begin = 0, end = 0;
};
// Whether a byte of `read` is also one of `written` (an empty span holds none). A fused
// collective that reads its inputs and writes its outputs where they lie, instead of
// through the fusion buffer, keeps to groups where none is.
bool anyOverlap(std::vector<Span> read, const std::vector<Span>& written);
// Whether two of `spans` share a byte: tensors reduced in place must not.
bool anyOverlap(std::vector<Span> spans);

}  // namespace accord

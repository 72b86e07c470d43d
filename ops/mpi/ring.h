// Reduce-scatter and allgather around a ring of point-to-point messages: the MPI
// transport's building blocks for allreduce, reducescatter and allgather.
//
// Rank r sends to r + 1 and receives from r - 1, n - 1 steps per phase, moving one
// block per step; every rank sends and receives (n - 1)/n of the data per phase, which
// is bandwidth-optimal. Unlike MPI's blocking collectives, every step's wait has a
// deadline and knows which peer it waits for (link.h); and unlike MPI's non-blocking
// ones, it keeps the speed of the blocking ones (docs/performance.md, "Why the defaults").
//
// Every block is reduced once, along the chain that ends at its owner, and then only
// copied: all ranks hold bit-identical results.
#pragma once

#include "ops/common/scaling.h"
#include "ops/mpi/context.h"

#include <cstddef>
#include <string>
#include <vector>

namespace accord::mpi {

// Block b of a buffer is the bytes [offset[b], offset[b] + bytes[b]); one block per
// rank of the set. Reductions need every block element-aligned.
struct Blocks {
  std::vector<std::size_t> offset;
  std::vector<std::size_t> bytes;
  std::size_t largest() const;
};
// `count` elements of `elem` bytes split as evenly as possible, in rank order.
Blocks evenBlocks(std::size_t count, std::size_t elem, int size);

// `input` holds this rank's contribution to every block. On return `output` holds
// block rank() of the reduction over all ranks, scaled by `post`. `output` may be the
// input's own block (an in-place allreduce); `input` is otherwise only read.
void ringReduceScatter(Context& ctx, const void* input, const Blocks& blocks, void* output,
                       DType dtype, ReduceOp op, const Scaling& post, const std::string& what);

// On entry block rank() of `data` holds this rank's block; on return every block holds
// its owner's.
void ringAllgather(Context& ctx, void* data, const Blocks& blocks, const std::string& what);

}  // namespace accord::mpi

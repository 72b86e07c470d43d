// Adasum allreduce on host memory (ReduceOp::Adasum, see accord.h and docs/adasum.md).
//
// Recursive doubling over the set's MPI link with whole buffers: in round k every rank
// exchanges its partial result with the rank 2^k away, and both combine the pair tensor
// by tensor (cpu::adasumDots, adasumWeights, adasumCombine), with the lower rank's
// partial as the first operand on both sides, so that both hold the same bits after it
// and every rank the same result at the end. The tree this makes pairs rank 0 with 1,
// then {0,1} with {2,3}, and so on: the binary tree of Adasum's definition.
//
// log2(n) rounds of the whole buffer: for 2 and 4 ranks as many bytes as halving the
// vector each round and gathering it back (vector-halving distance-doubling), with
// twice the arithmetic of that scheme; beyond 4 ranks more bytes. The set's size is a
// power of two (checked at submission, runtime/collectives.cc).
#pragma once

#include "ops/mpi/context.h"

#include <vector>

namespace accord::mpi {

// The whole response (one tensor or a fused group): the tensors back to back in the
// fusion buffer, prescaled; a joined rank, or one whose input failed its check,
// contributes zeros (adasum(a, 0) = a); the postscale runs on the result.
void adasumAllreduce(Context& ctx, const Response& response, std::vector<TensorEntry*>& entries);

}  // namespace accord::mpi

// Adasum allreduce on host memory (ReduceOp::Adasum, see accord.h and docs/adasum.md).
//
// Vector halving, distance doubling over the set's MPI link. In round k (k = 0, 1, ...)
// every rank pairs with the rank 2^k away; the pair splits the segment both hold, the
// lower rank keeping the first half and the upper the second, and each sends the other
// the half it gives up. Each rank then holds its half of two partial results: the lower
// group's (the 2^k ranks below the pair's split) and the upper group's. Adasum weighs
// each tensor by dot products over the whole tensor, whose pieces now lie on the 2^(k+1)
// ranks of the group: each rank takes its pieces' dot products (cpu::adasumDots), the
// group sums them by recursive doubling (3 doubles per tensor), and each rank combines
// its pieces with the tensor's weights (adasumWeights, adasumCombine). After log2(n)
// rounds every rank holds 1/n of the result, which the rounds in reverse gather back.
//
// Every element is computed once, by the rank that holds it, and copied to the others;
// the dot products' sums are added pairwise (x + y = y + x in IEEE), so every rank of a
// group holds the same weights: every rank ends with the same bits. The tree this makes
// pairs rank 0 with 1, then {0,1} with {2,3}, and so on: the binary tree of Adasum's
// definition. Each rank sends about the buffer's size in all (half of it in the first
// round, a quarter in the next, ..., and as much again gathering back) and computes on
// half of it in the first round, a quarter in the next, and so on. The set's size is a
// power of two (checked at submission, runtime/collectives.cc).
#pragma once

#include "ops/mpi/context.h"

#include <vector>

namespace accord::mpi {

// The whole response: a lone tensor in place, a fused group back to back in the fusion
// buffer; prescaled on the way in. A joined rank, or one whose input failed its check,
// contributes zeros (adasum(a, 0) = a); the postscale runs on the result.
void adasumAllreduce(Context& ctx, const Response& response, std::vector<TensorEntry*>& entries);

}  // namespace accord::mpi

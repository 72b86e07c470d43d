// Allreduce by recursive doubling: the MPI transport's algorithm for small buffers.
//
// The ring (ring.h) moves the least data but takes 2(n - 1) message rounds; below a few
// tens of KiB each round costs a network latency whatever its size, so there the
// ring loses to MPI's own small-message allreduce. Recursive doubling takes
// ceil(log2 n) rounds (one more each way when n is not a power of two) and sends the
// whole buffer in each.
//
// In round k every rank exchanges its partial result with the rank 2^k away and both
// combine the two. Every pair computes op(lower rank's partial, higher rank's
// partial), in that order, so both sides hold bit-identical results even for
// operations that are not commutative bit for bit (Min and Max of +0 and -0, NaNs).
// With n = p + q ranks (p the largest power of two not above n), the first 2q ranks
// pair up before the rounds: each even one hands its data to the odd one after it,
// waits out the rounds, and receives the result from it at the end.
#pragma once

#include "ops/common/scaling.h"
#include "ops/mpi/context.h"
#include "ops/mpi/link.h"

#include <cstddef>
#include <string>

namespace accord::mpi {

// Reduces `count` elements of `data` in place over every rank of ctx's link and
// scales the result by `post` in the same pass as its last reduction.
void doublingAllreduce(Context& ctx, void* data, std::size_t count, DType dtype, ReduceOp op,
                       const Scaling& post, const std::string& what);

// Whether an allreduce of `bytes` bytes over `link`'s ranks should use recursive
// doubling rather than the ring. Doubling saves 2(n - 1) - log2(n) message latencies
// and costs log2(n) - 2(n - 1)/n buffers' worth of extra traffic (more where ranks
// fold), so the crossover grows with the latency: far higher over a network than
// between ranks of one host. Over a network with two ranks the traffic is the same
// and doubling always wins; between ranks of one host it wins only from 4 to 32 KiB.
bool preferDoubling(std::size_t bytes, const Link& link);

}  // namespace accord::mpi

// How a reducing response runs on NCCL, decided from the response alone: which NCCL
// operation, and what scaling pass follows it. Kept apart from NCCL's headers so that it
// is unit-tested in one process without a GPU (tests/ops/unit/test_nccl_reduction.cc).
//
// Average is NCCL's own average (ncclAvg) for float32, bfloat16 and float64 when nothing
// else scales the result and the set's size is a power of two: ncclAvg multiplies each
// input by 1/n before the sum, which is exact for a power of two (while x / n stays a
// normal number: above 2^-126, or 2^-1022) and gives the host path's bits (sum, then
// divide once). Otherwise, and always for float16 (whose normal numbers end at 2^-14,
// where small gradients lie), Sum, with the division by the set size folded into the
// postscale pass, which rounds as cpu::scale does. So a device Average is the sum
// divided once, as on the host, in every dtype on any number of ranks.
#pragma once

#include "ops/common/scaling.h"
#include "runtime/message.h"

namespace accord::nccl {

enum class ReduceKind { Sum, Min, Max, Product, Average };

struct ReductionPlan {
  ReduceKind op = ReduceKind::Sum;
  Scaling post;  // applied to the result after NCCL's reduction; isOne() for none
};
ReductionPlan planReduction(const Response& response, int set_size);

// Whether NCCL can reduce `dtype`. It has no int16, uint16 or bool: their allreduces
// and reducescatters fall through to the staged MPI ops (ops/cuda/staging.cc), which
// reduce them in host memory; broadcast, allgather and alltoall move bytes on NCCL.
bool reducesOnNccl(DType dtype);

}  // namespace accord::nccl

#include "ops/nccl/reduction.h"

#include <bit>

namespace accord::nccl {

ReductionPlan planReduction(const Response& response, int set_size) {
  ReductionPlan plan;
  plan.post = postScaling(response, set_size);
  switch (response.op) {
    case ReduceOp::Sum:
      plan.op = ReduceKind::Sum;
      break;
    case ReduceOp::Min:
      plan.op = ReduceKind::Min;
      break;
    case ReduceOp::Max:
      plan.op = ReduceKind::Max;
      break;
    case ReduceOp::Product:
      plan.op = ReduceKind::Product;
      break;
    case ReduceOp::Average:
      plan.op = ReduceKind::Sum;
      // float16 takes the pass: ncclAvg multiplies in the input's precision, and
      // x / n rounds once it is below float16's smallest normal number (2^-14, where
      // small gradients are), or the sum that the host path rounds to inf stays finite.
      // For float32, bfloat16 and float64 those limits lie at 2^-126 and 2^-1022, and
      // near their largest numbers.
      if (is_floating_point(response.dtype) && response.dtype != DType::Float16 &&
          std::has_single_bit(static_cast<unsigned>(set_size)) && response.prescale == 1.0 &&
          response.postscale == 1.0) {
        plan.op = ReduceKind::Average;
        plan.post = Scaling{};
      }
      break;
    case ReduceOp::Adasum:  // the staged host op takes it (allreduce.cc's enabled())
      throw InvalidArgument("NCCL has no Adasum reduction");
  }
  return plan;
}

bool reducesOnNccl(DType dtype) {
  return dtype != DType::Int16 && dtype != DType::UInt16 && dtype != DType::Bool;
}

}  // namespace accord::nccl

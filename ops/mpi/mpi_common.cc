// Shared helpers of the MPI ops (see mpi_common.h).
#include "ops/mpi/mpi_common.h"

#include "ops/cpu/kernels.h"
#include "ops/mpi/link.h"

namespace accord {

int ExecContext::rank() const { return link.rank(); }
int ExecContext::size() const { return link.size(); }

namespace mpi {

std::string describe(const Response& response) {
  std::string out = responseTypeName(response.type);
  for (std::size_t i = 0; i < response.names.size(); ++i)
    out += (i ? ", '" : " '") + response.names[i] + "'";
  return out;
}

std::string describeTensor(const Response& response, std::size_t i) {
  return std::string(responseTypeName(response.type)) + " '" + response.names.at(i) + "'";
}

std::size_t rowBytes(const Shape& shape, DType dtype) {
  std::int64_t elems = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) elems *= shape[d];
  return static_cast<std::size_t>(elems) * dtype_size(dtype);
}

void checkInput(const Response& response, std::size_t i, const TensorEntry& entry,
                std::size_t bytes) {
  const TensorView& t = entry.tensor;
  if (t.dtype != response.dtype || t.bytes() != bytes || (bytes > 0 && t.data == nullptr))
    throw InvalidArgument(describeTensor(response, i) + ": local input is " + dtype_name(t.dtype) +
                          shape_string(t.shape) + " (" + std::to_string(t.bytes()) +
                          " bytes), the negotiated response needs " + dtype_name(response.dtype) +
                          " with " + std::to_string(bytes) + " bytes");
}

bool prepareLocal(TensorEntry& entry, const std::function<void()>& prepare) {
  try {
    prepare();
    return true;
  } catch (...) {
    entry.error = std::current_exception();
    return false;
  }
}

TensorView allocateOutput(const Response& response, std::size_t i, TensorEntry& entry,
                          const Shape& shape) {
  if (!entry.output)
    throw InvalidArgument(describeTensor(response, i) + ": no output allocator was given");
  TensorView out = entry.output(shape);
  const std::size_t need =
      static_cast<std::size_t>(num_elements(shape)) * dtype_size(response.dtype);
  if (out.dtype != response.dtype || out.bytes() < need || (need > 0 && out.data == nullptr))
    throw InvalidArgument(
        describeTensor(response, i) + ": the output allocator returned " + dtype_name(out.dtype) +
        shape_string(out.shape) + (out.data ? "" : " with no storage") + ", expected " +
        dtype_name(response.dtype) + shape_string(shape) + " (" + std::to_string(need) + " bytes)");
  return out;
}

void* outputOrSpare(ExecContext& ctx, const Response& response, std::size_t i, TensorEntry& entry,
                    const Shape& shape) {
  void* out = nullptr;
  if (prepareLocal(entry, [&] { out = allocateOutput(response, i, entry, shape).data; }))
    return out;
  const std::size_t bytes =
      static_cast<std::size_t>(num_elements(shape)) * dtype_size(response.dtype);
  return ctx.spare.reserve(bytes);
}

Scaling preScaling(const Response& response) { return {response.prescale, 1.0}; }

Scaling postScaling(const Response& response, int set_size) {
  // Average divides after the sum; folding it into the postscale pass saves a pass.
  return {response.postscale, response.op == ReduceOp::Average ? double(set_size) : 1.0};
}

void applyScaling(const Scaling& s, void* data, std::size_t count, DType dtype) {
  if (!s.isOne() && count > 0) cpu::scale(data, count, dtype, s.factor, s.divisor);
}

}  // namespace mpi
}  // namespace accord

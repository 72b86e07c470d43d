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

std::vector<std::vector<std::size_t>> allgatherBytes(const Response& response, int size) {
  const std::size_t n = response.names.size();
  if (response.rank_rows.size() != n * size)
    throw InvalidArgument(describe(response) + ": rank_rows has " +
                          std::to_string(response.rank_rows.size()) + " values, expected " +
                          std::to_string(n * size));
  std::vector<std::vector<std::size_t>> bytes(n, std::vector<std::size_t>(size));
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t row = rowBytes(response.shapes[t], response.dtype);
    for (int r = 0; r < size; ++r) {
      const std::int64_t rows = response.rank_rows[t * size + r];
      if (rows < 0)
        throw InvalidArgument(describeTensor(response, t) + ": rank " + std::to_string(r) +
                              " has " + std::to_string(rows) + " rows");
      bytes[t][r] = static_cast<std::size_t>(rows) * row;
    }
  }
  return bytes;
}

Exchange alltoallExchange(const Response& response, int me, int n) {
  const std::size_t row = rowBytes(response.shapes[0], response.dtype);
  Exchange x;
  for (int r = 0; r < n; ++r) {
    const std::int64_t to = response.rank_rows[me * n + r];
    const std::int64_t from = response.rank_rows[r * n + me];
    if (to < 0 || from < 0)
      throw InvalidArgument(describe(response) + ": negative split between ranks " +
                            std::to_string(me) + " and " + std::to_string(r));
    x.send_at.push_back(x.send_total);
    x.send.push_back(to * row);
    x.send_total += to * row;
    x.recv_at.push_back(x.recv_total);
    x.recv.push_back(from * row);
    x.recv_total += from * row;
    x.received_rows.push_back(from);
  }
  return x;
}

ScatterPlan reducescatterPlan(const Response& response, int size) {
  ScatterPlan plan;
  plan.per_rank.assign(size, 0);
  for (std::size_t t = 0; t < response.names.size(); ++t) {
    const Shape& shape = response.shapes[t];
    if (shape.empty())
      throw InvalidArgument(describeTensor(response, t) + ": needs at least one dimension");
    plan.row_elems.push_back(rowBytes(shape, response.dtype) / dtype_size(response.dtype));
    plan.rows.emplace_back(size);
    plan.first.emplace_back(size);
    std::int64_t row = 0;
    for (int r = 0; r < size; ++r) {
      plan.rows[t][r] = reducescatter_rows(shape[0], r, size);
      plan.first[t][r] = row;
      row += plan.rows[t][r];
      plan.per_rank[r] += plan.rows[t][r] * plan.row_elems[t];
    }
    plan.total += shape[0] * plan.row_elems[t];
  }
  return plan;
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

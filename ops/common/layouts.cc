// Per-rank layouts of the uneven collectives (see layouts.h).
#include "ops/common/layouts.h"

#include "ops/common/checks.h"

#include <accord/error.h>

namespace accord {

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

}  // namespace accord

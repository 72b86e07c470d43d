// What each rank sends and receives in the collectives whose ranks contribute
// different amounts (allgather, alltoall, reducescatter), derived from the negotiated
// response alone: the same on every backend, whatever moves the bytes.
#pragma once

#include "runtime/message.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accord {

// Bytes of one row: the product of the dims after the first, times the dtype size.
// A 0-d tensor counts as one row of one element.
std::size_t rowBytes(const Shape& shape, DType dtype);

// Allgather: bytes[t][r] is what rank r contributes to tensor t. InvalidArgument when
// rank_rows does not hold one row count per tensor and rank, or a count is negative.
std::vector<std::vector<std::size_t>> allgatherBytes(const Response& response, int size);

// Alltoall: this rank's side of the split matrix, in bytes.
struct Exchange {
  std::vector<std::size_t> send, send_at, recv, recv_at;
  std::vector<std::int64_t> received_rows;
  std::size_t send_total = 0, recv_total = 0;
};
Exchange alltoallExchange(const Response& response, int rank, int size);

// Reducescatter: where each tensor's rows go, in elements.
struct ScatterPlan {
  std::vector<std::size_t> row_elems;            // per tensor
  std::vector<std::vector<std::int64_t>> rows;   // [t][r]: rows rank r receives
  std::vector<std::vector<std::int64_t>> first;  // [t][r]: its first row
  std::vector<std::size_t> per_rank;             // [r]: elements of all tensors rank r gets
  std::size_t total = 0;                         // elements of the whole input
};
ScatterPlan reducescatterPlan(const Response& response, int size);

}  // namespace accord

// Helpers the MPI ops share: how messages name tensors, argument checks, output
// allocation that never leaves the other ranks waiting, and scaling.
#pragma once

#include "ops/op.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace accord::mpi {

// "allreduce 'a', 'b'": how error messages name a response's tensors.
std::string describe(const Response& response);
std::string describeTensor(const Response& response, std::size_t i);

// Bytes of one row: the product of the dims after the first, times the dtype size.
// A 0-d tensor counts as one row of one element.
std::size_t rowBytes(const Shape& shape, DType dtype);

// Layouts both backends derive from a negotiated response, whatever moves the bytes.

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

// Throws InvalidArgument unless entry's input has `dtype` and exactly `bytes` bytes.
void checkInput(const Response& response, std::size_t i, const TensorEntry& entry,
                std::size_t bytes);

// Runs `prepare` (a check or an output allocation of this rank's entry). When it
// throws, the error goes into entry.error and this returns false: the caller then does
// this rank's part with scratch space, as a joined rank does, so the other ranks are
// never left waiting in the collective, and the handle fails afterwards.
bool prepareLocal(TensorEntry& entry, const std::function<void()>& prepare);
// Calls entry.output(shape) and checks the view: right dtype, at least numel(shape)
// elements, non-null storage when non-empty.
TensorView allocateOutput(const Response& response, std::size_t i, TensorEntry& entry,
                          const Shape& shape);
// entry's output for `shape` through prepareLocal; on failure a stand-in of the same
// size from ctx.spare, whose contents are discarded.
void* outputOrSpare(ExecContext& ctx, const Response& response, std::size_t i, TensorEntry& entry,
                    const Shape& shape);

// Scaling applied around a reduction: prescale, then postscale divided by the set
// size for Average. isOne() lets callers skip a pass that would multiply by 1.
struct Scaling {
  double factor = 1.0;
  double divisor = 1.0;
  bool isOne() const { return factor == 1.0 && divisor == 1.0; }
};
Scaling preScaling(const Response& response);
Scaling postScaling(const Response& response, int set_size);
void applyScaling(const Scaling& s, void* data, std::size_t count, DType dtype);

}  // namespace accord::mpi

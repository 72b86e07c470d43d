// Alltoall on host memory with MPI.
//
// response.rank_rows is the full split matrix, rows sent from src to dst at
// [src * size + dst], so every rank computes both its send and receive layouts without
// another exchange; then one MPI_Alltoallv moves the bytes straight from the input to
// the output. Counts above INT_MAX bytes are expressed in a larger contiguous unit
// (ByteLayout); only when that fails too does the op throw, naming the tensor.
// A joined rank sends zeros for any rows assigned to it and receives into scratch.
#include "ops/mpi/mpi_check.h"
#include "ops/mpi/mpi_common.h"
#include "ops/mpi/mpi_ops.h"

#include <cstring>

namespace accord {
namespace {

// This rank's side of the split matrix, in bytes.
struct Exchange {
  std::vector<std::size_t> send, send_at, recv, recv_at;
  std::vector<std::int64_t> received_rows;
  std::size_t send_total = 0, recv_total = 0;
};

Exchange plan(const ExecContext& ctx, const Response& response) {
  const int n = ctx.size;
  const std::size_t row = mpi::rowBytes(response.shapes[0], response.dtype);
  Exchange x;
  for (int r = 0; r < n; ++r) {
    const std::int64_t to = response.rank_rows[ctx.rank * n + r];
    const std::int64_t from = response.rank_rows[r * n + ctx.rank];
    if (to < 0 || from < 0)
      throw InvalidArgument(mpi::describe(response) + ": negative split between ranks " +
                            std::to_string(ctx.rank) + " and " + std::to_string(r));
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

class MpiAlltoall final : public Op {
 public:
  explicit MpiAlltoall(FusionBuffer& buffer) : buffer_(buffer) {}

  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Alltoall && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& ctx, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    const int n = ctx.size;
    if (response.names.size() != 1 || response.rank_rows.size() != std::size_t(n) * n)
      throw InvalidArgument(mpi::describe(response) + ": expected one tensor and a " +
                            std::to_string(n) + "x" + std::to_string(n) + " split matrix, got " +
                            std::to_string(response.names.size()) + " tensors and " +
                            std::to_string(response.rank_rows.size()) + " splits");
    const Exchange x = plan(ctx, response);
    const void* in;
    void* out;
    if (TensorEntry* entry = entries[0]) {
      mpi::checkInput(response, 0, *entry, x.send_total);
      Shape shape = response.shapes[0].empty() ? Shape{0} : response.shapes[0];
      shape[0] = 0;
      for (std::int64_t rows : x.received_rows) shape[0] += rows;
      in = entry->tensor.data;
      out = mpi::allocateOutput(response, 0, *entry, shape).data;
      entry->received_splits = x.received_rows;
    } else {
      char* scratch = buffer_.reserve(alignUp(x.send_total) + x.recv_total);
      std::memset(scratch, 0, x.send_total);
      in = scratch;
      out = scratch + alignUp(x.send_total);
    }
    bool any = false;  // the whole matrix is known, so all ranks agree on skipping
    for (std::int64_t rows : response.rank_rows) any = any || rows > 0;
    if (!any || mpi::rowBytes(response.shapes[0], response.dtype) == 0) return;
    const mpi::ByteLayout send(x.send, x.send_at, mpi::describe(response) + " (send)");
    const mpi::ByteLayout recv(x.recv, x.recv_at, mpi::describe(response) + " (receive)");
    ACCORD_MPI_CHECK(MPI_Alltoallv(mpi::nonNull(in), send.counts.data(), send.displs.data(),
                                   send.type, mpi::nonNull(out), recv.counts.data(),
                                   recv.displs.data(), recv.type, ctx.comm));
  }

 private:
  FusionBuffer& buffer_;
};

}  // namespace

std::unique_ptr<Op> makeMpiAlltoall(FusionBuffer& buffer) {
  return std::make_unique<MpiAlltoall>(buffer);
}

}  // namespace accord

// Alltoall on host memory: every rank sends each peer its rows and receives the
// peer's, all at once, as point-to-point messages straight from the input to the
// output.
//
// response.rank_rows is the full split matrix, rows sent from src to dst at
// [src * size + dst], so every rank computes both its send and receive layouts without
// another exchange. A joined rank sends zeros for any rows assigned to it and receives
// into scratch, as does a rank whose output allocator failed (its handle then fails).
#include "ops/common/checks.h"
#include "ops/common/layouts.h"
#include "ops/mpi/context.h"
#include "ops/mpi/link.h"
#include "ops/mpi/mpi_ops.h"

#include <cstring>

namespace accord::mpi {

namespace {

constexpr int kAlltoallTag = 0x4154;

// Peers are visited starting after this rank, so that not every rank sends to rank 0
// first; this rank's own rows are a copy.
void exchange(Context& ctx, const Exchange& x, const char* in, char* out, const std::string& what) {
  const int n = ctx.size(), me = ctx.rank();
  Requests requests;
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n;
    ctx.link.recv(requests, out + x.recv_at[peer], x.recv[peer], peer, kAlltoallTag);
  }
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n;
    ctx.link.send(requests, in + x.send_at[peer], x.send[peer], peer, kAlltoallTag);
  }
  if (x.send[me] > 0) std::memcpy(out + x.recv_at[me], in + x.send_at[me], x.send[me]);
  ctx.link.await(requests, what, "exchange its rows", Patience::Data);
}

class AlltoallOp final : public Op {
 public:
  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Alltoall && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& exec, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    Context ctx = contextOf(exec);
    const int n = ctx.size();
    if (response.names.size() != 1 || response.rank_rows.size() != std::size_t(n) * n)
      throw InvalidArgument(describe(response) + ": expected one tensor and a " +
                            std::to_string(n) + "x" + std::to_string(n) + " split matrix, got " +
                            std::to_string(response.names.size()) + " tensors and " +
                            std::to_string(response.rank_rows.size()) + " splits");
    const Exchange x = alltoallExchange(response, ctx.rank(), ctx.size());
    const char* in = nullptr;
    char* out = nullptr;
    TensorEntry* e = entries[0];
    if (localInput(response, 0, e, x.send_total)) {
      Shape shape = response.shapes[0].empty() ? Shape{0} : response.shapes[0];
      shape[0] = 0;
      for (std::int64_t rows : x.received_rows) shape[0] += rows;
      in = static_cast<const char*>(e->tensor.data);
      out = static_cast<char*>(outputOrSpare(ctx.spare, response, 0, *e, shape));
      e->received_splits = x.received_rows;
    } else {
      char* scratch = ctx.spare.reserve(alignUp(x.send_total) + x.recv_total);
      std::memset(scratch, 0, x.send_total);
      in = scratch;
      out = scratch + alignUp(x.send_total);
    }
    exchange(ctx, x, in, out, describe(response));
  }
};

}  // namespace

std::unique_ptr<Op> makeAlltoall() { return std::make_unique<AlltoallOp>(); }

}  // namespace accord::mpi

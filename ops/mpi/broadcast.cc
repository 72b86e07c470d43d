// Broadcast on host memory: in place from response.root, down a binomial tree of
// point-to-point messages (tree.h).
//
// Large tensors go in pieces of ACCORD_CHUNK_BYTES and are pipelined: a rank passes
// piece p on to its children while it receives piece p + 1, so a chain of ranks works
// on consecutive pieces at once. A joined rank receives into scratch space and
// discards it (zeros if it were ever the root), as does a rank whose own tensor does
// not match the negotiated response, whose handle then fails.
#include "ops/common/checks.h"
#include "ops/mpi/context.h"
#include "ops/mpi/link.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/tree.h"

#include <algorithm>
#include <cstring>
#include <deque>

namespace accord::mpi {

namespace {

constexpr int kBroadcastTag = 0x4243 + 0x100;

void broadcastTree(Context& ctx, char* data, std::size_t bytes, int root, const std::string& what) {
  if (bytes == 0 || ctx.size() == 1) return;
  const Tree tree = binomialTree(ctx.rank(), ctx.size(), root);
  const std::size_t step = std::max<std::size_t>(1, ctx.config.chunk_bytes);
  const std::size_t pieces = (bytes + step - 1) / step;
  // At most this many pieces in flight to the children: enough to keep the pipeline
  // full, few enough that a child that stops answering is seen (and named) while the
  // other children's pieces have long arrived.
  constexpr std::size_t kWindow = 4;
  std::deque<Requests> sends;
  for (std::size_t p = 0; p < pieces; ++p) {
    const std::size_t lo = bytes * p / pieces, hi = bytes * (p + 1) / pieces;
    if (tree.parent >= 0) {
      Requests receive;
      ctx.link.recv(receive, data + lo, hi - lo, tree.parent, kBroadcastTag);
      ctx.link.await(receive, what, "pass on the broadcast", Patience::Data);
    }
    if (tree.children.empty()) continue;
    if (sends.size() == kWindow) {
      ctx.link.await(sends.front(), what, "receive the broadcast", Patience::Data);
      sends.pop_front();
    }
    sends.emplace_back();
    for (int child : tree.children)
      ctx.link.send(sends.back(), data + lo, hi - lo, child, kBroadcastTag);
  }
  for (auto& piece : sends) ctx.link.await(piece, what, "receive the broadcast", Patience::Data);
}

class BroadcastOp final : public Op {
 public:
  bool enabled(const Response& response) const override {
    return response.type == ResponseType::Broadcast && response.device.type == DeviceType::CPU;
  }

  void execute(ExecContext& exec, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    Context ctx = contextOf(exec);
    if (response.root < 0 || response.root >= ctx.size())
      throw InvalidArgument(describe(response) + ": root rank " + std::to_string(response.root) +
                            " is outside the process set of " + std::to_string(ctx.size()) +
                            " ranks");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::size_t bytes = response.tensorBytes(i);
      TensorEntry* e = entries[i];
      char* data;
      if (localInput(response, i, e, bytes)) {
        data = static_cast<char*>(e->tensor.data);
      } else {
        data = ctx.spare.reserve(bytes);
        if (ctx.rank() == response.root) std::memset(data, 0, bytes);
      }
      broadcastTree(ctx, data, bytes, response.root, describeTensor(response, i));
    }
  }
};

}  // namespace

std::unique_ptr<Op> makeBroadcast() { return std::make_unique<BroadcastOp>(); }

}  // namespace accord::mpi

// Ring reduce-scatter and allgather (see ring.h).
#include "ops/mpi/ring.h"

#include "ops/cpu/kernels.h"
#include "ops/mpi/link.h"

#include <algorithm>
#include <cstring>

namespace accord::mpi {

namespace {

constexpr int kRingTag = 0x5249;

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

std::size_t Blocks::largest() const {
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

Blocks evenBlocks(std::size_t count, std::size_t elem, int size) {
  Blocks b;
  for (int r = 0; r < size; ++r) {
    const std::size_t lo = count * r / size, hi = count * (r + 1) / size;
    b.offset.push_back(lo * elem);
    b.bytes.push_back((hi - lo) * elem);
  }
  return b;
}

// Block b's partial result travels the chain b+1, b+2, ..., b: each rank adds its own
// contribution to what arrives and passes it on, and b adds the last one. Two scratch
// buffers alternate: one receives the next partial while the other is being sent.
void ringReduceScatter(Context& ctx, const void* input, const Blocks& blocks, void* output,
                       DType dtype, ReduceOp op, const Scaling& post, const std::string& what) {
  const int n = ctx.size(), r = ctx.rank();
  const std::size_t elem = dtype_size(dtype);
  const char* in = static_cast<const char*>(input);
  if (n == 1) {
    if (output != in + blocks.offset[0])
      std::memmove(output, in + blocks.offset[0], blocks.bytes[0]);
    applyScaling(post, output, blocks.bytes[0] / elem, dtype);
    return;
  }
  const std::size_t slot = alignUp(blocks.largest());
  char* tmp[2];
  tmp[0] = ctx.scratch.reserve(2 * slot);
  tmp[1] = tmp[0] + slot;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(r - 1 - s, n), recv_block = mod(r - 2 - s, n);
    const char* send_from = s == 0 ? in + blocks.offset[send_block] : tmp[(s - 1) % 2];
    char* partial = tmp[s % 2];
    Requests requests;
    ctx.link.recv(requests, partial, blocks.bytes[recv_block], prev, kRingTag);
    ctx.link.send(requests, send_from, blocks.bytes[send_block], next, kRingTag);
    ctx.link.await(requests, what, "send its part", Patience::Data);
    const void* mine = in + blocks.offset[recv_block];
    const std::size_t count = blocks.bytes[recv_block] / elem;
    if (s < n - 2) {
      cpu::reduce(partial, mine, count, dtype, op);
    } else if (output == mine) {  // recv_block == r: the last contribution, scaled, in place
      cpu::reduceScaleInto(partial, output, count, dtype, op, post.factor, post.divisor);
    } else {
      const void* ins[] = {mine};
      cpu::reduceScaleMirror(partial, ins, count, dtype, op, post.factor, post.divisor, output);
    }
  }
}

void ringAllgather(Context& ctx, void* data, const Blocks& blocks, const std::string& what) {
  const int n = ctx.size(), r = ctx.rank();
  char* d = static_cast<char*>(data);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(r - s, n), recv_block = mod(r - s - 1, n);
    Requests requests;
    ctx.link.recv(requests, d + blocks.offset[recv_block], blocks.bytes[recv_block], prev,
                  kRingTag);
    ctx.link.send(requests, d + blocks.offset[send_block], blocks.bytes[send_block], next,
                  kRingTag);
    ctx.link.await(requests, what, "pass on its part", Patience::Data);
  }
}

}  // namespace accord::mpi

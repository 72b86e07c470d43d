// Recursive-doubling allreduce (see doubling.h).
#include "ops/mpi/doubling.h"

#include "ops/cpu/kernels.h"
#include "ops/mpi/link.h"

namespace accord::mpi {

namespace {

constexpr int kFoldTag = 0x5244, kRoundTag = 0x5245, kUnfoldTag = 0x5246;

// Exchanges `bytes` with `peer`: sends `mine`, receives into `theirs`.
void exchange(Link& link, const void* mine, void* theirs, std::size_t bytes, int peer, int tag,
              const std::string& what) {
  Requests requests;
  link.recv(requests, theirs, bytes, peer, tag);
  link.send(requests, mine, bytes, peer, tag);
  link.await(requests, what, "exchange its partial result", Patience::Data);
}

}  // namespace

bool preferDoubling(std::size_t bytes, const Link& link) {
  const int n = link.size();
  if (n < 2) return false;
  if (!link.spansHosts()) {
    // Open MPI's shared-memory transport sends up to 4 KiB eagerly and larger messages
    // by a single copy after a handshake: at 4 KiB the ring's smaller messages still go
    // eagerly, and above 32 KiB its half-size copies beat doubling's whole-buffer ones.
    constexpr std::size_t kEager = 4u << 10, kLargest = 32u << 10;
    return bytes > kEager && bytes <= kLargest;
  }
  // Across a network, by the textbook cost model: a message round costs a latency plus
  // its bytes, and a latency costs as much as sending kLatencyBytes.
  constexpr double kLatencyBytes = 32 << 10;
  int rounds = 0;
  for (int p = 1; p * 2 <= n; p *= 2) ++rounds;
  if ((n & (n - 1)) != 0) rounds += 2;  // the fold and the unfold
  const double m = static_cast<double>(bytes);
  const double doubling = rounds * (kLatencyBytes + m);
  const double ring = 2.0 * (n - 1) * (kLatencyBytes + m / n);
  return doubling <= ring;
}

void doublingAllreduce(Context& ctx, void* data, std::size_t count, DType dtype, ReduceOp op,
                       const Scaling& post, const std::string& what) {
  Link& link = ctx.link;
  const int n = link.size(), r = link.rank();
  const std::size_t bytes = count * dtype_size(dtype);
  if (n == 1) {
    applyScaling(post, data, count, dtype);
    return;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int q = n - p;  // ranks 0..2q-1 fold in pairs

  // An even rank below 2q sits the rounds out: its partner reduces for both.
  if (r < 2 * q && r % 2 == 0) {
    Requests requests;
    link.send(requests, data, bytes, r + 1, kFoldTag);
    link.await(requests, what, "take its part", Patience::Data);
    link.recv(requests, data, bytes, r + 1, kUnfoldTag);
    link.await(requests, what, "return the result", Patience::Data);
    return;
  }

  const std::size_t slot = alignUp(bytes);
  char* scratch = ctx.scratch.reserve(2 * slot);
  char* slots[2] = {scratch, scratch + slot};
  char* cur = static_cast<char*>(data);  // this rank's partial result
  auto freeSlot = [&] { return cur == slots[0] ? slots[1] : slots[0]; };

  if (r < 2 * q) {  // odd: the even rank before it is the lower operand
    char* in = freeSlot();
    Requests requests;
    link.recv(requests, in, bytes, r - 1, kFoldTag);
    link.await(requests, what, "hand over its part", Patience::Data);
    cpu::reduce(in, cur, count, dtype, op);
    cur = in;
  }
  const int v = r < 2 * q ? r / 2 : r - q;  // rank among the p that take part
  auto real = [q](int w) { return w < q ? 2 * w + 1 : w + q; };
  for (int mask = 1; mask < p; mask *= 2) {
    const int peer_v = v ^ mask;
    char* in = freeSlot();
    exchange(link, cur, in, bytes, real(peer_v), kRoundTag, what);
    const bool last = mask * 2 == p;
    // acc is the lower rank's partial, the other operand the higher one's.
    char* acc = v < peer_v ? cur : in;
    const void* other = v < peer_v ? in : cur;
    if (!last) {
      cpu::reduce(acc, other, count, dtype, op);
      cur = acc;
      continue;
    }
    const void* ins[] = {other};
    cpu::reduceScaleMirror(acc, ins, count, dtype, op, post.factor, post.divisor,
                           acc == data ? nullptr : data);
  }
  if (r < 2 * q) {
    Requests requests;
    link.send(requests, data, bytes, r - 1, kUnfoldTag);
    link.await(requests, what, "take the result", Patience::Data);
  }
}

}  // namespace accord::mpi

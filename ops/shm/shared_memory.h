// Collectives through an MPI-3 shared-memory window, for a communicator whose ranks all
// live on one host: the data allreduce, reduce-scatter and allgather, and the bitwise
// AND that every negotiation cycle runs.
//
// MPI_Allreduce between processes of one host moves large messages with a rendezvous
// and a kernel copy (CMA) per message. Here each rank reads its peers' memory
// directly: every piece of the buffer is split into one block per rank; each rank
// publishes the blocks the others own, reduces its own block from its peers' copies
// and publishes the result in the same pass (post-scale included, while each stretch
// is in L1), then copies the other reduced blocks back. Each block is reduced by one
// rank only, so every rank ends with bit-identical results. Ranks signal progress
// through counters in the window, one cache line each. Reduce-scatter and allgather are
// the first and last halves of that: each rank reduces its own block from its peers'
// copies, or copies each peer's block out of its slot (scatter_gather.cc).
//
// The negotiation's AND goes the same way: each rank writes its bit vector and bumps a
// counter, then ANDs its peers' vectors. That touches a few cache lines where MPI's
// point-to-point path runs through its whole progress engine, which is what a cycle
// costs most when the caches are cold (after the application's compute).
#pragma once

#include "ops/common/scaling.h"
#include "ops/cpu/kernels.h"
#include "ops/shm/layout.h"
#include "runtime/channel.h"

#include <accord/tensor.h>
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accord::shm {

struct SharedMemoryOptions {
  // Allreduce piece; a buffer of up to two pieces goes whole. The same everywhere.
  std::size_t piece_bytes = 1 << 20;
  std::size_t negotiation_words = 1;  // longest vector bitwiseAnd takes; same everywhere
  // Most bytes of small allreduces one negotiation round carries (Carriage::max_bytes);
  // 0: bitwiseAndCarrying is not used. The same everywhere.
  std::size_t carry_bytes = 0;
  // A peer that has not arrived after this long (0: wait forever) is reported as a
  // CommError, and every later call fails at once: the ranks' counters no longer agree.
  std::chrono::milliseconds timeout{0};
  std::vector<int> global_ranks;  // global_ranks[i] names comm's rank i in messages
  // Peers may in turn wait for ranks elsewhere (the hierarchical allreduce's cross-host
  // step): a late peer is then not necessarily the one that failed, and messages say so.
  bool peers_wait_elsewhere = false;
};

class SharedMemory {
 public:
  // The counter line that counts negotiation rounds (the region's layout:
  // shared_memory.cc).
  static constexpr int kRoundsCounter = 3;

  // Collective over `comm`. nullptr when `comm` has one rank or spans several hosts.
  static std::unique_ptr<SharedMemory> create(MPI_Comm comm, SharedMemoryOptions options);
  // Frees the window: collective, so every member destroys it in the same order.
  ~SharedMemory();

  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  // The hierarchical allreduce's step between this host's reduce-scatter and its
  // allgather (the MPI transport's hierarchy): handed this rank's block of a piece, reduced over
  // the host's ranks and not yet scaled, it leaves the block's final value in place.
  using Across = std::function<void(void* block, std::size_t count)>;

  // In-place allreduce of `count` elements, in the same pieces on every rank; `pre`
  // scales this rank's input, `post` the result. `what` names the tensors in errors.
  // With `across`, each rank's reduced block goes through it instead of being scaled by
  // `post`, which `across` then applies.
  void allreduce(void* data, std::size_t count, DType dtype, ReduceOp op, const Scaling& pre,
                 const Scaling& post, const std::string& what, const Across& across = nullptr);
  // The same for data spread over memory (a fused group's tensors, reduced where they
  // lie): the same pieces, blocks and arithmetic as for those tensors packed back to
  // back. `across` takes data in one stretch (the hierarchy's groups go packed).
  void allreduce(const Spread& data, DType dtype, ReduceOp op, const Scaling& pre,
                 const Scaling& post, const std::string& what, const Across& across = nullptr);
  // The blocks of a reduceScatter or an allgather, one per rank, the same on every rank:
  // rank r's starts at first[r] and holds count[r] elements (reduceScatter) or bytes
  // (allgather). Lengths may differ between ranks, and be 0.
  struct Blocks {
    std::vector<std::size_t> first, count;
  };
  // Reduce-scatter: `input` holds this rank's contribution to every block and is only
  // read; `output` (which must not overlap it) receives this rank's block reduced over
  // every rank. `pre` scales each rank's contribution (in the window, never in `input`),
  // `post` the result. Each block is reduced by its owner alone, in the order allreduce
  // uses (the owner's contribution, then the others' in rank order).
  void reduceScatter(const void* input, void* output, DType dtype, ReduceOp op, const Scaling& pre,
                     const Scaling& post, const Blocks& blocks, const std::string& what);
  // The same, each block spread over memory (a fused group's tensors, reduced in place):
  // inputs[r] is where this rank's contribution to block r lies, only read; `output`
  // (overlapping no input) is where its own reduced block goes. Blocks in bytes, whole
  // elements each.
  void reduceScatter(const std::vector<Spread>& inputs, const Spread& output, DType dtype,
                     ReduceOp op, const Scaling& pre, const Scaling& post, const std::string& what);
  // In-place allgather: on entry block rank() of `data` holds this rank's bytes; on
  // return every block holds its owner's.
  void allgather(void* data, const Blocks& blocks, const std::string& what);
  // The same, spread over memory: `mine` holds this rank's bytes, `into[r]` receives
  // rank r's for every other rank r; into[rank()], as long as `mine`, is left alone (the
  // caller puts this rank's bytes in place, if anywhere).
  void allgather(const Spread& mine, const std::vector<Spread>& into, const std::string& what);
  // The allreduce piece from now on (ACCORD_AUTOTUNE changes it while running): at most
  // the options' piece_bytes, for which the window was sized. The same on every rank.
  void setPieceBytes(std::size_t bytes);
  // In-place bitwise AND over every rank; bits.size() <= negotiation_words, the same on
  // every rank. Waits for late peers politely: they may be busy elsewhere for
  // milliseconds.
  void bitwiseAnd(std::vector<std::uint64_t>& bits);
  // bitwiseAnd, and in the same round the allreduce of the small tensors every rank
  // carries (NegotiationChannel::bitwiseAndCarrying): each rank writes its carried
  // inputs, prescaled, beside its bit vector; once every peer's round is in, each rank
  // reduces every carried tensor from all ranks' copies in rank order (the same
  // arithmetic everywhere, so identical results) and scales it into the tensor. A
  // small cached allreduce then costs one wait for the peers instead of four.
  void bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage);
  bool carries() const { return options_.carry_bytes > 0; }
  // Above this many bytes in a round, every rank reducing every carried tensor whole
  // costs more than the allreduce it saves, which splits the work among the ranks
  // (accord-bench, 2 ranks, alternating ACCORD_CARRY_BYTES=64K and 0: 4 KiB carried
  // 0.1-0.9 us faster, 8 KiB the same, 16 KiB 0.3-0.5 us slower, 64 KiB 10-20% slower).
  static constexpr std::size_t kCarryLimit = 8 << 10;

 private:
  // How to wait for a peer: spin this long, then yield until `yield_until`, then sleep,
  // starting at `first_sleep` and doubling up to `max_sleep`; with `block`, asleep on
  // the counter's futex for those times, woken as soon as the peer moves it.
  struct Patience {
    std::chrono::microseconds spin, yield_until, first_sleep, max_sleep;
    bool block = false;
  };

  // The data counters, one cache line each (the region's layout: shared_memory.cc).
  static constexpr int kPublished = 0, kReduced = 1, kCollected = 2;
  // How long data collectives wait for a peer (shared_memory.cc).
  static const Patience kDataPatience;

  SharedMemory() = default;
  char* counterLine(int rank, int which) const;
  void advance(int which, std::uint64_t value);  // my counter `which` = value; wakes waiters
  char* negotiationSlot(int rank, std::uint64_t round) const;
  // A negotiation round (negotiation.cc): beginRound writes `bits` at the front of this
  // rank's slot of the next round, checked to leave `extra` bytes after them, and
  // returns the slot; endRound publishes it, waits for every peer's and ANDs their bits
  // into `bits`.
  char* beginRound(const std::vector<std::uint64_t>& bits, std::size_t extra);
  void endRound(std::vector<std::uint64_t>& bits);
  char* dataSlot(int rank) const;
  // Allreduce piece number ++pieces_: `count` elements of `data` from its byte `at`.
  void piece(const Spread& data, std::size_t at, std::size_t count, DType dtype, ReduceOp op,
             const Scaling& post, const Across& across);
  // One round of reduceScatter / allgather (scatter_gather.cc), with its generation.
  void scatterRound(const std::vector<Spread>& inputs, const Spread& output, DType dtype,
                    ReduceOp op, const Scaling& pre, const Scaling& post, const Rounds& rounds,
                    std::size_t round);
  void gatherRound(const Spread& mine, const std::vector<Spread>& into, const Rounds& rounds,
                   std::size_t round);
  // Waits until every other rank's counter `which` reaches gen.
  void waitForPeers(int which, std::uint64_t gen, const Patience& patience);
  [[noreturn]] void giveUp(int which, int rank);

  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0;
  int size_ = 1;
  SharedMemoryOptions options_;
  std::size_t negotiation_bytes_ = 0;  // one negotiation slot, cache-line aligned
  std::size_t slot_piece_bytes_ = 0;   // options_.piece_bytes, cache-line aligned
  std::size_t piece_bytes_ = 0;        // the piece in use, at most slot_piece_bytes_
  std::vector<char*> bases_;           // every rank's region, mapped into this process
  std::uint64_t pieces_ = 0;           // allreduce pieces so far; the same on every rank
  std::uint64_t rounds_ = 0;           // bitwiseAnd rounds so far; the same on every rank
  std::string broken_;                 // why the transport is unusable; empty while it works
  const std::string* what_ = nullptr;  // the allreduce under way, for messages
  std::vector<const void*> peers_;     // per-piece scratch, kept to avoid allocations
  std::vector<char> carried_;          // a carried tensor's accumulator
  std::vector<std::size_t> at_;        // per peer, where its carried layout was read up to
  // Per rank, the carried slots of the round and their offsets (reused, not reallocated).
  std::vector<std::vector<std::pair<std::uint32_t, std::size_t>>> layouts_;
  std::vector<cpu::CopyPiece> collect_;
  // Where each block's piece of a reduce-scatter round starts in every rank's slot (bytes).
  std::vector<std::size_t> slot_at_;
  std::vector<const void*> peers_at_;  // peers_, moved on to a stretch of the output
};

}  // namespace accord::shm

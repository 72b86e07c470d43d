// SharedMemory (see shared_memory.h).
//
// Region of one rank: four counters, each on its own cache line (data pieces published,
// reduced and collected; negotiation rounds), two negotiation slots, then
// one data slot of two pieces.
//
// A buffer of up to two pieces is reduced whole, a larger one in pieces of piece_bytes.
// Each piece costs three waits for the slowest rank, and those add up, while large
// buffers still run fastest in pieces that stay in L2 (docs/performance.md, "Why the defaults").
//
// Allreduce piece number gen (counted from 1, identical on every rank):
//   0. wait for every peer's collected >= gen - 1: nobody reads my data slot any more
//   1. copy the blocks the peers own into my slot; published = gen; wait for every
//      peer's published >= gen
//   2. my block = op(my block, each peer's copy of it), post-scaled, and mirrored into
//      my slot in the same pass; reduced = gen; wait for every peer's reduced >= gen
//   3. copy each peer's reduced block out of its slot into my buffer; collected = gen
// One data slot rather than two alternating ones keeps the working set small enough to
// stay in L2 between pieces; the wait of step 0 is nearly always over at once, since
// peers collect while I finish my own collection.
//
// Reduce-scatter and allgather rounds (scatter_gather.cc) take their generation from the
// same count of pieces and keep the same promise: collected = gen once a rank has read
// everything it needs from its peers' slots in piece gen, and nobody writes its slot
// for piece gen before every peer's collected >= gen - 1. A round that has no reduced
// step leaves that counter behind, which no wait mistakes for progress (every wait is
// for the generation of its own piece). So the three collectives interleave in any
// order on one window.
//
// A rank that waits long for a peer's counter sleeps in the kernel on it (a futex on
// the counter's low 32 bits, which works across processes on this shared mapping) and
// says so in the line's waiter count; whoever moves a counter with waiters wakes them.
// Negotiation waits that way: a rank that is ahead waits without waking up until the
// late rank arrives, so the application's compute keeps its core.
//
// Negotiation round k writes slot k % 2. A slot is rewritten two rounds later, when its
// readers are done: a peer enters round k + 1 only after reading round k, and I wait
// for every peer's round k + 1 before I start round k + 2.
#include "ops/shm/shared_memory.h"

#include "ops/shm/layout.h"

#include "runtime/host_split.h"
#include "runtime/logging.h"
#include "runtime/mpi_check.h"
#include "runtime/peer_watch.h"

#include <accord/error.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <climits>
#include <ctime>

namespace accord::shm {

namespace {

constexpr std::size_t kLine = 64;
constexpr int kNegotiated = SharedMemory::kRoundsCounter;
// What a peer did not do, by counter, for messages.
constexpr const char* kSteps[] = {"publish its part", "reduce its block", "collect the result",
                                  "join a negotiation round"};
constexpr std::size_t kHeaderBytes = 4 * kLine;
// Far above any piece size ACCORD_CHUNK_BYTES allows; keeps every offset computation
// below in range.
constexpr std::size_t kMaxWindowBytes = std::size_t{1} << 40;

std::size_t roundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::atomic_ref<std::uint64_t> atomicAt(char* line) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(line));
}

// Ranks asleep on a counter line's futex, right after the counter.
std::atomic_ref<std::uint32_t> waitersAt(char* line) {
  return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(line + 8));
}

// The futex word: the counter's low half (x86-64 and AArch64 Linux are little-endian).
std::uint32_t* futexWord(char* line) { return reinterpret_cast<std::uint32_t*>(line); }

void futexWait(char* line, std::uint32_t seen, std::chrono::microseconds timeout) {
  const timespec ts{static_cast<time_t>(timeout.count() / 1000000),
                    static_cast<long>(timeout.count() % 1000000) * 1000};
  // Returns early when woken, when the word no longer holds `seen`, or on a signal;
  // the caller re-reads the counter in every case.
  syscall(SYS_futex, futexWord(line), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futexWakeAll(char* line) {
  syscall(SYS_futex, futexWord(line), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

char* SharedMemory::counterLine(int rank, int which) const { return bases_[rank] + which * kLine; }

char* SharedMemory::negotiationSlot(int rank, std::uint64_t round) const {
  return bases_[rank] + kHeaderBytes + (round % 2) * negotiation_bytes_;
}

char* SharedMemory::dataSlot(int rank) const {
  return bases_[rank] + kHeaderBytes + 2 * negotiation_bytes_;
}

std::unique_ptr<SharedMemory> SharedMemory::create(MPI_Comm comm, SharedMemoryOptions options) {
  int size = 1, rank = 0, host_size = 0;
  ACCORD_MPI_CHECK(MPI_Comm_size(comm, &size));
  ACCORD_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (size < 2) return nullptr;
  MPI_Comm host = splitByHost(comm, rank);
  ACCORD_MPI_CHECK(MPI_Comm_size(host, &host_size));
  MPI_Comm_free(&host);
  // Every rank sees the same sizes, so all of them take the same branch.
  if (host_size != size) return nullptr;

  std::unique_ptr<SharedMemory> s(new SharedMemory());
  s->rank_ = rank;
  s->size_ = size;
  s->options_ = std::move(options);
  auto& ranks = s->options_.global_ranks;
  if (static_cast<int>(ranks.size()) != size) {
    ranks.resize(size);
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  // The sizes come from validated settings, but a window that wraps around would
  // corrupt silently: check the arithmetic anyway.
  const std::size_t words = std::max<std::size_t>(s->options_.negotiation_words, 1);
  const std::size_t piece = std::max<std::size_t>(s->options_.piece_bytes, kLine);
  std::size_t bytes = 0;
  if (words > kMaxWindowBytes / 8 || piece > kMaxWindowBytes / 2)
    throw InvalidArgument("shared-memory transport: " + std::to_string(piece) +
                          "-byte pieces and " + std::to_string(words) +
                          " negotiation words do not fit a window");
  // A round's slot: the bit vector, then (when carrying) the carried tensors.
  const std::size_t carry = s->options_.carry_bytes;
  if (carry > kMaxWindowBytes / 4)
    throw InvalidArgument("shared-memory transport: " + std::to_string(carry) +
                          " carried bytes per round do not fit a window");
  s->negotiation_bytes_ = roundUp(carry ? carriedFootprint(words * 8) + carry : words * 8, kLine);
  s->slot_piece_bytes_ = s->piece_bytes_ = roundUp(piece, kLine);
  bytes =
      kHeaderBytes + 2 * s->negotiation_bytes_ + 2 * s->slot_piece_bytes_;  // data slot: two pieces
  MPI_Info info;
  ACCORD_MPI_CHECK(MPI_Info_create(&info));
  // Each rank's region in its own pages, placed near that rank.
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char* mine = nullptr;
  const int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, comm, &mine, &s->win_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    throw CommError("shared-memory transport: cannot allocate " + std::to_string(bytes) +
                    " bytes of shared memory per rank (" + detail::mpiErrorString(rc) +
                    "); the file system MPI maps it from (/dev/shm or /tmp) may be too small for " +
                    std::to_string(size) +
                    " ranks: lower ACCORD_CHUNK_BYTES (each rank holds "
                    "two pieces) or set ACCORD_SHARED_MEMORY=0");
  }
  ACCORD_MPI_CHECK(MPI_Win_set_errhandler(s->win_, MPI_ERRORS_RETURN));
  s->bases_.resize(size);
  for (int r = 0; r < size; ++r) {
    MPI_Aint got = 0;
    int unit = 0;
    ACCORD_MPI_CHECK(MPI_Win_shared_query(s->win_, r, &got, &unit, &s->bases_[r]));
  }
  // Loads and stores from here on are synchronized by the counters; the passive epoch
  // makes that legal under MPI's unified memory model. Zeroing the header is the first
  // store: MPI_Win_sync makes it visible to the other processes before the barrier
  // tells them to look, and the second sync orders their later loads after it.
  ACCORD_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win_));
  std::memset(mine, 0, kHeaderBytes);
  ACCORD_MPI_CHECK(MPI_Win_sync(s->win_));
  ACCORD_MPI_CHECK(MPI_Barrier(comm));
  ACCORD_MPI_CHECK(MPI_Win_sync(s->win_));
  return s;
}

SharedMemory::~SharedMemory() {
  if (win_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);  // nothing useful to do with a failure while tearing down
}

void SharedMemory::waitForPeers(int which, std::uint64_t gen, const Patience& patience) {
  const auto start = std::chrono::steady_clock::now();
  auto sleep = patience.first_sleep;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto c = atomicAt(counterLine(r, which));
    for (unsigned spins = 1; c.load(std::memory_order_acquire) < gen; ++spins) {
      cpuRelax();
      if (spins % 64 != 0) continue;  // the clock costs more than a probe: read it rarely
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited < patience.spin) continue;
      if (waited < patience.yield_until) {
        std::this_thread::yield();
        continue;
      }
      if (options_.timeout.count() > 0 && waited >= options_.timeout) giveUp(which, r);
      // Asleep on a peer: say so, for failure messages written on other threads.
      PeerWatch::instance().waiting(start, {options_.global_ranks[r]}, kSteps[which]);
      if (patience.block) {
        // Seq_cst on both sides: either the peer's advance() sees this waiter and wakes
        // it, or the re-read below sees the peer's new count.
        auto waiters = waitersAt(counterLine(r, which));
        waiters.fetch_add(1, std::memory_order_seq_cst);
        const std::uint64_t now = c.load(std::memory_order_seq_cst);
        if (now < gen)
          futexWait(counterLine(r, which), static_cast<std::uint32_t>(now), patience.max_sleep);
        waiters.fetch_sub(1, std::memory_order_seq_cst);
      } else {
        std::this_thread::sleep_for(sleep);
      }
      sleep = std::min(sleep * 2, patience.max_sleep);
    }
  }
  PeerWatch::instance().waitEnded();
}

void SharedMemory::advance(int which, std::uint64_t value) {
  char* line = counterLine(rank_, which);
  atomicAt(line).store(value, std::memory_order_seq_cst);
  if (waitersAt(line).load(std::memory_order_seq_cst) != 0) futexWakeAll(line);
}

void SharedMemory::giveUp(int which, int rank) {
  const auto& step = kSteps;
  const std::string what = which == kNegotiated || !what_ ? std::string("negotiation") : *what_;
  if (options_.peers_wait_elsewhere) {
    // The peer may be alive and stuck behind a rank on another host (the hierarchical
    // allreduce): the roll call among all ranks finds who really stopped.
    const std::string verdict = PeerWatch::instance().callRoll({options_.global_ranks[rank]},
                                                               step[which], options_.timeout);
    if (!verdict.empty()) {
      broken_ = what + ": " + verdict;
      throw CommError(broken_);
    }
  }
  broken_ = what + ": rank " + std::to_string(options_.global_ranks[rank]) + " did not " +
            step[which] + " within " + secondsText(options_.timeout) +
            " s (ACCORD_STALL_SHUTDOWN_TIME, shared-memory transport): " +
            (options_.peers_wait_elsewhere ? "it, or a rank it waits for in turn, has died or hangs"
                                           : "it has died or hangs") +
            ". Accord cannot go on without it; every pending and later collective fails";
  throw CommError(broken_);
}

// Peers normally arrive within microseconds. One that was descheduled (more ranks than
// cores, or the application's compute on them) needs a core, so yield; past 100 us sleep
// on the futex until it arrives, leaving the core to the compute.
const SharedMemory::Patience SharedMemory::kDataPatience{
    std::chrono::microseconds(20), std::chrono::microseconds(100), std::chrono::microseconds(20),
    std::chrono::microseconds(100000), true};

void SharedMemory::piece(const Spread& data, std::size_t at, std::size_t count, DType dtype,
                         ReduceOp op, const Scaling& post, const Across& across) {
  const std::size_t elem = dtype_size(dtype);
  const std::uint64_t gen = ++pieces_;
  // Block b of the piece: the data's bytes [at + begin(b), at + begin(b + 1)).
  auto begin = [&](int block) { return blockBegin(count, block, size_) * elem; };
  auto length = [&](int block) { return begin(block + 1) - begin(block); };
  char* mine = dataSlot(rank_);
  auto stretches = [&](int block, auto&& f) {
    data.visit(at + begin(block), at + begin(block + 1), f);
  };

  // 0-1. Once the peers are done with my slot, publish the blocks they reduce.
  waitForPeers(kCollected, gen - 1, kDataPatience);
  collect_.clear();  // here: what to publish
  for (int r = 0; r < size_; ++r)
    if (r != rank_)
      stretches(r, [&](char* p, std::size_t from, std::size_t n) {
        collect_.push_back({mine + begin(r) + from, p, n});
      });
  cpu::parallelCopy(collect_);
  advance(kPublished, gen);
  waitForPeers(kPublished, gen, kDataPatience);

  // 2. Reduce my block from every peer's copy, in rank order, and publish it: one call
  // per stretch of it (a buffer reduced in place is one stretch).
  auto reduce = [&](char* p, std::size_t from, std::size_t n, const Scaling& scale, char* mirror) {
    peers_.clear();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) peers_.push_back(dataSlot(r) + begin(rank_) + from);
    cpu::reduceScaleMirror(p, peers_, n / elem, dtype, op, scale.factor, scale.divisor, mirror);
  };
  if (!across) {
    stretches(rank_, [&](char* p, std::size_t from, std::size_t n) {
      reduce(p, from, n, post, mine + begin(rank_) + from);
    });
  } else {
    // The block is final only once the other hosts' shares are in: scaling waits for
    // the last pass over it, across hosts. Peers wait meanwhile on `reduced` with the
    // same deadline as for any late peer. The hierarchy hands whole buffers: one
    // stretch.
    char* block = nullptr;
    stretches(rank_, [&](char* p, std::size_t from, std::size_t n) {
      reduce(p, from, n, Scaling{}, nullptr);
      block = p - from;
    });
    try {
      if (length(rank_) > 0) across(block, length(rank_) / elem);
    } catch (const std::exception& e) {
      // The peers' counters no longer agree with mine: nothing can use the window now.
      broken_ = e.what();
      throw;
    }
    if (length(rank_) > 0) std::memcpy(mine + begin(rank_), block, length(rank_));
  }
  advance(kReduced, gen);
  waitForPeers(kReduced, gen, kDataPatience);

  // 3. Collect the other reduced blocks.
  collect_.clear();
  for (int r = 0; r < size_; ++r)
    if (r != rank_)
      stretches(r, [&](char* p, std::size_t from, std::size_t n) {
        collect_.push_back({p, dataSlot(r) + begin(r) + from, n});
      });
  cpu::parallelCopy(collect_);
  advance(kCollected, gen);
}

void SharedMemory::allreduce(const Spread& data, DType dtype, ReduceOp op, const Scaling& pre,
                             const Scaling& post, const std::string& what, const Across& across) {
  if (!broken_.empty()) throw CommError(broken_);
  if (across && data.stretches() > 1)
    throw InvalidArgument("shared-memory allreduce " + what +
                          ": the step across hosts takes one buffer, not " +
                          std::to_string(data.stretches()) + " stretches");
  what_ = &what;
  const std::size_t elem = dtype_size(dtype);
  const Pieces pieces(data.bytes() / elem, piece_bytes_ / elem);
  for (std::size_t i = 0; i < pieces.pieces; ++i) {
    const std::size_t lo = pieces.begin(i), hi = pieces.begin(i + 1);
    data.visit(lo * elem, hi * elem,
               [&](char* p, std::size_t, std::size_t n) { applyScaling(pre, p, n / elem, dtype); });
    piece(data, lo * elem, hi - lo, dtype, op, post, across);
  }
  what_ = nullptr;
}

void SharedMemory::allreduce(void* data, std::size_t count, DType dtype, ReduceOp op,
                             const Scaling& pre, const Scaling& post, const std::string& what,
                             const Across& across) {
  allreduce(Spread(static_cast<char*>(data), count * dtype_size(dtype)), dtype, op, pre, post, what,
            across);
}

void SharedMemory::setPieceBytes(std::size_t bytes) {
  piece_bytes_ = std::min(roundUp(std::max<std::size_t>(bytes, kLine), kLine), slot_piece_bytes_);
}

}  // namespace accord::shm

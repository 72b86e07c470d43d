// Hierarchy (see hierarchical.h).
#include "ops/mpi/hierarchical.h"

#include "ops/mpi/doubling.h"
#include "ops/mpi/ring.h"
#include "runtime/autotune.h"
#include "runtime/config.h"
#include "runtime/logging.h"
#include "runtime/mpi_check.h"

#include <accord/error.h>

#include <numeric>

namespace accord::mpi {

namespace {

// The global ranks of `sub`'s members, in `sub`'s rank order, for messages.
std::vector<int> globalRanksOf(MPI_Comm sub, const Link& set) {
  MPI_Group sub_group, set_group;
  ACCORD_MPI_CHECK(MPI_Comm_group(sub, &sub_group));
  ACCORD_MPI_CHECK(MPI_Comm_group(set.comm(), &set_group));
  int n = 0;
  ACCORD_MPI_CHECK(MPI_Group_size(sub_group, &n));
  std::vector<int> in(n), out(n);
  std::iota(in.begin(), in.end(), 0);
  ACCORD_MPI_CHECK(MPI_Group_translate_ranks(sub_group, n, in.data(), set_group, out.data()));
  MPI_Group_free(&sub_group);
  MPI_Group_free(&set_group);
  for (int& r : out) r = set.globalRank(r);
  return out;
}

}  // namespace

std::unique_ptr<Hierarchy> Hierarchy::create(Link& set, const Config& config) {
  if (!config.hierarchical_allreduce || !config.shared_memory || set.size() < 2) return nullptr;
  MPI_Comm host;
  ACCORD_MPI_CHECK(
      MPI_Comm_split_type(set.comm(), MPI_COMM_TYPE_SHARED, set.rank(), MPI_INFO_NULL, &host));
  int local_rank = 0, local_size = 0;
  ACCORD_MPI_CHECK(MPI_Comm_rank(host, &local_rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(host, &local_size));
  // The largest and the smallest host, and the number of hosts: the same on every rank,
  // so every rank takes the same branch below.
  int extremes[2] = {local_size, -local_size};
  int hosts = local_rank == 0 ? 1 : 0;
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT, MPI_MAX, set.comm()));
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hosts, 1, MPI_INT, MPI_SUM, set.comm()));
  const int largest = extremes[0], smallest = -extremes[1];
  const char* flat = nullptr;
  if (hosts < 2)
    flat = "all its ranks share one host (the shared-memory transport reduces it whole)";
  else if (largest != smallest)
    flat = "its hosts hold different numbers of its ranks";
  else if (local_size < 2)
    flat = "each host holds one of its ranks";
  if (flat) {
    MPI_Comm_free(&host);
    log().debug(
        "ACCORD_HIERARCHICAL_ALLREDUCE: a process set of {} ranks on {} hosts ({}..{} "
        "per host) reduces with the flat MPI ring: {}",
        set.size(), hosts, smallest, largest, flat);
    return nullptr;
  }

  std::unique_ptr<Hierarchy> h(new Hierarchy());
  h->host_ = host;
  SharedMemoryOptions options;
  options.piece_bytes = Autotuner::maxChunkBytes(config);
  options.timeout = config.stall_shutdown_time;
  options.global_ranks = globalRanksOf(host, set);
  options.peers_wait_elsewhere = true;
  h->local_ = SharedMemory::create(host, std::move(options));
  if (!h->local_)  // cannot happen: host has >= 2 ranks, all on this host
    throw CommError("hierarchical allreduce: no shared-memory window among this host's ranks");
  MPI_Comm across;
  ACCORD_MPI_CHECK(MPI_Comm_split(set.comm(), local_rank, set.rank(), &across));
  auto across_ranks = globalRanksOf(across, set);
  h->across_ = std::make_unique<Link>(across, std::move(across_ranks), config.stall_shutdown_time);
  log().debug(
      "ACCORD_HIERARCHICAL_ALLREDUCE: a process set of {} ranks reduces in {} hosts x "
      "{} ranks",
      set.size(), hosts, local_size);
  return h;
}

Hierarchy::~Hierarchy() {
  local_.reset();  // frees the window, which lives on host_
  if (host_ != MPI_COMM_NULL) MPI_Comm_free(&host_);
}

void Hierarchy::allreduce(ExecContext& ctx, void* data, std::size_t count, DType dtype, ReduceOp op,
                          const Scaling& pre, const Scaling& post, const std::string& what) {
  // The ring needs only a link and scratch space; it runs on the ranks that share this
  // rank's local index, with the set's buffers.
  ExecContext across{*across_,    nullptr,   ctx.config,    ctx.fusion,
                     ctx.scratch, ctx.spare, ctx.extension, nullptr};
  const std::size_t elem = dtype_size(dtype);
  local_->setPieceBytes(ctx.config.chunk_bytes);  // autotune may have changed it
  local_->allreduce(data, count, dtype, op, pre, post, what, [&](void* block, std::size_t n) {
    char* b = static_cast<char*>(block);
    if (preferDoubling(n * elem, across.link))
      return doublingAllreduce(across, b, n, dtype, op, post, what);
    const Blocks blocks = evenBlocks(n, elem, across.size());
    // Post-scaling (Average's division included) rides on the ring's last reduction.
    ringReduceScatter(across, b, blocks, b + blocks.offset[across.rank()], dtype, op, post, what);
    ringAllgather(across, b, blocks, what);
  });
}

}  // namespace accord::mpi

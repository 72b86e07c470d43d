// Hierarchy (see hierarchical.h).
#include "ops/mpi/hierarchical.h"

#include "ops/mpi/doubling.h"
#include "ops/mpi/ring.h"
#include "runtime/autotune.h"
#include "runtime/config.h"
#include "runtime/host_split.h"
#include "runtime/logging.h"
#include "runtime/mpi_check.h"

#include <accord/error.h>

#include <numeric>

namespace accord::mpi {

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

HostSplit splitByHost(const Link& set) {
  HostSplit split;
  split.host = accord::splitByHost(set.comm(), set.rank());
  ACCORD_MPI_CHECK(MPI_Comm_rank(split.host, &split.local_rank));
  ACCORD_MPI_CHECK(MPI_Comm_size(split.host, &split.local_size));
  int extremes[2] = {split.local_size, -split.local_size};
  split.hosts = split.local_rank == 0 ? 1 : 0;
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT, MPI_MAX, set.comm()));
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &split.hosts, 1, MPI_INT, MPI_SUM, set.comm()));
  split.largest = extremes[0];
  split.smallest = -extremes[1];
  return split;
}

std::unique_ptr<Link> linkAcrossHosts(const Link& set, const HostSplit& split,
                                      std::chrono::milliseconds timeout) {
  MPI_Comm across;
  ACCORD_MPI_CHECK(MPI_Comm_split(set.comm(), split.local_rank, set.rank(), &across));
  auto ranks = globalRanksOf(across, set);
  return std::make_unique<Link>(across, std::move(ranks), timeout);
}

std::unique_ptr<Hierarchy> Hierarchy::create(Link& set, const Config& config) {
  if (!config.hierarchical_allreduce || !config.shared_memory || set.size() < 2) return nullptr;
  HostSplit split = splitByHost(set);
  const char* flat = nullptr;
  if (split.hosts < 2)
    flat = "all its ranks share one host (the shared-memory transport reduces it whole)";
  else if (split.largest != split.smallest)
    flat = "its hosts hold different numbers of its ranks";
  else if (split.local_size < 2)
    flat = "each host holds one of its ranks";
  if (flat) {
    MPI_Comm_free(&split.host);
    log().debug(
        "ACCORD_HIERARCHICAL_ALLREDUCE: a process set of {} ranks on {} hosts ({}..{} "
        "per host) reduces with the flat MPI ring: {}",
        set.size(), split.hosts, split.smallest, split.largest, flat);
    return nullptr;
  }
  std::unique_ptr<Hierarchy> h(new Hierarchy());
  h->host_ = split.host;
  shm::SharedMemoryOptions options;
  options.piece_bytes = Autotuner::maxChunkBytes(config);
  options.timeout = config.stall_shutdown_time;
  options.global_ranks = globalRanksOf(split.host, set);
  options.peers_wait_elsewhere = true;
  h->local_ = shm::SharedMemory::create(split.host, std::move(options));
  if (!h->local_)  // cannot happen: host has >= 2 ranks, all on this host
    throw CommError("hierarchical allreduce: no shared-memory window among this host's ranks");
  h->across_ = linkAcrossHosts(set, split, config.stall_shutdown_time);
  log().debug(
      "ACCORD_HIERARCHICAL_ALLREDUCE: a process set of {} ranks reduces in {} hosts x "
      "{} ranks",
      set.size(), split.hosts, split.local_size);
  return h;
}

Hierarchy::~Hierarchy() {
  local_.reset();  // frees the window, which lives on host_
  if (host_ != MPI_COMM_NULL) MPI_Comm_free(&host_);
}

void Hierarchy::allreduce(Context& ctx, void* data, std::size_t count, DType dtype, ReduceOp op,
                          const Scaling& pre, const Scaling& post, const std::string& what) {
  // The ring needs only a link and scratch space; it runs on the ranks that share this
  // rank's local index, with the set's buffers.
  Context across{*across_, nullptr, nullptr, ctx.config, ctx.fusion, ctx.scratch, ctx.spare};
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

// MpiTransport (see mpi_transport.h).
#include "ops/mpi/mpi_transport.h"

#include "ops/mpi/context.h"
#include "runtime/autotune.h"

#include <accord/error.h>

#include <algorithm>

namespace accord::mpi {

// The shared-memory AND with MpiChannel's gather and broadcast.
class MpiTransport::ShmChannel final : public NegotiationChannel {
 public:
  ShmChannel(shm::SharedMemory& shm, MpiChannel& mpi) : shm_(shm), mpi_(mpi) {}
  void bitwiseAnd(std::vector<std::uint64_t>& bits) override { shm_.bitwiseAnd(bits); }
  bool carries() const override { return shm_.carries(); }
  std::size_t carryLimit() const override { return shm::SharedMemory::kCarryLimit; }
  void bitwiseAndCarrying(std::vector<std::uint64_t>& bits, Carriage& carriage) override {
    shm_.bitwiseAndCarrying(bits, carriage);
  }
  std::vector<std::vector<std::uint8_t>> gatherToRoot(
      const std::vector<std::uint8_t>& mine) override {
    return mpi_.gatherToRoot(mine);
  }
  void broadcastFromRoot(std::vector<std::uint8_t>& bytes) override {
    mpi_.broadcastFromRoot(bytes);
  }
  bool sleepsUntilJoined() const override { return true; }  // the futex wait

 private:
  shm::SharedMemory& shm_;
  MpiChannel& mpi_;
};

MpiTransport::MpiTransport(MPI_Comm comm, std::vector<int> global_ranks, const Config& config)
    : link_(comm, std::move(global_ranks), config.stall_shutdown_time),
      mpi_channel_(link_, config.carry_on_one_host) {
  if (!config.shared_memory) return;
  // A set spanning hosts gets no window of its own (create() returns nullptr), but may
  // get one per host under the hierarchical allreduce.
  shm::SharedMemoryOptions options;
  options.piece_bytes = Autotuner::maxChunkBytes(config);
  options.carry_bytes = std::min<std::size_t>(config.carry_bytes, shm::SharedMemory::kCarryLimit);
  options.negotiation_words = negotiationWords(config.cache_capacity, config.carry_bytes > 0);
  options.timeout = config.stall_shutdown_time;
  options.global_ranks.resize(link_.size());
  for (int r = 0; r < link_.size(); ++r) options.global_ranks[r] = link_.globalRank(r);
  shm_ = shm::SharedMemory::create(link_.comm(), std::move(options));
  if (shm_)
    shm_channel_ = std::make_unique<ShmChannel>(*shm_, mpi_channel_);
  else
    hierarchy_ = Hierarchy::create(link_, config);
}

MpiTransport::~MpiTransport() = default;

NegotiationChannel& MpiTransport::channel() {
  if (shm_channel_) return *shm_channel_;
  return mpi_channel_;
}

Transport MpiTransport::kind() const {
  if (link_.size() == 1) return Transport::Local;
  return shm_ ? Transport::SharedMemory : Transport::Mpi;
}

int Context::rank() const { return link.rank(); }
int Context::size() const { return link.size(); }

Context contextOf(ExecContext& ctx) {
  auto* t = dynamic_cast<MpiTransport*>(&ctx.transport);
  if (!t) throw Error("a host op was handed a process set without an MPI transport");
  return Context{t->link(),  t->shm(),    t->hierarchy(), ctx.config,
                 ctx.fusion, ctx.scratch, ctx.spare};
}

}  // namespace accord::mpi

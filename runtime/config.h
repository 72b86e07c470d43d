// Runtime configuration from ACCORD_* environment variables, parsed once at init.
//
// Every setting is one entry of runtime/settings.def: its name, Horovod alias, range,
// default, documentation and the field below it lands in. A bad value throws
// InvalidArgument naming the variable, the value and the accepted range, e.g.
// "ACCORD_CHUNK_BYTES='16G': expected bytes between 4096 (4K) and 1073741824 (1G),
// suffixes K, M, G".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace accord {

struct Config {
  // Least time between the starts of two negotiation cycles; work submitted meanwhile
  // is batched (ACCORD_CYCLE_TIME, milliseconds, fractional allowed; 0: no wait).
  std::chrono::microseconds cycle_time{0};
  std::size_t fusion_threshold = 0;  // ACCORD_FUSION_THRESHOLD, bytes; 0 disables fusion
  std::size_t chunk_bytes = 0;       // ACCORD_CHUNK_BYTES: large reductions run in pieces
  // ACCORD_CARRY_BYTES: in steady state, cached host allreduces of up to this many bytes
  // in all ride on the negotiation's own messages where it runs over MPI across hosts
  // among a power-of-two number of ranks or up to 8: one network round trip instead of
  // two.
  // 0 disables.
  std::size_t carry_bytes = 0;
  // ACCORD_CARRY_BYTES set explicitly: carry also among the ranks of one host over MPI
  // (ACCORD_SHARED_MEMORY=0), where by default it does not, having measured slower.
  bool carry_on_one_host = false;
  bool shared_memory = true;  // ACCORD_SHARED_MEMORY: allreduce through shared memory on one host
  // ACCORD_INLINE_CYCLES: a thread waiting on a handle runs the negotiation cycle itself
  // while the background thread is between cycles (background_loop.cc).
  bool inline_cycles = true;
  // ACCORD_HIERARCHICAL_ALLREDUCE: allreduces of a set that spans hosts reduce inside
  // each host (shared memory; NCCL for CUDA tensors) and only each rank's share crosses
  // hosts.
  bool hierarchical_allreduce = false;
  // ACCORD_HIERARCHICAL_ALLREDUCE=2: CUDA tensors take the hierarchical path also where
  // it cannot pay (all ranks on one host, or one per host), so that one GPU can run it.
  bool hierarchical_everywhere = false;
  // ACCORD_NCCL: CUDA tensors through NCCL where this build has it; 0 (or a build
  // without NCCL): through MPI, staged in pinned host memory.
  bool nccl = true;
  // ACCORD_NCCL=2: NCCL runs also in a set of one rank, where by default an allreduce
  // or broadcast is its input and nothing is exchanged (tests of the NCCL path use it
  // on one GPU).
  bool nccl_alone = false;
  // ACCORD_HOSTNAME: this rank's host as Accord counts hosts (local_rank, shared memory,
  // the hierarchical allreduces); ranks with different names are different hosts even
  // where they share a kernel. "" (unset): the hosts MPI sees (runtime/host_split.h).
  std::string hostname;
  std::size_t cache_capacity = 1024;                      // ACCORD_CACHE_CAPACITY; 0 disables
  std::chrono::milliseconds stall_check_time{60'000};     // ACCORD_STALL_CHECK_TIME, seconds
  std::chrono::milliseconds stall_shutdown_time{300'000}; // ACCORD_STALL_SHUTDOWN_TIME, s; 0 off
  // ACCORD_SHUTDOWN_WAIT_TIME, s: after a Timeout, shutdown()'s wait for the late ranks
  // before it finalizes MPI; 0: none (MPI is left initialized at once).
  std::chrono::milliseconds shutdown_wait_time{60'000};
  std::string log_level = "warn";  // ACCORD_LOG_LEVEL: trace debug info warn error off
  std::string timeline;            // ACCORD_TIMELINE: Chrome trace written by rank 0; "" off
  // ACCORD_AUTOTUNE: tune the cycle time, fusion threshold and piece size online, those
  // not given explicitly (runtime/autotune.h); they then start from ACCORD_AUTOTUNE_START.
  bool autotune = false;
  std::size_t autotune_steps = 5;  // ACCORD_AUTOTUNE_STEPS: measured steps per trial
  std::string autotune_log;        // ACCORD_AUTOTUNE_LOG: a CSV line per trial, rank 0
  std::string autotune_start;      // ACCORD_AUTOTUNE_START as given (applied above)
  // Which tunable settings the environment gave explicitly (ACCORD_ or HOROVOD_ name).
  struct Given {
    bool cycle_time = false, fusion_threshold = false, chunk_bytes = false;
  } given;
  // Times kept to their resolution that were given finer (ACCORD_STALL_SHUTDOWN_TIME=
  // 0.0015 runs as 2 ms): the variable and its value as given, which describe() shows.
  std::map<std::string, std::string> rounded;

  using Getenv = std::function<const char*(const char*)>;
  static Config parse(const Getenv& getenv);
  static Config fromEnvironment();
  // "ACCORD_CYCLE_TIME=0.1 ms\n..." for logs and --help texts.
  std::string describe() const;
  // The names among `environment` ("NAME=value" entries) that start with ACCORD_ but
  // are not Accord variables: most likely typos, which would otherwise be ignored.
  static std::vector<std::string> unknownVariables(const std::vector<std::string>& environment);
  static const std::vector<std::string>& knownVariables();
  // For each of Horovod's runtime settings that has no Accord counterpart and is set
  // (not empty) in `environment`: "HOROVOD_X is a Horovod setting Accord does not read:
  // <what Accord does instead>". A Horovod job script's settings are otherwise read
  // under their Horovod names or ignored without a word.
  static std::vector<std::string> unreadHorovodVariables(
      const std::vector<std::string>& environment);
  // The settings that must be the same on every rank (settings.def's kAgree, and
  // whether the kGivenAgrees and, when tuning, the kTuned ones are set), each as a
  // number: "ACCORD_FUSION_THRESHOLD" -> 65536. init() compares them across ranks.
  std::vector<std::pair<std::string, std::uint64_t>> mustAgree() const;
};

}  // namespace accord

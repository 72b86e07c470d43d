// ACCORD_* environment variables (config.h), parsed and validated once at init.
//
// Every rejection names the variable, the value as given and the accepted range, so
// a typo in a job script fails at init on every rank with a message that says what
// to write instead. A variable set to the empty string counts as unset, which is
// what `ACCORD_X= mpirun ...` means to most users.
#include "runtime/config.h"

#include "runtime/config_reader.h"

#include <accord/error.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

namespace accord {

namespace {

using namespace config_reader;

// Defaults; the accord-bench measurements behind them are in the README ("Why the
// defaults").
// - Chunk: 1 MiB pieces keep a piece and what arrives for it in L2 between arriving and
//   being passed on; smaller pieces pay more waits per byte, larger ones leave the cache.
//   The shared-memory transport reduces a buffer of up to two pieces whole (see
//   ops/mpi/shared_memory.cc).
// - Fusion threshold: fusing saves calls but costs a copy in and out; past a few hundred
//   KiB the copies cost more than the calls they save. 64 KiB still merges the many
//   small batch-norm and bias tensors.
// - Cycle time: 0, negotiate as soon as work arrives. A training step's tensors arrive
//   in a stream and are fused anyway; waiting for more only adds latency.
// Stall times follow Horovod: report after a minute, give up after five.
constexpr double kDefaultCycleTimeMs = 0.0;
constexpr std::size_t kDefaultFusionThreshold = 64u << 10;  // 64 KiB
constexpr std::size_t kDefaultChunkBytes = 1u << 20;        // 1 MiB
constexpr std::size_t kDefaultCarryBytes = 64u << 10;       // 64 KiB
constexpr std::size_t kDefaultCacheCapacity = 1024;
constexpr double kDefaultStallCheckSeconds = 60.0;
constexpr double kDefaultStallShutdownSeconds = 300.0;
constexpr const char* kDefaultLogLevel = "warn";

// Upper bounds: what can really be allocated and used, so that a typo ("16G" for "16M")
// fails here, naming the variable, rather than deep inside MPI or as a wrapped size.
// - Chunk: the shared-memory window holds two pieces for every rank of the host, so
//   1 GiB pieces already take 2 GiB of /dev/shm per rank, 16 GiB for 8 ranks: about
//   what a large node offers (16G failed inside MPI_Win_allocate_shared, and 2^63
//   wrapped the window's size). Past 1 MiB, larger pieces were only slower.
// - Fusion threshold: the fusion buffer grows to the largest fused group, so this much
//   heap per rank must be there for the taking; 4 GiB is allocatable on any 64-bit
//   training node, and fusion stops paying off at a few hundred KiB.
// - Cache: every process set allocates all its slots at init, ~350 bytes each (a cached
//   response and request), and exchanges a bit per slot; 65536 slots are 22 MiB and an
//   8 KiB vector, for models that have at most a few thousand tensors.
constexpr std::size_t kMinChunkBytes = 4u << 10;  // below a page, chunking is all overhead
constexpr std::size_t kMaxChunkBytes = 1u << 30;
constexpr std::size_t kMaxFusionThreshold = std::size_t{4} << 30;
constexpr std::size_t kMaxCacheCapacity = 1u << 16;
// - Carry: every MPI negotiation channel holds two buffers of this size; past the
//   round trip it saves, carrying more only delays the negotiation behind the data.
constexpr std::size_t kMaxCarryBytes = 1u << 20;
// Times: the cycle time is kept in microseconds and the stall times in milliseconds; a
// value below that resolution would round to 0, which means "no wait" or "never".
constexpr double kMaxCycleTimeMs = 10'000.0;
constexpr double kMaxSeconds = 1e9;  // keeps the milliseconds well inside int64
// - Host name: every rank of a machine exchanges its name at each split by host; a
//   name is a label, and 255 bytes is what hostnames are allowed anyway.
constexpr std::size_t kMaxHostNameBytes = 255;
// Autotune: more steps per trial only lengthen the search; a thousand is already hours.
constexpr std::size_t kMaxAutotuneSteps = 1000;

constexpr TimeSetting kCycleTime{"milliseconds",  0.001,     "microsecond",
                                 kMaxCycleTimeMs, "no wait", ", e.g. 0.5"};
constexpr TimeSetting kStallCheckTime{"seconds", 0.001, "millisecond", kMaxSeconds, nullptr, ""};
constexpr TimeSetting kStallShutdownTime{"seconds", 0.001, "millisecond", kMaxSeconds, "never", ""};

std::chrono::milliseconds secondsToMs(double s) {
  return std::chrono::milliseconds(std::llround(s * 1000.0));
}

// ACCORD_AUTOTUNE_START="ACCORD_FUSION_THRESHOLD=4K ACCORD_CYCLE_TIME=5": where the
// tuner starts the settings it tunes, for experiments from a chosen (bad) point. Each
// value is checked as the variable itself would be; a setting given explicitly is not
// tuned, so naming it here is an error.
void applyAutotuneStart(Config& c, const std::string& text) {
  if (text.empty()) return;
  constexpr const char* kVar = "ACCORD_AUTOTUNE_START";
  const char* expected =
      "space- or comma-separated NAME=VALUE among ACCORD_CYCLE_TIME, ACCORD_FUSION_THRESHOLD "
      "and ACCORD_CHUNK_BYTES";
  if (!c.autotune) {
    throw InvalidArgument(std::string(kVar) + "='" + text +
                          "' is only read with ACCORD_AUTOTUNE=1, which is not set");
  }
  std::vector<std::pair<std::string, std::string>> entries;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) reject(kVar, text, expected);
    entries.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    item.clear();
  };
  for (char ch : text) {
    if (ch == ' ' || ch == ',' || ch == '\t') {
      flush();
    } else {
      item += ch;
    }
  }
  flush();
  for (const auto& [name, value] : entries) {
    const bool given = name == "ACCORD_CYCLE_TIME"         ? c.given.cycle_time
                       : name == "ACCORD_FUSION_THRESHOLD" ? c.given.fusion_threshold
                       : name == "ACCORD_CHUNK_BYTES"      ? c.given.chunk_bytes
                                                           : (reject(kVar, text, expected), true);
    if (given) {
      throw InvalidArgument(std::string(kVar) + " names " + name +
                            ", which is also set explicitly and so is not tuned: unset one");
    }
  }
  Config::Getenv lookup = [&entries](const char* var) -> const char* {
    for (const auto& [name, value] : entries)
      if (name == var) return value.c_str();
    return nullptr;
  };
  try {
    Reader start(lookup);
    c.cycle_time = std::chrono::microseconds(
        std::llround(start.time("ACCORD_CYCLE_TIME",
                                static_cast<double>(c.cycle_time.count()) / 1000.0, kCycleTime) *
                     1000.0));
    c.fusion_threshold = start.bytes("ACCORD_FUSION_THRESHOLD", c.fusion_threshold, 0,
                                     kMaxFusionThreshold, "0 disables fusion");
    c.chunk_bytes =
        start.bytes("ACCORD_CHUNK_BYTES", c.chunk_bytes, kMinChunkBytes, kMaxChunkBytes, "");
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(kVar) + ": " + e.what());
  }
}

}  // namespace

Config Config::parse(const Getenv& getenv) {
  Reader env(getenv);
  Config c;
  c.cycle_time = std::chrono::microseconds(
      std::llround(env.time("ACCORD_CYCLE_TIME", kDefaultCycleTimeMs, kCycleTime) * 1000.0));
  c.fusion_threshold = env.bytes("ACCORD_FUSION_THRESHOLD", kDefaultFusionThreshold, 0,
                                 kMaxFusionThreshold, "0 disables fusion");
  c.chunk_bytes =
      env.bytes("ACCORD_CHUNK_BYTES", kDefaultChunkBytes, kMinChunkBytes, kMaxChunkBytes, "");
  c.carry_bytes =
      env.bytes("ACCORD_CARRY_BYTES", kDefaultCarryBytes, 0, kMaxCarryBytes, "0 disables carrying");
  c.shared_memory = env.count("ACCORD_SHARED_MEMORY", 1, 1,
                              "1: allreduces among ranks of one host go through shared "
                              "memory; 0: always MPI") == 1;
  const std::uint64_t hierarchical = env.count(
      "ACCORD_HIERARCHICAL_ALLREDUCE", 0, 2,
      "1: allreduces of a process set spanning hosts reduce inside each host (through "
      "shared memory, or NCCL for CUDA tensors) and across hosts; 0: one flat ring; 2: as "
      "1, and CUDA tensors take it also on one host or with one rank per host");
  c.hierarchical_allreduce = hierarchical >= 1;
  c.hierarchical_everywhere = hierarchical == 2;
  const std::uint64_t nccl =
      env.count("ACCORD_NCCL", 1, 2,
                "1: CUDA tensors go through NCCL where Accord was built with it; 0: "
                "through MPI, staged in pinned host memory; 2: through NCCL also in a "
                "process set of one rank");
  c.nccl = nccl >= 1;
  c.nccl_alone = nccl == 2;
  c.hostname = env.text("ACCORD_HOSTNAME");
  if (c.hostname.size() > kMaxHostNameBytes)
    reject("ACCORD_HOSTNAME", c.hostname,
           "a name of at most " + std::to_string(kMaxHostNameBytes) + " bytes");
  c.cache_capacity = env.count("ACCORD_CACHE_CAPACITY", kDefaultCacheCapacity, kMaxCacheCapacity,
                               "0 disables the cache");
  c.stall_check_time =
      secondsToMs(env.time("ACCORD_STALL_CHECK_TIME", kDefaultStallCheckSeconds, kStallCheckTime));
  c.stall_shutdown_time = secondsToMs(
      env.time("ACCORD_STALL_SHUTDOWN_TIME", kDefaultStallShutdownSeconds, kStallShutdownTime));
  c.log_level = env.level("ACCORD_LOG_LEVEL", kDefaultLogLevel);
  c.timeline = env.text("ACCORD_TIMELINE", true);
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: nothing recorded from init(); start_timeline()
  // records later, which Accord always allows. Not a file named DYNAMIC.
  if (c.timeline == "DYNAMIC") c.timeline.clear();
  c.autotune = env.count("ACCORD_AUTOTUNE", 0, 1,
                         "1: tune the cycle time, fusion threshold and piece size online") == 1;
  c.autotune_steps = env.count("ACCORD_AUTOTUNE_STEPS", 5, kMaxAutotuneSteps,
                               "measured training steps per autotune trial; 0 means 1");
  c.autotune_log = env.text("ACCORD_AUTOTUNE_LOG", true);
  c.given.cycle_time = env.given("ACCORD_CYCLE_TIME");
  c.given.fusion_threshold = env.given("ACCORD_FUSION_THRESHOLD");
  c.given.chunk_bytes = env.given("ACCORD_CHUNK_BYTES");
  c.carry_on_one_host = env.given("ACCORD_CARRY_BYTES");
  applyAutotuneStart(c, env.text("ACCORD_AUTOTUNE_START"));
  return c;
}

Config Config::fromEnvironment() {
  return parse([](const char* var) -> const char* { return std::getenv(var); });
}

// One line per known variable: its effective value, then what it does and accepts.
std::string Config::describe() const {
  auto line = [](const char* var, const std::string& value, const std::string& about) {
    std::string s = std::string(var) + "=" + value;
    s.resize(std::max<std::size_t>(s.size() + 2, 44), ' ');
    return s + about + "\n";
  };
  double cycle_ms = std::chrono::duration<double, std::milli>(cycle_time).count();
  double check_s = std::chrono::duration<double>(stall_check_time).count();
  double shutdown_s = std::chrono::duration<double>(stall_shutdown_time).count();
  std::string out;
  out +=
      line("ACCORD_CYCLE_TIME", formatNumber(cycle_ms) + " ms",
           "least time between negotiation cycles (0, or " + formatNumber(kCycleTime.resolution) +
               ".." + formatNumber(kCycleTime.max) + " ms)");
  out += line("ACCORD_FUSION_THRESHOLD", std::to_string(fusion_threshold) + " bytes",
              "fusion buffer size (0.." + suffixed(kMaxFusionThreshold) +
                  ", K/M/G suffixes, 0 = no fusion)");
  out += line("ACCORD_CHUNK_BYTES", std::to_string(chunk_bytes) + " bytes",
              "piece size of large reductions (" + suffixed(kMinChunkBytes) + ".." +
                  suffixed(kMaxChunkBytes) + ")");
  out += line("ACCORD_CARRY_BYTES", std::to_string(carry_bytes) + " bytes",
              "small cached allreduces carried by MPI negotiation (0.." + suffixed(kMaxCarryBytes) +
                  ", 0 = never)");
  out += line("ACCORD_SHARED_MEMORY", shared_memory ? "1" : "0",
              "negotiate and allreduce through shared memory within a host (0 = MPI)");
  out += line("ACCORD_HIERARCHICAL_ALLREDUCE",
              hierarchical_everywhere  ? "2"
              : hierarchical_allreduce ? "1"
                                       : "0",
              "across hosts: reduce within each host, then across hosts (0 = one flat ring)");
  out += line("ACCORD_NCCL",
              nccl_alone ? "2"
              : nccl     ? "1"
                         : "0",
              "CUDA tensors through NCCL where built with it (0 = MPI via pinned host "
              "memory, 2 = NCCL also in sets of one rank)");
  out += line("ACCORD_HOSTNAME", hostname.empty() ? "(the host MPI sees)" : hostname,
              "this rank's host for Accord: ranks with different names are different hosts");
  out +=
      line("ACCORD_CACHE_CAPACITY", std::to_string(cache_capacity),
           "response cache entries (0.." + std::to_string(kMaxCacheCapacity) + ", 0 = no cache)");
  out += line("ACCORD_STALL_CHECK_TIME", formatNumber(check_s) + " s",
              "report tensors some ranks have not submitted (" +
                  formatNumber(kStallCheckTime.resolution) + ".." +
                  formatNumber(kStallCheckTime.max) + " s)");
  out += line("ACCORD_STALL_SHUTDOWN_TIME", formatNumber(shutdown_s) + " s",
              "fail stalled tensors, give up on silent ranks (0 = never, or " +
                  formatNumber(kStallShutdownTime.resolution) + ".." +
                  formatNumber(kStallShutdownTime.max) + " s)");
  out += line("ACCORD_LOG_LEVEL", log_level, "trace, debug, info, warn, error or off");
  out += line("ACCORD_TIMELINE", timeline.empty() ? "(off)" : timeline,
              "Chrome trace of every tensor's phases, written by rank 0");
  out += line("ACCORD_AUTOTUNE", autotune ? "1" : "0",
              "tune cycle time, fusion threshold and pieces online (those not set)");
  out += line("ACCORD_AUTOTUNE_STEPS", std::to_string(autotune_steps),
              "measured steps per autotune trial (1.." + std::to_string(kMaxAutotuneSteps) + ")");
  out += line("ACCORD_AUTOTUNE_LOG", autotune_log.empty() ? "(off)" : autotune_log,
              "CSV file of the autotune trials, written by rank 0");
  out += line("ACCORD_AUTOTUNE_START", "(in the values above)",
              "NAME=VALUE list: where autotune starts those settings");
  return out;
}

const std::vector<std::string>& Config::knownVariables() {
  static const std::vector<std::string> known = {
      "ACCORD_CYCLE_TIME",     "ACCORD_FUSION_THRESHOLD", "ACCORD_CHUNK_BYTES",
      "ACCORD_CARRY_BYTES",    "ACCORD_SHARED_MEMORY",    "ACCORD_NCCL",
      "ACCORD_CACHE_CAPACITY", "ACCORD_STALL_CHECK_TIME", "ACCORD_STALL_SHUTDOWN_TIME",
      "ACCORD_LOG_LEVEL",      "ACCORD_TIMELINE",         "ACCORD_HIERARCHICAL_ALLREDUCE",
      "ACCORD_AUTOTUNE",       "ACCORD_AUTOTUNE_STEPS",   "ACCORD_AUTOTUNE_LOG",
      "ACCORD_AUTOTUNE_START", "ACCORD_HOSTNAME"};
  return known;
}

std::vector<std::string> Config::unknownVariables(const std::vector<std::string>& environment) {
  // Read by Accord's build scripts, tests and trainer, not by the runtime, but not
  // typos either.
  static const std::vector<std::string> tooling = {"ACCORD_BUILD_DIR",
                                                   "ACCORD_JOBS",
                                                   "ACCORD_TEST_WAIT_SECONDS",
                                                   "ACCORD_TEST_TIME_SCALE",
                                                   "ACCORD_PROGRESS",
                                                   "ACCORD_TORCH2_VENV",
                                                   "ACCORD_TEST_BUILT_CUDA_NCCL",
                                                   "ACCORD_TEST_MPIRUN"};
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  std::vector<std::string> unknown;
  for (const auto& entry : environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("ACCORD_", 0) != 0) continue;
    if (!listed(knownVariables(), name) && !listed(tooling, name)) unknown.push_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  unknown.erase(std::unique(unknown.begin(), unknown.end()), unknown.end());
  return unknown;
}

}  // namespace accord

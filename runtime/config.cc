// ACCORD_* environment variables (config.h), parsed and validated once at init.
//
// Every rejection names the variable, the value as given and the accepted range, so
// a typo in a job script fails at init on every rank with a message that says what
// to write instead. A variable set to the empty string counts as unset, which is
// what `ACCORD_X= mpirun ...` means to most users.
#include "runtime/config.h"

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
constexpr std::size_t kDefaultChunkBytes = 1u << 20;       // 1 MiB
constexpr std::size_t kDefaultCarryBytes = 64u << 10;      // 64 KiB
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
// Autotune: more steps per trial only lengthen the search; a thousand is already hours.
constexpr std::size_t kMaxAutotuneSteps = 1000;
const char* const kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

std::string trim(const char* raw) {
  std::string s = raw;
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && space(s.back())) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && space(s[start])) ++start;
  return s.substr(start);
}

[[noreturn]] void reject(const char* var, const std::string& value, const std::string& expected) {
  throw InvalidArgument(std::string(var) + "='" + value + "': expected " + expected);
}

// Plain bytes or a K/M/G suffix (KiB multiples), optionally followed by "B" or "iB".
bool parseBytes(const std::string& s, std::size_t& out) {
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end == s.data()) return false;
  std::string unit(end, s.data() + s.size());
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty()) {
    shift = unit[0] == 'K' ? 10 : unit[0] == 'M' ? 20 : unit[0] == 'G' ? 30 : -1;
    std::string rest = unit.substr(1);
    if (shift < 0 || (!rest.empty() && rest != "B" && rest != "IB")) return false;
  }
  if (n > (SIZE_MAX >> shift)) return false;
  out = static_cast<std::size_t>(n) << shift;
  return true;
}

// Whole numbers in full ("1000000000", not "1e+09"), so that messages read as written.
std::string formatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(std::llround(v));
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// "4K": bytes with the largest suffix that writes them whole.
std::string suffixed(std::size_t bytes) {
  for (auto [shift, suffix] : {std::pair{30, 'G'}, {20, 'M'}, {10, 'K'}}) {
    if (bytes != 0 && bytes % (std::size_t{1} << shift) == 0)
      return std::to_string(bytes >> shift) + suffix;
  }
  return std::to_string(bytes);
}

// "4096 (4K)": the exact count, and the short form where there is one.
std::string withUnit(std::size_t bytes) {
  std::string exact = std::to_string(bytes), short_form = suffixed(bytes);
  return short_form == exact ? exact : exact + " (" + short_form + ")";
}

bool parseNumber(const std::string& s, double& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(out);
}

// How a time setting is written and what the runtime can represent of it.
struct TimeSetting {
  const char* unit;             // as the user writes it: "milliseconds", "seconds"
  double resolution;            // the smallest nonzero value, in `unit`
  const char* resolution_name;  // that resolution in words: "microsecond"
  double max;
  const char* zero;     // what 0 means, or nullptr where 0 is not accepted
  const char* example;  // appended to "(fractional allowed"
};

constexpr TimeSetting kCycleTime{"milliseconds",  0.001,     "microsecond",
                                 kMaxCycleTimeMs, "no wait", ", e.g. 0.5"};
constexpr TimeSetting kStallCheckTime{"seconds", 0.001, "millisecond", kMaxSeconds, nullptr, ""};
constexpr TimeSetting kStallShutdownTime{"seconds", 0.001, "millisecond", kMaxSeconds, "never", ""};

// Horovod's names of the same settings, honoured when the ACCORD_ name is unset so that
// a Horovod job script keeps its tuning. Units agree (Horovod's cycle time is in
// milliseconds and its threshold in bytes too); Horovod's log levels "warning" and
// "fatal" are read as warn and error.
constexpr std::pair<const char*, const char*> kHorovodNames[] = {
    {"ACCORD_CYCLE_TIME", "HOROVOD_CYCLE_TIME"},
    {"ACCORD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"},
    {"ACCORD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY"},
    {"ACCORD_STALL_CHECK_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS"},
    {"ACCORD_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"},
    {"ACCORD_LOG_LEVEL", "HOROVOD_LOG_LEVEL"},
    {"ACCORD_TIMELINE", "HOROVOD_TIMELINE"},
    {"ACCORD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE"},
    {"ACCORD_AUTOTUNE", "HOROVOD_AUTOTUNE"},
    {"ACCORD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG"},
};

const char* horovodName(const char* var) {
  for (auto [accord_name, horovod_name] : kHorovodNames)
    if (std::string_view(var) == accord_name) return horovod_name;
  return nullptr;
}

class Reader {
 public:
  explicit Reader(const Config::Getenv& getenv) : getenv_(getenv) {}

  // var's value, else its Horovod alias's, each trimmed and parsed by
  // parse(name, text), which rejects a bad one naming the variable; nullopt when both are
  // unset or empty. Both set to different values (as parsed: 64K and 65536 agree) is an
  // error naming both.
  template <class T, class Parse>
  std::optional<T> read(const char* var, Parse parse) const {
    const auto own = raw(var);
    const char* alias = horovodName(var);
    const auto other = alias ? raw(alias) : std::nullopt;
    std::optional<T> a, b;
    if (own) a = parse(var, *own);
    if (other) b = parse(alias, *other);
    if (a && b && !(*a == *b)) {
      throw InvalidArgument(std::string(var) + "='" + *own + "' and " + alias + "='" + *other +
                            "' are the same setting with different values: unset one of them");
    }
    return a ? a : b;
  }

  // Bytes in [min, max]; `note` (may be empty) says what special values mean.
  std::size_t bytes(const char* var, std::size_t fallback, std::size_t min, std::size_t max,
                    const std::string& note) const {
    return read<std::size_t>(var,
                             [&](const char* name, const std::string& s) {
                               std::size_t v = 0;
                               if (!parseBytes(s, v) || v < min || v > max) {
                                 reject(name, s,
                                        "bytes between " + withUnit(min) + " and " + withUnit(max) +
                                            ", suffixes K, M, G" +
                                            (note.empty() ? "" : "; " + note));
                               }
                               return v;
                             })
        .value_or(fallback);
  }

  std::size_t count(const char* var, std::size_t fallback, std::size_t max,
                    const char* note) const {
    return read<std::size_t>(
               var,
               [&](const char* name, const std::string& s) {
                 std::uint64_t v = 0;
                 auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
                 if (ec != std::errc() || end != s.data() + s.size() || v > max)
                   reject(name, s,
                          "an integer between 0 and " + std::to_string(max) + " (" + note + ")");
                 return static_cast<std::size_t>(v);
               })
        .value_or(fallback);
  }

  // A fractional time: 0 when `time.zero` allows it, else in [time.resolution, time.max].
  double time(const char* var, double fallback, const TimeSetting& t) const {
    return read<double>(
               var, [&](const char* name, const std::string& s) { return parseTime(name, s, t); })
        .value_or(fallback);
  }

  std::string level(const char* var, const char* fallback) const {
    return read<std::string>(
               var, [&](const char* name, const std::string& s) { return parseLevel(name, s); })
        .value_or(fallback);
  }

  // Text as given; a path (ACCORD_TIMELINE) compares with its alias as the file it
  // names, so a relative and an absolute spelling of one file agree.
  std::string text(const char* var, bool path = false) const {
    struct Text {
      std::string value, key;
      bool operator==(const Text& o) const { return key == o.key; }
    };
    return read<Text>(var,
                      [&](const char*, const std::string& s) {
                        std::error_code ec;
                        const auto absolute = std::filesystem::absolute(s, ec).lexically_normal();
                        return Text{s, path && !ec ? absolute.string() : s};
                      })
        .value_or(Text{})
        .value;
  }

  bool given(const char* var) const {
    const char* alias = horovodName(var);
    return raw(var) || (alias && raw(alias));
  }

 private:
  static double parseTime(const char* name, const std::string& s, const TimeSetting& t) {
    std::string expected = std::string(t.unit) + " between " + formatNumber(t.resolution) +
                           " and " + formatNumber(t.max) + " (fractional allowed" + t.example +
                           ")" + (t.zero ? std::string(", or 0 = ") + t.zero : "");
    double v = 0;
    if (!parseNumber(s, v) || v < 0 || v > t.max || (v == 0 && !t.zero)) reject(name, s, expected);
    if (v > 0 && v < t.resolution) {
      throw InvalidArgument(std::string(name) + "='" + s + "': below the resolution of 1 " +
                            t.resolution_name + ", where it would round to 0" +
                            (t.zero ? std::string(" (") + t.zero + ")" : "") + "; expected " +
                            expected);
    }
    return v;
  }

  static std::string parseLevel(const char* name, const std::string& s) {
    std::string v = s;
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v == "warning") v = "warn";  // Horovod's spellings
    if (v == "fatal") v = "error";
    for (const char* known : kLogLevels)
      if (v == known) return v;
    reject(name, s, "one of trace, debug, info, warn, error, off");
  }

  std::optional<std::string> raw(const char* var) const {
    const char* value = getenv_(var);
    if (value == nullptr) return std::nullopt;
    std::string s = trim(value);
    if (s.empty()) return std::nullopt;
    return s;
  }

  const Config::Getenv& getenv_;
};

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
  c.cache_capacity = env.count("ACCORD_CACHE_CAPACITY", kDefaultCacheCapacity, kMaxCacheCapacity,
                               "0 disables the cache");
  c.stall_check_time =
      secondsToMs(env.time("ACCORD_STALL_CHECK_TIME", kDefaultStallCheckSeconds, kStallCheckTime));
  c.stall_shutdown_time = secondsToMs(
      env.time("ACCORD_STALL_SHUTDOWN_TIME", kDefaultStallShutdownSeconds, kStallShutdownTime));
  c.log_level = env.level("ACCORD_LOG_LEVEL", kDefaultLogLevel);
  c.timeline = env.text("ACCORD_TIMELINE", true);
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
      "ACCORD_AUTOTUNE_START"};
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

// ACCORD_* parsing: defaults, accepted spellings, and the exact message for every kind
// of bad value.
#include "runtime/config.h"
#include "runtime/settings.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <filesystem>

#include "parse_env.h"

#include <map>

using namespace accord;
using namespace std::chrono_literals;

namespace {

Config parse(const std::map<std::string, std::string>& env) { return accord_test::parseEnv(env); }

std::string error(const char* var, const std::string& value) {
  return accord_test::parseError(var, value);
}

}  // namespace

TEST_CASE("defaults apply when nothing is set", "[config]") {
  Config c = parse({});
  CHECK(c.cycle_time == 0us);
  CHECK(c.fusion_threshold == 64u << 10);
  CHECK(c.chunk_bytes == 1u << 20);
  CHECK(c.carry_bytes == 64u << 10);
  CHECK_FALSE(c.carry_on_one_host);  // only an explicit ACCORD_CARRY_BYTES asks for it
  CHECK(parse({{"ACCORD_CARRY_BYTES", "64K"}}).carry_on_one_host);
  CHECK(c.cache_capacity == 1024);
  CHECK(c.stall_check_time == 60s);
  CHECK(c.stall_shutdown_time == 300s);
  CHECK(c.shutdown_wait_time == 60s);
  CHECK(c.log_level == "warn");
  CHECK(c.shared_memory);
  CHECK(c.nccl);
  CHECK(parse({{"ACCORD_FUSION_THRESHOLD", ""}, {"ACCORD_LOG_LEVEL", "  "}}).fusion_threshold ==
        64u << 10);
}

TEST_CASE("every variable parses its accepted forms", "[config]") {
  Config c = parse({{"ACCORD_CYCLE_TIME", "2.5"},
                    {"ACCORD_FUSION_THRESHOLD", "64M"},
                    {"ACCORD_CHUNK_BYTES", " 4096 "},
                    {"ACCORD_CARRY_BYTES", "0"},
                    {"ACCORD_CACHE_CAPACITY", "0"},
                    {"ACCORD_STALL_CHECK_TIME", "0.5"},
                    {"ACCORD_STALL_SHUTDOWN_TIME", "0"},
                    {"ACCORD_SHUTDOWN_WAIT_TIME", "2.5"},
                    {"ACCORD_LOG_LEVEL", "DEBUG"},
                    {"ACCORD_SHARED_MEMORY", "0"},
                    {"ACCORD_NCCL", "0"}});
  CHECK(c.cycle_time == 2500us);
  CHECK(c.fusion_threshold == 64u << 20);
  CHECK(c.chunk_bytes == 4096);
  CHECK(c.carry_bytes == 0);
  CHECK(parse({{"ACCORD_CARRY_BYTES", "1M"}}).carry_bytes == 1u << 20);
  CHECK(c.cache_capacity == 0);
  CHECK(c.stall_check_time == 500ms);
  CHECK(c.stall_shutdown_time == 0ms);
  CHECK(c.shutdown_wait_time == 2500ms);
  CHECK(parse({{"ACCORD_SHUTDOWN_WAIT_TIME", "0"}}).shutdown_wait_time == 0ms);
  CHECK(c.log_level == "debug");
  CHECK_FALSE(c.shared_memory);
  CHECK(parse({{"ACCORD_SHARED_MEMORY", "1"}}).shared_memory);
  CHECK_FALSE(c.nccl);
  CHECK(parse({{"ACCORD_NCCL", "1"}}).nccl);
  CHECK_FALSE(parse({{"ACCORD_NCCL", "1"}}).nccl_alone);
  CHECK(parse({{"ACCORD_NCCL", "2"}}).nccl);
  CHECK(parse({{"ACCORD_NCCL", "2"}}).nccl_alone);
  CHECK_FALSE(c.hierarchical_allreduce);  // off unless asked for
  CHECK(parse({{"ACCORD_HIERARCHICAL_ALLREDUCE", "1"}}).hierarchical_allreduce);
  CHECK_FALSE(parse({{"ACCORD_HIERARCHICAL_ALLREDUCE", "1"}}).hierarchical_everywhere);
  CHECK(parse({{"ACCORD_HIERARCHICAL_ALLREDUCE", "2"}}).hierarchical_allreduce);
  CHECK(parse({{"ACCORD_HIERARCHICAL_ALLREDUCE", "2"}}).hierarchical_everywhere);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "10000"}}).cycle_time == 10s);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "0.0015"}}).cycle_time == 2us);  // to the nearest microsecond
}

TEST_CASE("sizes take plain bytes or K/M/G multiples of 1024", "[config]") {
  auto bytes = [](const std::string& v) {
    return parse({{"ACCORD_FUSION_THRESHOLD", v}}).fusion_threshold;
  };
  CHECK(bytes("0") == 0);
  CHECK(bytes("12345") == 12345);
  CHECK(bytes("1K") == 1024);
  CHECK(bytes("3k") == 3072);
  CHECK(bytes("2MiB") == 2u << 20);
  CHECK(bytes("1GB") == 1u << 30);
  CHECK(bytes("4G") == std::size_t{4} << 30);
}

TEST_CASE("bad sizes name the variable, the value and the range", "[config]") {
  const std::string fusion =
      "': expected bytes between 0 and 4294967296 (4G), suffixes K, M, G; 0 disables fusion";
  for (std::string bad :
       {"abc", "-1", "1.5M", "1T", "M", "10 M B", "1KX", "99999999999999999999", "99999999999G"}) {
    INFO(bad);
    CHECK(error("ACCORD_FUSION_THRESHOLD", bad) == "ACCORD_FUSION_THRESHOLD='" + bad + fusion);
  }
  const std::string chunk =
      "': expected bytes between 4096 (4K) and 1073741824 (1G), suffixes K, M, G";
  CHECK(error("ACCORD_CHUNK_BYTES", "4095") == "ACCORD_CHUNK_BYTES='4095" + chunk);
  CHECK(error("ACCORD_CHUNK_BYTES", "0") == "ACCORD_CHUNK_BYTES='0" + chunk);
  CHECK(error("ACCORD_CARRY_BYTES", "2M") ==
        "ACCORD_CARRY_BYTES='2M': expected bytes between 0 and 1048576 (1M), suffixes K, M, G; "
        "0 disables carrying");
}

TEST_CASE("bad times name the variable, the value and the range", "[config]") {
  const std::string cycle =
      "milliseconds between 0.001 and 10000 (fractional allowed, e.g. 0.5), or 0 = no wait";
  for (std::string bad : {"-0.1", "10000.5", "fast", "1ms", "nan", "inf", ""}) {
    if (bad.empty()) continue;  // empty means unset
    INFO(bad);
    CHECK(error("ACCORD_CYCLE_TIME", bad) == "ACCORD_CYCLE_TIME='" + bad + "': expected " + cycle);
  }
  const std::string check = "': expected seconds between 0.001 and 1000000000 (fractional allowed)";
  for (std::string bad : {"0", "-5", "1e10"}) {
    INFO(bad);
    CHECK(error("ACCORD_STALL_CHECK_TIME", bad) == "ACCORD_STALL_CHECK_TIME='" + bad + check);
  }
  const std::string shutdown =
      "': expected seconds between 0.001 and 1000000000 (fractional "
      "allowed), or 0 = never";
  for (std::string bad : {"-1", "5m", "1e10"}) {
    INFO(bad);
    CHECK(error("ACCORD_STALL_SHUTDOWN_TIME", bad) ==
          "ACCORD_STALL_SHUTDOWN_TIME='" + bad + shutdown);
  }
}

TEST_CASE("bad counts and log levels name the accepted values", "[config]") {
  for (std::string bad : {"-1", "1.5", "lots", "65537", "1048576"}) {
    INFO(bad);
    CHECK(error("ACCORD_CACHE_CAPACITY", bad) ==
          "ACCORD_CACHE_CAPACITY='" + bad +
              "': expected an integer between 0 and 65536 (0 disables the cache)");
  }
  for (std::string bad : {"2", "yes", "-1"}) {
    INFO(bad);
    CHECK(error("ACCORD_SHARED_MEMORY", bad) ==
          "ACCORD_SHARED_MEMORY='" + bad +
              "': expected an integer between 0 and 1 (1: allreduces among ranks of one host "
              "go through shared memory; 0: always MPI)");
  }
  for (std::string bad : {"3", "on", "-1"}) {
    INFO(bad);
    CHECK(error("ACCORD_NCCL", bad) ==
          "ACCORD_NCCL='" + bad +
              "': expected an integer between 0 and 2 (1: CUDA tensors go through NCCL where "
              "Accord was built with it; 0: through MPI, staged in pinned host memory; 2: "
              "through NCCL also in a process set of one rank)");
  }
  for (std::string bad : {"3", "true", "-1"}) {
    INFO(bad);
    CHECK(error("ACCORD_HIERARCHICAL_ALLREDUCE", bad) ==
          "ACCORD_HIERARCHICAL_ALLREDUCE='" + bad +
              "': expected an integer between 0 and 2 (1: allreduces of a process set "
              "spanning hosts reduce inside each host (through shared memory, or NCCL for "
              "CUDA tensors) and across hosts; 0: one flat ring; 2: as 1, and CUDA tensors "
              "take it also on one host or with one rank per host)");
  }
  CHECK(error("ACCORD_LOG_LEVEL", "warnings") ==
        "ACCORD_LOG_LEVEL='warnings': expected one of trace, debug, info, warn, error, off");
  for (std::string level : {"trace", "debug", "info", "warn", "error", "off"})
    CHECK(parse({{"ACCORD_LOG_LEVEL", level}}).log_level == level);
}

TEST_CASE("Horovod's names of the same settings apply where the ACCORD_ name is unset",
          "[config]") {
  Config c = parse({{"HOROVOD_CYCLE_TIME", "2.5"},
                    {"HOROVOD_FUSION_THRESHOLD", "33554432"},
                    {"HOROVOD_CACHE_CAPACITY", "0"},
                    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
                    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "120"},
                    {"HOROVOD_LOG_LEVEL", "WARNING"},
                    {"HOROVOD_TIMELINE", "/tmp/t.json"},
                    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  CHECK(c.cycle_time == 2500us);
  CHECK(c.hierarchical_allreduce);
  CHECK(c.fusion_threshold == 32u << 20);
  CHECK(c.cache_capacity == 0);
  CHECK(c.stall_check_time == 30s);
  CHECK(c.stall_shutdown_time == 120s);
  CHECK(c.log_level == "warn");
  CHECK(c.timeline == "/tmp/t.json");
  CHECK(parse({{"HOROVOD_LOG_LEVEL", "fatal"}}).log_level == "error");

  // The ACCORD_ name wins where both are set to the same value; an empty one is unset.
  CHECK(parse({{"ACCORD_FUSION_THRESHOLD", "1M"}, {"HOROVOD_FUSION_THRESHOLD", " 1M "}})
            .fusion_threshold == 1u << 20);
  CHECK(parse({{"ACCORD_FUSION_THRESHOLD", ""}, {"HOROVOD_FUSION_THRESHOLD", "2M"}})
            .fusion_threshold == 2u << 20);
  // The same value in other spellings agrees: as parsed, and as the file a path names.
  CHECK(parse({{"ACCORD_FUSION_THRESHOLD", "64K"}, {"HOROVOD_FUSION_THRESHOLD", "65536"}})
            .fusion_threshold == 64u << 10);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "5"}, {"HOROVOD_CYCLE_TIME", "5.0"}}).cycle_time == 5000us);
  CHECK(parse({{"ACCORD_LOG_LEVEL", "warn"}, {"HOROVOD_LOG_LEVEL", "WARNING"}}).log_level ==
        "warn");
  const std::string here = std::filesystem::current_path().string();
  CHECK(parse({{"ACCORD_TIMELINE", here + "/t.json"}, {"HOROVOD_TIMELINE", "./t.json"}}).timeline ==
        here + "/t.json");
  CHECK_THROWS_AS(parse({{"ACCORD_TIMELINE", "/tmp/a.json"}, {"HOROVOD_TIMELINE", "/tmp/b.json"}}),
                  InvalidArgument);
  // Horovod's "record only once start_timeline() is called" (its own tests set it).
  CHECK(parse({{"HOROVOD_TIMELINE", "DYNAMIC"}}).timeline.empty());

  // Different values: an error naming both. A bad value: the name the user wrote.
  try {
    parse({{"ACCORD_CYCLE_TIME", "1"}, {"HOROVOD_CYCLE_TIME", "5"}});
    FAIL("no error for two different values of one setting");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()) ==
          "ACCORD_CYCLE_TIME='1' and HOROVOD_CYCLE_TIME='5' are the same setting with "
          "different values: unset one of them");
  }
  CHECK(error("HOROVOD_CACHE_CAPACITY", "lots") ==
        "HOROVOD_CACHE_CAPACITY='lots': expected an integer between 0 and 65536 (0 disables "
        "the cache)");
  CHECK(error("HOROVOD_STALL_CHECK_TIME_SECONDS", "-1")
            .rfind("HOROVOD_STALL_CHECK_TIME_SECONDS='-1': expected seconds between", 0) == 0);
}

TEST_CASE("describe lists every known variable with its value", "[config]") {
  std::string d = parse({{"ACCORD_CYCLE_TIME", "0.25"}, {"ACCORD_SHARED_MEMORY", "0"}}).describe();
  for (const char* var :
       {"ACCORD_CYCLE_TIME=0.25 ms", "ACCORD_FUSION_THRESHOLD=65536 bytes",
        "ACCORD_CHUNK_BYTES=1048576 bytes", "ACCORD_CARRY_BYTES=65536 bytes",
        "ACCORD_SHARED_MEMORY=0", "ACCORD_INLINE_CYCLES=1", "ACCORD_NCCL=1",
        "ACCORD_CACHE_CAPACITY=1024", "ACCORD_STALL_CHECK_TIME=60 s",
        "ACCORD_STALL_SHUTDOWN_TIME=300 s", "ACCORD_SHUTDOWN_WAIT_TIME=60 s",
        "ACCORD_LOG_LEVEL=warn", "ACCORD_TIMELINE=(off)", "ACCORD_HIERARCHICAL_ALLREDUCE=0",
        "ACCORD_AUTOTUNE=0", "ACCORD_AUTOTUNE_STEPS=5", "ACCORD_AUTOTUNE_LOG=(off)",
        "ACCORD_HOSTNAME=(the host MPI sees)"}) {
    INFO(var);
    CHECK(d.find(var) != std::string::npos);
  }
  CHECK(std::count(d.begin(), d.end(), '\n') == 19);
  CHECK(Config::knownVariables().size() == 19);
  for (const auto& var : Config::knownVariables()) CHECK(d.find(var + "=") != std::string::npos);
}

// Ranks that share a kernel but not a host (containers, simulated hosts) name their host;
// HOROVOD_HOSTNAME is Horovod's name for it.
TEST_CASE("ACCORD_HOSTNAME names this rank's host, within a hostname's length", "[config]") {
  CHECK(parse({}).hostname.empty());
  CHECK(parse({{"ACCORD_HOSTNAME", "node-7"}}).hostname == "node-7");
  CHECK(parse({{"HOROVOD_HOSTNAME", "sim1"}}).hostname == "sim1");
  CHECK(parse({{"ACCORD_HOSTNAME", "a"}, {"HOROVOD_HOSTNAME", "a"}}).hostname == "a");
  CHECK(parse({{"ACCORD_HOSTNAME", "a"}}).describe().find("ACCORD_HOSTNAME=a ") !=
        std::string::npos);
  CHECK(parse({{"ACCORD_HOSTNAME", std::string(255, 'h')}}).hostname.size() == 255);
  CHECK(error("ACCORD_HOSTNAME", std::string(256, 'h'))
            .find("expected a name of at most 255 bytes") != std::string::npos);
}

TEST_CASE("unknown ACCORD_ variables are reported, everything else is not", "[config]") {
  CHECK(Config::unknownVariables({}).empty());
  CHECK(Config::unknownVariables({"PATH=/bin", "ACCORD_FUSION_THRESHOLD=1M", "ACCORD_LOG_LEVEL=",
                                  "ACCORD_BUILD_DIR=b", "XACCORD_FOO=1", "accord_cycle_time=1"})
            .empty());
  CHECK(Config::unknownVariables({"ACCORD_FUSION_THRESHHOLD=1M", "ACCORD_TIMELINES=t.json",
                                  "ACCORD_FUSION_THRESHHOLD=2M", "ACCORD_NOVALUE",
                                  "ACCORD_TIMELINE=t.json", "ACCORD_PROGRESS=1"}) ==
        std::vector<std::string>{"ACCORD_FUSION_THRESHHOLD", "ACCORD_NOVALUE", "ACCORD_TIMELINES"});
}

TEST_CASE("Horovod settings Accord does not read are named with what it does instead",
          "[config]") {
  // Read under their Horovod names (settings.def), empty, or not Horovod's: no note.
  CHECK(Config::unreadHorovodVariables({"HOROVOD_FUSION_THRESHOLD=1M", "HOROVOD_CYCLE_TIME=5",
                                        "HOROVOD_STALL_CHECK_DISABLE=", "HOROVOD_WITH_MPI=1",
                                        "XHOROVOD_TORUS_ALLREDUCE=1", "PATH=/bin"})
            .empty());
  const auto notes = Config::unreadHorovodVariables(
      {"HOROVOD_STALL_CHECK_DISABLE=1", "HOROVOD_TORUS_ALLREDUCE=1", "HOROVOD_CONTROLLER=gloo"});
  REQUIRE(notes.size() == 3);
  CHECK(notes[0] == "HOROVOD_CONTROLLER is a Horovod setting Accord does not read: Accord "
                    "negotiates over MPI, always");
  CHECK(notes[1].find("HOROVOD_STALL_CHECK_DISABLE is a Horovod setting Accord does not read: "
                      "Accord always watches for stalls") == 0);
  CHECK(notes[1].find("ACCORD_STALL_SHUTDOWN_TIME=0") != std::string::npos);
  CHECK(notes[2] == "HOROVOD_TORUS_ALLREDUCE is a Horovod setting Accord does not read: Accord "
                    "has no counterpart");
  // None of them is one Accord reads: the two lists do not meet.
  for (const auto& name : Config::knownVariables()) {
    const auto* s = settings::find(name);
    if (s == nullptr || !*s->horovod) continue;
    INFO(s->horovod);
    CHECK(Config::unreadHorovodVariables({std::string(s->horovod) + "=1"}).empty());
  }
}

TEST_CASE("sizes past what can be allocated are rejected with their range", "[config]") {
  // 2^63 wrapped the shared-memory window's size; 16G failed deep inside MPI.
  for (std::string big : {"1025M", "16G", "9223372036854775808", "8589934592G"}) {
    INFO(big);
    CHECK(error("ACCORD_CHUNK_BYTES", big) ==
          "ACCORD_CHUNK_BYTES='" + big +
              "': expected bytes between 4096 (4K) and 1073741824 (1G), suffixes K, M, G");
  }
  CHECK(parse({{"ACCORD_CHUNK_BYTES", "1G"}}).chunk_bytes == std::size_t{1} << 30);
  for (std::string big : {"4097M", "5G", "18446744073709551615"}) {
    INFO(big);
    CHECK(error("ACCORD_FUSION_THRESHOLD", big) ==
          "ACCORD_FUSION_THRESHOLD='" + big +
              "': expected bytes between 0 and 4294967296 (4G), suffixes K, M, G; 0 disables "
              "fusion");
  }
  CHECK(parse({{"ACCORD_FUSION_THRESHOLD", "4G"}}).fusion_threshold == std::size_t{4} << 30);
  CHECK(parse({{"ACCORD_CACHE_CAPACITY", "65536"}}).cache_capacity == 1u << 16);
}

TEST_CASE("times below the clock's resolution are rejected, not rounded to 0", "[config]") {
  // 0 means "never" (stall shutdown) or "no wait" (cycle): a tiny positive value must
  // not silently turn into that.
  CHECK(error("ACCORD_STALL_SHUTDOWN_TIME", "0.0004") ==
        "ACCORD_STALL_SHUTDOWN_TIME='0.0004': below the resolution of 1 millisecond, where it "
        "would round to 0 (never); expected seconds between 0.001 and 1000000000 (fractional "
        "allowed), or 0 = never");
  CHECK(error("ACCORD_STALL_CHECK_TIME", "0.0009") ==
        "ACCORD_STALL_CHECK_TIME='0.0009': below the resolution of 1 millisecond, where it "
        "would round to 0; expected seconds between 0.001 and 1000000000 (fractional allowed)");
  CHECK(error("ACCORD_CYCLE_TIME", "0.0001") ==
        "ACCORD_CYCLE_TIME='0.0001': below the resolution of 1 microsecond, where it would "
        "round to 0 (no wait); expected milliseconds between 0.001 and 10000 (fractional "
        "allowed, e.g. 0.5), or 0 = no wait");
  // The smallest accepted values keep their meaning; 0 keeps its own.
  CHECK(parse({{"ACCORD_STALL_SHUTDOWN_TIME", "0.001"}}).stall_shutdown_time == 1ms);
  CHECK(parse({{"ACCORD_STALL_CHECK_TIME", "0.001"}}).stall_check_time == 1ms);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "0.001"}}).cycle_time == 1us);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "0"}}).cycle_time == 0us);
  CHECK(parse({{"ACCORD_STALL_SHUTDOWN_TIME", "0.0"}}).stall_shutdown_time == 0ms);
}

TEST_CASE("autotune settings and where the search starts", "[config]") {
  Config off = parse({});
  CHECK_FALSE(off.autotune);
  CHECK(off.autotune_steps == 5);
  CHECK_FALSE(off.given.cycle_time);
  Config c =
      parse({{"HOROVOD_AUTOTUNE", "1"},
             {"HOROVOD_AUTOTUNE_LOG", "/tmp/a.csv"},
             {"ACCORD_AUTOTUNE_START", " ACCORD_FUSION_THRESHOLD=4K,ACCORD_CYCLE_TIME=0.5 "}});
  CHECK(c.autotune);
  CHECK(c.autotune_log == "/tmp/a.csv");
  CHECK(c.fusion_threshold == 4096);
  CHECK(c.cycle_time == 500us);
  CHECK(c.chunk_bytes == 1u << 20);
  CHECK_FALSE(c.given.fusion_threshold);  // a starting point, still tuned

  CHECK(error("ACCORD_AUTOTUNE", "yes") ==
        "ACCORD_AUTOTUNE='yes': expected an integer between 0 and 1 (1: tune the cycle time, "
        "fusion threshold and piece size online)");
  CHECK(error("ACCORD_AUTOTUNE_START", "ACCORD_CYCLE_TIME=1") ==
        "ACCORD_AUTOTUNE_START='ACCORD_CYCLE_TIME=1' is only read with ACCORD_AUTOTUNE=1, which "
        "is not set");
  auto startError = [](std::map<std::string, std::string> env) {
    env.emplace("ACCORD_AUTOTUNE", "1");
    try {
      parse(env);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(startError({{"ACCORD_AUTOTUNE_START", "ACCORD_CHUNK_BYTES=16G"}}) ==
        "ACCORD_AUTOTUNE_START: ACCORD_CHUNK_BYTES='16G': expected bytes between 4096 (4K) and "
        "1073741824 (1G), suffixes K, M, G");
  CHECK(startError({{"ACCORD_AUTOTUNE_START", "ACCORD_CACHE_CAPACITY=1"}}) ==
        "ACCORD_AUTOTUNE_START='ACCORD_CACHE_CAPACITY=1': expected space- or comma-separated "
        "NAME=VALUE among ACCORD_CYCLE_TIME, ACCORD_FUSION_THRESHOLD and ACCORD_CHUNK_BYTES");
  CHECK(startError({{"ACCORD_AUTOTUNE_START", "ACCORD_CYCLE_TIME"}}).find("expected space-") !=
        std::string::npos);
  CHECK(
      startError({{"ACCORD_AUTOTUNE_START", "ACCORD_CYCLE_TIME=1"}, {"ACCORD_CYCLE_TIME", "2"}}) ==
      "ACCORD_AUTOTUNE_START names ACCORD_CYCLE_TIME, which is also set explicitly and so is "
      "not tuned: unset one");
}

// ACCORD_* parsing: defaults, accepted spellings, and the exact message for every kind
// of bad value.
#include "runtime/config.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <map>

using namespace accord;
using namespace std::chrono_literals;

namespace {

Config parse(const std::map<std::string, std::string>& env) {
  return Config::parse([&](const char* var) -> const char* {
    auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error(const char* var, const std::string& value) {
  try {
    parse({{var, value}});
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("defaults apply when nothing is set", "[config]") {
  Config c = parse({});
  CHECK(c.cycle_time == 0us);
  CHECK(c.fusion_threshold == 64u << 10);
  CHECK(c.chunk_bytes == 1u << 20);
  CHECK(c.cache_capacity == 1024);
  CHECK(c.stall_check_time == 60s);
  CHECK(c.stall_shutdown_time == 300s);
  CHECK(c.log_level == "warn");
  CHECK(c.shared_memory);
  CHECK(parse({{"ACCORD_FUSION_THRESHOLD", ""}, {"ACCORD_LOG_LEVEL", "  "}}).fusion_threshold ==
        64u << 10);
}

TEST_CASE("every variable parses its accepted forms", "[config]") {
  Config c = parse({{"ACCORD_CYCLE_TIME", "2.5"},
                    {"ACCORD_FUSION_THRESHOLD", "64M"},
                    {"ACCORD_CHUNK_BYTES", " 4096 "},
                    {"ACCORD_CACHE_CAPACITY", "0"},
                    {"ACCORD_STALL_CHECK_TIME", "0.5"},
                    {"ACCORD_STALL_SHUTDOWN_TIME", "0"},
                    {"ACCORD_LOG_LEVEL", "DEBUG"},
                    {"ACCORD_SHARED_MEMORY", "0"}});
  CHECK(c.cycle_time == 2500us);
  CHECK(c.fusion_threshold == 64u << 20);
  CHECK(c.chunk_bytes == 4096);
  CHECK(c.cache_capacity == 0);
  CHECK(c.stall_check_time == 500ms);
  CHECK(c.stall_shutdown_time == 0ms);
  CHECK(c.log_level == "debug");
  CHECK_FALSE(c.shared_memory);
  CHECK(parse({{"ACCORD_SHARED_MEMORY", "1"}}).shared_memory);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "10000"}}).cycle_time == 10s);
  CHECK(parse({{"ACCORD_CYCLE_TIME", "0.0001"}}).cycle_time == 0us);  // below the clock's grain
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
  for (std::string bad :
       {"abc", "-1", "1.5M", "1T", "M", "10 M B", "1KX", "99999999999999999999"}) {
    INFO(bad);
    CHECK(error("ACCORD_FUSION_THRESHOLD", bad) ==
          "ACCORD_FUSION_THRESHOLD='" + bad + "': expected bytes >= 0 (suffixes K, M, G)");
  }
  CHECK(error("ACCORD_FUSION_THRESHOLD", "99999999999G") ==
        "ACCORD_FUSION_THRESHOLD='99999999999G': expected bytes >= 0 (suffixes K, M, G)");
  CHECK(error("ACCORD_CHUNK_BYTES", "4095") ==
        "ACCORD_CHUNK_BYTES='4095': expected bytes >= 4096 (4K; suffixes K, M, G)");
  CHECK(error("ACCORD_CHUNK_BYTES", "0") ==
        "ACCORD_CHUNK_BYTES='0': expected bytes >= 4096 (4K; suffixes K, M, G)");
}

TEST_CASE("bad times name the variable, the value and the range", "[config]") {
  const std::string cycle = "milliseconds between 0 and 10000 (fractional allowed, e.g. 0.5)";
  for (std::string bad : {"-0.1", "10000.5", "fast", "1ms", "nan", "inf", ""}) {
    if (bad.empty()) continue;  // empty means unset
    INFO(bad);
    CHECK(error("ACCORD_CYCLE_TIME", bad) == "ACCORD_CYCLE_TIME='" + bad + "': expected " + cycle);
  }
  CHECK(error("ACCORD_STALL_CHECK_TIME", "0") ==
        "ACCORD_STALL_CHECK_TIME='0': expected seconds > 0 and <= 1e9 (fractional allowed)");
  CHECK(error("ACCORD_STALL_CHECK_TIME", "-5") ==
        "ACCORD_STALL_CHECK_TIME='-5': expected seconds > 0 and <= 1e9 (fractional allowed)");
  CHECK(error("ACCORD_STALL_CHECK_TIME", "1e10") ==
        "ACCORD_STALL_CHECK_TIME='1e10': expected seconds > 0 and <= 1e9 (fractional allowed)");
  CHECK(error("ACCORD_STALL_SHUTDOWN_TIME", "-1") ==
        "ACCORD_STALL_SHUTDOWN_TIME='-1': expected seconds >= 0 and <= 1e9 (fractional allowed, 0 "
        "= never)");
  CHECK(error("ACCORD_STALL_SHUTDOWN_TIME", "5m") ==
        "ACCORD_STALL_SHUTDOWN_TIME='5m': expected seconds >= 0 and <= 1e9 (fractional allowed, 0 "
        "= never)");
}

TEST_CASE("bad counts and log levels name the accepted values", "[config]") {
  for (std::string bad : {"-1", "1.5", "lots", "1048577"}) {
    INFO(bad);
    CHECK(error("ACCORD_CACHE_CAPACITY", bad) ==
          "ACCORD_CACHE_CAPACITY='" + bad +
              "': expected an integer between 0 and 1048576 (0 disables the cache)");
  }
  for (std::string bad : {"2", "yes", "-1"}) {
    INFO(bad);
    CHECK(error("ACCORD_SHARED_MEMORY", bad) ==
          "ACCORD_SHARED_MEMORY='" + bad +
              "': expected an integer between 0 and 1 (1: allreduces among ranks of one host "
              "go through shared memory; 0: always MPI)");
  }
  CHECK(error("ACCORD_LOG_LEVEL", "warning") ==
        "ACCORD_LOG_LEVEL='warning': expected one of trace, debug, info, warn, error, off");
  for (std::string level : {"trace", "debug", "info", "warn", "error", "off"})
    CHECK(parse({{"ACCORD_LOG_LEVEL", level}}).log_level == level);
}

TEST_CASE("describe lists every known variable with its value", "[config]") {
  std::string d = parse({{"ACCORD_CYCLE_TIME", "0.25"}, {"ACCORD_SHARED_MEMORY", "0"}}).describe();
  for (const char* var : {"ACCORD_CYCLE_TIME=0.25 ms", "ACCORD_FUSION_THRESHOLD=65536 bytes",
                          "ACCORD_CHUNK_BYTES=1048576 bytes", "ACCORD_SHARED_MEMORY=0",
                          "ACCORD_CACHE_CAPACITY=1024", "ACCORD_STALL_CHECK_TIME=60 s",
                          "ACCORD_STALL_SHUTDOWN_TIME=300 s", "ACCORD_LOG_LEVEL=warn"}) {
    INFO(var);
    CHECK(d.find(var) != std::string::npos);
  }
  CHECK(std::count(d.begin(), d.end(), '\n') == 8);
  CHECK(Config::knownVariables().size() == 8);
  for (const auto& var : Config::knownVariables()) CHECK(d.find(var + "=") != std::string::npos);
}

TEST_CASE("unknown ACCORD_ variables are reported, everything else is not", "[config]") {
  CHECK(Config::unknownVariables({}).empty());
  CHECK(Config::unknownVariables({"PATH=/bin", "ACCORD_FUSION_THRESHOLD=1M", "ACCORD_LOG_LEVEL=",
                                  "ACCORD_BUILD_DIR=b", "XACCORD_FOO=1", "accord_cycle_time=1"})
            .empty());
  CHECK(Config::unknownVariables({"ACCORD_FUSION_THRESHHOLD=1M", "ACCORD_TIMELINE=t.json",
                                  "ACCORD_FUSION_THRESHHOLD=2M", "ACCORD_NOVALUE"}) ==
        std::vector<std::string>{"ACCORD_FUSION_THRESHHOLD", "ACCORD_NOVALUE", "ACCORD_TIMELINE"});
}

// The table of settings (runtime/settings.def) against its consumers: every entry must
// reach the parser, the error messages, describe(), the known names and, where the table
// says so, the agreement check at init. accordrun's flags and docs/configuration.md are
// checked against it by tests/tools (tools.accordrun, tools.settings-docs).
#include "runtime/config.h"
#include "runtime/config_reader.h"
#include "runtime/settings.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "parse_env.h"

using namespace accord;
using namespace std::chrono_literals;

namespace {

Config parse(const std::map<std::string, std::string>& env) { return accord_test::parseEnv(env); }

std::string error(const char* var, const std::string& value) {
  return accord_test::parseError(var, value);
}

// A valid value other than the default, for every setting.
std::string otherValue(const settings::Setting& s) {
  if (*s.example) return s.example;
  if (s.kind == settings::Kind::Count) return std::string(s.fallback) == "0" ? "1" : "0";
  return "1";  // the stall times
}

std::string lineOf(const std::string& describe, const std::string& name) {
  const auto at = describe.find("\n" + name + "=");
  const auto from = at == std::string::npos ? describe.rfind(name + "=", 0) : at + 1;
  if (from == std::string::npos) return "";
  return describe.substr(from, describe.find('\n', from) - from);
}

std::map<std::string, std::string> with(const settings::Setting& s, const std::string& value,
                                        bool by_horovod = false) {
  std::map<std::string, std::string> env{{by_horovod ? s.horovod : s.name, value}};
  if (s.has(settings::kAutotuneOnly)) env.emplace("ACCORD_AUTOTUNE", "1");
  return env;
}

}  // namespace

TEST_CASE("every setting of the table is parsed, described, known and checked", "[settings]") {
  const std::string defaults = parse({}).describe();
  const std::string tuning = parse({{"ACCORD_AUTOTUNE", "1"}}).describe();
  CHECK(Config::knownVariables().size() == settings::Id::kCount);
  for (const auto& s : settings::kTable) {
    INFO(s.name);
    const std::string value = otherValue(s);
    const Config set = parse(with(s, value));
    // Parsed into its field: the value in force, as describe() shows it, changes.
    const std::string before = lineOf(s.has(settings::kAutotuneOnly) ? tuning : defaults, s.name);
    CHECK_FALSE(before.empty());
    CHECK_FALSE(lineOf(set.describe(), s.name).empty());
    CHECK(lineOf(set.describe(), s.name) != before);
    CHECK(std::count(defaults.begin(), defaults.end(), '\n') == settings::Id::kCount);
    // Known, so never reported as a typo.
    CHECK(std::find(Config::knownVariables().begin(), Config::knownVariables().end(), s.name) !=
          Config::knownVariables().end());
    CHECK(Config::unknownVariables({std::string(s.name) + "=" + value}).empty());
    // Horovod's name reads the same value.
    if (*s.horovod) CHECK(parse(with(s, value, true)).describe() == set.describe());
    // A bad value is refused naming the setting and what it accepts.
    const std::string bad =
        s.kind == settings::Kind::Text || s.kind == settings::Kind::Path ||
                s.kind == settings::Kind::List
            ? std::string(static_cast<std::size_t>(s.max) + 1, 'x')
            : "bogus";
    if (s.kind != settings::Kind::List) {
      CHECK(error(s.name, bad) ==
            std::string(s.name) + "='" + bad + "': expected " + config_reader::expected(s));
    }
    // The agreement check compares it where the table says it must agree.
    const auto agreeing = [&](const Config& c) {
      for (const auto& [name, number] : c.mustAgree())
        if (name == s.name) return std::optional<std::uint64_t>(number);
      return std::optional<std::uint64_t>();
    };
    const Config base = parse(s.has(settings::kAutotuneOnly)
                                  ? std::map<std::string, std::string>{{"ACCORD_AUTOTUNE", "1"}}
                                  : std::map<std::string, std::string>{});
    CHECK(agreeing(base).has_value() == s.has(settings::kAgree));
    if (s.has(settings::kAgree)) CHECK(agreeing(base) != agreeing(set));
  }
}

TEST_CASE("whether a setting is set agrees where the table says so", "[settings]") {
  auto find = [](const Config& c, const std::string& name) {
    for (const auto& [n, v] : c.mustAgree())
      if (n == name) return std::optional<std::uint64_t>(v);
    return std::optional<std::uint64_t>();
  };
  for (const auto& s : settings::kTable) {
    INFO(s.name);
    const std::string tuned = std::string(s.name) + " (set, or left to ACCORD_AUTOTUNE)";
    const std::string defaulted = std::string(s.name) + " (set, or left to its default)";
    CHECK(find(parse({}), tuned).has_value() == s.has(settings::kTuned));
    CHECK(find(parse({}), defaulted).has_value() == s.has(settings::kGivenAgrees));
    if (s.has(settings::kTuned)) {
      CHECK(find(parse({{s.name, otherValue(s)}}), tuned) == 0u);  // not tuning: no matter
      CHECK(find(parse({{s.name, otherValue(s)}, {"ACCORD_AUTOTUNE", "1"}}), tuned) == 1u);
      CHECK(find(parse({{"ACCORD_AUTOTUNE", "1"}}), tuned) == 0u);
    }
    if (s.has(settings::kGivenAgrees)) {
      CHECK(find(parse({}), defaulted) == 0u);
      CHECK(find(parse({{s.name, s.fallback}}), defaulted) == 1u);  // set to its default
    }
  }
  // ACCORD_AUTOTUNE_STEPS is compared only where autotune reads it.
  CHECK(find(parse({{"ACCORD_AUTOTUNE_STEPS", "9"}}), "ACCORD_AUTOTUNE_STEPS") == 0u);
  CHECK(find(parse({{"ACCORD_AUTOTUNE_STEPS", "9"}, {"ACCORD_AUTOTUNE", "1"}}),
             "ACCORD_AUTOTUNE_STEPS") == 9u);
  CHECK(find(parse({{"ACCORD_NCCL", "2"}}), "ACCORD_NCCL") == 2u);
  CHECK(find(parse({{"ACCORD_HIERARCHICAL_ALLREDUCE", "1"}}), "ACCORD_HIERARCHICAL_ALLREDUCE") ==
        1u);
}

TEST_CASE("every default in the table is accepted by its own setting", "[settings]") {
  for (const auto& s : settings::kTable) {
    INFO(s.name);
    if (*s.fallback) CHECK_NOTHROW(parse({{s.name, s.fallback}}));
    if (*s.fallback && s.kind != settings::Kind::List)
      CHECK(lineOf(parse({{s.name, s.fallback}}).describe(), s.name) ==
            lineOf(parse({}).describe(), s.name));
  }
}

// A time finer than what it is kept to runs rounded; the log line must not pretend that
// the value given is the one in force, nor hide that it was given finer.
TEST_CASE("a time kept to its resolution says what was given", "[settings]") {
  CHECK(parse({{"ACCORD_STALL_SHUTDOWN_TIME", "0.0015"}}).stall_shutdown_time == 2ms);
  const std::string d = parse({{"ACCORD_STALL_SHUTDOWN_TIME", "0.0015"}}).describe();
  CHECK(lineOf(d, "ACCORD_STALL_SHUTDOWN_TIME")
            .rfind("ACCORD_STALL_SHUTDOWN_TIME=0.002 s (given 0.0015, kept to the millisecond)",
                   0) == 0);
  CHECK(lineOf(parse({{"ACCORD_CYCLE_TIME", "0.0015"}}).describe(), "ACCORD_CYCLE_TIME")
            .rfind("ACCORD_CYCLE_TIME=0.002 ms (given 0.0015, kept to the microsecond)", 0) == 0);
  // Values the resolution holds exactly are shown as they are.
  for (const char* exact : {"0.001", "0.25", "300", "0"}) {
    INFO(exact);
    const std::string line =
        lineOf(parse({{"ACCORD_STALL_SHUTDOWN_TIME", exact}}).describe(), "ACCORD_STALL_SHUTDOWN_TIME");
    CHECK(line.find("(given") == std::string::npos);
    CHECK(line.rfind(std::string("ACCORD_STALL_SHUTDOWN_TIME=") + exact + " s", 0) == 0);
  }
}

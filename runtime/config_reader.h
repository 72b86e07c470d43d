// Reading one ACCORD_* variable for Config::parse (config.cc): trimmed, parsed, checked
// against its range, and compared with its Horovod alias. Every rejection names the
// variable, the value as given and what was expected.
#pragma once

#include "runtime/config.h"

#include <accord/error.h>

#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace accord::config_reader {

inline constexpr const char* kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

std::string trim(const char* raw);
[[noreturn]] void reject(const char* var, const std::string& value, const std::string& expected);
// Plain bytes or a K/M/G suffix (KiB multiples), optionally followed by "B" or "iB".
bool parseBytes(const std::string& s, std::size_t& out);
// Whole numbers in full ("1000000000", not "1e+09"), so that messages read as written.
std::string formatNumber(double v);
// "4K": bytes with the largest suffix that writes them whole.
std::string suffixed(std::size_t bytes);
// "4096 (4K)": the exact count, and the short form where there is one.
std::string withUnit(std::size_t bytes);
bool parseNumber(const std::string& s, double& out);
// Horovod's name of the same setting (HOROVOD_CYCLE_TIME), or nullptr.
const char* horovodName(const char* var);

// How a time setting is written and what the runtime can represent of it.
struct TimeSetting {
  const char* unit;             // as the user writes it: "milliseconds", "seconds"
  double resolution;            // the smallest nonzero value, in `unit`
  const char* resolution_name;  // that resolution in words: "microsecond"
  double max;
  const char* zero;     // what 0 means, or nullptr where 0 is not accepted
  const char* example;  // appended to "(fractional allowed"
};

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
                        if (!path) return Text{s, s};
                        std::error_code ec;
                        const auto absolute = std::filesystem::absolute(s, ec).lexically_normal();
                        return Text{s, ec ? s : absolute.string()};
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

}  // namespace accord::config_reader

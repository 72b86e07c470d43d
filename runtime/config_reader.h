// Reading one setting of the table (runtime/settings.h) for Config::parse: trimmed,
// parsed by its kind, checked against its range, and compared with its Horovod alias.
// Every rejection names the variable as the user wrote it, the value as given and what
// was expected, in words that come from the table (expected()).
#pragma once

#include "runtime/config.h"
#include "runtime/settings.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

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

// A time setting's unit as written ("milliseconds") and its resolution in words
// ("microsecond"): the smallest nonzero value the runtime keeps.
const char* timeUnit(settings::Kind kind);
const char* resolutionName(settings::Kind kind);
// What a setting accepts, as its error message words it after "expected ".
std::string expected(const settings::Setting& s);
// The same, short, for one line of Config::describe: "0..4G; 0 disables fusion".
std::string range(const settings::Setting& s);

// A parsed value: Bytes and Count as integers, times as the number written (in the
// setting's unit), the rest as text.
using Value = std::variant<std::uint64_t, double, std::string>;

// `text` (trimmed, not empty) as setting `s`, or InvalidArgument naming `var` (the
// name the user wrote: the ACCORD_ one or Horovod's).
Value parse(const settings::Setting& s, const char* var, const std::string& text);

class Reader {
 public:
  explicit Reader(const Config::Getenv& getenv) : getenv_(getenv) {}

  // The setting's value: its ACCORD_ variable's, else its Horovod alias's, else its
  // default. Both set to different values (as parsed: 64K and 65536 agree, and two
  // spellings of one file) is an error naming both.
  Value value(const settings::Setting& s) const;
  // Set, by either name, to something other than blanks.
  bool given(const settings::Setting& s) const;
  // The text of the variable that gave the value (for messages), or "".
  std::string text(const settings::Setting& s) const;

 private:
  std::optional<std::string> raw(const char* var) const;

  const Config::Getenv& getenv_;
};

}  // namespace accord::config_reader

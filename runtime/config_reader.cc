// Reading one setting of the table; see config_reader.h.
#include "runtime/config_reader.h"

#include <accord/error.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <utility>

namespace accord::config_reader {

using settings::Kind;
using settings::Setting;

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

std::string formatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(std::llround(v));
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string suffixed(std::size_t bytes) {
  for (auto [shift, suffix] : {std::pair{30, 'G'}, {20, 'M'}, {10, 'K'}}) {
    if (bytes != 0 && bytes % (std::size_t{1} << shift) == 0)
      return std::to_string(bytes >> shift) + suffix;
  }
  return std::to_string(bytes);
}

std::string withUnit(std::size_t bytes) {
  std::string exact = std::to_string(bytes), short_form = suffixed(bytes);
  return short_form == exact ? exact : exact + " (" + short_form + ")";
}

bool parseNumber(const std::string& s, double& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(out);
}

const char* timeUnit(Kind kind) { return kind == Kind::Milliseconds ? "milliseconds" : "seconds"; }

const char* resolutionName(Kind kind) {
  return kind == Kind::Milliseconds ? "microsecond" : "millisecond";
}

namespace {

std::size_t whole(double v) { return static_cast<std::size_t>(v); }

std::string tunedNames() {
  std::string names;
  std::size_t left = 0;
  for (const auto& s : settings::kTable) left += s.has(settings::kTuned);
  for (const auto& s : settings::kTable) {
    if (!s.has(settings::kTuned)) continue;
    --left;
    names += std::string(s.name) + (left > 1 ? ", " : left == 1 ? " and " : "");
  }
  return names;
}

std::string logLevels() {
  std::string out;
  for (const char* level : kLogLevels) out += std::string(out.empty() ? "" : ", ") + level;
  return out;
}

}  // namespace

std::string expected(const Setting& s) {
  const std::string values = s.values;
  switch (s.kind) {
    case Kind::Bytes:
      return "bytes between " + withUnit(whole(s.min)) + " and " + withUnit(whole(s.max)) +
             ", suffixes K, M, G" + (values.empty() ? "" : "; " + values);
    case Kind::Count:
      return "an integer between " + formatNumber(s.min) + " and " + formatNumber(s.max) +
             (values.empty() ? "" : " (" + values + ")");
    case Kind::Milliseconds:
    case Kind::Seconds:
      return std::string(timeUnit(s.kind)) + " between " + formatNumber(s.min) + " and " +
             formatNumber(s.max) + " (fractional allowed" +
             (*s.example ? std::string(", e.g. ") + s.example : "") + ")" +
             (values.empty() ? "" : ", or 0 = " + values);
    case Kind::LogLevel:
      return "one of " + logLevels();
    case Kind::Text:
      return "a name of at most " + formatNumber(s.max) + " bytes";
    case Kind::Path:
      return "a path of at most " + formatNumber(s.max) + " bytes";
    case Kind::List:
      return "space- or comma-separated NAME=VALUE among " + tunedNames();
  }
  return "";
}

std::string range(const Setting& s) {
  const std::string values = s.values;
  switch (s.kind) {
    case Kind::Bytes:
      return suffixed(whole(s.min)) + ".." + suffixed(whole(s.max)) + ", K/M/G suffixes" +
             (values.empty() ? "" : "; " + values);
    case Kind::Count:  // its values are words enough for the documentation alone
      return formatNumber(s.min) + ".." + formatNumber(s.max);
    case Kind::Milliseconds:
    case Kind::Seconds:
      return (values.empty() ? "" : "0 = " + values + ", or ") + formatNumber(s.min) + ".." +
             formatNumber(s.max) + (s.kind == Kind::Seconds ? " s" : " ms");
    case Kind::LogLevel:
      return logLevels();
    case Kind::Text:
    case Kind::Path:
    case Kind::List:
      return "at most " + formatNumber(s.max) + " bytes";
  }
  return "";
}

namespace {

double parseTime(const Setting& s, const char* var, const std::string& text) {
  double v = 0;
  const bool zero = *s.values != '\0';
  if (!parseNumber(text, v) || v < 0 || v > s.max || (v == 0 && !zero))
    reject(var, text, expected(s));
  if (v > 0 && v < s.min) {
    throw InvalidArgument(std::string(var) + "='" + text + "': below the resolution of 1 " +
                          resolutionName(s.kind) + ", where it would round to 0" +
                          (zero ? std::string(" (") + s.values + ")" : "") + "; expected " +
                          expected(s));
  }
  return v;
}

std::string parseLevel(const Setting& s, const char* var, const std::string& text) {
  std::string v = text;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "warning") v = "warn";  // Horovod's spellings
  if (v == "fatal") v = "error";
  for (const char* known : kLogLevels)
    if (v == known) return v;
  reject(var, text, expected(s));
}

// Values compare as parsed; a path as the file it names, so that a relative and an
// absolute spelling of one file agree.
bool same(const Setting& s, const Value& a, const Value& b) {
  if (s.kind != Kind::Path) return a == b;
  auto file = [](const std::string& p) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(p, ec).lexically_normal();
    return ec ? p : absolute.string();
  };
  return file(std::get<std::string>(a)) == file(std::get<std::string>(b));
}

}  // namespace

Value parse(const Setting& s, const char* var, const std::string& text) {
  switch (s.kind) {
    case Kind::Bytes: {
      std::size_t v = 0;
      if (!parseBytes(text, v) || v < s.min || v > s.max) reject(var, text, expected(s));
      return std::uint64_t{v};
    }
    case Kind::Count: {
      std::uint64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || v < s.min || v > s.max)
        reject(var, text, expected(s));
      return v;
    }
    case Kind::Milliseconds:
    case Kind::Seconds:
      return parseTime(s, var, text);
    case Kind::LogLevel:
      return parseLevel(s, var, text);
    case Kind::Text:
    case Kind::Path:
    case Kind::List:
      if (text.size() > s.max) reject(var, text, expected(s));
      return text;
  }
  return text;
}

Value Reader::value(const Setting& s) const {
  const auto own = raw(s.name);
  const auto other = *s.horovod ? raw(s.horovod) : std::nullopt;
  std::optional<Value> a, b;
  if (own) a = parse(s, s.name, *own);
  if (other) b = parse(s, s.horovod, *other);
  if (a && b && !same(s, *a, *b)) {
    throw InvalidArgument(std::string(s.name) + "='" + *own + "' and " + s.horovod + "='" +
                          *other +
                          "' are the same setting with different values: unset one of them");
  }
  if (a) return *a;
  if (b) return *b;
  if (*s.fallback) return parse(s, s.name, s.fallback);
  return std::string();
}

bool Reader::given(const Setting& s) const {
  return raw(s.name) || (*s.horovod && raw(s.horovod));
}

std::string Reader::text(const Setting& s) const {
  if (auto own = raw(s.name)) return *own;
  if (auto other = *s.horovod ? raw(s.horovod) : std::nullopt) return *other;
  return "";
}

std::optional<std::string> Reader::raw(const char* var) const {
  const char* value = getenv_(var);
  if (value == nullptr) return std::nullopt;
  std::string s = trim(value);
  if (s.empty()) return std::nullopt;
  return s;
}

}  // namespace accord::config_reader

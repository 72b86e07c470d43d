// Reading one ACCORD_* variable; see config_reader.h.
#include "runtime/config_reader.h"

#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

namespace accord::config_reader {

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
    {"ACCORD_HOSTNAME", "HOROVOD_HOSTNAME"},
};

const char* horovodName(const char* var) {
  for (auto [accord_name, horovod_name] : kHorovodNames)
    if (std::string_view(var) == accord_name) return horovod_name;
  return nullptr;
}

}  // namespace accord::config_reader

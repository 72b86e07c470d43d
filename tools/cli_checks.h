// Command-line checks shared by the tools (accord-pack, accord-make-jpegs,
// accord-data-bench, accord-bench). Each message names the value as given and what is
// accepted; CLI11 puts the flag's name in front ("--iters: 0 is not an integer in
// [1, 1000000]"). CLI11's own PositiveNumber prints its range as 0 to 1.8e308 written
// out in full, and its conversions wrap -1 into 2^64 - 1 for an unsigned setting.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <utility>

namespace accord_tools {

// A whole number that fits 64 bits: CLI11 would wrap -5 into an unsigned seed, or
// saturate 2^64.
inline CLI::Validator nonNegativeInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        std::uint64_t v = 0;
        const char* end = input.data() + input.size();
        const auto [stop, error] = std::from_chars(input.data(), end, v);
        return error == std::errc() && stop == end ? "" : input + " is not an integer in [0, 2^64)";
      },
      "[0, 2^64)");
}

// A whole number in [lo, hi]; "abc", "1.5" and "-1" are refused as they were typed.
inline CLI::Validator integerIn(long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& input) -> std::string {
        long long v = 0;
        const char* end = input.data() + input.size();
        const auto [stop, error] = std::from_chars(input.data(), end, v);
        const bool ok = error == std::errc() && stop == end && !input.empty() && v >= lo && v <= hi;
        return ok ? "" : input + " is not an integer in " + range;
      },
      range);
}

// A byte count, bare or with a unit of 1024s (4096, 4K, 4KiB, 256M, 8G), in [lo, hi]
// bytes; the input is replaced by the number (so: ->transform, not ->check). Units and
// bounds are checked here rather than with CLI11's AsSizeValue, which reads "-1" as
// 18446744073709551615.
inline CLI::Validator byteSize(std::uint64_t lo, std::uint64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "] bytes";
  return CLI::Validator(
      [lo, hi, range](std::string& input) -> std::string {
        const std::string refused =
            input + " is not a size in " + range + " (a number, or with K, M or G: 4K, 256M)";
        std::uint64_t v = 0;
        const char* end = input.data() + input.size();
        const auto [stop, error] = std::from_chars(input.data(), end, v);
        if (error != std::errc() || stop == input.data()) return refused;
        std::string unit(stop, end);
        std::transform(unit.begin(), unit.end(), unit.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        int shift = 0;  // log2 of the unit
        if (!unit.empty() && unit != "b") {
          const std::string prefixes = "kmgt";
          const std::size_t p = prefixes.find(unit[0]);
          const std::string rest = unit.substr(1);
          if (p == std::string::npos ||
              !(rest.empty() || rest == "b" || rest == "i" || rest == "ib"))
            return refused;
          shift = 10 * static_cast<int>(p + 1);
        }
        if (v > (UINT64_MAX >> shift)) return refused;
        v <<= shift;
        if (v < lo || v > hi) return refused;
        input = std::to_string(v);
        return "";
      },
      "SIZE " + range);
}

// A file or folder name: an empty one ("$OUT" with OUT unset) would mean the current
// folder to the file system calls, and the tool would write into it, or clean up in it.
inline CLI::Validator nonEmptyPath() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        return input.empty() ? "the path is empty (an unset variable?): name a file or folder" : "";
      },
      "PATH");
}

}  // namespace accord_tools

// Command-line checks shared by the data tools (accord-pack, accord-make-jpegs).
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <string>

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

}  // namespace accord_tools

// Command-line checks shared by the tools (accord-pack, accord-make-jpegs,
// accord-data-bench, accord-bench). Each message names the value as given and what is
// accepted; CLI11 puts the flag's name in front.
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

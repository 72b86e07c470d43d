// Reading the runtime's failure messages in tests that run without the MPI test
// harness (test_fault.cc) as well as with it.
#pragma once

#include <cstdlib>
#include <string>

namespace accord_test {

// True when the message's list of silent ranks ("rank 2 did not", "ranks 0, 2 did not",
// "rank(s) 2 did not") holds `rank`. A survivor waiting on several ranks at once (a
// frozen rank and one that waits for it in turn) names them all.
inline bool namesSilent(const std::string& message, int rank) {
  const std::size_t end = message.find(" did not ");
  if (end == std::string::npos) return false;
  std::size_t begin = message.rfind("rank", end);
  if (begin == std::string::npos) return false;
  begin = message.find(' ', begin) + 1;
  const std::string list = message.substr(begin, end - begin);
  std::size_t pos = 0;
  while (pos < list.size()) {
    const std::size_t comma = list.find(',', pos);
    const std::string item =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (std::atoi(item.c_str()) == rank && item.find_first_of("0123456789") != std::string::npos)
      return true;
    if (comma == std::string::npos) break;
    pos = comma + 2;
  }
  return false;
}

}  // namespace accord_test

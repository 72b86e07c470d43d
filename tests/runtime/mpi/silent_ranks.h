// Reading the runtime's failure messages in tests that run without the MPI test
// harness (test_fault.cc) as well as with it.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace accord_test {

// The ranks a failure message blames: the list before its first " did not " or
// " stopped answering" ("rank 2 did not ...", "ranks 0, 2 did not ...", "rank(s) 2 did
// not ...", "rank 2 stopped answering: ..."). After a roll call (ops/mpi/roll_call.h)
// that is the ranks that stopped; a wait that names whom it was stuck on may list a
// live rank beside them.
inline std::vector<int> blamedRanks(const std::string& message) {
  const std::size_t end = std::min(message.find(" did not "), message.find(" stopped answering"));
  if (end == std::string::npos) return {};
  std::size_t begin = message.rfind("rank", end);
  if (begin == std::string::npos) return {};
  begin = message.find(' ', begin) + 1;
  const std::string list = message.substr(begin, end - begin);
  std::vector<int> ranks;
  std::size_t pos = 0;
  while (pos < list.size()) {
    const std::size_t comma = list.find(',', pos);
    const std::string item =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.find_first_of("0123456789") == std::string::npos) return {};
    ranks.push_back(std::atoi(item.c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 2;
  }
  return ranks;
}

// True when the message blames `rank` (perhaps among others).
inline bool namesSilent(const std::string& message, int rank) {
  const std::vector<int> ranks = blamedRanks(message);
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

// True when the message blames `rank` and no other: no live rank is named as a culprit.
inline bool blamesOnly(const std::string& message, int rank) {
  return blamedRanks(message) == std::vector<int>{rank};
}

// True when the ranks blamed are the ones a roll call found silent, as every wait of
// the MPI link reports them.
inline bool rollCalled(const std::string& message) {
  return message.find(" stopped answering") != std::string::npos;
}

}  // namespace accord_test

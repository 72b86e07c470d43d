// splitByHost (see host_split.h).
#include "runtime/host_split.h"

#include "runtime/mpi_check.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace accord {

namespace {

std::string& storedName() {
  static std::string name;
  return name;
}

}  // namespace

void setHostName(std::string name) { storedName() = std::move(name); }
const std::string& hostName() { return storedName(); }

MPI_Comm splitByHost(MPI_Comm comm, int key) {
  MPI_Comm node = MPI_COMM_NULL;
  ACCORD_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &node));
  // The longest name among the ranks that share memory: 0 (the common case) means no
  // rank set one, and the split by memory is the answer on every rank alike.
  const std::string& mine = hostName();
  int length = static_cast<int>(mine.size()), longest = 0;
  ACCORD_MPI_CHECK(MPI_Allreduce(&length, &longest, 1, MPI_INT, MPI_MAX, node));
  if (longest == 0) return node;

  // Every rank's name, padded to the longest; a rank's color is the lowest node rank
  // that has the same name (an unset name is a name too: "").
  int size = 0, rank = 0;
  ACCORD_MPI_CHECK(MPI_Comm_size(node, &size));
  ACCORD_MPI_CHECK(MPI_Comm_rank(node, &rank));
  const std::size_t width = static_cast<std::size_t>(longest);
  std::vector<char> padded(width, '\0'), all(width * static_cast<std::size_t>(size));
  std::memcpy(padded.data(), mine.data(), mine.size());
  ACCORD_MPI_CHECK(MPI_Allgather(padded.data(), longest, MPI_CHAR, all.data(), longest, MPI_CHAR,
                                 node));
  int color = rank;
  for (int r = 0; r < rank; ++r) {
    if (std::equal(padded.begin(), padded.end(), all.begin() + static_cast<std::ptrdiff_t>(width * r))) {
      color = r;
      break;
    }
  }
  MPI_Comm host = MPI_COMM_NULL;
  ACCORD_MPI_CHECK(MPI_Comm_split(node, color, key, &host));
  MPI_Comm_free(&node);
  return host;
}

}  // namespace accord

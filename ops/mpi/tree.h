// Binomial trees for broadcasts over point-to-point messages.
//
// Ranks are renumbered relative to the root (v = (rank - root) mod size); v receives
// from v minus its lowest set bit and sends to v + 2^k for every 2^k below that bit,
// largest first, so the first child sent to heads the largest subtree. A message
// reaches all ranks in ceil(log2 size) rounds.
#pragma once

#include <vector>

namespace accord::mpi {

struct Tree {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // the order to send in
};

Tree binomialTree(int rank, int size, int root);

}  // namespace accord::mpi

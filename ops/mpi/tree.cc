#include "ops/mpi/tree.h"

namespace accord::mpi {

Tree binomialTree(int rank, int size, int root) {
  Tree tree;
  const int v = (rank - root + size) % size;
  int mask = 1;
  while (mask < size) {
    if (v & mask) {
      tree.parent = (v - mask + root) % size;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < size) tree.children.push_back((v + mask + root) % size);
  }
  return tree;
}

}  // namespace accord::mpi

// Binomial broadcast trees: every rank but the root has exactly one parent, the
// parent/child relation agrees from both ends, and no rank is more than ceil(log2 size)
// hops from the root (exactly that many when size is a power of two).
#include "ops/mpi/tree.h"

#include <catch2/catch.hpp>

#include <vector>

using accord::mpi::binomialTree;

TEST_CASE("binomial trees reach every rank once, from any root", "[tree]") {
  for (int size = 1; size <= 17; ++size) {
    for (int root = 0; root < size; ++root) {
      std::vector<int> parents(size, -2), depth(size, -1);
      for (int r = 0; r < size; ++r) {
        const auto tree = binomialTree(r, size, root);
        parents[r] = tree.parent;
        for (int c : tree.children) {
          INFO("size " << size << " root " << root << " rank " << r << " child " << c);
          REQUIRE(c >= 0);
          REQUIRE(c < size);
          CHECK(binomialTree(c, size, root).parent == r);
        }
      }
      // Follow parents to the root from every rank: no cycles, bounded depth.
      int max_depth = 0;
      for (int r = 0; r < size; ++r) {
        int d = 0;
        for (int x = r; x != root; x = parents[x]) {
          REQUIRE(parents[x] >= 0);
          REQUIRE(++d <= size);
        }
        max_depth = std::max(max_depth, d);
      }
      CHECK(parents[root] == -1);
      int log2 = 0;
      while ((1 << log2) < size) ++log2;
      CHECK(max_depth <= log2);
      if ((size & (size - 1)) == 0) CHECK(max_depth == log2);
    }
  }
}

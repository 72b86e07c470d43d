// ACCORD_HOSTNAME: ranks that share a machine but name different hosts count as
// different hosts, everywhere Accord decides "same host". Run through
// ci/nccl-one-gpu.sh --hosts A,B,..., which gives each rank its simulated host's name;
// the expected layout is derived from the names the ranks were given.
//   - local_rank/local_size/cross_rank/cross_size follow the names (hosts numbered in the
//     order of their lowest global ranks);
//   - a set spanning named hosts negotiates over MPI, one within a host through shared
//     memory;
//   - allreduces give the reduced values (Average within its rounding), with ACCORD_HIERARCHICAL_ALLREDUCE=1 through the
//     hierarchy where the hosts hold equal numbers of ranks (the debug log says which).
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

// Every rank's ACCORD_HOSTNAME, in rank order.
std::vector<std::string> hostNames() {
  const char* mine = std::getenv("ACCORD_HOSTNAME");
  char name[64] = {};
  std::strncpy(name, mine ? mine : "", sizeof name - 1);
  std::vector<char> all(64 * static_cast<std::size_t>(accord::size()));
  MPI_Allgather(name, 64, MPI_CHAR, all.data(), 64, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> names;
  for (int r = 0; r < accord::size(); ++r) names.emplace_back(all.data() + 64 * r);
  return names;
}

}  // namespace

TEST_CASE("local and cross ranks follow ACCORD_HOSTNAME") {
  const int me = accord::rank(), n = accord::size();
  const auto names = hostNames();
  REQUIRE_FALSE(names[me].empty());  // run through ci/nccl-one-gpu.sh --hosts
  int local_rank = 0, local_size = 0;
  std::vector<std::string> hosts;  // in the order of their lowest ranks
  for (int r = 0; r < n; ++r) {
    if (names[r] == names[me]) {
      ++local_size;
      if (r < me) ++local_rank;
    }
    if (std::find(hosts.begin(), hosts.end(), names[r]) == hosts.end()) hosts.push_back(names[r]);
  }
  const int cross_rank =
      static_cast<int>(std::find(hosts.begin(), hosts.end(), names[me]) - hosts.begin());
  CHECK(accord::local_rank() == local_rank);
  CHECK(accord::local_size() == local_size);
  CHECK(accord::cross_rank() == cross_rank);
  CHECK(accord::cross_size() == static_cast<int>(hosts.size()));

  // The global set spans the named hosts: MPI, not one shared-memory window.
  CHECK(accord::process_set_transport(accord::kGlobalProcessSet) ==
        (hosts.size() > 1 ? accord::Transport::Mpi : accord::Transport::SharedMemory));
  // A set of this host's ranks shares memory (where it has two or more).
  std::vector<std::vector<int>> per_host(hosts.size());
  for (int r = 0; r < n; ++r)
    per_host[std::find(hosts.begin(), hosts.end(), names[r]) - hosts.begin()].push_back(r);
  std::vector<accord::ProcessSetId> sets;
  for (const auto& ranks : per_host) sets.push_back(accord::add_process_set(ranks));
  const auto mine = sets[static_cast<std::size_t>(cross_rank)];
  CHECK(accord::process_set_transport(mine) ==
        (local_size > 1 ? accord::Transport::SharedMemory : accord::Transport::Local));
  for (auto id : sets) accord::remove_process_set(id);
}

TEST_CASE("allreduces across named hosts reduce correctly, small and large") {
  const int me = accord::rank();
  const auto ranks = allRanks(accord::size());
  for (DType dtype : {DType::Float32, DType::Int64})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max})
      for (std::int64_t count : {std::int64_t{7}, std::int64_t{300001}}) {
        Buffer b(dtype, {count});
        b.fill([&](std::int64_t i) { return fillValue(dtype, op, me, i); });
        accord::AllreduceOptions o;
        o.op = op;
        o.name = "host." + str(dtype) + "." + str(op) + "." + std::to_string(count);
        const auto error = describe(finish(accord::allreduce_async(b.view(), o), o.name), o.name);
        INFO(error);
        CHECK(error.empty());
        const auto diff = compareElements(
            dtype, b.data(), count, [&](std::int64_t i) { return reducedValue(dtype, op, ranks, i); },
            toleranceFor(dtype, op));
        INFO(o.name << ": " << diff);
        CHECK(diff.empty());
      }
}
int main(int argc, char** argv) { return runMain(argc, argv); }

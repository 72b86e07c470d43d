// Accord over a communicator of the application's (accord/mpi.h): the job is split in
// two groups, the first half of the world ranks and the rest, each group ordered from
// its highest world rank down, and each starts its own Accord over its group at the
// same time, both on this host, both using the same tensor names. Every collective must
// reach the group's members only, in the group's rank order; rank(), size(), roots and
// process sets are the group's; the application's own traffic on MPI_COMM_WORLD goes on
// beside it; and shutdown leaves MPI to the application.
//
// With `--env INIT_COMM_BY=ranks` each group starts Accord from the list of its world
// ranks instead (accord::init(world_ranks), what Python's init(comm=[...]) calls); with
// `--env INIT_COMM_SPLIT=interleaved` the groups are the even and the odd world ranks,
// which across simulated hosts of 2 + 2 ranks puts each group on both hosts.
//
// Before any of it: the refusals. accord::init(comm) before MPI_Init (main), and after
// it (before_init) MPI_COMM_NULL, an intercommunicator and bad lists of world ranks.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <accord/mpi.h>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

int g_world_rank = -1;
int g_world_size = 0;
int g_color = 0;                   // which group: the first half or the rest, or the parity
MPI_Comm g_group = MPI_COMM_NULL;  // this rank's group, highest world rank first
std::vector<int> g_members;        // the group's world ranks, in group-rank order

bool envIs(const char* name, const std::string& value) {
  const char* set = std::getenv(name);
  return set != nullptr && set == value;
}

int colorOf(int world_rank) {
  if (envIs("INIT_COMM_SPLIT", "interleaved")) return world_rank % 2;
  return world_rank < (g_world_size + 1) / 2 ? 0 : 1;
}

// "" when `call` throws an accord exception of `kind` whose message has `needle`.
std::string refused(const std::string& kind, const std::string& needle,
                    const std::function<void()>& call) {
  const auto outcome = attempt(call);
  if (outcome.kind == kind && contains(outcome.message, needle)) return "";
  return "expected " + kind + " mentioning '" + needle + "', got " + outcome.kind + ": " +
         outcome.message;
}

int report(const std::string& what, const std::string& problem) {
  if (problem.empty()) return 0;
  std::fprintf(stderr, "[rank %d] FAILED: %s: %s\n", g_world_rank, what.c_str(), problem.c_str());
  return 1;
}

int makeGroups() {
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  g_color = colorOf(g_world_rank);
  MPI_Comm_split(MPI_COMM_WORLD, g_color, -g_world_rank, &g_group);
  for (int r = g_world_size - 1; r >= 0; --r)
    if (colorOf(r) == g_color) g_members.push_back(r);
  return 0;
}

// After MPI_Init, before this rank's Accord starts: what init refuses.
int refusalsBeforeInit() {
  int failures = makeGroups();
  failures += report("init(MPI_COMM_NULL)", refused("InvalidArgument", "MPI_COMM_NULL",
                                                    [] { accord::init(MPI_COMM_NULL); }));
  if (g_world_size >= 2) {
    // The two groups' leaders are their highest world ranks.
    int other_leader = g_world_size - 1;
    while (colorOf(other_leader) == g_color) --other_leader;
    MPI_Comm inter;
    MPI_Intercomm_create(g_group, 0, MPI_COMM_WORLD, other_leader, 77, &inter);
    failures += report("init(intercommunicator)", refused("InvalidArgument", "intercommunicator",
                                                          [&] { accord::init(inter); }));
    MPI_Comm_free(&inter);
  }
  const auto n = std::to_string(g_world_size);
  failures += report(
      "init({})", refused("InvalidArgument", "no rank", [] { accord::init(std::vector<int>{}); }));
  failures += report("init({size})",
                     refused("InvalidArgument", "0.." + std::to_string(g_world_size - 1), [] {
                       accord::init(std::vector<int>{g_world_rank, g_world_size});
                     }));
  failures += report("init({-1})", refused("InvalidArgument", "-1", [] {
                       accord::init(std::vector<int>{-1, g_world_rank});
                     }));
  failures += report("init({me, me})", refused("InvalidArgument", "twice", [] {
                       accord::init(std::vector<int>{g_world_rank, g_world_rank});
                     }));
  if (g_world_size >= 2) {
    const int other = (g_world_rank + 1) % g_world_size;
    failures += report(
        "init({other})",
        refused("InvalidArgument", "rank " + std::to_string(g_world_rank) + " of MPI_COMM_WORLD",
                [&] { accord::init(std::vector<int>{other}); }));
  }
  failures += report("still not running", accord::is_initialized() ? "Accord started" : "");
  return failures;
}

void startOnGroup() {
  if (envIs("INIT_COMM_BY", "ranks"))
    accord::init(g_members);
  else
    accord::init(g_group);
}

int afterShutdown() {
  int failures = 0;
  int finalized = 1;
  MPI_Finalized(&finalized);
  failures +=
      report("MPI after shutdown", finalized ? "Accord finalized the application's MPI" : "");
  if (finalized) return failures;
  int one = 1, n = 0;
  MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  failures +=
      report("MPI_Allreduce after shutdown", n == g_world_size ? "" : "gave " + std::to_string(n));
  MPI_Comm_free(&g_group);
  return failures;
}

}  // namespace

TEST_CASE("rank, size and topology are the group's") {
  int group_rank = -1;
  MPI_Comm_rank(g_group, &group_rank);
  CHECK(accord::rank() == group_rank);
  CHECK(accord::size() == static_cast<int>(g_members.size()));
  CHECK(g_members[accord::rank()] == g_world_rank);
  CHECK(accord::process_set_ranks(accord::kGlobalProcessSet) == allRanks(accord::size()));
  // The group's members on this host, and its hosts, as MPI counts them.
  MPI_Comm node;
  MPI_Comm_split_type(g_group, MPI_COMM_TYPE_SHARED, group_rank, MPI_INFO_NULL, &node);
  int local_rank = -1, local_size = 0, hosts = 0;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  const int leader = local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &hosts, 1, MPI_INT, MPI_SUM, g_group);
  CHECK(accord::local_rank() == local_rank);
  CHECK(accord::local_size() == local_size);
  CHECK(accord::cross_size() == hosts);
}

TEST_CASE("ranks_of: a communicator's members as Accord ranks") {
  const int n = accord::size();
  CHECK(accord::ranks_of(g_group) == allRanks(n));
  CHECK(accord::ranks_of(MPI_COMM_SELF) == std::vector<int>{accord::rank()});
  MPI_Comm reversed;
  MPI_Comm_split(g_group, 0, -accord::rank(), &reversed);
  std::vector<int> expected;
  for (int r = n - 1; r >= 0; --r) expected.push_back(r);
  CHECK(accord::ranks_of(reversed) == expected);
  MPI_Comm_free(&reversed);
  CHECK(refused("InvalidArgument", "MPI_COMM_NULL", [] { accord::ranks_of(MPI_COMM_NULL); }) == "");
  if (g_world_size > n) {
    int outsider = 0;  // the first in world order
    while (colorOf(outsider) == g_color) ++outsider;
    CHECK(refused("InvalidArgument", "rank " + std::to_string(outsider) + " of MPI_COMM_WORLD",
                  [] { accord::ranks_of(MPI_COMM_WORLD); }) == "");
  }
}

TEST_CASE("collectives reach the group's members only, in its order") {
  const int n = accord::size();
  // Sums of world ranks: a member of the other group would change them.
  long long sum = 0;
  for (int w : g_members) sum += w + 1;
  for (int step = 0; step < 5; ++step) {
    std::vector<Buffer> grads;
    std::vector<accord::Handle> handles;
    for (int t = 0; t < 8; ++t) {
      // The same names in both groups, at the same time; the last one above the fusion
      // buffer, reduced in pieces.
      grads.emplace_back(DType::Int32, Shape{t == 7 ? kAboveFusionBytes / 4 : 100 + t});
    }
    for (int t = 0; t < 8; ++t) {
      grads[t].fill([&](std::int64_t i) { return (g_world_rank + 1) * (i % 13 + step); }, 13);
      accord::AllreduceOptions options;
      options.name = "grad." + std::to_string(t);
      options.op = ReduceOp::Sum;
      handles.push_back(accord::allreduce_async(grads[t].view(), options));
    }
    // The application's collectives on MPI_COMM_WORLD and on the group meanwhile.
    int one = 1, world = 0, group = 0;
    MPI_Allreduce(&one, &world, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&one, &group, 1, MPI_INT, MPI_SUM, g_group);
    CHECK(world == g_world_size);
    CHECK(group == n);
    for (int t = 0; t < 8; ++t) {
      const std::string name = "grad." + std::to_string(t);
      INFO(name << " step " << step);
      CHECK(describe(finish(handles[t], name), name).empty());
      CHECK(compareElements(DType::Int32, grads[t].data(), grads[t].numel(), [&](std::int64_t i) {
              return static_cast<double>(sum * (i % 13 + step));
            }).empty());
    }
  }

  // Allgather: member r gives r + 1 rows of its world rank; rows come in group order.
  Buffer mine(DType::Int64, {accord::rank() + 1, 2});
  mine.fill([&](std::int64_t) { return g_world_rank; });
  Output gathered(DType::Int64);
  accord::AllgatherOptions gather;
  gather.name = "who";
  CHECK(describe(finish(accord::allgather_async(mine.view(), gathered.allocator(), gather), "who"),
                 "who")
            .empty());
  std::vector<double> rows;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < 2 * (r + 1); ++k) rows.push_back(g_members[r]);
  CHECK(gathered.numel() == static_cast<std::int64_t>(rows.size()));
  if (gathered.numel() == static_cast<std::int64_t>(rows.size()))
    CHECK(compareElements(DType::Int64, gathered.data(), gathered.numel(), [&](std::int64_t i) {
            return rows[i];
          }).empty());

  // Broadcast from every root of the group: the root's world rank.
  for (int root = 0; root < n; ++root) {
    Buffer value(DType::Int32, {3});
    value.fill([&](std::int64_t) { return g_world_rank; });
    accord::BroadcastOptions bo;
    bo.name = "from";
    bo.root = root;
    CHECK(describe(finish(accord::broadcast_async(value.view(), bo), "from"), "from").empty());
    CHECK(value.get(2) == g_members[root]);
  }
}

TEST_CASE("a process set names the group's ranks") {
  if (accord::size() < 2) return;
  // Accord's rank 0 of the group is its highest world rank.
  const auto id = accord::add_process_set({0});
  if (accord::rank() == 0) {
    Buffer x(DType::Int32, {5});
    x.fill([](std::int64_t) { return g_world_rank; });
    accord::AllreduceOptions options;
    options.name = "alone";
    options.process_set = id;
    CHECK(describe(finish(accord::allreduce_async(x.view(), options), "alone"), "alone").empty());
    CHECK(x.get(4) == g_members[0]);
  }
  accord::remove_process_set(id);
}

TEST_CASE("init again: the same ranks do nothing, others are refused") {
  const int before = accord::rank();
  CHECK(attempt([] { accord::init(g_group); }).ok());
  CHECK(attempt([] { accord::init(g_members); }).ok());
  CHECK(attempt([] { accord::init(); }).ok());  // as Horovod: a second init() is a no-op
  CHECK(accord::rank() == before);
  if (g_world_size > accord::size()) {
    CHECK(refused("InvalidArgument", "already runs", [] { accord::init(MPI_COMM_WORLD); }) == "");
    CHECK(refused("InvalidArgument", "already runs", [] {
            accord::init(std::vector<int>{g_world_rank});
          }).empty() == (accord::size() > 1));
  }
}

int main(int argc, char** argv) {
  // Before MPI_Init no communicator exists yet.
  int failures = report(
      "init(MPI_COMM_WORLD) before MPI_Init",
      refused("NotInitialized", "MPI is not initialized", [] { accord::init(MPI_COMM_WORLD); }));
  MainOptions options;
  options.before_init = [failures] { return failures + refusalsBeforeInit(); };
  options.init = startOnGroup;
  options.after_shutdown = afterShutdown;
  return runMain(argc, argv, options);
}

// What only several hosts can show, run on simulated hosts (simhosts.sh): the topology
// queries, which transport each process set uses, and collectives over sets that lie
// inside one host or span several. SIMHOSTS_SLOTS (e.g. "1,2") gives the layout: Open
// MPI fills the hosts in order, so global ranks 0..s0-1 are on host 0, and so on.
#include <catch2/catch.hpp>

#include "tests/support/mpi_test.h"

#include <accord/error.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace accord_test;

namespace {

std::vector<int> layout() {
  const char* env = std::getenv("SIMHOSTS_SLOTS");
  REQUIRE(env != nullptr);
  std::vector<int> slots;
  std::stringstream in(env);
  for (std::string item; std::getline(in, item, ',');) slots.push_back(std::stoi(item));
  return slots;
}

struct Place {
  int host, index_on_host, ranks_on_host;
};

Place placeOf(int rank, const std::vector<int>& slots) {
  int first = 0;
  for (int h = 0; h < static_cast<int>(slots.size()); ++h) {
    if (rank < first + slots[h]) return {h, rank - first, slots[h]};
    first += slots[h];
  }
  FAIL("rank " << rank << " is beyond the layout");
  return {};
}

std::vector<int> ranksOfHost(int host, const std::vector<int>& slots) {
  int first = 0;
  for (int h = 0; h < host; ++h) first += slots[h];
  std::vector<int> ranks;
  for (int i = 0; i < slots[host]; ++i) ranks.push_back(first + i);
  return ranks;
}

bool sharedMemoryOn() {
  const char* shm = std::getenv("ACCORD_SHARED_MEMORY");
  return !(shm && std::string(shm) == "0");
}

// Sum-allreduces rank + i over `set` (whose global ranks are `members`) and checks it.
void allreduceOver(accord::ProcessSetId set, const std::vector<int>& members,
                   const std::string& name) {
  const int me = accord::rank();
  Buffer b(DType::Float64, {1000});
  b.fill([&](std::int64_t i) { return static_cast<double>(me + i); });
  accord::AllreduceOptions o;
  o.name = name;
  o.process_set = set;
  const Outcome out = finish(accord::allreduce_async(b.view(), o), name);
  INFO(out.message);
  REQUIRE(out.ok());
  double rank_sum = 0;
  for (int r : members) rank_sum += r;
  for (std::int64_t i = 0; i < 1000; ++i) {
    INFO(name << " element " << i);
    CHECK(b.get(i) == rank_sum + static_cast<double>(members.size()) * i);
  }
}

}  // namespace

TEST_CASE("topology: local and cross ranks follow the hosts, also uneven ones") {
  const auto slots = layout();
  int np = 0;
  for (int s : slots) np += s;
  REQUIRE(accord::size() == np);
  const Place p = placeOf(accord::rank(), slots);
  INFO("rank " << accord::rank() << " expected on host " << p.host);
  CHECK(accord::local_rank() == p.index_on_host);
  CHECK(accord::local_size() == p.ranks_on_host);
  CHECK(accord::cross_rank() == p.host);
  CHECK(accord::cross_size() == static_cast<int>(slots.size()));

  // The simulated hosts really are distinct machines to the ranks: same host, same name.
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::vector<char> all(256 * np);
  REQUIRE(MPI_Allgather(name, 256, MPI_CHAR, all.data(), 256, MPI_CHAR, MPI_COMM_WORLD) ==
          MPI_SUCCESS);
  for (int r = 0; r < np; ++r) {
    const bool same_host = placeOf(r, slots).host == p.host;
    INFO("rank " << r << " on '" << &all[256 * r] << "', this rank on '" << name << "'");
    CHECK((std::string(&all[256 * r]) == name) == same_host);
  }
}

TEST_CASE("transports: shared memory inside a host, MPI across hosts") {
  const auto slots = layout();
  const int me = accord::rank();
  const Place p = placeOf(me, slots);
  const auto global = accord::process_set_transport(accord::kGlobalProcessSet);
  INFO("global set: " << accord::transport_name(global));
  CHECK(global == (slots.size() > 1 ? accord::Transport::Mpi
                                    : (accord::size() == 1 ? accord::Transport::Local
                                                           : accord::Transport::SharedMemory)));

  // One set per host (each host's ranks), and one spanning the hosts (each host's
  // first rank). Every rank adds every set, in the same order.
  std::vector<accord::ProcessSetId> host_sets;
  for (int h = 0; h < static_cast<int>(slots.size()); ++h)
    host_sets.push_back(accord::add_process_set(ranksOfHost(h, slots)));
  std::vector<int> leaders;
  for (int h = 0; h < static_cast<int>(slots.size()); ++h) leaders.push_back(ranksOfHost(h, slots)[0]);
  const auto across = accord::add_process_set(leaders);

  const auto mine = host_sets[p.host];
  const auto kind = accord::process_set_transport(mine);
  INFO("this host's set: " << accord::transport_name(kind));
  if (p.ranks_on_host == 1)
    CHECK(kind == accord::Transport::Local);
  else
    CHECK(kind == (sharedMemoryOn() ? accord::Transport::SharedMemory : accord::Transport::Mpi));
  allreduceOver(mine, ranksOfHost(p.host, slots), "multihost.host" + std::to_string(p.host));

  if (p.index_on_host == 0) {
    const auto k = accord::process_set_transport(across);
    INFO("set across hosts: " << accord::transport_name(k));
    CHECK(k == (slots.size() > 1 ? accord::Transport::Mpi : accord::Transport::Local));
    allreduceOver(across, leaders, "multihost.across");
  }
  // Everyone, across hosts, on the global set as well.
  std::vector<int> all;
  for (int r = 0; r < accord::size(); ++r) all.push_back(r);
  allreduceOver(accord::kGlobalProcessSet, all, "multihost.global");

  accord::remove_process_set(across);
  for (auto it = host_sets.rbegin(); it != host_sets.rend(); ++it) accord::remove_process_set(*it);
}
namespace {

bool hierarchicalAsked() {
  for (const char* var : {"ACCORD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE"}) {
    const char* v = std::getenv(var);
    if (v && std::string(v) == "1") return true;
  }
  return false;
}

// Where the hierarchical allreduce applies to a set of all ranks: asked for, shared
// memory on, two or more hosts, each with the same number (>= 2) of ranks.
bool hierarchicalApplies(const std::vector<int>& slots) {
  bool even = slots.size() > 1 && slots[0] >= 2;
  for (int s : slots) even = even && s == slots[0];
  return hierarchicalAsked() && sharedMemoryOn() && even;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("hierarchical allreduce: taken on even hosts, flat elsewhere, and exact either way") {
  const auto slots = layout();
  const int me = accord::rank();
  // Rank 0's timeline says which path each allreduce took.
  const std::string path = "/tmp/accord_multihost_hier_" + std::to_string(::getpid()) + ".json";
  accord::start_timeline(path);
  std::vector<int> all;
  for (int r = 0; r < accord::size(); ++r) all.push_back(r);
  // Odd sizes, fewer elements than ranks, and one over several 1 MiB pieces.
  for (std::int64_t n : {1, 3, 1001, 300'007}) {
    Buffer b(DType::Int64, {n});
    b.fill([&](std::int64_t i) { return static_cast<double>(me * 1000 + i % 997); });
    accord::AllreduceOptions o;
    o.name = "multihost.hier." + std::to_string(n);
    const Outcome out = finish(accord::allreduce_async(b.view(), o), o.name);
    INFO(out.message);
    CHECK(out.ok());
    const std::int64_t n_ranks = accord::size();
    const std::string diff = compareElements(DType::Int64, b.data(), n, [&](std::int64_t i) {
      return static_cast<double>(1000 * n_ranks * (n_ranks - 1) / 2 + n_ranks * (i % 997));
    });
    INFO(o.name << ": " << diff);
    CHECK(diff.empty());
  }
  // Sets that span the hosts: all ranks again (its own transport), and all but the last
  // rank (uneven hosts: flat).
  const auto again = accord::add_process_set(all);
  std::vector<int> uneven(all.begin(), all.end() - 1);
  const auto lopsided = uneven.size() > 1 ? accord::add_process_set(uneven) : again;
  allreduceOver(again, all, "multihost.hier.set");
  if (lopsided != again && me < static_cast<int>(uneven.size()))
    allreduceOver(lopsided, uneven, "multihost.hier.uneven");
  accord::stop_timeline();
  if (lopsided != again) accord::remove_process_set(lopsided);
  accord::remove_process_set(again);

  if (me == 0) {
    const std::string trace = readFile(path);
    const bool hierarchical = trace.find("HIERARCHICAL_ALLREDUCE") != std::string::npos;
    INFO("layout " << std::getenv("SIMHOSTS_SLOTS") << ", ACCORD_HIERARCHICAL_ALLREDUCE "
                   << (hierarchicalAsked() ? "1" : "unset/0"));
    CHECK(hierarchical == hierarchicalApplies(slots));
    if (slots.size() > 1) CHECK(trace.find("\"MPI_ALLREDUCE\"") != std::string::npos);
    std::remove(path.c_str());
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// The timeline of a real job: rank 0 writes every tensor's queue, negotiate and
// collective phases (with the fused group's size and the backend's steps), the
// application's own tracks, and a file that is complete JSON. Started at run time with
// start_timeline; ACCORD_TIMELINE (set by CTest for the .env variant) writes one from
// init to shutdown, which this program checks after shutdown.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <accord/error.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <unistd.h>

using namespace accord_test;
using nlohmann::json;

namespace {

// Runs a few fused and unfused allreduces and an allgather, with application tracks.
void someWork(const std::string& tag) {
  const int me = accord::rank(), n = accord::size();
  std::vector<Buffer> small;
  std::vector<accord::Handle> handles;
  accord::timeline_begin("app", "submit");
  for (int i = 0; i < 6; ++i) small.emplace_back(DType::Float32, Shape{100});
  for (int i = 0; i < 6; ++i) {
    small[i].fill([&](std::int64_t k) { return static_cast<double>(me + k); });
    accord::AllreduceOptions o;
    o.name = tag + ".small." + std::to_string(i);
    handles.push_back(accord::allreduce_async(small[i].view(), o));
  }
  Buffer big(DType::Float32, {1 << 20});  // above the fusion threshold: alone, in place
  big.fill([&](std::int64_t) { return static_cast<double>(me); });
  accord::AllreduceOptions o;
  o.name = tag + ".big";
  handles.push_back(accord::allreduce_async(big.view(), o));
  accord::timeline_begin("app", "wait");
  for (auto& h : handles) h.wait();
  accord::timeline_end("app");
  CHECK(big.get(0) == n * (n - 1) / 2);
  CHECK(small[5].get(3) == n * (n - 1) / 2 + 3 * n);
}

json parseFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Whether the ranks reduce through the shared-memory window: the default when they all
// share one host.
bool sharedMemory() {
  const char* env = std::getenv("ACCORD_SHARED_MEMORY");
  return (!env || std::string(env) != "0") && accord::cross_size() == 1;
}

// Checks what rank 0 wrote for the tensors tagged `tag`; returns the failures.
int checkFile(const std::string& path, const std::string& tag) {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "timeline %s: %s\n", path.c_str(), what.c_str());
    }
  };
  json events;
  try {
    events = parseFile(path);
  } catch (const std::exception& e) {
    expect(false, std::string("not valid JSON: ") + e.what());
    return failures;
  }
  std::map<int, std::string> names;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
  std::map<std::string, std::set<std::string>> phases;
  std::map<std::string, json> args;
  std::map<int, int> depth;
  for (const auto& e : events) {
    if (e["ph"] == "M") continue;
    const int tid = e.value("tid", 0);
    if (e["ph"] == "B") ++depth[tid];
    if (e["ph"] == "E" && --depth[tid] < 0)
      expect(false, "an end without a begin on " + names[tid]);
    if (!e.contains("name") || !names.count(tid)) continue;
    phases[names[tid]].insert(e["name"].get<std::string>());
    if (e["name"] == "ALLREDUCE") args[names[tid]] = e["args"];
  }
  for (const auto& [tid, d] : depth) expect(d == 0, "unbalanced track " + names[tid]);
  for (int i = 0; i < 6; ++i) {
    const std::string name = tag + ".small." + std::to_string(i);
    const auto& p = phases[name];
    for (const char* phase : {"QUEUE", "NEGOTIATE_ALLREDUCE", "ALLREDUCE"})
      expect(p.count(phase) == 1, name + " has no '" + phase + "' phase");
    const int group = args[name].is_object() ? args[name].value("tensors", 0) : 0;
    expect(group >= 1, name + ": allreduce without a group size");
    // Fused with others over MPI: copied into the fusion buffer and out; through the
    // shared-memory window, reduced where the tensors lie, without copies. A tensor
    // negotiated before the next one arrived (a slow rank, a sanitizer build) is reduced
    // alone, in place.
    const bool copied = group > 1 && !sharedMemory();
    for (const char* phase : {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}) {
      expect(p.count(phase) == (copied ? 1u : 0u),
             name + (copied ? " was fused over MPI but has no '" : " was not copied but has a '") +
                 phase + "' phase");
    }
    // A tensor carried by the negotiation has no step of its own.
    const bool carried = args[name].is_object() && args[name].value("carried", false);
    const bool stepped = sharedMemory()
                             ? p.count("SHM_ALLREDUCE") == 1
                             : p.count("MPI_ALLREDUCE") + p.count("HIERARCHICAL_ALLREDUCE") == 1;
    expect(carried || stepped, name + " has no reduction step of its transport");
  }
  const auto& big = phases[tag + ".big"];
  expect(big.count("ALLREDUCE") == 1 && big.count("MEMCPY_IN_FUSION_BUFFER") == 0,
         tag + ".big: reduced in place, so an allreduce without copies");
  expect(args[tag + ".big"].is_object() && args[tag + ".big"].value("bytes", 0) == 4 << 20,
         tag + ".big: bytes not 4 MiB");
  expect(phases["app"].count("submit") == 1 && phases["app"].count("wait") == 1,
         "the application's track lacks its activities");
  return failures;
}

std::string tempPath(const char* tag) {
  return "/tmp/accord_mpi_timeline_" + std::string(tag) + "_" + std::to_string(::getpid()) +
         ".json";
}

}  // namespace

TEST_CASE("a timeline started at run time holds every tensor's phases") {
  if (std::getenv("ACCORD_TIMELINE")) {  // the .env variant: main() checks after shutdown
    someWork("tl");
    return;
  }
  // Rank 0's path; the others' calls do nothing.
  const std::string path = tempPath("runtime");
  accord::start_timeline(path);
  someWork("tl");
  accord::stop_timeline();
  if (accord::rank() == 0) {
    CHECK(checkFile(path, "tl") == 0);
    std::remove(path.c_str());
  } else {
    CHECK(::access(path.c_str(), F_OK) != 0);  // only rank 0 writes
  }
  // Nothing is recorded once stopped, and a bad path is refused on rank 0.
  someWork("after");
  if (accord::rank() == 0) {
    const Outcome bad = attempt([] { accord::start_timeline("/nonexistent-dir/t.json"); });
    CHECK(bad.kind == "InvalidArgument");
    CHECK(contains(bad.message, "/nonexistent-dir/t.json"));
  }
}

TEST_CASE("a cached allreduce that rides on the negotiation is marked carried") {
  if (std::getenv("ACCORD_TIMELINE")) return;  // the .env variant records the whole run
  // Small cached allreduces ride on the negotiation: through the shared-memory window
  // among the ranks of one host, or over MPI among a power-of-two number of ranks or up
  // to 8, across hosts (tests/multihost runs this on 2 and 3 simulated hosts) or on one
  // host without shared memory when ACCORD_CARRY_BYTES is set; never with
  // ACCORD_CARRY_BYTES=0.
  const int n = accord::size();
  const char* carry = std::getenv("ACCORD_CARRY_BYTES");
  const bool shm_here =
      accord::process_set_transport(accord::kGlobalProcessSet) == accord::Transport::SharedMemory;
  const bool over_mpi = !shm_here && (accord::cross_size() > 1 || carry);
  const bool carries = n > 1 && !(carry && std::string(carry) == "0") &&
                       (shm_here || (over_mpi && ((n & (n - 1)) == 0 || n <= 8)));
  const std::string path = tempPath("carried");
  accord::start_timeline(path);
  for (int step = 0; step < 5; ++step) {
    Buffer b(DType::Float32, {300});
    b.fill([&](std::int64_t k) { return static_cast<double>(accord::rank() + k + step); });
    accord::AllreduceOptions o;
    o.name = "carried.grad";
    accord::allreduce_async(b.view(), o).wait();
    CHECK(b.get(7) == n * (n - 1) / 2 + n * (7 + step));
  }
  accord::stop_timeline();
  if (accord::rank() != 0) return;
  const json events = parseFile(path);
  std::remove(path.c_str());
  int track = -1, carried = 0, plain = 0;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "carried.grad")
      track = e["tid"];
  REQUIRE(track >= 0);
  for (const auto& e : events) {
    if (e["ph"] != "B" || e.value("tid", -1) != track || e["name"] != "ALLREDUCE") continue;
    const bool marked = e.contains("args") && e["args"].value("carried", false);
    (marked ? carried : plain) += 1;
    if (marked) CHECK(e["args"].value("bytes", 0) == 1200);
  }
  INFO(carried << " of 5 allreduces carried; " << n << " ranks on " << accord::cross_size()
               << " hosts, ACCORD_CARRY_BYTES=" << (carry ? carry : "(unset)"));
  CHECK(carried + plain == 5);
  if (carries) {
    CHECK(carried >= 4);  // all but the first, which no cache knew yet
  } else {
    CHECK(carried == 0);
  }
}

// One name in two process sets is two tensors, negotiated apart: a track each, whose
// phases begin and end in order, rather than one track with both interleaved.
TEST_CASE("one name in two process sets gets a track in each") {
  if (std::getenv("ACCORD_TIMELINE")) return;  // the .env variant records the whole run
  const int n = accord::size();
  const accord::ProcessSetId pair = accord::add_process_set({0, 1});
  const std::string path = tempPath("sets");
  accord::start_timeline(path);
  for (int step = 0; step < 3; ++step) {
    Buffer global(DType::Float32, {64}), in_pair(DType::Float32, {64});
    global.fill([&](std::int64_t) { return 1.0; });
    in_pair.fill([&](std::int64_t) { return 1.0; });
    accord::AllreduceOptions o;
    o.name = "shared";
    o.op = accord::ReduceOp::Sum;
    accord::Handle h = accord::allreduce_async(global.view(), o);
    if (accord::rank() < 2) {
      o.process_set = pair;
      accord::allreduce_async(in_pair.view(), o).wait();
      CHECK(in_pair.get(5) == 2);
    }
    h.wait();
    CHECK(global.get(5) == n);
  }
  accord::stop_timeline();
  accord::remove_process_set(pair);
  if (accord::rank() != 0) return;
  const json events = parseFile(path);
  std::remove(path.c_str());
  std::map<int, std::string> names;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
  const std::string in_set = "shared [set " + std::to_string(pair) + "]";
  std::map<std::string, int> allreduces;
  std::map<int, double> last;
  std::map<int, int> depth;
  for (const auto& e : events) {
    if (e["ph"] == "M" || !e.contains("ts")) continue;
    const int tid = e.value("tid", 0);
    const double ts = e["ts"];
    INFO(names[tid] << " at " << ts);
    CHECK(ts >= last[tid]);  // in order on its track
    last[tid] = ts;
    if (e["ph"] == "B") ++depth[tid];
    if (e["ph"] == "E") CHECK(--depth[tid] >= 0);
    if (e["ph"] == "B" && e["name"] == "ALLREDUCE") ++allreduces[names[tid]];
  }
  CHECK(allreduces["shared"] == 3);
  CHECK(allreduces[in_set] == 3);
  for (const auto& [tid, d] : depth) CHECK(d == 0);
}

int main(int argc, char** argv) {
  MainOptions options;
  // With ACCORD_TIMELINE set, the whole run is in that file once shutdown() returns.
  options.after_shutdown = [] {
    const char* path = std::getenv("ACCORD_TIMELINE");
    if (!path || worldRank() != 0) return 0;
    const int failures = checkFile(path, "tl");
    std::remove(path);
    return failures;
  };
  return runMain(argc, argv, options);
}

// The Controller's negotiation protocol, in one process: three "ranks" on three threads,
// each with its own Controller and ProcessSet, talking through an in-memory channel.
// No MPI: the channel is the controller's only way out, which is what makes this test
// possible (see runtime/channel.h).
#include "runtime/controller.h"
#include "runtime/timeline.h"

#include <accord/error.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>

#include <unistd.h>

using namespace accord;
using namespace std::chrono_literals;

namespace {

// Every rank deposits its bytes and gets everyone's back: the one primitive the three
// channel operations are built from. A rank missing for 10 s fails the test instead of
// hanging it.
class Hub {
 public:
  explicit Hub(int size) : size_(size), slots_(size) {}

  std::vector<std::vector<std::uint8_t>> exchange(int rank, std::vector<std::uint8_t> mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const std::uint64_t generation = generation_;
    slots_[rank] = std::move(mine);
    if (++arrived_ == size_) {
      result_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, 10s, [&] { return generation_ != generation; })) {
      throw CommError("in-memory channel: a rank did not arrive within 10 s");
    }
    return result_;
  }
  int gathers() const { return gathers_; }
  void countGather() {
    std::lock_guard<std::mutex> lock(mu_);
    ++gathers_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int size_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  int gathers_ = 0;
  std::vector<std::vector<std::uint8_t>> slots_, result_;
};

class InMemoryChannel final : public NegotiationChannel {
 public:
  InMemoryChannel(Hub& hub, int rank) : hub_(hub), rank_(rank) {}

  void bitwiseAnd(std::vector<std::uint64_t>& bits) override {
    std::vector<std::uint8_t> mine(bits.size() * 8);
    std::memcpy(mine.data(), bits.data(), mine.size());
    for (const auto& theirs : hub_.exchange(rank_, std::move(mine))) {
      // Catch's assertions are not thread-safe: a rank's thread throws, and
      // onEveryRank() rethrows in the test's own thread.
      if (theirs.size() != bits.size() * 8)
        throw std::logic_error("in-memory channel: bit vectors of different lengths");
      for (std::size_t i = 0; i < bits.size(); ++i) {
        std::uint64_t w;
        std::memcpy(&w, theirs.data() + 8 * i, 8);
        bits[i] &= w;
      }
    }
  }
  std::vector<std::vector<std::uint8_t>> gatherToRoot(const std::vector<std::uint8_t>& mine) override {
    if (rank_ == 0) hub_.countGather();
    auto all = hub_.exchange(rank_, mine);
    if (rank_ != 0) return {};
    return all;
  }
  void broadcastFromRoot(std::vector<std::uint8_t>& bytes) override {
    bytes = hub_.exchange(rank_, bytes)[0];
  }

 private:
  Hub& hub_;
  int rank_;
};

class InMemoryTransport final : public SetTransport {
 public:
  InMemoryTransport(Hub& hub, int rank) : channel_(hub, rank) {}
  NegotiationChannel& channel() override { return channel_; }
  Transport kind() const override { return Transport::Local; }

 private:
  InMemoryChannel channel_;
};

constexpr int kRanks = 3;

// One rank: its controller, its view of the global set, and what it negotiated.
struct Rank {
  Rank(Hub& hub, int rank, const Config& config)
      : controller(config),
        set(ProcessSet::create(kGlobalProcessSet, {0, 1, 2},
                               std::make_unique<InMemoryTransport>(hub, rank), rank,
                               config.cache_capacity)) {}

  // `late`: how long after the cycle began the tensor was submitted (the background
  // thread takes the cycle's time before it drains the queue).
  void submit(const std::string& name, Shape shape, ReduceOp op = ReduceOp::Sum,
              Clock::duration late = {}) {
    const auto cycle = Clock::now();
    QueuedOp op_;
    op_.enqueued = cycle + late;
    op_.request.type = RequestType::Allreduce;
    op_.request.name = name;
    op_.request.shape = std::move(shape);
    op_.request.op = op;
    op_.entry.name = name;
    op_.entry.handle = std::make_shared<detail::HandleState>();
    controller.admit(*set, std::move(op_), cycle);
  }

  // The members "<group>.<i>" of a group, pushed together as grouped_*_async does; member
  // i has `rows[i]` rows of 2.
  void submitGroup(const std::string& group, RequestType type, const std::vector<int>& rows) {
    const auto cycle = Clock::now();
    auto handle = std::make_shared<detail::HandleState>(static_cast<int>(rows.size()));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      QueuedOp op;
      op.enqueued = cycle;
      op.request.type = type;
      op.request.name = group + "." + std::to_string(i);
      op.request.shape = {rows[i], 2};
      op.request.group = group;
      op.request.group_size = static_cast<std::int32_t>(rows.size());
      op.entry.name = op.request.name;
      op.entry.handle = handle;
      controller.admit(*set, std::move(op), cycle);
    }
  }

  // Negotiates until nothing this rank submitted is waiting; each cycle's responses.
  std::vector<std::vector<Response>> negotiateCycles() {
    std::vector<std::vector<Response>> out;
    for (int cycle = 0; cycle < 20; ++cycle) {
      auto n = controller.negotiate(*set, false, Clock::now());
      for (const auto& r : n.responses)
        for (const auto& name : r.names) set->pending.take(name);
      out.push_back(std::move(n.responses));
      if (!n.anyone_pending) break;
    }
    return out;
  }

  // Negotiates until nothing this rank submitted is waiting; every response's names.
  std::vector<std::string> negotiateAll(bool want_shutdown = false) {
    std::vector<std::string> out;
    for (int cycle = 0; cycle < 20; ++cycle) {
      auto n = controller.negotiate(*set, want_shutdown, Clock::now());
      shutdown = shutdown || n.shutdown;
      for (const auto& r : n.responses) {
        for (const auto& name : r.names) {
          out.push_back(r.type == ResponseType::Error ? "error:" + name : name);
          set->pending.take(name);  // what the executor does once it ran the response
        }
        if (r.type == ResponseType::Error) errors.push_back(r.error);
      }
      if (!n.anyone_pending) break;
    }
    return out;
  }

  Controller controller;
  std::unique_ptr<ProcessSet> set;
  bool shutdown = false;
  std::vector<std::string> errors;
};

// Runs body(rank) on one thread per rank and rethrows the first failure.
void onEveryRank(std::vector<std::unique_ptr<Rank>>& ranks,
                 const std::function<void(Rank&, int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*ranks[r], static_cast<int>(r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct Fixture {
  Fixture() : hub(kRanks) {
    for (int r = 0; r < kRanks; ++r) ranks.push_back(std::make_unique<Rank>(hub, r, config));
  }
  Config config;
  Hub hub;
  std::vector<std::unique_ptr<Rank>> ranks;
};

}  // namespace

TEST_CASE("ranks that submit in different orders execute one identical order", "[controller]") {
  Fixture f;
  std::vector<std::vector<std::string>> seen(kRanks);
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    std::vector<std::string> names = {"a", "b", "c", "d", "e"};
    std::rotate(names.begin(), names.begin() + r, names.end());  // a different order each
    for (const auto& name : names) rank.submit(name, {4});
    seen[r] = rank.negotiateAll();
  });
  REQUIRE(seen[0].size() == 5);
  CHECK(seen[1] == seen[0]);
  CHECK(seen[2] == seen[0]);
}

TEST_CASE("in steady state the cache answers: nothing is gathered to rank 0", "[controller]") {
  Fixture f;
  std::vector<std::vector<std::string>> first(kRanks), second(kRanks);
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    for (const char* name : {"w1", "w2", "w3"}) rank.submit(name, {8});
    first[r] = rank.negotiateAll();
  });
  const int gathers_cold = f.hub.gathers();
  CHECK(gathers_cold > 0);
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    for (const char* name : {"w3", "w1", "w2"}) rank.submit(name, {8});
    second[r] = rank.negotiateAll();
  });
  CHECK(f.hub.gathers() == gathers_cold);  // answered by the AND of cache bits alone
  REQUIRE(second[0].size() == 3);
  CHECK(second[1] == second[0]);
  CHECK(second[2] == second[0]);
}

TEST_CASE("a changed shape misses the cache and is negotiated again", "[controller]") {
  Fixture f;
  onEveryRank(f.ranks, [&](Rank& rank, int) {
    rank.submit("w", {8});
    rank.negotiateAll();
  });
  const int before = f.hub.gathers();
  std::vector<std::vector<std::string>> seen(kRanks);
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    rank.submit("w", {9});
    seen[r] = rank.negotiateAll();
  });
  CHECK(f.hub.gathers() > before);
  for (const auto& s : seen) CHECK(s == std::vector<std::string>{"w"});
}

TEST_CASE("ranks that disagree get the same error naming them", "[controller]") {
  Fixture f;
  std::vector<std::vector<std::string>> seen(kRanks);
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    rank.submit("x", {r == 2 ? 5 : 4});
    seen[r] = rank.negotiateAll();
  });
  for (const auto& s : seen) CHECK(s == std::vector<std::string>{"error:x"});
  for (auto& rank : f.ranks) {
    REQUIRE(rank->errors.size() == 1);
    CHECK(rank->errors[0] == f.ranks[0]->errors[0]);
    CHECK_THAT(rank->errors[0], Catch::Contains("rank 2") && Catch::Contains("[5]"));
  }
}

TEST_CASE("one rank asking to shut down ends the loop on every rank", "[controller]") {
  Fixture f;
  onEveryRank(f.ranks, [&](Rank& rank, int r) { rank.negotiateAll(r == 1); });
  for (auto& rank : f.ranks) CHECK(rank->shutdown);
}

// A rank whose GPU failed tells every rank in the next cycle, with its global rank; a
// cycle where no rank has one to tell costs no exchange beyond the AND.
TEST_CASE("a rank's own GPU failure reaches every rank in one cycle", "[controller]") {
  Fixture f;
  std::vector<std::vector<std::pair<int, std::string>>> told(kRanks), quiet(kRanks);
  const int before = f.hub.gathers();
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    quiet[r] = rank.controller.negotiate(*rank.set, false, Clock::now()).announced;
  });
  CHECK(f.hub.gathers() == before);
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    const std::string mine = r == 2 ? "cudaEventQuery: an illegal memory access" : "";
    told[r] = rank.controller.negotiate(*rank.set, false, Clock::now(), mine).announced;
  });
  CHECK(f.hub.gathers() == before + 1);
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    CHECK(quiet[r].empty());
    REQUIRE(told[r].size() == 1);
    CHECK(told[r][0].first == 2);
    CHECK(told[r][0].second == "cudaEventQuery: an illegal memory access");
  }
}

// A tensor submitted after its cycle's time was taken starts negotiating when it was
// submitted: on the timeline its NEGOTIATE phase begins after its QUEUE span, never
// before it (a timeline test under load found a track going back in time).
TEST_CASE("a tensor submitted after its cycle began negotiates after its queue span",
          "[controller][timeline]") {
  Fixture f;
  const std::string path = "/tmp/accord_controller_timeline_" + std::to_string(::getpid()) + ".json";
  Timeline::instance().start(path);
  f.ranks[0]->submit("late", {4}, ReduceOp::Sum, 3ms);
  Timeline::instance().stop();
  std::ifstream in(path);
  const auto events = nlohmann::json::parse(in);
  std::remove(path.c_str());
  int tid = -1;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "late") tid = e["tid"];
  REQUIRE(tid >= 0);
  std::vector<nlohmann::json> track;
  for (const auto& e : events)
    if (e["ph"] != "M" && e.value("tid", -1) == tid) track.push_back(e);
  REQUIRE(track.size() >= 2);
  CHECK(track[0]["name"] == "QUEUE");
  CHECK(track[0]["dur"] == 0.0);
  CHECK(track[1]["name"] == "NEGOTIATE_ALLREDUCE");
  CHECK(track[1]["ts"].get<double>() >= track[0]["ts"].get<double>());
}

namespace {

// The cycle in which each name came out, and the gathered rows of each (allgather).
struct Outcome {
  std::map<std::string, int> cycle;
  std::map<std::string, std::vector<std::int64_t>> rows;
};

Outcome outcomeOf(const std::vector<std::vector<Response>>& cycles) {
  Outcome o;
  for (std::size_t c = 0; c < cycles.size(); ++c)
    for (const Response& r : cycles[c])
      for (std::size_t i = 0; i < r.names.size(); ++i) {
        o.cycle[r.names[i]] = static_cast<int>(c);
        if (r.type == ResponseType::Allgather)
          o.rows[r.names[i]].assign(r.rank_rows.begin() + static_cast<std::ptrdiff_t>(i * kRanks),
                                    r.rank_rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * kRanks));
      }
  return o;
}

}  // namespace

TEST_CASE("a group in steady state is answered by the cache, whole, in one cycle",
          "[controller]") {
  Fixture f;
  std::vector<Outcome> cold(kRanks), warm(kRanks);
  // Rank r gathers r + 1 + i rows of member i: each member's rows differ by rank.
  auto rows = [](int r) { return std::vector<int>{r + 1, r + 2, r + 3}; };
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    rank.submitGroup("g", RequestType::Allgather, rows(r));
    cold[r] = outcomeOf(rank.negotiateCycles());
  });
  const int gathers_cold = f.hub.gathers();
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    rank.submitGroup("g", RequestType::Allgather, rows(r));
    warm[r] = outcomeOf(rank.negotiateCycles());
  });
  CHECK(f.hub.gathers() == gathers_cold);  // nothing went to rank 0
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(warm[r].cycle.size() == 3);
    CHECK(warm[r].cycle["g.0"] == warm[r].cycle["g.2"]);  // together
    CHECK(warm[r].cycle["g.1"] == warm[r].cycle["g.2"]);
    CHECK(warm[r].rows == cold[r].rows);  // each member's own rows, from the cache
    CHECK(warm[r].rows["g.1"] == std::vector<std::int64_t>{2, 3, 4});
  }
}

TEST_CASE("a group with one member the cache cannot answer is negotiated whole at once",
          "[controller]") {
  Fixture f;
  onEveryRank(f.ranks, [&](Rank& rank, int) {
    rank.submitGroup("g", RequestType::Allgather, {1, 2, 3});
    rank.negotiateCycles();
  });
  const int before = f.hub.gathers();
  std::vector<Outcome> seen(kRanks);
  const auto start = Clock::now();
  onEveryRank(f.ranks, [&](Rank& rank, int r) {
    // Rank 1 gathers one more row of member 1 this time: its cached signature no longer
    // matches there, while the other ranks' caches still answer every member.
    rank.submitGroup("g", RequestType::Allgather, {1, r == 1 ? 3 : 2, 3});
    seen[r] = outcomeOf(rank.negotiateCycles());
  });
  // Well before a hit waiting alone would be sent to rank 0 (demote_after, up to 1 s).
  CHECK(Clock::now() - start < 500ms);
  CHECK(f.hub.gathers() > before);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(seen[r].cycle.size() == 3);
    CHECK(seen[r].cycle["g.0"] == seen[r].cycle["g.1"]);
    CHECK(seen[r].cycle["g.2"] == seen[r].cycle["g.1"]);
    CHECK(seen[r].rows["g.1"] == std::vector<std::int64_t>{2, 3, 2});
  }
}

// The autotuner's search, step recognition and wire format, driven with a made-up cost
// of a step for each choice of settings: no runtime, no MPI.
#include "runtime/autotune.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include "parse_env.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>

using namespace accord;
using namespace std::chrono_literals;

namespace {

Config parse(const std::map<std::string, std::string>& env) { return accord_test::parseEnv(env); }

Response allreduce(std::vector<std::string> names) {
  Response r;
  r.type = ResponseType::Allreduce;
  r.names = std::move(names);
  r.shapes.assign(r.names.size(), Shape{4});
  return r;
}

// A step whose time depends on the settings: best at 1 MiB fusion, 2 MiB pieces and no
// cycle time, with every setting contributing independently.
double stepMs(const TunedSettings& s) {
  auto away = [](double v, double best) { return std::abs(std::log2((v + 1) / (best + 1))); };
  return 100.0 + 7.0 * away(static_cast<double>(s.fusion_threshold), 1 << 20) +
         3.0 * away(static_cast<double>(s.chunk_bytes), 2 << 20) +
         static_cast<double>(s.cycle_time.count()) / 100.0;
}

// Runs the training loop of `ranks` tuners (rank 0 decides) until they settle; each
// step negotiates the same three names in two cycles. Returns the steps taken.
int runUntilSettled(std::vector<Autotuner>& ranks, int max_steps = 10'000) {
  auto t = Autotuner::Clock::time_point{};
  for (int step = 0; step < max_steps; ++step) {
    const std::vector<std::vector<Response>> cycles = {{allreduce({"grad.fc", "grad.conv2"})},
                                                       {allreduce({"grad.conv1"})}};
    for (const auto& cycle : cycles) {
      std::vector<bool> ended;
      for (auto& tuner : ranks) ended.push_back(tuner.observe(cycle, t));
      // Every rank ends a trial in the same cycle, or the broadcast would not line up.
      for (bool e : ended) REQUIRE(e == ended[0]);
      if (ended[0]) {
        auto choice = ranks[0].decide();
        for (auto& tuner : ranks) tuner.accept(choice);
        for (auto& tuner : ranks) REQUIRE(tuner.current() == ranks[0].current());
      }
    }
    if (ranks[0].settled()) return step;
    t += std::chrono::microseconds(std::llround(stepMs(ranks[0].current()) * 1000));
  }
  return -1;
}

}  // namespace

TEST_CASE("autotune finds the best settings from a bad start, the same on every rank",
          "[autotune]") {
  Config c = parse({{"ACCORD_AUTOTUNE", "1"},
                    {"ACCORD_AUTOTUNE_STEPS", "3"},
                    {"ACCORD_AUTOTUNE_START",
                     "ACCORD_FUSION_THRESHOLD=0 ACCORD_CHUNK_BYTES=16K,ACCORD_CYCLE_TIME=5"}});
  REQUIRE(c.fusion_threshold == 0);
  REQUIRE(c.chunk_bytes == 16u << 10);
  REQUIRE(c.cycle_time == 5000us);
  std::vector<Autotuner> ranks;
  ranks.emplace_back(c, true);
  ranks.emplace_back(c, false);
  ranks.emplace_back(c, false);
  const int steps = runUntilSettled(ranks);
  REQUIRE(steps > 0);
  const TunedSettings& best = ranks[0].current();
  CHECK(best.fusion_threshold == 1u << 20);
  CHECK(best.chunk_bytes == 2u << 20);
  CHECK(best.cycle_time == 0us);
  for (auto& r : ranks) CHECK(r.settled());

  // Trial 0 measures the start; then each setting's other candidates, one at a time
  // (cycle time, fusion, pieces), with the ones already decided kept at their best.
  const auto& trials = ranks[0].trials();
  REQUIRE(!trials.empty());
  CHECK(trials[0].settings.fusion_threshold == 0);
  CHECK(trials[0].settings.chunk_bytes == 16u << 10);
  CHECK(trials[1].settings.cycle_time == 0us);  // the cycle time goes first
  CHECK(trials[1].settings.fusion_threshold == 0);
  // Per pass: 4 cycle times (with the start), 8 fusion values (7 + the start), 6 piece
  // sizes, every value once; the second pass first measures the best settings again.
  constexpr std::size_t kPass = 1 + 3 + 7 + 5;
  CHECK(trials.size() == 2 * kPass);
  std::set<std::tuple<std::size_t, std::size_t, long>> distinct;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const auto& trial = trials[i];
    CHECK(trial.steps_ms.size() == 3);
    CHECK(trial.median_ms == Approx(stepMs(trial.settings)));
    if (i < kPass) {
      distinct.insert({trial.settings.fusion_threshold, trial.settings.chunk_bytes,
                       static_cast<long>(trial.settings.cycle_time.count())});
    }
  }
  CHECK(distinct.size() == kPass);
  CHECK(trials[kPass].settings == best);  // the second pass starts from the best
  // Each trial takes a warm-up step and 3 measured ones, after a first step that finds
  // the anchor.
  CHECK(steps >= static_cast<int>(trials.size()) * 4 + 1);
  CHECK(steps <= static_cast<int>(trials.size()) * 4 + 3);

  // Settled: nothing more is measured or exchanged.
  CHECK_FALSE(ranks[1].observe({allreduce({"grad.fc"})}, Autotuner::Clock::time_point{}));
}

TEST_CASE("autotune keeps what the user set and tunes the rest", "[autotune]") {
  Config c = parse({{"ACCORD_AUTOTUNE", "1"},
                    {"ACCORD_AUTOTUNE_STEPS", "1"},
                    {"HOROVOD_FUSION_THRESHOLD", "4M"},
                    {"ACCORD_CYCLE_TIME", "2"}});
  CHECK(c.given.fusion_threshold);
  CHECK(c.given.cycle_time);
  CHECK_FALSE(c.given.chunk_bytes);
  std::vector<Autotuner> ranks;
  ranks.emplace_back(c, true);
  REQUIRE(runUntilSettled(ranks) > 0);
  for (const auto& trial : ranks[0].trials()) {
    CHECK(trial.settings.fusion_threshold == 4u << 20);
    CHECK(trial.settings.cycle_time == 2000us);
  }
  CHECK(ranks[0].trials().size() == 2 * 5);  // per pass: 1 MiB (the start) and 4 others
  CHECK(ranks[0].current().chunk_bytes == 2u << 20);

  Config all = parse({{"ACCORD_AUTOTUNE", "1"},
                      {"ACCORD_FUSION_THRESHOLD", "1M"},
                      {"ACCORD_CHUNK_BYTES", "1M"},
                      {"ACCORD_CYCLE_TIME", "0"}});
  Autotuner idle(all, true);
  CHECK(idle.settled());
  CHECK(Autotuner::maxChunkBytes(all) == 1u << 20);
  CHECK(Autotuner::maxChunkBytes(c) == 4u << 20);  // the window makes room for the ladder
}

TEST_CASE("autotune counts steps by the first name that recurs", "[autotune]") {
  Config c = parse({{"ACCORD_AUTOTUNE", "1"}, {"ACCORD_AUTOTUNE_STEPS", "2"}});
  Autotuner tuner(c, true);
  auto t = Autotuner::Clock::time_point{};
  // Set-up collectives, used once, and other types never mark a step.
  Response bcast;
  bcast.type = ResponseType::Broadcast;
  bcast.names = {"init.weights"};
  CHECK_FALSE(tuner.observe({bcast, allreduce({"init.stats"})}, t));
  // Boundaries: "a" negotiated again (second step) starts the trial, the next ends the
  // warm-up step, two more are measured: the trial ends in the fifth step.
  int ended_at = -1;
  for (int i = 1; i <= 8 && ended_at < 0; ++i) {
    t += 10ms;
    if (tuner.observe({allreduce({"a", "b"})}, t)) ended_at = i;
    t += 5ms;
    CHECK_FALSE(tuner.observe({allreduce({"c"})}, t));
  }
  CHECK(ended_at == 5);
  auto choice = tuner.decide();
  REQUIRE(tuner.trials().size() == 1);
  CHECK(tuner.trials()[0].steps_ms == std::vector<double>{15.0, 15.0});
  const TunedSettings& next = tuner.accept(choice);
  CHECK(next.cycle_time == 500us);  // the first value of the first ladder that is not the start
  CHECK(next.fusion_threshold == 64u << 10);
}

// A job that stops before the search settles ran its last part on a trial's settings:
// the log's last line says which.
TEST_CASE("autotune cut short says which settings were in force", "[autotune]") {
  const std::string path = "autotune_unsettled_log.csv";
  std::remove(path.c_str());
  Config c = parse(
      {{"ACCORD_AUTOTUNE", "1"}, {"ACCORD_AUTOTUNE_STEPS", "1"}, {"ACCORD_AUTOTUNE_LOG", path}});
  {
    Autotuner tuner(c, true);
    auto t = Autotuner::Clock::time_point{};
    for (int trial = 0; trial < 2; ++trial) {  // the start, then the first candidate
      bool ended = false;
      for (int i = 0; i < 10 && !ended; ++i) ended = tuner.observe({allreduce({"a"})}, t += 10ms);
      REQUIRE(ended);
      tuner.accept(tuner.decide());
    }
    tuner.observe({allreduce({"a"})}, t += 10ms);  // the third trial has begun; then the end
    tuner.finish();
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 1 + 2 + 1);
  CHECK(lines[2].rfind("2,", 0) == 0);
  CHECK(lines.back() == "unsettled,65536,1048576,2,,");  // the third trial's cycle time
  std::remove(path.c_str());
}

TEST_CASE("autotune rejects a choice that is not one and writes its log", "[autotune]") {
  const std::string path = "autotune_test_log.csv";
  std::remove(path.c_str());
  Config c = parse({{"ACCORD_AUTOTUNE", "1"},
                    {"ACCORD_AUTOTUNE_STEPS", "1"},
                    {"ACCORD_AUTOTUNE_LOG", path},
                    {"ACCORD_FUSION_THRESHOLD", "64K"},
                    {"ACCORD_CHUNK_BYTES", "1M"}});
  {
    std::vector<Autotuner> ranks;
    ranks.emplace_back(c, true);
    CHECK_THROWS_AS(ranks[0].accept({1, 2, 3}), CommError);
    REQUIRE(runUntilSettled(ranks) > 0);
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 1 + 2 * 4 + 1);  // header, 4 cycle times twice, the settled line
  CHECK(lines[0].rfind("trial,fusion_threshold_bytes,chunk_bytes,cycle_time_ms", 0) == 0);
  CHECK(lines[1].rfind("1,65536,1048576,0,", 0) == 0);
  CHECK(lines.back().rfind("settled,65536,1048576,0,", 0) == 0);
  std::remove(path.c_str());

  Config bad = c;
  bad.autotune_log = "/nonexistent-dir/log.csv";
  bad.given.chunk_bytes = false;
  // init() refuses such a log (mpi.lifetime); here, on Accord's thread, it must not throw.
  CHECK_NOTHROW(Autotuner(bad, true));
}

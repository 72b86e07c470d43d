// Stress: four application threads per rank submit collectives at the same time,
// thousands in all, of every kind: allreduce of every dtype and op (Adasum included where
// the set's size allows it, prescale and postscale) at sizes from 0 to above the fusion
// threshold, grouped allreduce, allgather, broadcast, reduce-scatter and alltoall with
// uneven rows.
//
// Each thread works in rounds. A round's jobs are a function of (thread, round) alone,
// so every rank builds the same jobs with the same names; each rank submits them in its
// own shuffled order and awaits them in its own order, every handle with a deadline.
// The threads of one rank interleave as the scheduler likes, so the background thread
// sees the submissions of several threads in a different order on every rank. Every
// result is checked against values computed here (mpi_test.h), exactly but for
// Average's rounding.
//
// Three cases. In the first every collective has a name of its own. In the second, as in
// training, names come back: every round reuses a thread's few names, so most
// collectives take the response cache's path, and every few rounds the same names come
// back with another kind, dtype or size, so the cache must let go of its entries; one
// thread works on a process set that leaves rank 0 out, and the main thread meanwhile
// adds a process set, reduces on it and removes it again, over and over. In the third,
// ranks run out of data at different rounds and join while the others go on.
//
// Catch2's assertions are not thread-safe: the threads collect failures as strings and
// the main thread CHECKs them after joining.
#include <catch2/catch.hpp>

#include "mpi_test.h"
#include "stress_jobs.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;
using namespace accord_test::stress;

namespace {

constexpr int kThreads = 4;

void report(const std::vector<ThreadResult>& results, const std::vector<int>& expected) {
  for (std::size_t t = 0; t < results.size(); ++t) {
    const ThreadResult& r = results[t];
    std::ostringstream failures;
    for (const auto& f : r.first_failures) failures << "\n  " << f;
    INFO("thread " << t << ": " << r.failed << " of " << r.checked << " collectives wrong"
                   << failures.str());
    CHECK(r.checked == expected[t]);
    CHECK(r.failed == 0);
  }
}

}  // namespace

// 4 threads x 300 rounds x 8 jobs = 9600 collectives per rank (about 11,000 tensors with
// the groups' members): seconds for 4 ranks sharing 2 cores.
TEST_CASE("stress: 4 threads per rank, distinct names, every result checked") {
  constexpr int kRounds = 300;
  const Naming naming{"stress", 0, 1, {}};
  const Place global = placeIn(accord::kGlobalProcessSet);
  std::vector<ThreadResult> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(runThread, t, kRounds, std::cref(global), std::cref(naming),
                         std::ref(results[t]));
  for (auto& thread : threads) thread.join();
  report(results, std::vector<int>(kThreads, kRounds * kJobsPerRound));
}

// Rounds reuse 5 names per job slot and change what they stand for every 20 rounds.
// Thread 3 works on `part`, every rank but 0 (a set of one rank on 2); the main thread
// adds `churn` (rank 0 and the last; rank 0 alone on 2), allreduces on it and removes it
// while the threads run.
TEST_CASE("stress: names reused as in training, a process set beside, sets added and removed") {
  constexpr int kRounds = 200, kChurns = 25, kChurnJobs = 3;
  const int n = accord::size(), me = accord::rank();
  std::vector<int> part_ranks(static_cast<std::size_t>(std::max(n - 1, 1)));
  std::iota(part_ranks.begin(), part_ranks.end(), n > 1 ? 1 : 0);
  const std::vector<int> churn_ranks = n > 2 ? std::vector<int>{0, n - 1} : std::vector<int>{0};
  const accord::ProcessSetId part = accord::add_process_set(part_ranks);
  const Naming naming{"reused", 5, 20, {}};
  const Place global = placeIn(accord::kGlobalProcessSet);
  const Place in_part = accord::process_set_included(part) ? placeIn(part) : Place{};
  std::vector<ThreadResult> results(kThreads + 1);  // the last: the main thread's churn
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    const bool on_part = t == kThreads - 1;
    if (on_part && !accord::process_set_included(part)) continue;
    threads.emplace_back(runThread, t, kRounds, std::cref(on_part ? in_part : global),
                         std::cref(naming), std::ref(results[static_cast<std::size_t>(t)]));
  }
  const Naming churn_naming{"churn", 0, 1, {}};
  for (int c = 0; c < kChurns; ++c) {
    const accord::ProcessSetId churn = accord::add_process_set(churn_ranks);
    if (accord::process_set_included(churn))
      runMixedJobs(kThreads, c, kChurnJobs, placeIn(churn), churn_naming, results.back());
    accord::remove_process_set(churn);
  }
  for (auto& thread : threads) thread.join();
  accord::remove_process_set(part);
  std::vector<int> expected(kThreads, kRounds * kJobsPerRound);
  if (std::find(part_ranks.begin(), part_ranks.end(), me) == part_ranks.end())
    expected[kThreads - 1] = 0;
  const bool in_churn = std::find(churn_ranks.begin(), churn_ranks.end(), me) != churn_ranks.end();
  expected.push_back(in_churn ? kChurns * kChurnJobs : 0);
  report(results, expected);
}

// Rank r runs 40 + 30 * ((r + 1) % n) rounds of allreduces, names reused as in training,
// then joins: the ranks still running a round get the joined ranks' neutral elements
// (Adasum's zeros too), fused and carried with theirs, and every join names rank n - 2,
// the one with the most rounds.
TEST_CASE("stress: ranks run out of data at different rounds and join") {
  const int n = accord::size(), me = accord::rank();
  Naming naming{"joining", 5, 20, {}};
  naming.rounds_of = [n](int r) { return 40 + 30 * ((r + 1) % n); };
  const Place global = placeIn(accord::kGlobalProcessSet);
  std::vector<ThreadResult> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(runThread, t, naming.rounds_of(me), std::cref(global), std::cref(naming),
                         std::ref(results[static_cast<std::size_t>(t)]));
  for (auto& thread : threads) thread.join();
  const accord::Handle joined = accord::join_async();
  const auto error = describe(finish(joined, "join"), "join");
  INFO(error);
  CHECK(error.empty());
  if (error.empty()) CHECK(joined.last_joined_rank() == n - 2);
  report(results, std::vector<int>(kThreads, naming.rounds_of(me) * kJobsPerRound));
}

int main(int argc, char** argv) { return runMain(argc, argv); }

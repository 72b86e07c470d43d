// The stress test's jobs (test_stress.cc): rounds of collectives of every kind, the
// same on every rank but for what each contributes, submitted and awaited in each
// rank's own order and checked against values computed here.
#pragma once

#include "mpi_test.h"

#include <functional>
#include <string>
#include <vector>

namespace accord_test::stress {

// Jobs 0-3 of a round are float32 sums (like gradients), submitted back to back so that
// the negotiated order has runs of them, from several threads, to fuse. Jobs 4-7 are of
// any kind, dtype and op.
constexpr int kGradients = 4;
constexpr int kJobsPerRound = kGradients + 4;

// Where a thread's collectives run: the set, and this rank's place in it.
struct Place {
  accord::ProcessSetId set = accord::kGlobalProcessSet;
  int me = 0;  // rank within the set
  int n = 1;   // the set's size
};

// What a thread's rounds are named after, and how many a rank runs.
struct Naming {
  std::string prefix;
  // 0: every round's names are its own. Otherwise a round's names are those of round
  // (round % slots), and their jobs change every `epoch` rounds.
  int slots = 0;
  int epoch = 1;
  // Set where ranks run different numbers of rounds and then join: only allreduces, and
  // a round's result is that of the ranks still running it.
  std::function<int(int)> rounds_of;
};

struct ThreadResult {
  int checked = 0;
  int failed = 0;
  std::vector<std::string> first_failures;  // at most kKeep, for INFO()
  static constexpr int kKeep = 5;

  void note(const std::string& failure) {
    ++checked;
    if (failure.empty()) return;
    if (++failed <= kKeep)
      first_failures.push_back("rank " + std::to_string(accord::rank()) + ": " + failure);
  }
};

// Thread boundary: runs `rounds` rounds of thread t's jobs on its own application thread;
// touches only its own jobs and `result`, and the runtime through the public API.
void runThread(int t, int rounds, const Place& at, const Naming& naming, ThreadResult& result);

// Submits `count` jobs of any kind (those after the gradients) of `round` of thread t at
// once, then awaits and checks them in order.
void runMixedJobs(int t, int round, int count, const Place& at, const Naming& naming,
                  ThreadResult& result);

// The global set or another: this rank's place in it.
Place placeIn(accord::ProcessSetId set);

}  // namespace accord_test::stress

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
// Two cases. In the first every collective has a name of its own. In the second, as in
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

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

constexpr int kThreads = 4;
// Jobs 0-3 of a round are float32 sums (like gradients), submitted back to back so that
// the negotiated order has runs of them, from several threads, to fuse. Jobs 4-7 are of
// any kind, dtype and op.
constexpr int kGradients = 4;
constexpr int kJobsPerRound = kGradients + 4;
// Above the default fusion threshold (64 KiB) and ACCORD_FUSION_THRESHOLD=16384; about one
// allreduce in 16 is this big.
constexpr std::int64_t kLargeBytes = 96 << 10;
constexpr std::int64_t kSmallSizes[] = {0, 1, 2, 7, 64, 257, 1000, 3001};
constexpr std::int64_t kTrailing = 3;  // rows of allgather, alltoall, reduce-scatter
constexpr std::int64_t kScatterRows[] = {0, 1, 2, 3, 5, 8, 13, 41};

enum class Kind { Allreduce, Grouped, Allgather, Broadcast, Reducescatter, Alltoall };

// SplitMix64: the jobs are derived from it, identically on every rank (no standard
// distribution, whose results the standard leaves to the implementation).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T, std::size_t N>
const T& pick(const T (&options)[N], std::uint64_t h) {
  return options[h % N];
}

bool isFloat(DType d) {
  return d == DType::Float16 || d == DType::BFloat16 || d == DType::Float32 ||
         d == DType::Float64;
}

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

struct Job {
  std::string name;
  Kind kind = Kind::Allreduce;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0, postscale = 1.0;
  std::vector<std::int64_t> sizes;  // elements: one per tensor (a group's members)
  std::int64_t shift = 0;           // offsets fillValue's index, so tensors differ
  int tag = 0;                      // tagValue's second argument
  int root = 0;                     // broadcast, within the set
  std::uint64_t rows_seed = 0;      // allgather and alltoall rows
  std::int64_t scatter_rows = 0;    // reduce-scatter: the input's first dimension
  std::vector<int> active;          // the ranks that contribute; the others have joined

  // Allgather: rank r's rows.
  std::int64_t rows(int rank) const { return static_cast<std::int64_t>((rows_seed + rank) % 3); }
  // Alltoall: rows rank `from` sends rank `to`.
  std::int64_t split(int from, int to) const {
    return static_cast<std::int64_t>((rows_seed + from + 2 * to) % 3);
  }
  // Alltoall: what `from` sends `to`, row-major element i of that block.
  double sent(int from, int to, std::int64_t i) const {
    return tagValue(dtype, from, tag + 7 * to, i);
  }
};

// Job j of `round` of thread t: the same on every rank of the place but for what each
// rank contributes.
Job makeJob(int t, int round, int j, const Place& at, const Naming& naming) {
  const int key = naming.slots ? round % naming.slots : round;
  const int epoch = naming.slots ? round / naming.epoch : 0;
  const std::uint64_t h = mix((std::uint64_t(t) << 48) ^ (std::uint64_t(epoch) << 32) ^
                              (std::uint64_t(key) << 16) ^ std::uint64_t(j));
  Job job;
  job.name = naming.prefix + ".t" + std::to_string(t) + ".r" + std::to_string(key) + ".j" +
             std::to_string(j);
  const Kind mixed[] = {Kind::Allreduce, Kind::Grouped,       Kind::Allgather,
                        Kind::Broadcast, Kind::Reducescatter, Kind::Alltoall};
  job.kind = j < kGradients ? Kind::Allreduce : pick(mixed, h >> 4);
  if (naming.rounds_of) {
    job.kind = (h >> 4) % 2 ? Kind::Allreduce : Kind::Grouped;
    for (int r = 0; r < at.n; ++r)
      if (naming.rounds_of(r) > round) job.active.push_back(r);
  } else {
    job.active = allRanks(at.n);
  }
  job.dtype = j < kGradients ? DType::Float32 : pick(kAllDTypes, h);
  job.op = j < kGradients ? ReduceOp::Sum : pick(kAllOps, h >> 8);
  job.shift = static_cast<std::int64_t>((h >> 16) % kFillPeriod);
  job.tag = static_cast<int>((h >> 24) % 50);
  job.root = static_cast<int>((h >> 32) % static_cast<std::uint64_t>(at.n));
  job.rows_seed = (h >> 40) % 3;
  const std::int64_t size = pick(kSmallSizes, h >> 44);
  const auto element = static_cast<std::int64_t>(accord::dtype_size(job.dtype));
  const bool large = (h >> 52) % 16 == 0;
  const bool power_of_two = (at.n & (at.n - 1)) == 0;
  switch (job.kind) {
    case Kind::Allreduce:
      job.sizes = {large ? kLargeBytes / element + 3 : size};
      if (j >= kGradients && isFloat(job.dtype) && (h >> 56) % 4 == 0) {
        if (power_of_two) {
          job.op = ReduceOp::Adasum;
        } else {
          job.op = ReduceOp::Sum;  // exact: the sums are small integers
          job.prescale = 0.5;
          job.postscale = 4.0;
        }
      }
      break;
    case Kind::Grouped:
      for (int m = 0; m < 2 + static_cast<int>((h >> 52) % 3); ++m)
        job.sizes.push_back(pick(kSmallSizes, mix(h + static_cast<std::uint64_t>(m))));
      break;
    case Kind::Allgather:
      job.sizes = {job.rows(at.me) * kTrailing};
      break;
    case Kind::Broadcast:
      job.sizes = {size};
      break;
    case Kind::Reducescatter:
      job.scatter_rows = large ? kLargeBytes / element / kTrailing + 1 : pick(kScatterRows, h >> 56);
      job.sizes = {job.scatter_rows * kTrailing};
      break;
    case Kind::Alltoall: {
      std::int64_t rows = 0;
      for (int to = 0; to < at.n; ++to) rows += job.split(at.me, to);
      job.sizes = {rows * kTrailing};
      break;
    }
  }
  return job;
}

// A job in flight on this rank: its buffers and its handle.
struct Flight {
  Job job;
  Place at;
  std::vector<std::unique_ptr<Buffer>> tensors;
  std::unique_ptr<Output> output;  // allgather, reduce-scatter, alltoall
  accord::Handle handle;
};

void fillInputs(Flight& f) {
  const Job& job = f.job;
  const int me = f.at.me;
  for (std::size_t m = 0; m < job.sizes.size(); ++m) {
    f.tensors.push_back(std::make_unique<Buffer>(job.dtype, Shape{job.sizes[m]}));
    Buffer& b = *f.tensors.back();
    const auto offset = job.shift + static_cast<std::int64_t>(m);
    if (job.op == ReduceOp::Adasum) {  // the same tensor on every rank: Adasum gives it back
      b.fill([&](std::int64_t i) { return tagValue(job.dtype, 0, job.tag, i); });
    } else if (job.kind == Kind::Allreduce || job.kind == Kind::Grouped ||
               job.kind == Kind::Reducescatter) {
      b.fill([&](std::int64_t i) { return fillValue(job.dtype, job.op, me, i + offset); },
             kFillPeriod);
    } else if (job.kind == Kind::Alltoall) {
      std::int64_t at_row = 0;
      for (int to = 0; to < f.at.n; ++to) {
        const std::int64_t first = at_row * kTrailing, count = job.split(me, to) * kTrailing;
        for (std::int64_t i = 0; i < count; ++i) b.set(first + i, job.sent(me, to, i));
        at_row += job.split(me, to);
      }
    } else {
      b.fill([&](std::int64_t i) { return tagValue(job.dtype, me, job.tag, i); });
    }
  }
}

std::unique_ptr<Flight> submit(const Job& job, const Place& at) {
  auto f = std::make_unique<Flight>();
  f->job = job;
  f->at = at;
  fillInputs(*f);
  // A view of the one input with its rows of kTrailing elements; Buffer's shape is flat.
  auto rowsView = [&] {
    accord::TensorView view = f->tensors[0]->view();
    view.shape = {job.sizes[0] / kTrailing, kTrailing};
    return view;
  };
  switch (job.kind) {
    case Kind::Allreduce:
    case Kind::Grouped: {
      accord::AllreduceOptions options;
      options.name = job.name;
      options.process_set = at.set;
      options.op = job.op;
      options.prescale = job.prescale;
      options.postscale = job.postscale;
      if (job.kind == Kind::Allreduce) {
        f->handle = accord::allreduce_async(f->tensors[0]->view(), options);
      } else {
        std::vector<accord::TensorView> views;
        for (auto& b : f->tensors) views.push_back(b->view());
        f->handle = accord::grouped_allreduce_async(views, options);
      }
      break;
    }
    case Kind::Allgather: {
      f->output = std::make_unique<Output>(job.dtype);
      accord::AllgatherOptions options;
      options.name = job.name;
      options.process_set = at.set;
      f->handle = accord::allgather_async(rowsView(), f->output->allocator(), options);
      break;
    }
    case Kind::Broadcast: {
      accord::BroadcastOptions options;
      options.name = job.name;
      options.process_set = at.set;
      options.root = job.root;
      f->handle = accord::broadcast_async(f->tensors[0]->view(), options);
      break;
    }
    case Kind::Reducescatter: {
      f->output = std::make_unique<Output>(job.dtype);
      accord::ReducescatterOptions options;
      options.name = job.name;
      options.process_set = at.set;
      options.op = job.op;
      f->handle = accord::reducescatter_async(rowsView(), f->output->allocator(), options);
      break;
    }
    case Kind::Alltoall: {
      f->output = std::make_unique<Output>(job.dtype);
      accord::AlltoallOptions options;
      options.name = job.name;
      options.process_set = at.set;
      for (int to = 0; to < at.n; ++to) options.splits.push_back(job.split(at.me, to));
      f->handle = accord::alltoall_async(rowsView(), f->output->allocator(), options);
      break;
    }
  }
  return f;
}

// The output's shape against {rows, kTrailing}, then its values against want: "" when right.
std::string compareOutput(const Output& out, DType dtype, std::int64_t rows,
                          const std::function<double(std::int64_t)>& want, Tolerance tol = {}) {
  if (out.shape() != Shape{rows, kTrailing})
    return "output shape " + accord::shape_string(out.shape()) + ", expected [" +
           std::to_string(rows) + "," + std::to_string(kTrailing) + "]";
  return compareElements(dtype, out.data(), out.numel(), want, tol);
}

// Awaits the job (with finish()'s deadline) and checks its result: "" when right.
std::string check(const Flight& f) {
  const Job& job = f.job;
  const int n = f.at.n, me = f.at.me;
  const auto error = describe(finish(f.handle, job.name), job.name);
  if (!error.empty()) return error;
  const Tolerance tol = toleranceFor(job.dtype, job.op == ReduceOp::Adasum ? ReduceOp::Sum : job.op);
  std::string diff;
  switch (job.kind) {
    case Kind::Allreduce:
    case Kind::Grouped:
      for (std::size_t m = 0; m < f.tensors.size() && diff.empty(); ++m) {
        const auto offset = job.shift + static_cast<std::int64_t>(m);
        const Buffer& b = *f.tensors[m];
        diff = compareElements(
            job.dtype, b.data(), b.numel(),
            [&](std::int64_t i) {
              if (job.op == ReduceOp::Adasum) return tagValue(job.dtype, 0, job.tag, i);
              // Average divides by every rank, the joined ones too.
              const double share = job.op == ReduceOp::Average ? double(job.active.size()) / n : 1.0;
              return job.prescale * job.postscale * share *
                     reducedValue(job.dtype, job.op, job.active, i + offset);
            },
            tol);
        if (!diff.empty()) diff = "member " + std::to_string(m) + ": " + diff;
      }
      break;
    case Kind::Allgather: {
      std::vector<double> want;
      for (int r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < job.rows(r) * kTrailing; ++i)
          want.push_back(tagValue(job.dtype, r, job.tag, i));
      diff = compareOutput(*f.output, job.dtype, static_cast<std::int64_t>(want.size()) / kTrailing,
                           [&](std::int64_t i) { return want[static_cast<std::size_t>(i)]; });
      break;
    }
    case Kind::Broadcast:
      diff = compareElements(
          job.dtype, f.tensors[0]->data(), f.tensors[0]->numel(),
          [&](std::int64_t i) { return tagValue(job.dtype, job.root, job.tag, i); });
      break;
    case Kind::Reducescatter: {
      const std::int64_t first = firstRow(job.scatter_rows, me, n) * kTrailing + job.shift;
      diff = compareOutput(
          *f.output, job.dtype, rowsFor(job.scatter_rows, me, n),
          [&](std::int64_t i) { return reducedValue(job.dtype, job.op, allRanks(n), first + i); },
          tol);
      break;
    }
    case Kind::Alltoall: {
      std::vector<double> want;
      std::vector<std::int64_t> splits;
      for (int from = 0; from < n; ++from) {
        splits.push_back(job.split(from, me));
        for (std::int64_t i = 0; i < job.split(from, me) * kTrailing; ++i)
          want.push_back(job.sent(from, me, i));
      }
      diff = compareOutput(*f.output, job.dtype, static_cast<std::int64_t>(want.size()) / kTrailing,
                           [&](std::int64_t i) { return want[static_cast<std::size_t>(i)]; });
      if (diff.empty() && f.handle.received_splits() != splits) diff = "received_splits differ";
      break;
    }
  }
  if (diff.empty()) return "";
  return job.name + " (" + str(job.dtype) + ", " + str(job.op) + "): " + diff;
}

struct ThreadResult {
  int checked = 0;
  int failed = 0;
  std::vector<std::string> first_failures;  // at most kKeep, for INFO()
  static constexpr int kKeep = 5;

  void note(const std::string& failure) {
    ++checked;
    if (failure.empty()) return;
    if (++failed <= kKeep) first_failures.push_back("rank " + std::to_string(accord::rank()) + ": " + failure);
  }
};

// Thread boundary: runs on its own application thread; touches only its own jobs and
// `result`, and the runtime through the public API.
void runThread(int t, int rounds, const Place& at, const Naming& naming, ThreadResult& result) {
  const int me = accord::rank();
  std::mt19937 order(static_cast<std::uint32_t>(1000 * me + t));  // per rank: own order
  for (int round = 0; round < rounds; ++round) {
    std::vector<Job> jobs;
    for (int j = 0; j < kJobsPerRound; ++j) jobs.push_back(makeJob(t, round, j, at, naming));
    // Each half in its own order on each rank; odd ranks submit the mixed half first.
    std::shuffle(jobs.begin(), jobs.begin() + kGradients, order);
    std::shuffle(jobs.begin() + kGradients, jobs.end(), order);
    if (me % 2) std::rotate(jobs.begin(), jobs.begin() + kGradients, jobs.end());
    std::vector<std::unique_ptr<Flight>> flights;
    for (const Job& job : jobs) flights.push_back(submit(job, at));
    std::shuffle(flights.begin(), flights.end(), order);
    for (const auto& f : flights) result.note(check(*f));
  }
}

Place placeIn(accord::ProcessSetId set) {
  return {set, accord::process_set_rank(set), accord::process_set_size(set)};
}

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
    if (accord::process_set_included(churn)) {
      const Place at = placeIn(churn);
      std::vector<std::unique_ptr<Flight>> flights;
      for (int j = 0; j < kChurnJobs; ++j)
        flights.push_back(submit(makeJob(kThreads, c, kGradients + j, at, churn_naming), at));
      for (const auto& f : flights) results.back().note(check(*f));
    }
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

// Stress: four application threads per rank submit collectives at the same time, each
// under its own names, thousands in all: allreduce of every dtype and op at sizes from 0
// to above the fusion threshold, grouped allreduce, allgather and broadcast.
//
// Each thread works in rounds. A round's jobs are a function of (thread, round) alone,
// so every rank builds the same jobs with the same names; each rank submits them in its
// own shuffled order and awaits them in its own order, every handle with a deadline.
// The threads of one rank interleave as the scheduler likes, so the background thread
// sees the submissions of several threads in a different order on every rank. Every
// result is checked against values computed here (mpi_test.h), exactly but for
// Average's rounding.
//
// Catch2's assertions are not thread-safe: the threads collect failures as strings and
// the main thread CHECKs them after joining.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

constexpr int kThreads = 4;
// 4 threads x 300 rounds x 8 jobs = 9600 collectives per rank (about 11,000 tensors with
// the groups' members): about 4 s for 4 ranks sharing 2 cores.
constexpr int kRounds = 300;
// Jobs 0-3 of a round are float32 sums (like gradients), submitted back to back so that
// the negotiated order has runs of them, from several threads, to fuse. Jobs 4-7 are an
// allreduce of any dtype and op, a grouped allreduce, an allgather and a broadcast.
constexpr int kGradients = 4;
constexpr int kJobsPerRound = kGradients + 4;
// Above the default fusion threshold (64 KiB) and ACCORD_FUSION_THRESHOLD=16384; about one
// allreduce in 16 is this big.
constexpr std::int64_t kLargeBytes = 96 << 10;
constexpr std::int64_t kSmallSizes[] = {0, 1, 2, 7, 64, 257, 1000, 3001};
constexpr std::int64_t kTrailing = 3;  // allgather rows are kTrailing elements wide

enum class Kind { Allreduce, Grouped, Allgather, Broadcast };

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

struct Job {
  std::string name;
  Kind kind = Kind::Allreduce;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::vector<std::int64_t> sizes;  // elements: one per tensor (a group's members)
  std::int64_t shift = 0;           // offsets fillValue's index, so tensors differ
  int tag = 0;                      // tagValue's second argument
  int root = 0;                     // broadcast
  std::uint64_t rows_seed = 0;      // allgather: rows(r) = (rows_seed + r) % 3

  std::int64_t rows(int rank) const { return static_cast<std::int64_t>((rows_seed + rank) % 3); }
};

// Job j of `round` of thread t on rank `me` of n: the same on every rank but for what
// each rank contributes (an allgather's rows).
Job makeJob(int t, int round, int j, int me, int n) {
  const std::uint64_t h =
      mix((std::uint64_t(t) << 48) ^ (std::uint64_t(round) << 16) ^ std::uint64_t(j));
  Job job;
  job.name =
      "stress.t" + std::to_string(t) + ".r" + std::to_string(round) + ".j" + std::to_string(j);
  const Kind mixed[] = {Kind::Allreduce, Kind::Grouped, Kind::Allgather, Kind::Broadcast};
  job.kind = j < kGradients ? Kind::Allreduce : mixed[j - kGradients];
  job.dtype = j < kGradients ? DType::Float32 : pick(kAllDTypes, h);
  job.op = j < kGradients ? ReduceOp::Sum : pick(kAllOps, h >> 8);
  job.shift = static_cast<std::int64_t>((h >> 16) % kFillPeriod);
  job.tag = static_cast<int>((h >> 24) % 50);
  job.root = static_cast<int>((h >> 32) % static_cast<std::uint64_t>(n));
  job.rows_seed = (h >> 40) % 3;
  const std::int64_t size = pick(kSmallSizes, h >> 44);
  const auto element = static_cast<std::int64_t>(accord::dtype_size(job.dtype));
  switch (job.kind) {
    case Kind::Allreduce:
      job.sizes = {(h >> 52) % 16 == 0 ? kLargeBytes / element + 3 : size};
      break;
    case Kind::Grouped:
      for (int m = 0; m < 2 + static_cast<int>((h >> 52) % 3); ++m)
        job.sizes.push_back(pick(kSmallSizes, mix(h + static_cast<std::uint64_t>(m))));
      break;
    case Kind::Allgather:
      job.sizes = {job.rows(me) * kTrailing};
      break;
    case Kind::Broadcast:
      job.sizes = {size};
      break;
  }
  return job;
}

// A job in flight on this rank: its buffers and its handle.
struct Flight {
  Job job;
  std::vector<std::unique_ptr<Buffer>> tensors;
  std::unique_ptr<Output> output;  // allgather
  accord::Handle handle;
};

std::unique_ptr<Flight> submit(const Job& job) {
  const int me = accord::rank();
  auto f = std::make_unique<Flight>();
  f->job = job;
  for (std::size_t m = 0; m < job.sizes.size(); ++m) {
    f->tensors.push_back(std::make_unique<Buffer>(job.dtype, Shape{job.sizes[m]}));
    const auto offset = job.shift + static_cast<std::int64_t>(m);
    if (job.kind == Kind::Allreduce || job.kind == Kind::Grouped) {
      f->tensors.back()->fill(
          [&](std::int64_t i) { return fillValue(job.dtype, job.op, me, i + offset); },
          kFillPeriod);
    } else {
      f->tensors.back()->fill([&](std::int64_t i) { return tagValue(job.dtype, me, job.tag, i); });
    }
  }
  switch (job.kind) {
    case Kind::Allreduce: {
      accord::AllreduceOptions options;
      options.name = job.name;
      options.op = job.op;
      f->handle = accord::allreduce_async(f->tensors[0]->view(), options);
      break;
    }
    case Kind::Grouped: {
      std::vector<accord::TensorView> views;
      for (auto& b : f->tensors) views.push_back(b->view());
      accord::AllreduceOptions options;
      options.name = job.name;
      options.op = job.op;
      f->handle = accord::grouped_allreduce_async(views, options);
      break;
    }
    case Kind::Allgather: {
      // Rows of kTrailing elements; Buffer's shape is flat, the collective's is not.
      accord::TensorView view = f->tensors[0]->view();
      view.shape = {job.rows(me), kTrailing};
      f->output = std::make_unique<Output>(job.dtype);
      accord::AllgatherOptions options;
      options.name = job.name;
      f->handle = accord::allgather_async(view, f->output->allocator(), options);
      break;
    }
    case Kind::Broadcast: {
      accord::BroadcastOptions options;
      options.name = job.name;
      options.root = job.root;
      f->handle = accord::broadcast_async(f->tensors[0]->view(), options);
      break;
    }
  }
  return f;
}

// Awaits the job (with finish()'s deadline) and checks its result: "" when right.
std::string check(const Flight& f) {
  const Job& job = f.job;
  const int n = accord::size();
  const auto error = describe(finish(f.handle, job.name), job.name);
  if (!error.empty()) return error;
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
              return reducedValue(job.dtype, job.op, allRanks(n), i + offset);
            },
            toleranceFor(job.dtype, job.op));
        if (!diff.empty()) diff = "member " + std::to_string(m) + ": " + diff;
      }
      break;
    case Kind::Allgather: {
      std::vector<double> want;
      for (int r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < job.rows(r) * kTrailing; ++i)
          want.push_back(tagValue(job.dtype, r, job.tag, i));
      const auto rows = static_cast<std::int64_t>(want.size()) / kTrailing;
      if (f.output->shape() != Shape{rows, kTrailing}) {
        diff = "output shape " + accord::shape_string(f.output->shape()) + ", expected [" +
               std::to_string(rows) + "," + std::to_string(kTrailing) + "]";
      } else {
        diff = compareElements(job.dtype, f.output->data(), f.output->numel(),
                               [&](std::int64_t i) { return want[static_cast<std::size_t>(i)]; });
      }
      break;
    }
    case Kind::Broadcast:
      diff = compareElements(
          job.dtype, f.tensors[0]->data(), f.tensors[0]->numel(),
          [&](std::int64_t i) { return tagValue(job.dtype, job.root, job.tag, i); });
      break;
  }
  if (diff.empty()) return "";
  return job.name + " (" + str(job.dtype) + ", " + str(job.op) + "): " + diff;
}

struct ThreadResult {
  int checked = 0;
  int failed = 0;
  std::vector<std::string> first_failures;  // at most kKeep, for INFO()
  static constexpr int kKeep = 5;
};

// Thread boundary: runs on its own application thread; touches only its own jobs and
// `result`, and the runtime through the public API.
void runThread(int t, ThreadResult& result) {
  const int me = accord::rank();
  const int n = accord::size();
  std::mt19937 order(static_cast<std::uint32_t>(1000 * me + t));  // per rank: own order
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Job> jobs;
    for (int j = 0; j < kJobsPerRound; ++j) jobs.push_back(makeJob(t, round, j, me, n));
    // Each half in its own order on each rank; odd ranks submit the mixed half first.
    std::shuffle(jobs.begin(), jobs.begin() + kGradients, order);
    std::shuffle(jobs.begin() + kGradients, jobs.end(), order);
    if (me % 2) std::rotate(jobs.begin(), jobs.begin() + kGradients, jobs.end());
    std::vector<std::unique_ptr<Flight>> flights;
    for (const Job& job : jobs) flights.push_back(submit(job));
    std::shuffle(flights.begin(), flights.end(), order);
    for (const auto& f : flights) {
      const std::string failure = check(*f);
      ++result.checked;
      if (failure.empty()) continue;
      if (++result.failed <= ThreadResult::kKeep)
        result.first_failures.push_back("rank " + std::to_string(me) + ": " + failure);
    }
  }
}

}  // namespace

TEST_CASE("stress: 4 threads per rank, distinct names, every result checked") {
  std::vector<ThreadResult> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(runThread, t, std::ref(results[t]));
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    const ThreadResult& r = results[static_cast<std::size_t>(t)];
    std::ostringstream failures;
    for (const auto& f : r.first_failures) failures << "\n  " << f;
    INFO("thread " << t << ": " << r.failed << " of " << r.checked << " collectives wrong"
                   << failures.str());
    CHECK(r.checked == kRounds * kJobsPerRound);
    CHECK(r.failed == 0);
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

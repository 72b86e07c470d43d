// The stress test's jobs: see stress_jobs.h. Expected values come from mpi_test.h
// (fillValue, reducedValue, tagValue), computed independently of the runtime.
#include "stress_jobs.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace accord_test::stress {
namespace {

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
  return d == DType::Float16 || d == DType::BFloat16 || d == DType::Float32 || d == DType::Float64;
}

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
      job.scatter_rows =
          large ? kLargeBytes / element / kTrailing + 1 : pick(kScatterRows, h >> 56);
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

// The options every collective of `job` takes: its name and set.
template <class Options>
Options optionsFor(const Job& job, const Place& at) {
  Options options;
  options.name = job.name;
  options.process_set = at.set;
  return options;
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
      auto options = optionsFor<accord::AllreduceOptions>(job, at);
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
      auto options = optionsFor<accord::AllgatherOptions>(job, at);
      f->handle = accord::allgather_async(rowsView(), f->output->allocator(), options);
      break;
    }
    case Kind::Broadcast: {
      auto options = optionsFor<accord::BroadcastOptions>(job, at);
      options.root = job.root;
      f->handle = accord::broadcast_async(f->tensors[0]->view(), options);
      break;
    }
    case Kind::Reducescatter: {
      f->output = std::make_unique<Output>(job.dtype);
      auto options = optionsFor<accord::ReducescatterOptions>(job, at);
      options.op = job.op;
      f->handle = accord::reducescatter_async(rowsView(), f->output->allocator(), options);
      break;
    }
    case Kind::Alltoall: {
      f->output = std::make_unique<Output>(job.dtype);
      auto options = optionsFor<accord::AlltoallOptions>(job, at);
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
  const Tolerance tol =
      toleranceFor(job.dtype, job.op == ReduceOp::Adasum ? ReduceOp::Sum : job.op);
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
              const double share =
                  job.op == ReduceOp::Average ? double(job.active.size()) / n : 1.0;
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

}  // namespace

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

void runMixedJobs(int t, int round, int count, const Place& at, const Naming& naming,
                  ThreadResult& result) {
  std::vector<std::unique_ptr<Flight>> flights;
  for (int j = kGradients; j < kGradients + count; ++j)
    flights.push_back(submit(makeJob(t, round, j, at, naming), at));
  for (const auto& f : flights) result.note(check(*f));
}

}  // namespace accord_test::stress

// accord-bench --scatter-gather: reducescatter and allgather through the shared-memory
// window against the MPI ring, in one run, on ranks of one host, with the allreduce of
// the same bytes beside them (a sharded optimizer's step is one reducescatter and one
// allgather where a replicated one is one allreduce).
//
//   mpirun -np 2 accord-bench --scatter-gather [--min-bytes 4K] [--max-bytes 64M]
//          [--tensors 100] [--iters 10] [--repeats 3]
//
// ACCORD_SHARED_MEMORY is read once at init, so each repeat starts Accord twice, once
// per setting (the order alternating between repeats). Each size is one float32 tensor
// of that many bytes: reducescatter's input, allgather's output (each rank contributing
// its reducescatter_rows share, gathered in place into a prepared output, as the sharded
// optimizer does), allreduce's buffer; the three are timed alternately. Last comes a set
// of --tensors tensors sharing --max-bytes, submitted together, as a model's step
// submits them. The medians pool every repeat's iterations. Beside them, per size, raw
// MPI's MPI_Reduce_scatter and in-place MPI_Allgatherv of the same rows (Open MPI's
// shared-memory transport copies large messages once, with the kernel's cross-memory
// attach), timed in every repeat before Accord starts.
#include "bench_common.h"

#include <accord/accord.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace accord_bench {

namespace {

enum Kind { kScatter, kGather, kReduce, kKinds };
constexpr const char* kKindNames[] = {"reducescatter", "allgather", "allreduce"};

// An allocator that hands out `data`, whatever shape is asked for.
accord::Allocator into(float* data) {
  return [data](const accord::Shape& shape) {
    accord::TensorView v;
    v.data = data;
    v.dtype = accord::DType::Float32;
    v.shape = shape;
    return v;
  };
}

// Where a set's tensors lie: tensor t holds count[t] floats from at[t], in every buffer.
struct Set {
  std::vector<std::int64_t> at, count;
  std::string name;
};

Set oneTensor(std::int64_t count, const std::string& name) { return {{0}, {count}, name}; }

Set tensors(std::int64_t total, int n, const std::string& name) {
  Set s{{}, {}, name};
  for (int t = 0; t < n; ++t) {
    s.at.push_back(total * t / n);
    s.count.push_back(total * (t + 1) / n - total * t / n);
  }
  return s;
}

// The buffers every collective works on, each of --max-bytes.
struct Buffers {
  float* input;     // reducescatter's input
  float* shard;     // reducescatter's output
  float* gathered;  // allgather's, in place
  float* reduced;   // allreduce's, in place
};

std::int64_t firstRow(std::int64_t rows, int rank, int size) {
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += accord::reducescatter_rows(rows, r, size);
  return first;
}

// Runs `kind` on every tensor of `set`, all submitted before any is waited for.
void run(Kind kind, const Set& set, const Buffers& b, int rank, int size) {
  std::vector<accord::Handle> handles;
  for (std::size_t t = 0; t < set.at.size(); ++t) {
    const std::string name = set.name + "." + std::to_string(t) + "." + kKindNames[kind];
    const std::int64_t at = set.at[t], count = set.count[t];
    if (kind == kScatter) {
      accord::ReducescatterOptions o;
      o.name = name;
      handles.push_back(
          accord::reducescatter_async(floatView(b.input + at, count), into(b.shard + at), o));
    } else if (kind == kGather) {
      accord::AllgatherOptions o;
      o.name = name;
      const std::int64_t first = firstRow(count, rank, size);
      const auto mine = accord::reducescatter_rows(count, rank, size);
      handles.push_back(
          accord::allgather_async(floatView(b.gathered + at + first, mine), into(b.gathered + at), o));
    } else {
      accord::AllreduceOptions o;
      o.name = name;
      handles.push_back(accord::allreduce_async(floatView(b.reduced + at, count), o));
    }
  }
  for (auto& h : handles) h.wait();
}

// Each rank contributes rank + 1 everywhere: the sum and the gathered blocks are checked
// at every tensor's ends, then the buffers are zeroed (no denormals while timing).
bool check(const Set& set, const Buffers& b, int rank, int size, std::int64_t total) {
  std::fill(b.input, b.input + total, static_cast<float>(rank + 1));
  std::fill(b.gathered, b.gathered + total, 0.0f);
  for (std::size_t t = 0; t < set.at.size(); ++t) {
    const std::int64_t first = firstRow(set.count[t], rank, size);
    const auto mine = accord::reducescatter_rows(set.count[t], rank, size);
    std::fill_n(b.gathered + set.at[t] + first, mine, static_cast<float>(rank + 1));
  }
  run(kScatter, set, b, rank, size);
  run(kGather, set, b, rank, size);
  bool ok = true;
  const float sum = static_cast<float>(size * (size + 1) / 2);
  for (std::size_t t = 0; t < set.at.size(); ++t) {
    const auto mine = accord::reducescatter_rows(set.count[t], rank, size);
    if (mine > 0 && (b.shard[set.at[t]] != sum || b.shard[set.at[t] + mine - 1] != sum)) ok = false;
    for (int r = 0; r < size; ++r) {
      const std::int64_t first = firstRow(set.count[t], r, size);
      const auto rows = accord::reducescatter_rows(set.count[t], r, size);
      const float* g = b.gathered + set.at[t] + first;
      if (rows > 0 &&
          (g[0] != static_cast<float>(r + 1) || g[rows - 1] != static_cast<float>(r + 1)))
        ok = false;
    }
  }
  if (!ok)
    std::fprintf(stderr, "[rank %d] accord-bench: wrong reducescatter/allgather result in %s\n",
                 rank, set.name.c_str());
  std::fill(b.input, b.input + total, 0.0f);
  std::fill(b.gathered, b.gathered + total, 0.0f);
  std::fill(b.reduced, b.reduced + total, 0.0f);
  return ok;
}

// How one tensor of floats splits into rows per rank, as Accord splits it, in MPI's ints.
struct RawSplit {
  std::vector<int> rows, first;
  RawSplit(std::int64_t count, int size) {
    for (int r = 0; r < size; ++r) {
      rows.push_back(static_cast<int>(accord::reducescatter_rows(count, r, size)));
      first.push_back(static_cast<int>(firstRow(count, r, size)));
    }
  }
};

// Raw MPI's reducescatter or allgather of one tensor split as `split`.
void runRaw(Kind kind, const RawSplit& split, const Buffers& b, int rank) {
  if (kind == kScatter)
    MPI_Reduce_scatter(b.input, b.shard + split.first[rank], split.rows.data(), MPI_FLOAT,
                       MPI_SUM, MPI_COMM_WORLD);
  else
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, b.gathered, split.rows.data(), split.first.data(),
                   MPI_FLOAT, MPI_COMM_WORLD);
}

}  // namespace

int runScatterGatherBench(const Bench& bench, const Options& opt) {
  const auto most = static_cast<std::int64_t>(opt.max_bytes / sizeof(float));
  std::vector<std::unique_ptr<float, decltype(&std::free)>> owned;
  auto alloc = [&] {
    const std::size_t bytes = (static_cast<std::size_t>(most) * sizeof(float) + 63) / 64 * 64;
    owned.emplace_back(static_cast<float*>(std::aligned_alloc(64, bytes)), &std::free);
    std::memset(owned.back().get(), 0, bytes);  // first touch outside the timing
    return owned.back().get();
  };
  const Buffers b{alloc(), alloc(), alloc(), alloc()};

  // The sweep's sizes, then the set (its key: 0).
  std::vector<std::pair<std::uint64_t, Set>> cases;
  for (std::uint64_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 2) {
    cases.emplace_back(bytes, oneTensor(static_cast<std::int64_t>(bytes / sizeof(float)),
                                        "bench.sg." + std::to_string(bytes)));
    if (bytes > opt.max_bytes / 2) break;
  }
  cases.emplace_back(0, tensors(most, opt.tensors, "bench.sg.set"));

  if (bench.rank == 0) {
    std::printf(
        "# accord-bench --scatter-gather: %d ranks; float32 sum; medians of %d iterations x "
        "%d repeats (%d warm-up each); each repeat starts Accord once with "
        "ACCORD_SHARED_MEMORY=1 (shm), once =0 (mpi), alternating the order\n",
        bench.size, opt.iters, opt.repeats, opt.warmup);
    std::printf("#%11s  %9s %9s %6s  %9s %9s %6s  %9s %9s  %7s\n", "size", "RS shm", "RS mpi", "x",
                "AG shm", "AG mpi", "x", "AR shm", "AR mpi", "RS+AG");
    std::printf("#%11s  %9s %9s %6s  %9s %9s %6s  %9s %9s  %7s\n", "(B)", "(us)", "(us)", "",
                "(us)", "(us)", "", "(us)", "(us)", "/AR shm");
    std::fflush(stdout);
  }
  // [shm][kind][case]: times; raw[kind][case]: raw MPI's (reducescatter, allgather).
  std::map<std::size_t, std::vector<double>> t[2][kKinds], raw[2];
  for (int repeat = 0; repeat < opt.repeats; ++repeat) {
    for (std::size_t c = 0; c + 1 < cases.size(); ++c) {  // the sizes, not the set
      const std::int64_t count = cases[c].second.count[0];
      if (count > INT_MAX) continue;  // beyond MPI's int counts: no raw figure
      const RawSplit split(count, bench.size);
      for (int it = 0; it < opt.warmup + opt.iters; ++it)
        for (int kind : {kScatter, kGather}) {
          float* rewritten = kind == kScatter ? b.input : b.gathered;
          const double s = bench.timeOnce(
              [&] { runRaw(static_cast<Kind>(kind), split, b, bench.rank); },
              [&] { std::memset(rewritten, 0, static_cast<std::size_t>(count) * sizeof(float)); });
          if (it >= opt.warmup) raw[kind][c].push_back(s);
        }
    }
    for (int k = 0; k < 2; ++k) {
      const int shm = (repeat + k) % 2;
      setenv("ACCORD_SHARED_MEMORY", shm ? "1" : "0", 1);
      accord::init();
      for (std::size_t c = 0; c < cases.size(); ++c) {
        const Set& set = cases[c].second;
        const std::int64_t total = set.at.back() + set.count.back();
        if (!check(set, b, bench.rank, bench.size, total)) MPI_Abort(MPI_COMM_WORLD, 3);
        for (int it = 0; it < opt.warmup + opt.iters; ++it) {
          for (int kind = 0; kind < kKinds; ++kind) {
            float* rewritten = kind == kScatter  ? b.input
                               : kind == kGather ? b.gathered
                                                 : b.reduced;
            const double s = bench.timeOnce(
                [&] { run(static_cast<Kind>(kind), set, b, bench.rank, bench.size); },
                [&] {
                  std::memset(rewritten, 0, static_cast<std::size_t>(total) * sizeof(float));
                });
            if (it >= opt.warmup) t[shm][kind][c].push_back(s);
          }
        }
      }
      accord::shutdown();
    }
  }
  for (std::size_t c = 0; c < cases.size(); ++c) {
    double m[2][kKinds];
    for (int shm = 0; shm < 2; ++shm)
      for (int kind = 0; kind < kKinds; ++kind) m[shm][kind] = median(t[shm][kind][c]);
    const Set& set = cases[c].second;
    const std::int64_t total = set.at.back() + set.count.back();
    const double bytes = static_cast<double>(total) * sizeof(float);
    if (bench.rank == 0) {
      if (cases[c].first == 0)
        std::printf("# %d tensors sharing %llu bytes, submitted together:\n", opt.tensors,
                    static_cast<unsigned long long>(opt.max_bytes));
      std::printf(" %11.0f  %9.1f %9.1f %6.2f  %9.1f %9.1f %6.2f  %9.1f %9.1f  %7.2f\n", bytes,
                  m[1][kScatter] * 1e6, m[0][kScatter] * 1e6, m[0][kScatter] / m[1][kScatter],
                  m[1][kGather] * 1e6, m[0][kGather] * 1e6, m[0][kGather] / m[1][kGather],
                  m[1][kReduce] * 1e6, m[0][kReduce] * 1e6,
                  (m[1][kScatter] + m[1][kGather]) / m[1][kReduce]);
    }
    const char* section = cases[c].first == 0 ? "scatter_gather_set" : "scatter_gather";
    for (int shm = 0; shm < 2; ++shm)
      for (int kind = 0; kind < kKinds; ++kind)
        bench.csvRow(section, std::string(kKindNames[kind]) + (shm ? "_shm" : "_mpi"), bytes, total,
                     m[shm][kind]);
  }
  if (bench.rank == 0) {
    std::printf(
        "# x = mpi time / shm time: > 1 means the shared-memory window is faster; "
        "RS+AG/AR shm = (reducescatter + allgather) / allreduce, all through shm\n"
        "# raw MPI (MPI_Reduce_scatter, MPI_Allgatherv in place), the same rows:\n"
        "#%11s  %9s %6s  %9s %6s\n#%11s  %9s %6s  %9s %6s\n",
        "size", "RS raw", "x", "AG raw", "x", "(B)", "(us)", "", "(us)", "");
  }
  for (std::size_t c = 0; c + 1 < cases.size(); ++c) {
    if (raw[kScatter][c].empty()) continue;
    const double rs = median(raw[kScatter][c]), ag = median(raw[kGather][c]);
    const double rs_shm = median(t[1][kScatter][c]), ag_shm = median(t[1][kGather][c]);
    const double bytes = static_cast<double>(cases[c].first);
    if (bench.rank == 0)
      std::printf(" %11.0f  %9.1f %6.2f  %9.1f %6.2f\n", bytes, rs * 1e6, rs / rs_shm, ag * 1e6,
                  ag / ag_shm);
    bench.csvRow("scatter_gather", "reducescatter_raw_mpi", bytes, cases[c].second.count[0], rs);
    bench.csvRow("scatter_gather", "allgather_raw_mpi", bytes, cases[c].second.count[0], ag);
  }
  if (bench.rank == 0) {
    std::printf("# x = raw MPI time / Accord's through shm: > 1 means Accord is faster\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace accord_bench

// What the host and the device benchmarks of accord-bench share: options, the MPI
// context with its timing of one iteration, medians and alternating pairs, CSV rows.
#pragma once

#include <accord/tensor.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace accord_bench {

// `count` float32 elements of host memory at `data`, as the runtime takes them.
inline accord::TensorView floatView(float* data, std::int64_t count) {
  accord::TensorView v;
  v.data = data;
  v.dtype = accord::DType::Float32;
  v.shape = {count};
  return v;
}

struct Options {
  std::uint64_t min_bytes = 4 << 10;
  std::uint64_t max_bytes = 256 << 20;
  int iters = 20;
  int warmup = 5;
  int latency_iters = 200;
  int resnet_steps = 10;
  int resnet_warmup = -1;    // untimed ResNet-50 steps first (-1: 2, or 1 with --quick)
  bool resnet_only = false;  // the ResNet-50 gradient set only (no sweep, no latency)
  bool resnet_accord_only = false;  // ... and only Accord's Sum variant
  bool average_only = false;        // --device cuda: the Average study only
  std::string csv;
  bool quick = false;
  std::string device = "cpu";  // cpu: host memory against MPI; cuda: GPU memory against NCCL
  bool hierarchical = false;   // the hierarchical allreduce against the flat one and MPI
  int repeats = 3;             // --hierarchical, --scatter-gather: restarts per setting

  bool scatter_gather = false;  // reducescatter and allgather, shared memory against MPI
  int tensors = 100;            // --scatter-gather: tensors in the set sharing --max-bytes
};

// The benchmark's MPI context: a duplicate of MPI_COMM_WORLD, so that raw MPI's traffic
// and the timing barriers never mix with anything else.
struct Bench {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::FILE* csv = nullptr;

  // One timed iteration: rewrite the inputs, barrier, time the call, maximum over ranks.
  double timeOnce(const std::function<void()>& call,
                  const std::function<void()>& rewrite = nullptr) const {
    if (rewrite) rewrite();
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    call();
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return t;
  }
  double busFactor() const { return size > 1 ? 2.0 * (size - 1) / size : 0.0; }
  void csvRow(const char* section, const std::string& variant, double bytes, std::int64_t count,
              double seconds) const {
    if (!csv || rank != 0) return;
    const double algbw = bytes / seconds / 1e9;
    std::fprintf(csv, "%s,%s,%.0f,%lld,%d,%.3f,%.4f,%.4f\n", section, variant.c_str(), bytes,
                 static_cast<long long>(count), size, seconds * 1e6, algbw, algbw * busFactor());
  }
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Medians of two calls timed alternately (A, B, A, B, ...), so slow phases of a shared
// machine hit both alike.
inline std::pair<double, double> timePair(const Bench& bench, int warmup, int iters,
                                          const std::function<void()>& a,
                                          const std::function<void()>& b,
                                          const std::function<void()>& rewrite) {
  std::vector<double> ta, tb;
  for (int it = 0; it < warmup + iters; ++it) {
    const double x = bench.timeOnce(a, rewrite);
    const double y = bench.timeOnce(b, rewrite);
    if (it >= warmup) {
      ta.push_back(x);
      tb.push_back(y);
    }
  }
  return {median(ta), median(tb)};
}

// Every rank contributes rank + 1 through `allreduce` (in place on data[0, count)); true
// when n(n+1)/2 came back at both ends, else a message on stderr. Leaves zeros, which
// stay zeros: no overflow, no denormals.
inline bool checkedSum(const Bench& bench, float* data, std::int64_t count,
                       const std::function<void()>& allreduce) {
  std::fill(data, data + count, static_cast<float>(bench.rank + 1));
  allreduce();
  const float want = static_cast<float>(bench.size * (bench.size + 1) / 2);
  const bool ok = data[0] == want && data[count - 1] == want;
  if (!ok)
    std::fprintf(stderr,
                 "[rank %d] accord-bench: wrong allreduce result for %lld floats: %g/%g, "
                 "expected %g\n",
                 bench.rank, static_cast<long long>(count), data[0], data[count - 1], want);
  std::fill(data, data + count, 0.0f);
  return ok;
}

// accord-bench --hierarchical (hierarchical_bench.cc): flat and hierarchical Accord and
// MPI_Allreduce over the size sweep, Accord started once per setting and repeat; Accord
// must not be initialized when it is called. `buffer` holds max_bytes. Returns the exit
// status.
int runHierarchicalBench(const Bench& bench, const Options& options, float* buffer);

// accord-bench --scatter-gather (scatter_gather_bench.cc): reducescatter, allgather and
// allreduce with ACCORD_SHARED_MEMORY=1 against =0 over the size sweep and a set of
// tensors, Accord started once per setting and repeat; Accord must not be initialized
// when it is called. Returns the exit status.
int runScatterGatherBench(const Bench& bench, const Options& options);

// The device benchmarks (device_bench.cc where Accord was built with CUDA and NCCL):
// the same sweep, latency and ResNet-50 gradient set on GPU memory, against raw NCCL.
// Returns the exit status.
int runDeviceBench(const Bench& bench, const Options& options);

}  // namespace accord_bench

// accord-bench --hierarchical: the hierarchical allreduce against Accord's flat path and
// raw MPI_Allreduce, in one run, on ranks that span hosts.
//
//   mpirun -np 4 -H a:2,b:2 accord-bench --hierarchical [--min-bytes 64K] [--max-bytes 64M]
//          [--iters 10] [--repeats 3]
//
// ACCORD_HIERARCHICAL_ALLREDUCE is read once at init, so each repeat starts Accord twice,
// once per setting (the order alternating between repeats), and sweeps every size with
// Accord and MPI_Allreduce timed alternately as in the plain sweep. The medians pool the
// iterations of every repeat: a slow phase of a shared machine falls on both settings
// and on MPI alike.
#include "bench_common.h"

#include <accord/accord.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace accord_bench {

namespace {

void allreduceFloats(float* data, std::int64_t count, const std::string& name) {
  accord::TensorView v;
  v.data = data;
  v.dtype = accord::DType::Float32;
  v.shape = {count};
  accord::AllreduceOptions options;
  options.name = name;
  accord::allreduce_async(v, options).wait();
}

// The layout as MPI sees it, and whether the hierarchical path applies to it.
struct Layout {
  int hosts = 1, smallest = 0, largest = 0;
  bool even() const { return hosts > 1 && smallest == largest && smallest >= 2; }
};

Layout layoutOf(MPI_Comm comm) {
  MPI_Comm host;
  int rank = 0, local_rank = 0, local_size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  MPI_Comm_rank(host, &local_rank);
  MPI_Comm_size(host, &local_size);
  MPI_Comm_free(&host);
  int extremes[2] = {local_size, -local_size};
  Layout l;
  l.hosts = local_rank == 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT, MPI_MAX, comm);
  MPI_Allreduce(MPI_IN_PLACE, &l.hosts, 1, MPI_INT, MPI_SUM, comm);
  l.largest = extremes[0];
  l.smallest = -extremes[1];
  return l;
}

}  // namespace

int runHierarchicalBench(const Bench& bench, const Options& opt, float* buffer) {
  const Layout layout = layoutOf(bench.comm);
  if (bench.rank == 0) {
    std::printf("# accord-bench --hierarchical: %d ranks on %d hosts (%d..%d per host)%s\n",
                bench.size, layout.hosts, layout.smallest, layout.largest,
                layout.even() ? ""
                              : "; the hierarchical path does not apply here (it needs >= 2 "
                                "hosts with the same number >= 2 of ranks): both rows run flat");
    std::printf(
        "# float32 sum; medians of %d iterations x %d repeats (%d warm-up each); each "
        "repeat starts Accord once flat, once hierarchical, alternating the order\n",
        opt.iters, opt.repeats, opt.warmup);
    std::printf("#%11s  %10s %10s %10s  %8s %8s %8s\n", "size", "flat", "hier", "MPI", "hier",
                "MPI/flat", "MPI/hier");
    std::printf("#%11s  %10s %10s %10s  %8s %8s %8s\n", "(B)", "(us)", "(us)", "(us)", "speedup",
                "", "");
    std::fflush(stdout);
  }
  // [setting][size]: Accord's times; [size]: MPI's, from both settings' runs.
  std::map<std::uint64_t, std::vector<double>> accord_t[2], mpi_t;
  for (int repeat = 0; repeat < opt.repeats; ++repeat) {
    for (int k = 0; k < 2; ++k) {
      const int hierarchical = (repeat + k) % 2;
      setenv("ACCORD_HIERARCHICAL_ALLREDUCE", hierarchical ? "1" : "0", 1);
      accord::init();
      for (std::uint64_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 2) {
        const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
        const std::string name = "bench.hier." + std::to_string(bytes);
        if (!checkedSum(bench, buffer, count, [&] { allreduceFloats(buffer, count, name); }))
          MPI_Abort(MPI_COMM_WORLD, 3);
        std::vector<double> ta, tm;
        for (int it = 0; it < opt.warmup + opt.iters; ++it) {
          auto rewrite = [&] { std::memset(buffer, 0, bytes); };
          const double a = bench.timeOnce([&] { allreduceFloats(buffer, count, name); }, rewrite);
          const double m = bench.timeOnce(
              [&] {
                MPI_Allreduce(MPI_IN_PLACE, buffer, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                              bench.comm);
              },
              rewrite);
          if (it < opt.warmup) continue;
          accord_t[hierarchical][bytes].push_back(a);
          mpi_t[bytes].push_back(m);
        }
        if (bytes > opt.max_bytes / 2) break;
      }
      accord::shutdown();
    }
  }
  for (const auto& [bytes, times] : mpi_t) {
    const double flat = median(accord_t[0][bytes]), hier = median(accord_t[1][bytes]);
    const double mpi = median(times);
    if (bench.rank == 0)
      std::printf(" %11llu  %10.1f %10.1f %10.1f  %8.2f %8.2f %8.2f\n",
                  static_cast<unsigned long long>(bytes), flat * 1e6, hier * 1e6, mpi * 1e6,
                  flat / hier, mpi / flat, mpi / hier);
    const double b = static_cast<double>(bytes);
    const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
    bench.csvRow("hierarchical", "accord_flat", b, count, flat);
    bench.csvRow("hierarchical", "accord_hierarchical", b, count, hier);
    bench.csvRow("hierarchical", "mpi_allreduce", b, count, mpi);
  }
  if (bench.rank == 0) {
    std::printf(
        "# speedup = flat / hier time; MPI/x = MPI time / x time: > 1 means x is "
        "faster than MPI_Allreduce\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace accord_bench

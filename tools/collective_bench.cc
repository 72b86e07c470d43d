// accord-bench: Accord's allreduce against raw MPI, in one run, on the same buffers.
//
//   mpirun -np 4 accord-bench [--min-bytes 4K] [--max-bytes 256M] [--iters 20] [--csv out.csv]
//   mpirun -np 1 accord-bench --device cuda   (GPU memory against raw NCCL: device_bench.cc)
//   mpirun -np 4 -H a:2,b:2 accord-bench --hierarchical   (hierarchical_bench.cc)
//   mpirun -np 2 accord-bench --scatter-gather   (scatter_gather_bench.cc)
//
// Three parts, each printed by rank 0 in the style of nccl-tests:
//  1. a size sweep (float32 Sum): Accord allreduce vs MPI_Allreduce on a duplicate of
//     MPI_COMM_WORLD; time, algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests'
//     definitions), and the busbw ratio Accord / MPI (> 1: Accord faster);
//  2. latency: a 4 KiB allreduce in steady state (the response cache hits every time);
//  3. the ResNet-50 gradient set: its 161 parameter tensors reduced as separate named
//     allreduces (Average, reverse order, as backward produces them) per step, against
//     the best of three raw MPI strategies.
// Every iteration is timed separately: each rank rewrites its buffer (as backward
// rewrites gradients before they are reduced), all ranks meet at a barrier, each times
// its call, and the iteration's time is the maximum over ranks; we report the median.
// Accord and MPI alternate, so each runs right after the other has pushed its working
// set out of the caches, as the application's compute does in training: neither gets
// a warm-cache advantage the other lacks. (Run back to back, a 1 MiB Accord allreduce
// took 118 us here; right after an MPI_Allreduce of the same buffer, 149-175 us, and
// MPI_Allreduce after MPI_Allreduce was slowed alike.)
#include "bench_common.h"
#include "cli_checks.h"
#include "resnet50_params.h"

#include <accord/accord.h>

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace {

using accord_bench::Bench;
using accord_bench::floatView;
using accord_bench::median;
using accord_bench::Options;
using accord_bench::resnet50Params;
using accord_bench::timePair;

void accordAllreduce(float* data, std::int64_t count, const std::string& name) {
  accord::AllreduceOptions options;
  options.name = name;
  accord::allreduce_async(floatView(data, count), options).wait();
}

// Before timing a size: every rank contributes rank + 1, the sum is n(n+1)/2.
void checkSum(const Bench& bench, float* data, std::int64_t count, const std::string& name) {
  if (!accord_bench::checkedSum(bench, data, count, [&] { accordAllreduce(data, count, name); }))
    MPI_Abort(MPI_COMM_WORLD, 3);
}

void sweep(const Bench& bench, const Options& opt, float* buffer) {
  if (bench.rank == 0) {
    std::printf("#\n# allreduce sweep: float32, sum, %d ranks; median of %d iterations (%d warm-up)\n",
                bench.size, opt.iters, opt.warmup);
    std::printf("# ratio = Accord busbw / MPI busbw (= MPI time / Accord time): > 1 means Accord is faster\n");
    std::printf("#%11s %11s  %10s %8s %8s  %10s %8s %8s  %6s\n", "", "", "accord", "", "",
                "MPI_Allreduce", "", "", "");
    std::printf("#%11s %11s  %10s %8s %8s  %10s %8s %8s  %6s\n", "size", "count", "time",
                "algbw", "busbw", "time", "algbw", "busbw", "ratio");
    std::printf("#%11s %11s  %10s %8s %8s  %10s %8s %8s  %6s\n", "(B)", "(elements)", "(us)",
                "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }
  for (std::uint64_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 2) {
    const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
    const std::string name = "bench.sweep." + std::to_string(bytes);
    checkSum(bench, buffer, count, name);
    const auto [ta, tm] = timePair(
        bench, opt.warmup, opt.iters, [&] { accordAllreduce(buffer, count, name); },
        [&] {
          MPI_Allreduce(MPI_IN_PLACE, buffer, static_cast<int>(count), MPI_FLOAT, MPI_SUM, bench.comm);
        },
        [&] { std::memset(buffer, 0, bytes); });
    const double b = static_cast<double>(bytes);
    if (bench.rank == 0) {
      std::printf(" %11llu %11lld  %10.1f %8.2f %8.2f  %10.1f %8.2f %8.2f  %6.2f\n",
                  static_cast<unsigned long long>(bytes), static_cast<long long>(count), ta * 1e6,
                  b / ta / 1e9, b / ta / 1e9 * bench.busFactor(), tm * 1e6, b / tm / 1e9,
                  b / tm / 1e9 * bench.busFactor(), tm / ta);
      std::fflush(stdout);
    }
    bench.csvRow("sweep", "accord", b, count, ta);
    bench.csvRow("sweep", "mpi_allreduce", b, count, tm);
    if (bytes > opt.max_bytes / 2) break;  // no overflow past 2^63
  }
}

void latency(const Bench& bench, const Options& opt, float* buffer) {
  const std::int64_t count = 1024;  // 4 KiB
  checkSum(bench, buffer, count, "bench.latency");
  const auto [ta, tm] = timePair(
      bench, std::max(10, opt.latency_iters / 10), opt.latency_iters,
      [&] { accordAllreduce(buffer, count, "bench.latency"); },
      [&] { MPI_Allreduce(MPI_IN_PLACE, buffer, 1024, MPI_FLOAT, MPI_SUM, bench.comm); },
      [&] { std::memset(buffer, 0, count * sizeof(float)); });
  if (bench.rank == 0) {
    std::printf("#\n# latency: 4 KiB float32 allreduce, steady state (same name every time: cache hit),"
                " median of %d\n", opt.latency_iters);
    std::printf("  latency  accord %.1f us   MPI_Allreduce %.1f us   (accord - MPI = %+.1f us)\n",
                ta * 1e6, tm * 1e6, (ta - tm) * 1e6);
    std::fflush(stdout);
  }
  bench.csvRow("latency", "accord", 4096, count, ta);
  bench.csvRow("latency", "mpi_allreduce", 4096, count, tm);
}

void resnet50(const Bench& bench, const Options& opt) {
  const auto params = resnet50Params();
  std::vector<std::int64_t> offset;
  std::int64_t total = 0;
  for (const auto& p : params) {
    offset.push_back(total);
    total += p.numel();
  }
  if (params.size() != 161 || total != 25'557'032) {
    std::fprintf(stderr, "accord-bench: ResNet-50 parameter list is wrong: %zu tensors, %lld values\n",
                 params.size(), static_cast<long long>(total));
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  // One concatenated gradient buffer; every strategy works on it (or slices of it).
  std::vector<float> grads(static_cast<std::size_t>(total), 0.0f);
  const int n = static_cast<int>(params.size());
  auto slice = [&](int i) { return grads.data() + offset[static_cast<std::size_t>(i)]; };
  auto count = [&](int i) { return static_cast<int>(params[static_cast<std::size_t>(i)].numel()); };

  std::vector<std::pair<std::string, std::function<void()>>> variants;
  auto accordStep = [&](accord::ReduceOp op, const char* prefix) {
    std::vector<accord::Handle> handles;
    handles.reserve(params.size());
    for (int i = n - 1; i >= 0; --i) {
      accord::AllreduceOptions options;
      options.name = std::string(prefix) + params[static_cast<std::size_t>(i)].name;
      options.op = op;
      handles.push_back(accord::allreduce_async(floatView(slice(i), count(i)), options));
    }
    for (auto& h : handles) h.wait();
  };
  // Sum is the like-for-like comparison with raw MPI; Average, what training uses,
  // divides in the pass that adds each block's last contribution (no pass of its own),
  // so the two lines differ only by that in-cache multiply or divide.
  variants.emplace_back("accord: 161 named allreduce_async (Sum, reverse order), wait all",
                        [&] { accordStep(accord::ReduceOp::Sum, "grad.sum."); });
  if (opt.resnet_accord_only) {
    // Every step is Accord's alone, as in training: what ACCORD_AUTOTUNE measures.
    const int warmup = std::max(opt.resnet_warmup, 0);
    std::vector<double> times;
    for (int step = 0; step < warmup + opt.resnet_steps; ++step) {
      const double t =
          bench.timeOnce(variants[0].second, [&] { std::fill(grads.begin(), grads.end(), 0.0f); });
      if (step >= warmup) times.push_back(t);
    }
    const double med = median(times);
    if (bench.rank == 0) {
      std::printf(
          "# ResNet-50 gradient set, Accord only: %d ranks, median of %d steps after %d\n"
          "  resnet50  accord_sum %.2f ms\n",
          bench.size, opt.resnet_steps, warmup, med * 1e3);
      std::fflush(stdout);
    }
    bench.csvRow("resnet50", "accord_sum", static_cast<double>(total) * sizeof(float), total, med);
    return;
  }
  variants.emplace_back(std::string("accord: the same with Average"), [&] {
    accordStep(accord::ReduceOp::Average, "grad.avg.");
  });
  variants.emplace_back("mpi (a): 161 blocking MPI_Allreduce, reverse order", [&] {
    for (int i = n - 1; i >= 0; --i)
      MPI_Allreduce(MPI_IN_PLACE, slice(i), count(i), MPI_FLOAT, MPI_SUM, bench.comm);
  });
  variants.emplace_back("mpi (b): 161 MPI_Iallreduce + MPI_Waitall", [&] {
    std::vector<MPI_Request> requests(params.size());
    for (int i = n - 1; i >= 0; --i)
      MPI_Iallreduce(MPI_IN_PLACE, slice(i), count(i), MPI_FLOAT, MPI_SUM, bench.comm,
                     &requests[static_cast<std::size_t>(i)]);
    MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE);
  });
  variants.emplace_back("mpi (c): 1 MPI_Allreduce of the concatenated buffer", [&] {
    MPI_Allreduce(MPI_IN_PLACE, grads.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM, bench.comm);
  });

  // Round-robin over the variants, step by step, for the same reason as timePair.
  const int warmup = opt.resnet_warmup >= 0 ? opt.resnet_warmup : opt.quick ? 1 : 2;
  std::vector<std::vector<double>> times(variants.size());
  for (int step = 0; step < warmup + opt.resnet_steps; ++step)
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const double t = bench.timeOnce(variants[v].second,
                                      [&] { std::fill(grads.begin(), grads.end(), 0.0f); });
      if (step >= warmup) times[v].push_back(t);
    }

  const double bytes = static_cast<double>(total) * sizeof(float);
  std::vector<double> med;
  for (auto& t : times) med.push_back(median(t));
  constexpr std::size_t kFirstRaw = 2;
  std::size_t best = kFirstRaw;
  for (std::size_t v = kFirstRaw + 1; v < variants.size(); ++v)
    if (med[v] < med[best]) best = v;
  if (bench.rank == 0) {
    std::printf("#\n# ResNet-50 gradient set: %d tensors, %lld float32 values (%.1f MiB) per step, "
                "%d ranks; median of %d steps\n", n, static_cast<long long>(total), bytes / (1 << 20),
                bench.size, opt.resnet_steps);
    std::printf("#%-72s %10s %8s %8s\n", " variant", "time (ms)", "algbw", "busbw");
    for (std::size_t v = 0; v < variants.size(); ++v)
      std::printf("  %-71s %10.2f %8.2f %8.2f\n", variants[v].first.c_str(), med[v] * 1e3,
                  bytes / med[v] / 1e9, bytes / med[v] / 1e9 * bench.busFactor());
    std::printf("  best raw MPI: %s\n", variants[best].first.substr(0, 7).c_str());
    if (bench.size == 1)  // MPI moves nothing on one rank: a ratio to ~0 says nothing
      std::printf(
          "  resnet50  one rank: raw MPI has nothing to exchange; Accord's bookkeeping "
          "%.3f ms (Sum) / %.3f ms (Average) per step, %.1f us per tensor\n",
          med[0] * 1e3, med[1] * 1e3, med[0] * 1e6 / params.size());
    else
      std::printf(
          "  resnet50  Accord/best time ratio %.3f (Sum)  %.3f (Average)  (< 1 means "
          "Accord is faster)\n",
          med[0] / med[best], med[1] / med[best]);
    std::fflush(stdout);
  }
  const char* keys[] = {"accord_sum", "accord_average", "mpi_a_blocking", "mpi_b_iallreduce",
                        "mpi_c_concatenated"};
  static_assert(std::size(keys) == 5);
  for (std::size_t v = 0; v < variants.size(); ++v)
    bench.csvRow("resnet50", keys[v], bytes, total, med[v]);
}

int run(const Options& opt) {
  Bench bench;
  MPI_Comm_dup(MPI_COMM_WORLD, &bench.comm);
  MPI_Comm_rank(bench.comm, &bench.rank);
  MPI_Comm_size(bench.comm, &bench.size);
  int csv_ok = 1;
  if (!opt.csv.empty() && bench.rank == 0) {
    bench.csv = std::fopen(opt.csv.c_str(), "w");
    if (!bench.csv) {
      std::fprintf(stderr, "accord-bench: --csv %s cannot be written: %s\n", opt.csv.c_str(),
                   std::strerror(errno));
      csv_ok = 0;
    } else {
      std::fprintf(bench.csv, "section,variant,bytes,count,ranks,time_us,algbw_GBps,busbw_GBps\n");
    }
  }
  // Every rank stops with rank 0, with an exit status rather than an abort's noise.
  MPI_Bcast(&csv_ok, 1, MPI_INT, 0, bench.comm);
  if (!csv_ok) {
    MPI_Comm_free(&bench.comm);
    return 2;
  }
  if (bench.rank == 0 && opt.device == "cpu" && !opt.scatter_gather) {
    std::printf("# accord-bench: %d ranks; Accord allreduce vs raw MPI on a duplicate of "
                "MPI_COMM_WORLD\n# algbw = bytes / time; busbw = algbw * 2(n-1)/n; time = max over "
                "ranks, median over iterations\n", bench.size);
  }
  if (opt.device == "cuda") {
    const int rc = accord_bench::runDeviceBench(bench, opt);
    if (bench.csv) std::fclose(bench.csv);
    MPI_Comm_free(&bench.comm);
    return rc;
  }
  // One buffer for the sweep, 64-byte aligned like a framework's tensors.
  const std::size_t floats = std::max<std::uint64_t>(opt.max_bytes, 4096) / sizeof(float);
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)), &std::free);
  int rc = 0;
  if (opt.hierarchical) {
    rc = accord_bench::runHierarchicalBench(bench, opt, buffer.get());
  } else if (opt.scatter_gather) {
    rc = accord_bench::runScatterGatherBench(bench, opt);
  } else {
    if (!opt.resnet_only) {
      sweep(bench, opt, buffer.get());
      latency(bench, opt, buffer.get());
    }
    resnet50(bench, opt);
  }
  if (bench.csv) std::fclose(bench.csv);
  MPI_Comm_free(&bench.comm);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"accord-bench: Accord's allreduce against raw MPI_Allreduce, run under mpirun, e.g.\n"
               "  mpirun -np 4 accord-bench --max-bytes 64M --csv bench.csv"};
  // Counts reach MPI as int: 2^31 - 1 floats at most.
  const std::uint64_t max_bytes = static_cast<std::uint64_t>(INT32_MAX) * sizeof(float);
  app.add_option("--min-bytes", opt.min_bytes, "Smallest message of the sweep (e.g. 4K)")
      ->transform(accord_tools::byteSize(sizeof(float), max_bytes))->capture_default_str();
  app.add_option("--max-bytes", opt.max_bytes, "Largest message of the sweep (e.g. 256M)")
      ->transform(accord_tools::byteSize(sizeof(float), max_bytes))->capture_default_str();
  // Each timed iteration keeps its time (a double per rank): a million is 8 MB.
  app.add_option("--iters", opt.iters, "Timed iterations per size")
      ->check(accord_tools::integerIn(1, 1000000))->capture_default_str();
  app.add_option("--warmup", opt.warmup, "Untimed iterations before those")
      ->check(accord_tools::integerIn(0, 1000000))->capture_default_str();
  app.add_option("--latency-iters", opt.latency_iters, "Timed iterations of the 4 KiB latency case")
      ->check(accord_tools::integerIn(1, 1000000))->capture_default_str();
  app.add_option("--resnet-steps", opt.resnet_steps, "Timed steps of the ResNet-50 gradient set")
      ->check(accord_tools::integerIn(1, 1000000))->capture_default_str();
  app.add_option("--resnet-warmup", opt.resnet_warmup,
                 "Untimed steps of the ResNet-50 gradient set before those (default 2, 1 with "
                 "--quick; 0 with --resnet-accord-only; with ACCORD_AUTOTUNE, give enough for "
                 "the search to settle)")
      ->check(accord_tools::integerIn(0, 1000000));
  app.add_flag("--resnet-only", opt.resnet_only, "Run the ResNet-50 gradient set only");
  app.add_flag("--resnet-accord-only", opt.resnet_accord_only,
               "With --resnet-only: time Accord's Sum steps alone, nothing between them (how "
               "tools/autotune_bench.py measures ACCORD_AUTOTUNE)");
  app.add_flag("--average-only", opt.average_only,
               "With --device cuda: only Average on NCCL, raw ncclAvg against Accord's, in time "
               "and error (sizes up to --max-bytes, at most 64M)");
  app.add_option("--csv", opt.csv, "Also write every measurement to this CSV file (rank 0)")
      ->check(accord_tools::nonEmptyPath());
  app.add_flag("--quick", opt.quick, "A short run (4 KiB..1 MiB, few iterations): a smoke test");
  app.add_option("--device", opt.device,
                 "cpu: host memory against raw MPI; cuda: GPU memory (one GPU per rank) "
                 "against raw NCCL")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--hierarchical", opt.hierarchical,
               "Across hosts: ACCORD_HIERARCHICAL_ALLREDUCE=1 against =0 and MPI_Allreduce in "
               "one run (sizes 64K..64M unless given; Accord restarts per setting)");
  app.add_flag("--scatter-gather", opt.scatter_gather,
               "On one host: reducescatter and allgather with ACCORD_SHARED_MEMORY=1 against =0 "
               "and against raw MPI's, beside allreduce, in one run (sizes 4K..64M unless "
               "given, then --tensors tensors sharing --max-bytes; Accord restarts per "
               "setting)");
  app.add_option("--tensors", opt.tensors, "--scatter-gather: tensors in the last row's set")
      ->check(accord_tools::integerIn(1, 1000000))
      ->capture_default_str();
  app.add_option("--repeats", opt.repeats,
                 "--hierarchical, --scatter-gather: alternating restarts per setting")
      ->check(accord_tools::integerIn(1, 1000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (opt.average_only && opt.device != "cuda") {
    std::fprintf(stderr, "accord-bench: --average-only measures NCCL: it needs --device cuda\n");
    return 2;
  }
  if (opt.hierarchical) {
    if (app.count("--min-bytes") == 0) opt.min_bytes = 64 << 10;
    if (app.count("--max-bytes") == 0) opt.max_bytes = 64 << 20;
  }
  if (opt.scatter_gather && app.count("--max-bytes") == 0) opt.max_bytes = 64 << 20;
  if (opt.scatter_gather && (opt.hierarchical || opt.device != "cpu")) {
    std::fprintf(stderr, "accord-bench: --scatter-gather is a run of its own, on host memory "
                         "(no --hierarchical, no --device cuda)\n");
    return 2;
  }
  if (opt.quick) {
    opt.min_bytes = 4 << 10;
    opt.max_bytes = 1 << 20;
    opt.iters = 3;
    opt.warmup = 1;
    opt.latency_iters = 20;
    opt.resnet_steps = 2;
  }
  // Each size is in range (checked as parsed); here, their order, which --hierarchical's
  // default --min-bytes can also break.
  if (opt.max_bytes < opt.min_bytes) {
    std::fprintf(stderr, "accord-bench: --max-bytes %llu is below --min-bytes %llu\n",
                 static_cast<unsigned long long>(opt.max_bytes),
                 static_cast<unsigned long long>(opt.min_bytes));
    return 2;
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "accord-bench: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rc = 0;
  try {
    // --hierarchical and --scatter-gather start and stop Accord themselves, once per
    // setting.
    const bool restarts = opt.hierarchical || opt.scatter_gather;
    if (!restarts) accord::init();
    rc = run(opt);
    if (!restarts) accord::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}

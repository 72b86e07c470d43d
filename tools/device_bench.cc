// accord-bench --device cuda: Accord's allreduce of GPU memory against raw NCCL, in one
// run, on the same buffers.
//
//   mpirun -np 1 accord-bench --device cuda --csv cuda.csv
//
// The host benchmark's three parts on device memory (one GPU per rank: local rank modulo
// the GPUs of the host):
//  1. the size sweep (float32 Sum): Accord vs one ncclAllReduce on a communicator of
//     the benchmark's own;
//  2. latency: a 4 KiB allreduce in steady state (response cache hit), Accord vs NCCL;
//  3. the ResNet-50 gradient set (161 tensors, 97.5 MiB in float32) in float32 and
//     bfloat16: 161 named Accord allreduces (Sum, and Average) against 161
//     ncclAllReduce calls and against one ncclAllReduce of the concatenated buffer;
//  4. Average: raw ncclAvg against Accord's, in time and in error (averageStudy, in
//     device_average_bench.cc).
// Then, on rank 0, what each CUDA call that a device tensor's submission makes costs.
// Every call is timed to its completion as the host sees it: Accord's wait() returns
// when the runtime's finalizer has seen the collective's event; NCCL's calls are
// followed by cudaStreamSynchronize. Inputs are rewritten (cudaMemsetAsync, then a
// synchronize) before every timed call, on the stream that Accord is told the tensors
// are ready on. Accord and NCCL alternate; medians as in the host benchmark.
#include "device_bench.h"
#include "resnet50_params.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace accord_bench {

namespace {

// Before timing a size: every rank contributes rank + 1, the sum is n(n+1)/2.
void checkSum(const Gpu& gpu, float* data, std::int64_t count, const std::string& name) {
  const Bench& bench = gpu.bench;
  std::vector<float> host(static_cast<std::size_t>(count), static_cast<float>(bench.rank + 1));
  cudaOk(bench, cudaMemcpy(data, host.data(), count * sizeof(float), cudaMemcpyHostToDevice),
         "cudaMemcpy");
  gpu.accordAllreduce(data, count, name);
  cudaOk(bench, cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost),
         "cudaMemcpy");
  const float want = static_cast<float>(bench.size * (bench.size + 1) / 2);
  if (host.front() != want || host.back() != want)
    fail(bench, "wrong allreduce result for " + name + ": " + std::to_string(host.front()) + "/" +
                    std::to_string(host.back()) + ", expected " + std::to_string(want));
  gpu.zero(data, count * sizeof(float));
}

void sweep(const Gpu& gpu, const Options& opt, float* buffer) {
  const Bench& bench = gpu.bench;
  if (bench.rank == 0) {
    std::printf(
        "#\n# allreduce sweep on %s: float32, sum, %d ranks; median of %d iterations "
        "(%d warm-up)\n# ratio = NCCL time / Accord time: > 1 means Accord is faster\n",
        gpu.name.c_str(), bench.size, opt.iters, opt.warmup);
    std::printf("#%11s %11s  %10s %8s  %10s %8s  %6s\n", "size", "count", "accord", "busbw",
                "ncclAllRed", "busbw", "ratio");
    std::printf("#%11s %11s  %10s %8s  %10s %8s  %6s\n", "(B)", "(elements)", "(us)", "(GB/s)",
                "(us)", "(GB/s)", "");
  }
  for (std::uint64_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 2) {
    const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
    const std::string name = "bench.cuda.sweep." + std::to_string(bytes);
    checkSum(gpu, buffer, count, name);
    const auto [ta, tn] = timePair(
        bench, opt.warmup, opt.iters, [&] { gpu.accordAllreduce(buffer, count, name); },
        [&] { gpu.rawAllreduce(buffer, count, ncclFloat32); }, [&] { gpu.zero(buffer, bytes); });
    const double b = static_cast<double>(bytes);
    if (bench.rank == 0) {
      std::printf(" %11llu %11lld  %10.1f %8.2f  %10.1f %8.2f  %6.2f\n",
                  static_cast<unsigned long long>(bytes), static_cast<long long>(count), ta * 1e6,
                  b / ta / 1e9 * bench.busFactor(), tn * 1e6, b / tn / 1e9 * bench.busFactor(),
                  tn / ta);
      std::fflush(stdout);
    }
    bench.csvRow("sweep_cuda", "accord", b, count, ta);
    bench.csvRow("sweep_cuda", "nccl_allreduce", b, count, tn);
    if (bytes > opt.max_bytes / 2) break;
  }
}

void latency(const Gpu& gpu, const Options& opt, float* buffer) {
  const Bench& bench = gpu.bench;
  const std::int64_t count = 1024;  // 4 KiB
  checkSum(gpu, buffer, count, "bench.cuda.latency");
  const auto [ta, tn] = timePair(
      bench, std::max(10, opt.latency_iters / 10), opt.latency_iters,
      [&] { gpu.accordAllreduce(buffer, count, "bench.cuda.latency"); },
      [&] { gpu.rawAllreduce(buffer, count, ncclFloat32); },
      [&] { gpu.zero(buffer, count * sizeof(float)); });
  if (bench.rank == 0) {
    std::printf("#\n# latency: 4 KiB float32 allreduce on %s, steady state, median of %d\n",
                gpu.name.c_str(), opt.latency_iters);
    std::printf(
        "  latency_cuda  accord %.1f us   ncclAllReduce %.1f us   (accord - NCCL = %+.1f "
        "us; target <= +10 us)\n",
        ta * 1e6, tn * 1e6, (ta - tn) * 1e6);
    std::fflush(stdout);
  }
  bench.csvRow("latency_cuda", "accord", 4096, count, ta);
  bench.csvRow("latency_cuda", "nccl_allreduce", 4096, count, tn);
}

void resnet50(const Gpu& gpu, const Options& opt, accord::DType dtype) {
  const Bench& bench = gpu.bench;
  const auto params = resnet50Params();
  std::vector<std::int64_t> offset;
  std::int64_t total = 0;
  for (const auto& p : params) {
    offset.push_back(total);
    total += p.numel();
  }
  const std::size_t elem = accord::dtype_size(dtype);
  const ncclDataType_t type = dtype == accord::DType::BFloat16 ? ncclBfloat16 : ncclFloat32;
  const std::string tag = accord::dtype_name(dtype);
  const std::size_t bytes = static_cast<std::size_t>(total) * elem;
  char* grads = static_cast<char*>(gpu.alloc(bytes));
  const int n = static_cast<int>(params.size());
  auto slice = [&](int i) { return grads + offset[static_cast<std::size_t>(i)] * elem; };
  auto count = [&](int i) { return params[static_cast<std::size_t>(i)].numel(); };

  // How much of a step the application's thread spends submitting (the checks and the
  // ready marker of each device tensor), apart from waiting for the background thread.
  std::vector<double> submitting;
  auto accordStep = [&](accord::ReduceOp op, const std::string& prefix) {
    std::vector<accord::Handle> handles;
    handles.reserve(params.size());
    const auto start = std::chrono::steady_clock::now();
    for (int i = n - 1; i >= 0; --i)
      handles.push_back(gpu.accordAsync(slice(i), dtype, count(i),
                                        prefix + params[static_cast<std::size_t>(i)].name, op));
    if (op == accord::ReduceOp::Sum)
      submitting.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    for (auto& h : handles) h.wait();
  };
  std::vector<std::pair<std::string, std::function<void()>>> variants;
  variants.emplace_back("accord: 161 named allreduce_async (Sum, reverse order), wait all",
                        [&] { accordStep(accord::ReduceOp::Sum, "grad.cuda." + tag + ".sum."); });
  variants.emplace_back("accord: the same with Average", [&] {
    accordStep(accord::ReduceOp::Average, "grad.cuda." + tag + ".avg.");
  });
  variants.emplace_back("nccl (a): 161 ncclAllReduce, reverse order, one synchronize", [&] {
    for (int i = n - 1; i >= 0; --i)
      ncclOk(bench,
             ncclAllReduce(slice(i), slice(i), count(i), type, ncclSum, gpu.comm, gpu.stream),
             "ncclAllReduce");
    cudaOk(bench, cudaStreamSynchronize(gpu.stream), "cudaStreamSynchronize");
  });
  variants.emplace_back("nccl (b): 1 ncclAllReduce of the concatenated buffer",
                        [&] { gpu.rawAllreduce(grads, static_cast<std::size_t>(total), type); });

  const int warmup = opt.quick ? 1 : 2;
  std::vector<std::vector<double>> times(variants.size());
  for (int step = 0; step < warmup + opt.resnet_steps; ++step)
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const double t = bench.timeOnce(variants[v].second, [&] { gpu.zero(grads, bytes); });
      if (step >= warmup) times[v].push_back(t);
    }
  std::vector<double> med;
  for (auto& t : times) med.push_back(median(t));
  submitting.erase(submitting.begin(), submitting.begin() + warmup);
  const double submit = median(submitting);
  constexpr std::size_t kFirstRaw = 2;
  const std::size_t best = med[kFirstRaw] <= med[kFirstRaw + 1] ? kFirstRaw : kFirstRaw + 1;
  if (bench.rank == 0) {
    std::printf(
        "#\n# ResNet-50 gradient set on %s: %d tensors, %lld %s values (%.1f MiB) per "
        "step, %d ranks; median of %d steps\n",
        gpu.name.c_str(), n, static_cast<long long>(total), tag.c_str(), bytes / double(1 << 20),
        bench.size, opt.resnet_steps);
    std::printf("#%-72s %10s %8s\n", " variant", "time (ms)", "busbw");
    for (std::size_t v = 0; v < variants.size(); ++v)
      std::printf("  %-71s %10.2f %8.2f\n", variants[v].first.c_str(), med[v] * 1e3,
                  bytes / med[v] / 1e9 * bench.busFactor());
    std::printf("  of Accord's Sum step, submitting the %d tensors took %.3f ms (%.1f us each)\n",
                n, submit * 1e3, submit * 1e6 / n);
    if (bench.size == 1)  // NCCL moves nothing on one rank: a ratio to ~0 says nothing
      std::printf(
          "  resnet50_cuda %s  one rank: raw NCCL has nothing to exchange; Accord's "
          "bookkeeping %.3f ms (Sum) / %.3f ms (Average) per step, %.1f us per tensor\n",
          tag.c_str(), med[0] * 1e3, med[1] * 1e3, med[0] * 1e6 / n);
    else
      std::printf(
          "  resnet50_cuda %s  Accord/best raw NCCL time ratio %.3f (Sum)  %.3f (Average)  "
          "(best raw: %s; target <= 1.1)\n",
          tag.c_str(), med[0] / med[best], med[1] / med[best],
          variants[best].first.substr(0, 8).c_str());
    std::fflush(stdout);
  }
  const char* keys[] = {"accord_sum", "accord_average", "nccl_a_161_calls", "nccl_b_concatenated"};
  for (std::size_t v = 0; v < variants.size(); ++v)
    bench.csvRow(("resnet50_cuda_" + tag).c_str(), keys[v], static_cast<double>(bytes), total,
                 med[v]);
  cudaFree(grads);
}

// What each CUDA call that Accord's submission of a device tensor makes costs here
// (ops/cuda/device_support.cc: the device and pointer checks, the idle-stream test, the
// ready event; then the executor's event query and stream wait), so that the submission
// share of the ResNet-50 steps can be laid to its calls. A "busy" stream runs a host
// function that holds it until released (or for 5 s at most); the calls that queue work
// on it queue 100 at a time, well within what a stream takes before the host blocks.
// Rank 0 only: per-process costs.
struct Held {
  std::atomic<bool> released{false};
  static void hold(void* self) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!static_cast<Held*>(self)->released.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  }
};

void submissionCalls(const Gpu& gpu, float* buffer) {
  const Bench& bench = gpu.bench;
  if (bench.rank != 0) return;
  constexpr int kRepeats = 5;
  cudaEvent_t event = nullptr;
  cudaOk(bench, cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  // Microseconds per call: the median of kRepeats runs of `calls` calls, each run on a
  // stream held busy meanwhile where `busy`.
  auto perCall = [&](const std::function<void()>& call, bool busy, int calls = 1000) {
    std::vector<double> runs;
    for (int r = 0; r < kRepeats; ++r) {
      Held held;
      if (busy) {
        cudaOk(bench, cudaLaunchHostFunc(gpu.stream, Held::hold, &held), "cudaLaunchHostFunc");
        cudaOk(bench, cudaEventRecord(event, gpu.stream), "cudaEventRecord");
      }
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) call();
      const auto end = std::chrono::steady_clock::now();
      held.released = true;
      cudaOk(bench, cudaStreamSynchronize(gpu.stream), "cudaStreamSynchronize");
      runs.push_back(std::chrono::duration<double, std::micro>(end - start).count() / calls);
    }
    cudaGetLastError();  // a busy stream's query leaves cudaErrorNotReady behind
    return median(runs);
  };
  int count = 0, device = 0;
  cudaPointerAttributes attributes{};
  cudaStreamCaptureStatus capture{};
  const std::vector<std::tuple<std::string, bool, int, std::function<void()>>> calls = {
      {"cudaGetDeviceCount", false, 1000, [&] { cudaGetDeviceCount(&count); }},
      {"cudaGetDevice", false, 1000, [&] { cudaGetDevice(&device); }},
      {"cudaPointerGetAttributes", false, 1000,
       [&] { cudaPointerGetAttributes(&attributes, buffer); }},
      {"cudaStreamIsCapturing", false, 1000, [&] { cudaStreamIsCapturing(gpu.stream, &capture); }},
      {"cudaStreamGetDevice", false, 1000, [&] { cudaStreamGetDevice(gpu.stream, &device); }},
      {"cudaStreamQuery (idle stream)", false, 1000, [&] { cudaStreamQuery(gpu.stream); }},
      {"cudaStreamQuery (busy stream)", true, 1000, [&] { cudaStreamQuery(gpu.stream); }},
      {"cudaEventRecord (idle stream)", false, 100, [&] { cudaEventRecord(event, gpu.stream); }},
      {"cudaEventRecord (busy stream)", true, 100, [&] { cudaEventRecord(event, gpu.stream); }},
      {"cudaEventQuery (completed)", false, 1000, [&] { cudaEventQuery(event); }},
      {"cudaEventQuery (pending)", true, 1000, [&] { cudaEventQuery(event); }},
      {"cudaStreamWaitEvent (pending)", true, 100,
       [&] { cudaStreamWaitEvent(gpu.stream, event, 0); }},
  };
  std::printf("#\n# the CUDA calls of a device submission on %s: us per call, median of %d runs\n",
              gpu.name.c_str(), kRepeats);
  for (const auto& [name, busy, n, call] : calls) {
    const double us = perCall(call, busy, n);
    std::printf("  submission_call  %-32s %8.3f us\n", name.c_str(), us);
    bench.csvRow("submission_call", name, 0, 1, us * 1e-6);
  }
  std::fflush(stdout);
  cudaEventDestroy(event);
}

}  // namespace

int runDeviceBench(const Bench& bench, const Options& opt) {
  Gpu gpu(bench);
  if (bench.rank == 0)
    std::printf(
        "# accord-bench --device cuda: %d ranks on %s; Accord allreduce vs raw NCCL\n"
        "# busbw = bytes / time * 2(n-1)/n; time = max over ranks, median over "
        "iterations\n",
        bench.size, gpu.name.c_str());
  if (opt.average_only) {
    averageStudy(gpu, opt);
    return 0;
  }
  const std::size_t bytes = std::max<std::uint64_t>(opt.max_bytes, 4096);
  auto* buffer = static_cast<float*>(gpu.alloc(bytes));
  sweep(gpu, opt, buffer);
  latency(gpu, opt, buffer);
  resnet50(gpu, opt, accord::DType::Float32);
  resnet50(gpu, opt, accord::DType::BFloat16);
  averageStudy(gpu, opt);
  submissionCalls(gpu, buffer);
  cudaFree(buffer);
  return 0;
}

}  // namespace accord_bench

// accord-bench --device cuda, part 4: Average on NCCL (see averageStudy below).
#include "device_bench.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace accord_bench {

// Average on NCCL, decided rather than left to the backend: raw ncclAvg (each input times
// 1/n, then the sum) against Accord's Average (ncclAvg where n is a power of two, else the
// sum divided once in Accord's scaling pass), in time beside their Sums and in error
// against the exactly rounded average, with Accord's host path as the reference for
// what the host gives. The inputs carry full mantissas (sin of the index), so every
// rounding shows; the ranks' sums differ in order between paths, which is not what this
// measures, so the error is against the exact quotient of the exact sum.
namespace average_study {

double input(int rank, std::int64_t i) {
  return std::sin(0.6180339887 * static_cast<double>(i) + 1.7 * rank) * 3.0;
}

// The float32 or bfloat16 bits of `v`, rounded to nearest even, as a 32-bit pattern.
std::uint32_t roundTo(accord::DType dtype, double v) {
  const float f = static_cast<float>(v);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  if (dtype == accord::DType::Float32) return bits;
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return rounded >> 16;
}

double toDouble(accord::DType dtype, std::uint32_t bits) {
  if (dtype == accord::DType::BFloat16) bits <<= 16;
  float f = 0;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Error {
  double differing = 0;  // share of elements that are not the exactly rounded average
  // The largest error in units of the last place of the largest input (|sum| can be far
  // below the inputs where they cancel, so the result's own last place says little).
  double max_units = 0;
};

// `got` (count elements of dtype) against the exactly rounded average of the ranks'
// inputs, over the first million elements at most (enough to see every rounding).
Error measure(accord::DType dtype, const std::vector<std::uint8_t>& got, std::int64_t count,
              int ranks) {
  count = std::min<std::int64_t>(count, 1 << 20);
  const int mantissa = dtype == accord::DType::Float32 ? 24 : 8;
  Error e;
  std::int64_t differing = 0;
  const std::size_t elem = accord::dtype_size(dtype);
  for (std::int64_t i = 0; i < count; ++i) {
    double sum = 0, largest = 0;
    for (int r = 0; r < ranks; ++r) {
      const double x = toDouble(dtype, roundTo(dtype, input(r, i)));
      sum += x;  // exact: a few values of 24 bits or fewer
      largest = std::max(largest, std::fabs(x));
    }
    std::uint32_t bits = 0;
    std::memcpy(&bits, got.data() + static_cast<std::size_t>(i) * elem, elem);
    if (bits != roundTo(dtype, sum / ranks)) ++differing;
    if (largest == 0) continue;
    const double unit = std::ldexp(1.0, std::ilogb(largest) - (mantissa - 1));
    e.max_units = std::max(e.max_units, std::fabs(toDouble(dtype, bits) - sum / ranks) / unit);
  }
  e.differing = static_cast<double>(differing) / static_cast<double>(std::max<std::int64_t>(count, 1));
  return e;
}

}  // namespace average_study

void averageStudy(const Gpu& gpu, const Options& opt) {
  using namespace average_study;
  const Bench& bench = gpu.bench;
  if (bench.rank == 0)
    std::printf(
        "#\n# Average on %d ranks, %s: raw ncclAvg vs Accord's Average (%s); us, median of "
        "%d: each beside its Sum, and Accord's Sum with a postscale (its scaling pass);\n"
        "# error against the exactly rounded average: share of elements off, and the "
        "largest error in units of the largest input's last place\n"
        "#%8s %9s  %9s %9s  %9s %9s %9s  %15s %15s %15s\n",
        bench.size, gpu.name.c_str(),
        (bench.size & (bench.size - 1)) == 0 ? "ncclAvg: a power of two"
                                             : "sum, then Accord's scaling pass",
        opt.iters, "dtype", "bytes", "ncclSum", "ncclAvg", "acc.Sum", "acc.Avg", "acc.Sum/3",
        "ncclAvg off,max", "GPU off,max", "host off,max");
  for (accord::DType dtype : {accord::DType::Float32, accord::DType::BFloat16}) {
    const std::size_t elem = accord::dtype_size(dtype);
    const ncclDataType_t type = dtype == accord::DType::Float32 ? ncclFloat32 : ncclBfloat16;
    for (std::uint64_t bytes : {std::uint64_t{64} << 10, std::uint64_t{4} << 20,
                                std::uint64_t{64} << 20}) {
      if (bytes > opt.max_bytes) break;
      const auto count = static_cast<std::int64_t>(bytes / elem);
      std::vector<std::uint8_t> mine(bytes), got(bytes);
      for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t bits = roundTo(dtype, input(bench.rank, i));
        std::memcpy(mine.data() + static_cast<std::size_t>(i) * elem, &bits, elem);
      }
      void* data = gpu.alloc(bytes);
      auto load = [&] {
        cudaOk(bench, cudaMemcpy(data, mine.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      };
      auto raw = [&](ncclRedOp_t op) {
        ncclOk(bench, ncclAllReduce(data, data, count, type, op, gpu.comm, gpu.stream),
               "ncclAllReduce");
        cudaOk(bench, cudaStreamSynchronize(gpu.stream), "cudaStreamSynchronize");
      };
      const std::string name = "bench.cuda.average." + std::string(accord::dtype_name(dtype)) +
                               "." + std::to_string(bytes);
      auto accord = [&](accord::ReduceOp op, const char* tag) {
        gpu.accordAsync(data, dtype, count, name + tag, op).wait();
      };
      const auto [t_sum, t_avg] = timePair(
          bench, opt.warmup, opt.iters, [&] { raw(ncclSum); }, [&] { raw(ncclAvg); }, load);
      const auto [a_sum, a_avg] = timePair(
          bench, opt.warmup, opt.iters, [&] { accord(accord::ReduceOp::Sum, ".sum"); },
          [&] { accord(accord::ReduceOp::Average, ".avg"); }, load);
      // The scaling pass that a sum divided afterwards adds, whatever the number of ranks.
      const auto [a_sum2, a_scaled] = timePair(
          bench, opt.warmup, opt.iters, [&] { accord(accord::ReduceOp::Sum, ".sum"); },
          [&] {
            accord::AllreduceOptions o;
            o.name = name + ".third";
            o.postscale = 1.0 / 3.0;
            o.stream = gpu.stream;
            accord::allreduce_async(gpu.view(data, dtype, count), o).wait();
          },
          load);
      (void)a_sum2;
      load();
      raw(ncclAvg);
      cudaOk(bench, cudaMemcpy(got.data(), data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      const Error nccl_error = measure(dtype, got, count, bench.size);
      load();
      accord(accord::ReduceOp::Average, ".avg");
      cudaOk(bench, cudaMemcpy(got.data(), data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      const Error device_error = measure(dtype, got, count, bench.size);
      got = mine;
      accord::AllreduceOptions host;
      host.name = name + ".host";
      host.op = accord::ReduceOp::Average;
      accord::allreduce_async({got.data(), dtype, {count}, {}}, host).wait();
      const Error host_error = measure(dtype, got, count, bench.size);
      cudaFree(data);
      if (bench.rank == 0) {
        std::printf("  %8s %9llu  %9.1f %9.1f  %9.1f %9.1f %9.1f  "
                    "%7.2f%% %6.2f %7.2f%% %6.2f %7.2f%% %6.2f\n",
                    accord::dtype_name(dtype), static_cast<unsigned long long>(bytes), t_sum * 1e6,
                    t_avg * 1e6, a_sum * 1e6, a_avg * 1e6, a_scaled * 1e6,
                    100 * nccl_error.differing, nccl_error.max_units, 100 * device_error.differing,
                    device_error.max_units, 100 * host_error.differing, host_error.max_units);
        std::fflush(stdout);
      }
      const std::string section = std::string("average_cuda_") + accord::dtype_name(dtype);
      bench.csvRow(section.c_str(), "nccl_sum", static_cast<double>(bytes), count, t_sum);
      bench.csvRow(section.c_str(), "nccl_avg", static_cast<double>(bytes), count, t_avg);
      bench.csvRow(section.c_str(), "accord_sum", static_cast<double>(bytes), count, a_sum);
      bench.csvRow(section.c_str(), "accord_average", static_cast<double>(bytes), count, a_avg);
      bench.csvRow(section.c_str(), "accord_sum_postscaled", static_cast<double>(bytes), count,
                   a_scaled);
    }
  }
}

}  // namespace accord_bench

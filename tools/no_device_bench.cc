// accord-bench built without the CUDA toolkit or NCCL: --device cuda says so.
#include "bench_common.h"

namespace accord_bench {

int runDeviceBench(const Bench& bench, const Options&) {
  if (bench.rank == 0)
    std::fprintf(stderr,
                 "accord-bench: --device cuda needs a build with the CUDA toolkit and NCCL\n");
  return 2;
}

}  // namespace accord_bench

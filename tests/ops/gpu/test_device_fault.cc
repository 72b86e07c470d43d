// A rank that fails in the middle of a large device allreduce through NCCL must not hold
// the others: every survivor's handle fails with a CommError that names the collective
// and the failed rank within ACCORD_STALL_SHUTDOWN_TIME + 1 s, the set's communicator is
// aborted, shutdown() returns and the process exits.
//
//   gpu_test_device_fault --fault freeze|kill|cuda [--mib N]
//
// The last rank is the victim. Once its own copy of the tensor has changed (the
// collective is under way: the tensor is N MiB, 1024 by default, of ones summed in
// place, and a probe on a stream of its own reads its first element), it
//   freeze: stops (SIGSTOP, as a debugger or a hung process would); NCCL sees nothing,
//           the survivors' finalizers time out; rank 0 kills it at the end;
//   kill:   dies (SIGKILL); NCCL sees its sockets close. Run it under
//           `ci/nccl-one-gpu.sh --child` with orte_abort_on_non_zero_status 0, so that
//           mpirun lets the survivors finish;
//   cuda:   runs a kernel that traps on a stream of its own, which loses its CUDA
//           context and with it the collective's kernels: its own handle fails with the
//           GPU's error, it tells the others at the next negotiation
//           round, and host collectives go on on every rank.
// NCCL itself does not say which rank broke a collective; the survivors' messages name
// it from what the runtime knows (runtime/peer_watch.h).
//
// Plain main, not Catch: after a freeze or a kill MPI cannot be finalized, so each rank
// reports with a marker line (DEVICE-FAULT-DETECTED by a survivor that saw everything it
// should, DEVICE-FAULT-VICTIM-OK by a victim of `cuda` whose own handle failed as it
// should) and exits 1; run_expect_abort.cmake counts the markers.
#include "fault_test.h"
#include "device_test.h"
#include "fault_kernels.h"

#include <accord/accord.h>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using accord_test::outcome;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string fault;
  std::size_t mib = 1024;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--fault") a.fault = argv[i + 1];
    else if (flag == "--mib") a.mib = static_cast<std::size_t>(std::atol(argv[i + 1]));
  }
  if ((a.fault != "freeze" && a.fault != "kill" && a.fault != "cuda") || a.mib == 0) {
    std::fprintf(stderr, "usage: %s --fault freeze|kill|cuda [--mib N (> 0)]\n", argv[0]);
    std::exit(2);
  }
  return a;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The message blames `rank`: a wait for it ("rank 2 did not ...", "ranks 0, 2 did not
// ...") or its own report ("rank 2 reported that its GPU failed"), wherever in the
// message that clause stands.
bool blames(const std::string& message, int rank) {
  static const std::regex clause(R"(ranks? ([0-9]+(, [0-9]+)*) (did not|reported))");
  for (auto it = std::sregex_iterator(message.begin(), message.end(), clause);
       it != std::sregex_iterator(); ++it) {
    const std::string list = (*it)[1].str();
    std::size_t at = 0;
    while (at < list.size()) {
      const std::size_t comma = list.find(',', at);
      if (std::atoi(list.substr(at, comma - at).c_str()) == rank) return true;
      if (comma == std::string::npos) break;
      at = comma + 2;
    }
  }
  return false;
}

// A host allreduce after the fault: "ok" or how it failed.
std::string hostAllreduce() {
  std::vector<float> x(16, 1.0f);
  accord::AllreduceOptions o;
  o.name = "fault.later.host";
  try {
    accord::allreduce_async({x.data(), accord::DType::Float32, {16}, {}}, o).wait();
    return x[0] == static_cast<float>(accord::size()) ? "ok" : "wrong result";
  } catch (const accord::CommError&) {
    return "CommError";
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "[rank %d] %s: %s\n", accord::rank(), what, cudaGetErrorString(status));
  std::_Exit(1);
}

// The victim's wait for the collective to be under way: its first element has changed,
// read on `probe_stream`, a stream of its own.
void awaitStart(const float* tensor, cudaStream_t probe_stream) {
  float* probe = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&probe), sizeof(float)), "cudaMallocHost");
  const auto t0 = Clock::now();
  for (;;) {
    check(cudaMemcpyAsync(probe, tensor, sizeof(float), cudaMemcpyDeviceToHost, probe_stream),
          "probe");
    check(cudaStreamSynchronize(probe_stream), "probe sync");
    if (*probe != 1.0f) return;
    if (since(t0) > 60) {
      std::fprintf(stderr, "[victim] the collective did not start within 60 s\n");
      std::_Exit(1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  if (const int status = accord_gpu::selectGpu(); status != 0)
    return status == 77 ? accord_gpu::skippedExit() : status;
  accord::init();
  const int me = accord::rank(), n = accord::size();
  const int victim = n - 1;
  if (n < 2) {
    std::printf("skipped: a fault needs 2 or more ranks\n");
    accord::shutdown();
    return 77;
  }
  const accord_test::FaultSetup setup = accord_test::faultSetup(victim);
  const double scale = setup.scale, limit = setup.limit;
  const std::vector<int>& pids = setup.pids;
  MPI_Comm survivors = setup.survivors;

  const std::size_t count = args.mib << 18;  // floats
  float* tensor = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&tensor), count * sizeof(float)), "cudaMalloc");
  check(accord_gpu::fill(tensor, count, 1.0f, nullptr), "fill");
  check(accord_gpu::prepareBreak(), "prepareBreak");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const accord::Device device = accord_gpu::accordDevice();
  {  // the communicator is created and connected before the fault
    accord::AllreduceOptions o;
    o.name = "fault.warm_up";
    accord::allreduce_async({tensor, accord::DType::Float32, {1024}, device}, o).wait();
    check(accord_gpu::fill(tensor, 1024, 1.0f, nullptr), "fill");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  accord::AllreduceOptions o;
  o.name = "fault.device";
  const auto t0 = Clock::now();
  accord::Handle h = accord::allreduce_async(
      {tensor, accord::DType::Float32, {static_cast<std::int64_t>(count)}, device}, o);
  if (me == victim) {
    cudaStream_t probe_stream = nullptr;
    check(cudaStreamCreateWithFlags(&probe_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    awaitStart(tensor, probe_stream);
    std::fprintf(stderr, "[victim] the collective is under way after %.3f s: %s\n", since(t0),
                 args.fault.c_str());
    std::fflush(stderr);
    if (args.fault == "freeze") raise(SIGSTOP);  // rank 0 kills it at the end
    if (args.fault == "kill") raise(SIGKILL);
    // The fault runs beside the collective's kernels, and its error ends the context's
    // work: the stream's synchronize says so before the collective could complete.
    check(accord_gpu::breakContext(probe_stream), "breakContext");
    const cudaError_t broke = cudaStreamSynchronize(probe_stream);
    std::fprintf(stderr, "[victim] the CUDA context failed after %.3f s: %s\n", since(t0),
                 cudaGetErrorString(broke));
    std::string message;
    const std::string kind = outcome(h, message);
    // The survivors learn of the fault later (NCCL's error, or the finalizer's bound):
    // the host collective waits for them here, not in negotiation, whose stall bound is
    // as short as the finalizer's.
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string later = hostAllreduce();
    const auto t2 = Clock::now();
    accord::shutdown();
    const bool pass = broke != cudaSuccess && kind == "CommError" &&
                      contains(message, "allreduce 'fault.device'") &&
                      contains(message, cudaGetErrorString(broke)) && later == "ok";
    std::fprintf(stderr, "DEVICE-FAULT-%s by rank %d: %s, later host collective: %s, shutdown %.3f s: %s\n",
                 pass ? "VICTIM-OK" : "VICTIM-CHECK-FAILED", me, kind.c_str(), later.c_str(),
                 since(t2), message.c_str());
    return 1;
  }

  std::string message;
  const std::string kind = outcome(h, message);
  const double waited = since(t0);
  // Host collectives go on after a GPU's failure, not after a rank's death. The victim
  // of `cuda` is alive and waits for every survivor at the barrier.
  if (args.fault == "cuda") MPI_Barrier(MPI_COMM_WORLD);
  const std::string later = hostAllreduce();
  const std::string later_expected = args.fault == "cuda" ? "ok" : "CommError";
  const auto t2 = Clock::now();
  accord::shutdown();
  const double shut = since(t2);
  const bool pass = kind == "CommError" && contains(message, "allreduce 'fault.device'") &&
                    blames(message, victim) && waited <= limit && later == later_expected &&
                    since(t0) <= limit + 1.0 * scale;
  std::fprintf(stderr,
               "DEVICE-FAULT-%s by rank %d: %s after %.2f s (limit %.2f), later host collective: %s "
               "(expected %s), shutdown %.3f s: %s\n",
               pass ? "DETECTED" : "CHECK-FAILED", me, kind.c_str(), waited, limit, later.c_str(),
               later_expected.c_str(), shut, message.c_str());
  std::fflush(stderr);
  if (args.fault == "freeze") {
    // Every survivor has reported before the victim is killed.
    MPI_Barrier(survivors);
    if (me == 0) kill(pids[victim], SIGKILL);
  }
  return 1;  // as after any CommError: exit non-zero, without MPI_Finalize
}

// What the fault tests that run without the MPI test harness share
// (tests/runtime/mpi/test_fault.cc, tests/ops/gpu/test_device_fault.cc): after a peer's
// failure MPI cannot be finalized, so they report with marker lines rather than Catch.
#pragma once

#include <accord/accord.h>

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace accord_test {

// "ok", "CommError", "other" or "hang" (not done within 60 s), with the message.
inline std::string outcome(const accord::Handle& h, std::string& message) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!h.poll()) {
    if (std::chrono::steady_clock::now() > deadline) return "hang";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  try {
    h.wait();
    return "ok";
  } catch (const accord::CommError& e) {
    message = e.what();
    return "CommError";
  } catch (const std::exception& e) {
    message = e.what();
    return "other";
  }
}

// Every rank's pid, the survivors' communicator, and how long a survivor may wait: the
// stall time, the runtime's own bound, and the roll call that follows it (a quarter of
// the stall time, between 0.1 and 2 s: rollCallTime in ops/mpi/link.h), plus a second
// for noticing and being scheduled, which sanitizer builds slow down (ci/sanitize.sh
// sets ACCORD_TEST_TIME_SCALE).
// Collective over MPI_COMM_WORLD.
struct FaultSetup {
  double scale = 1.0;
  double limit = 0;
  std::vector<int> pids;
  MPI_Comm survivors = MPI_COMM_NULL;
};

inline FaultSetup faultSetup(int victim) {
  FaultSetup f;
  const char* t_env = std::getenv("ACCORD_STALL_SHUTDOWN_TIME");
  const char* scale_env = std::getenv("ACCORD_TEST_TIME_SCALE");
  f.scale = scale_env ? std::max(1.0, std::atof(scale_env)) : 1.0;
  const double stall = t_env ? std::atof(t_env) : 300.0;
  f.limit = stall + std::clamp(stall / 4, 0.1, 2.0) + 1.0 * f.scale;
  int size = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  f.pids.resize(static_cast<std::size_t>(size));
  int pid = static_cast<int>(getpid());
  MPI_Allgather(&pid, 1, MPI_INT, f.pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Comm_split(MPI_COMM_WORLD, me == victim ? 1 : 0, me, &f.survivors);
  return f;
}

// The fault itself, on the victim: stops every thread of the process (SIGSTOP, as a
// debugger or a hung process would; a survivor kills it later) or leaves at once
// (_exit, as a crash the launcher is told to ignore would). Async-signal-safe, so that it
// may run on Accord's background thread (inside an Allocator) as well.
inline void injectFault(bool freeze) {
  const char* line = freeze ? "[victim] stopping myself\n" : "[victim] leaving\n";
  if (write(2, line, std::strlen(line)) < 0) {
  }
  if (freeze) {
    raise(SIGSTOP);
    return;
  }
  _exit(3);
}

// On the victim's application thread: waits until *data differs from `before`, i.e. a
// collective writing it is under way, then injects the fault, so that the fault falls
// inside the collective (with large buffers in small pieces, most of it still ahead)
// rather than before or after it. Reading memory the runtime is writing is the point
// here, and ThreadSanitizer would rightly call it a race: it does not instrument this.
__attribute__((no_sanitize("thread"))) inline void faultOnceChanged(const float* data,
                                                                   float before,
                                                                   bool freeze) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(data);
  std::uint32_t b;
  std::memcpy(&b, &before, sizeof b);
  while (__atomic_load_n(bits, __ATOMIC_RELAXED) == b) {
  }
  injectFault(freeze);
}

// A survivor's collective after the failure: "CommError" (as it must be: at once),
// "slow" (it succeeded, after more than a second times `scale`), "ok" or "other".
inline std::string laterCollective(const std::string& name, double scale) {
  try {
    float x[16] = {};
    accord::AllreduceOptions o;
    o.name = name;
    const auto t1 = std::chrono::steady_clock::now();
    accord::allreduce_async({x, accord::DType::Float32, {16}, {}}, o).wait();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    return took < 1.0 * scale ? "ok" : "slow";
  } catch (const accord::CommError&) {
    return "CommError";
  } catch (const std::exception&) {
    return "other";
  }
}

}  // namespace accord_test

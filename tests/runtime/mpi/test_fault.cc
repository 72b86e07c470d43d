// A rank that stops answering inside a data collective must not hold the others: every
// survivor's collective fails with a CommError within ACCORD_STALL_SHUTDOWN_TIME (plus
// the roll call's time and a second) that blames the victim and no other rank, although
// most survivors were stuck waiting for a live rank that waited for the victim in turn;
// later collectives fail at once, and shutdown() returns at once so that the survivor
// can exit.
//
//   mpi_test_fault --fault freeze|exit
//                  --collective allreduce|broadcast|allgather|alltoall|reducescatter|adasum
//                  [--victim last|middle]
//
// The victim is the last rank, or with `middle` rank n/2 (for 4 ranks rank 2, which
// is not a neighbour of rank 0 in the ring, so rank 0 waits only for live ranks). It
// stops (SIGSTOP, as a debugger or a hung process would) or leaves (_exit, as a crash
// the launcher is told to ignore would) in the middle of the collective: for allreduce
// and broadcast as soon as the first piece of its buffer has changed (the buffers are
// large and go in 4 KiB pieces, so most of the collective is still ahead); for an
// Adasum allreduce (victim last only: a power of two of ranks) as soon as the last
// element changed, which the last rank combines itself before the rounds that gather
// the result back; for the
// others inside its output allocator, which Accord calls on its background thread once
// the collective runs.
//
// Plain main, not Catch: after the failure MPI cannot be finalized (see
// accord::shutdown), so each survivor reports with a marker line and exits 1, and
// run_expect_abort.cmake counts the markers. Rank 0 then kills a frozen victim.
#include "fault_test.h"
#include "silent_ranks.h"

#include <accord/accord.h>

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using accord_test::outcome;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string fault = "freeze";
  std::string collective = "allreduce";
  std::string victim = "last";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--fault") a.fault = argv[i + 1];
    else if (flag == "--collective") a.collective = argv[i + 1];
    else if (flag == "--victim") a.victim = argv[i + 1];
  }
  const bool ok = (a.fault == "freeze" || a.fault == "exit") &&
                  (a.victim == "last" || a.victim == "middle") &&
                  (a.collective == "allreduce" || a.collective == "broadcast" ||
                   a.collective == "allgather" || a.collective == "alltoall" ||
                   a.collective == "reducescatter" || a.collective == "adasum") &&
                  (a.collective != "adasum" || a.victim == "last");
  if (!ok) {
    std::fprintf(stderr, "usage: %s --fault freeze|exit --collective allreduce|broadcast|"
                 "allgather|alltoall|reducescatter|adasum [--victim last|middle] (adasum: "
                 "last)\n", argv[0]);
    std::exit(2);
  }
  return a;
}

std::string g_fault;

void fail() { accord_test::injectFault(g_fault == "freeze"); }

void failOnceChanged(const float* data, float before) {
  accord_test::faultOnceChanged(data, before, g_fault == "freeze");
}

accord::Allocator into(std::vector<float>& out, bool victim) {
  return [&out, victim](const accord::Shape& shape) {
    if (victim) fail();
    out.resize(static_cast<std::size_t>(accord::num_elements(shape)));
    return accord::TensorView{out.data(), accord::DType::Float32, shape, {}};
  };
}

// Submits the collective; on the victim also injects the fault.
accord::Handle run(const std::string& collective, bool victim, std::vector<float>& in,
                   std::vector<float>& out) {
  const int me = accord::rank(), n = accord::size();
  const std::string name = "fault." + collective;
  if (collective == "allreduce" || collective == "broadcast") {
    in.assign(std::size_t{16} << 20, collective == "broadcast" ? (me == 0 ? 1.0f : 0.0f) : 1.0f);
    const float before = in[0];
    accord::TensorView view{in.data(), accord::DType::Float32,
                            {static_cast<std::int64_t>(in.size())}, {}};
    accord::Handle h;
    if (collective == "allreduce") {
      accord::AllreduceOptions o;
      o.name = name;
      // A sum of ones changes every element (an average of ones would leave them as
      // they were, and the victim would notice no change).
      o.op = accord::ReduceOp::Sum;
      h = accord::allreduce_async(view, o);
    } else {
      accord::BroadcastOptions o;
      o.name = name;
      h = accord::broadcast_async(view, o);
    }
    if (victim) failOnceChanged(in.data(), before);
    return h;
  }
  if (collective == "adasum") {
    // Rank r's tensor is r + 1 times the others': parallel, so every element becomes
    // their average, unlike the victim's own value.
    in.assign(std::size_t{16} << 20, static_cast<float>(me + 1));
    accord::TensorView view{in.data(), accord::DType::Float32,
                            {static_cast<std::int64_t>(in.size())}, {}};
    accord::AllreduceOptions o;
    o.name = name;
    o.op = accord::ReduceOp::Adasum;
    accord::Handle h = accord::allreduce_async(view, o);
    if (victim) failOnceChanged(&in.back(), static_cast<float>(me + 1));
    return h;
  }
  const std::int64_t rows = 1024 * n;
  in.assign(static_cast<std::size_t>(rows), static_cast<float>(me));
  accord::TensorView view{in.data(), accord::DType::Float32, {rows}, {}};
  if (collective == "allgather") {
    accord::AllgatherOptions o;
    o.name = name;
    return accord::allgather_async(view, into(out, victim), o);
  }
  if (collective == "alltoall") {
    accord::AlltoallOptions o;
    o.name = name;
    return accord::alltoall_async(view, into(out, victim), o);
  }
  accord::ReducescatterOptions o;
  o.name = name;
  return accord::reducescatter_async(view, into(out, victim), o);
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  g_fault = args.fault;
  accord::init();
  const int me = accord::rank(), n = accord::size();
  const int victim = args.victim == "middle" ? n / 2 : n - 1;
  const accord_test::FaultSetup setup = accord_test::faultSetup(victim);
  const double scale = setup.scale, limit = setup.limit;
  const std::vector<int>& pids = setup.pids;
  MPI_Comm survivors = setup.survivors;
  {  // everything is connected before the fault
    std::vector<float> warm(1024, 1.0f);
    accord::allreduce({warm.data(), accord::DType::Float32, {1024}, {}});
  }
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<float> in, out;
  const auto t0 = Clock::now();
  accord::Handle h = run(args.collective, me == victim, in, out);
  if (me == victim) {
    // The allocator fails on the background thread: the process stops or leaves there.
    // Only a victim whose fault point never came gets past this.
    try {
      h.wait();
    } catch (const std::exception&) {
    }
    std::fprintf(stderr, "[victim] the collective ended before the fault\n");
    std::_Exit(1);
  }
  std::string message;
  const std::string kind = outcome(h, message);
  const double waited = since(t0);
  // Failed inside the data collective (it names the tensor). A wait over MPI calls the
  // roll and blames the victim alone; so does a wait of the shared-memory transport under
  // the hierarchical allreduce, whose host peer may be alive and stuck behind the victim
  // across hosts. Elsewhere a shared-memory wait watches every host peer itself and
  // names the one that stopped: the victim.
  const std::string type = args.collective == "adasum" ? "allreduce" : args.collective;
  const std::string name = type + " 'fault." + args.collective + "'";
  const bool named = contains(message, name);
  const char* shm_env = std::getenv("ACCORD_SHARED_MEMORY");
  const bool over_mpi = shm_env && std::string(shm_env) == "0";
  const bool points =
      accord_test::rollCalled(message)
          ? accord_test::blamesOnly(message, victim)
          : !over_mpi && contains(message, "shared-memory transport") &&
                accord_test::blamesOnly(message, victim);
  const std::string later = accord_test::laterCollective("fault.later", scale);
  const auto t2 = Clock::now();
  accord::shutdown();
  const double shut = since(t2);
  const bool pass = kind == "CommError" && named && points && waited <= limit &&
                    later == "CommError" && shut <= 1.0 * scale;
  std::fprintf(stderr, "%s by rank %d: %s after %.2f s (limit %.2f), later: %s, shutdown %.3f s: %s\n",
               pass ? "FAULT-DETECTED" : "FAULT-CHECK-FAILED", me, kind.c_str(), waited, limit,
               later.c_str(), shut, message.c_str());
  std::fflush(stderr);
  if (args.fault == "freeze") {
    // Every survivor has reported before the victim is killed (mpirun may end the job
    // then). MPI after a failure is safe enough for that on one host; across hosts a
    // broken TCP connection can leave a barrier waiting, which is why a leaving victim
    // needs none: each survivor just exits.
    MPI_Barrier(survivors);
    if (me == 0) kill(pids[victim], SIGKILL);
  }
  return 1;  // as documented after a CommError: exit non-zero, without MPI_Finalize
}

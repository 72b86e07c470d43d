// A rank that stops answering while four application threads on every rank have
// collectives in flight, as a training job with a data loader and a gradient hook
// thread has: no survivor's handle may hang. Every one of them completes, each thread's
// first failure is a CommError within ACCORD_STALL_SHUTDOWN_TIME (plus the roll call and
// a second) of the rank's last success, at least one message per survivor blames the
// victim and no other rank, a later collective fails at once and shutdown() returns at
// once.
//
//   mpi_test_fault_load --fault freeze|exit
//
// The victim is the last rank. Its threads run as the others' do until its main thread
// stops the process (SIGSTOP) or leaves (_exit), 0.3 s after as many rounds as threads
// have completed; the rounds reuse their names (the response cache's path, small
// tensors carried in the negotiation) and mix tensors of a few elements with ones of
// megabytes, which are in flight for a while. Plain main, reporting with marker lines,
// as test_fault.cc (which says why).
#include "fault_test.h"
#include "silent_ranks.h"

#include <accord/accord.h>

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using accord_test::outcome;
using Clock = std::chrono::steady_clock;

constexpr int kThreads = 4;
constexpr int kMaxRounds = 20000;  // a victim that never fails ends the survivors' rounds
constexpr std::int64_t kSizes[] = {7, 1000, 64 << 10, 1 << 20};  // float32 elements

std::atomic<int> g_rounds{0};  // rounds this rank's threads have completed

// What one survivor thread saw.
struct ThreadLog {
  Clock::time_point last_ok{};
  Clock::time_point first_failure{};
  int failures = 0;
  int wrong = 0;  // results that completed with other values than expected
  int rounds = 0;
  std::string first_kind, first_message;
  bool blames_victim_only = false;
  bool only_comm_errors = true;
};

// Rounds of allreduces (sums of ones) and an allgather until the first round with a
// failure; every handle of that round is awaited too.
void runThread(int t, int victim, ThreadLog& log) {
  const int me = accord::rank(), n = accord::size();
  std::vector<std::vector<float>> tensors(std::size(kSizes));
  std::vector<float> gathered;
  for (int round = 0; round < kMaxRounds && log.failures == 0; ++round) {
    std::vector<accord::Handle> handles;
    for (std::size_t j = 0; j < std::size(kSizes); ++j) {
      tensors[j].assign(static_cast<std::size_t>(kSizes[j]), 1.0f);
      accord::AllreduceOptions o;
      o.name = "load.t" + std::to_string(t) + ".j" + std::to_string(j);
      handles.push_back(
          accord::allreduce_async({tensors[j].data(), accord::DType::Float32, {kSizes[j]}, {}}, o));
    }
    float row = static_cast<float>(me);
    accord::AllgatherOptions g;
    g.name = "load.t" + std::to_string(t) + ".gather";
    handles.push_back(accord::allgather_async(
        {&row, accord::DType::Float32, {1}, {}},
        [&gathered](const accord::Shape& shape) {
          gathered.resize(static_cast<std::size_t>(accord::num_elements(shape)));
          return accord::TensorView{gathered.data(), accord::DType::Float32, shape, {}};
        },
        g));
    for (std::size_t j = 0; j < handles.size(); ++j) {
      std::string message;
      const std::string kind = outcome(handles[j], message);  // "hang" after 60 s
      if (kind == "ok") {
        log.last_ok = Clock::now();
        const bool right = j < tensors.size() ? tensors[j].front() == n && tensors[j].back() == n
                                              : gathered.size() == static_cast<std::size_t>(n) &&
                                                    gathered.back() == static_cast<float>(n - 1);
        if (!right) ++log.wrong;
        continue;
      }
      if (log.failures++ == 0) {
        log.first_failure = Clock::now();
        log.first_kind = kind;
        log.first_message = message;
      }
      if (kind != "CommError") log.only_comm_errors = false;
      if (accord_test::blamesOnly(message, victim)) log.blames_victim_only = true;
    }
    log.rounds = round + 1;
    g_rounds.fetch_add(1);
  }
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  const std::string fault = argc == 3 && std::string(argv[1]) == "--fault" ? argv[2] : "";
  if (fault != "freeze" && fault != "exit") {
    std::fprintf(stderr, "usage: %s --fault freeze|exit\n", argv[0]);
    return 2;
  }
  accord::init();
  const int me = accord::rank(), n = accord::size();
  const int victim = n - 1;
  const accord_test::FaultSetup setup = accord_test::faultSetup(victim);
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<ThreadLog> logs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(runThread, t, victim, std::ref(logs[t]));
  const auto start = Clock::now();
  if (me == victim) {
    // Every thread's collectives have run before (slow builds take longer to get there).
    while (g_rounds.load() < kThreads && Clock::now() - start < std::chrono::seconds(30))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    accord_test::injectFault(fault == "freeze");
    std::fprintf(stderr, "[victim] woke up\n");
    std::_Exit(1);
  }
  for (auto& thread : threads) thread.join();

  // The rank's last success is the latest any of its threads saw: the fault came after.
  Clock::time_point last_ok = start;
  for (const ThreadLog& l : logs) last_ok = std::max(last_ok, l.last_ok);
  bool pass = true, blamed = false;
  std::string detail;
  for (int t = 0; t < kThreads; ++t) {
    const ThreadLog& l = logs[static_cast<std::size_t>(t)];
    const double after = l.failures ? seconds(l.first_failure - last_ok) : -1;
    const bool ok = l.failures > 0 && l.only_comm_errors && l.wrong == 0 && after <= setup.limit;
    pass = pass && ok;
    blamed = blamed || l.blames_victim_only;
    char line[256];
    std::snprintf(line, sizeof line,
                  "\n  thread %d: %d rounds, %d failed, %d wrong, first %s %.2f s "
                  "after the last success%s",
                  t, l.rounds, l.failures, l.wrong, l.first_kind.c_str(), after,
                  ok ? "" : " <- wrong");
    detail += line;
  }
  pass = pass && blamed;

  const std::string later = accord_test::laterCollective("load.later", setup.scale);
  const auto t2 = Clock::now();
  accord::shutdown();
  const double shut = seconds(Clock::now() - t2);
  pass = pass && later == "CommError" && shut <= 1.0 * setup.scale;
  std::fprintf(stderr,
               "%s by rank %d (limit %.2f s, a message blaming rank %d alone: %s, "
               "later: %s, shutdown %.3f s): %s%s\n",
               pass ? "LOAD-FAULT-DETECTED" : "LOAD-FAULT-CHECK-FAILED", me, setup.limit, victim,
               blamed ? "yes" : "no", later.c_str(), shut, logs[0].first_message.c_str(),
               detail.c_str());
  std::fflush(stderr);
  if (fault == "freeze") {
    MPI_Barrier(setup.survivors);  // every survivor has reported before the victim goes
    if (me == 0) kill(setup.pids[static_cast<std::size_t>(victim)], SIGKILL);
  }
  return 1;  // as after any CommError: exit non-zero, without MPI_Finalize
}

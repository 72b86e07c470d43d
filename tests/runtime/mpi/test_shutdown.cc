// Shutdown: collectives still pending when the ranks shut down complete with ShutDown
// (a thread blocked in wait() wakes up too); shutdown twice is fine; calls after it raise
// NotInitialized.
//
// CTest also runs this binary with --accord-owns-mpi: then the application never
// touches MPI_Init/MPI_Finalize and Accord must manage MPI's lifetime itself.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

// True once thread `tid` (0: not yet started) of this process is asleep (state 'S'
// in /proc/self/task/<tid>/stat: blocked on a futex, say) within `limit`; false when
// `returned` becomes ready first or the limit passes.
bool awaitAsleep(const std::atomic<pid_t>& tid, const std::future<void>& returned,
                 std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (returned.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return false;
    if (const pid_t t = tid.load(); t != 0) {
      std::ifstream stat("/proc/self/task/" + std::to_string(t) + "/stat");
      std::string line;
      std::getline(stat, line);
      // "tid (comm) S ...": comm may hold spaces and parentheses; the state follows
      // the last ')'.
      const auto paren = line.rfind(')');
      if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S')
        return true;
    }
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

TEST_CASE("shutdown: pending handles complete with ShutDown; twice is fine") {
  const int me = accord::rank();
  const int n = accord::size();
  // Only this rank submits these names, so with n > 1 they can never become ready.
  Buffer a(DType::Float32, {32}), b(DType::Int64, {5});
  accord::AllreduceOptions oa, ob;
  oa.name = "pending.a.rank" + std::to_string(me);
  ob.name = "pending.b.rank" + std::to_string(me);
  accord::Handle ha = accord::allreduce_async(a.view(), oa);
  accord::Handle hb = accord::allreduce_async(b.view(), ob);

  // A thread blocked in wait() (not polling) must be woken by the shutdown. The main
  // thread shuts down only once the waiter, after announcing its thread id, is asleep
  // in the kernel: between the two it does nothing but call wait() (no allocation, no
  // lock held by anyone else for long), so asleep means blocked in wait().
  std::atomic<pid_t> waiter_tid{0};
  Outcome waited;
  std::promise<void> woke;
  std::future<void> woken = woke.get_future();
  std::thread waiter([&] {
    waiter_tid = static_cast<pid_t>(syscall(SYS_gettid));
    waited = attempt([&] { hb.wait(); });
    woke.set_value();
  });
  const bool blocked = awaitAsleep(waiter_tid, woken, std::chrono::seconds(30));
  if (n > 1) {  // with one rank both handles complete on their own
    INFO("rank " << me << ": the thread in wait() " << (blocked ? "is" : "never got") << " asleep");
    CHECK(blocked);
    CHECK_FALSE(hb.poll());  // blocked in wait(), not finished
    CHECK_FALSE(ha.poll());  // still pending before the shutdown
  }
  // Any rank's shutdown() shuts every rank down (the negotiation ANDs a "keep running"
  // bit): no rank may shut down before every rank has checked the above.
  const auto aligned = finish(accord::barrier_async(), "barrier");
  INFO(describe(aligned, "barrier"));
  CHECK(aligned.ok());

  const auto first = attempt([] { accord::shutdown(); });
  INFO(describe(first, "first shutdown"));
  CHECK(first.ok());
  const Outcome oa_out = finish(ha, oa.name);
  INFO("rank " << me << ", '" << oa.name << "': " << oa_out.kind << ": " << oa_out.message);
  if (n > 1) {
    CHECK(oa_out.kind == "ShutDown");
    CHECK(contains(oa_out.message, oa.name));
    // Named by who asked in the cycle that decided it: whoever called first, or every
    // rank where all calls met in one cycle.
    CHECK((contains(oa_out.message, "Accord shut down (rank") ||
           contains(oa_out.message, "Accord shut down (every rank called shutdown())")));
    CHECK(contains(oa_out.message, " called shutdown()"));
  }
  if (woken.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "[rank %d] a thread in wait() was not woken by shutdown\n", me);
    std::abort();  // the waiter would block forever; joining it would hang the test
  }
  waiter.join();
  INFO("waiter thread: " << waited.kind << ": " << waited.message);
  if (n > 1) CHECK(waited.kind == "ShutDown");

  const auto second = attempt([] { accord::shutdown(); });
  INFO(describe(second, "second shutdown"));
  CHECK(second.ok());
  CHECK_FALSE(accord::is_initialized());
  Buffer c(DType::Float32, {4});
  const auto after = attempt([&] { accord::allreduce_async(c.view()); });
  INFO(describe(after, "allreduce_async after shutdown"));
  CHECK(after.kind == "NotInitialized");
}

int main(int argc, char** argv) {
  MainOptions options;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--accord-owns-mpi") == 0) {
      options.app_inits_mpi = false;
    } else {
      args.push_back(argv[i]);
    }
  }
  return runMain(static_cast<int>(args.size()), args.data(), options);
}

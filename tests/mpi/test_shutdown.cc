// Shutdown: collectives still pending when the ranks shut down complete with ShutDown
// (a thread blocked in wait() wakes up too); shutdown twice is fine; calls after it raise
// NotInitialized.
//
// CTest also runs this binary with --accord-owns-mpi: then the application never
// touches MPI_Init/MPI_Finalize and Accord must manage MPI's lifetime itself.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

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

  // A thread blocked in wait() (not polling) must be woken by the shutdown.
  std::atomic<bool> woke{false};
  Outcome waited;
  std::thread waiter([&] {
    waited = attempt([&] { hb.wait(); });
    woke = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (n > 1) CHECK_FALSE(ha.poll());  // still pending before the shutdown
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
  }
  for (int k = 0; k < 300 && !woke; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!woke) {
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

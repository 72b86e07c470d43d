// A rank whose collective waits for late peers costs (nearly) no CPU: over shared
// memory its background thread sleeps in each negotiation round until a late rank
// arrives, instead of waking every few microseconds to look. On a machine where the
// ranks share their cores with the application's compute (data-parallel training on
// CPUs), every such wake-up is taken from the compute. Run with 2 and 3 ranks.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <accord/accord.h>

#include <sys/resource.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {

double cpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// `waiter` submits at once and waits; every other rank first sleeps `late`. Returns the
// waiter's process CPU time over its wall time while it waited (0 on other ranks) and
// checks the sum.
double waitFor(int waiter, std::chrono::milliseconds late, const std::string& name) {
  const int me = accord::rank();
  std::vector<float> values(1024, static_cast<float>(me + 1));
  if (me != waiter) std::this_thread::sleep_for(late);
  const double cpu0 = cpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  accord::AllreduceOptions o;
  o.name = name;
  o.op = accord::ReduceOp::Sum;
  accord::allreduce({values.data(), accord::DType::Float32, {1024}, accord::Device::cpu()}, o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpuSeconds() - cpu0;
  const int n = accord::size();
  for (float v : values) REQUIRE(v == static_cast<float>(n * (n + 1) / 2));
  if (me != waiter) return 0.0;
  INFO(name << ": rank " << me << " waited " << wall << " s using " << cpu << " s of CPU");
  REQUIRE(wall > 0.5 * late.count() / 1000.0);
  return cpu / wall;
}

}  // namespace

TEST_CASE("a rank waiting for late peers sleeps", "[waiting]") {
  using namespace std::chrono_literals;
  accord::barrier();
  // Polling every 50 us costs a waiter some 10-20% of a core; asleep it uses well
  // under 1%. 5% leaves room for a loaded machine.
  constexpr double kMaxShare = 0.05;
  for (int waiter = 0; waiter < accord::size(); ++waiter) {
    const double share = waitFor(waiter, 1500ms, "waiting." + std::to_string(waiter));
    CHECK(share < kMaxShare);
  }
  // Then the waiter keeps working at full speed: a burst of collectives after the wait.
  for (int i = 0; i < 200; ++i) {
    float one = 1.0f;
    accord::AllreduceOptions o;
    o.name = "after." + std::to_string(i);
    o.op = accord::ReduceOp::Sum;
    accord::allreduce({&one, accord::DType::Float32, {1}, accord::Device::cpu()}, o);
    REQUIRE(one == static_cast<float>(accord::size()));
  }
}

int main(int argc, char** argv) { return accord_test::runMain(argc, argv); }

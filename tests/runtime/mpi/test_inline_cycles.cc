// ACCORD_INLINE_CYCLES: a thread that waits on a handle while the background thread is
// between cycles runs the next cycle itself. Seen from outside, the cycle's Allocator
// then runs on the waiting thread; with the setting at 0, never. Several application
// threads waiting at once take turns at the cycle, and every result stays exact.
// Run as mpi.inline_cycles (on) and mpi.inline_cycles.off (ACCORD_INLINE_CYCLES=0).
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <accord/accord.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

bool inlineCycles() {
  const char* value = std::getenv("ACCORD_INLINE_CYCLES");
  return !value || std::string(value) != "0";
}

}  // namespace

TEST_CASE("a waiting thread runs the cycle itself", "[inline]") {
  constexpr int kRounds = 300;
  const int n = accord::size();
  const int me = accord::rank();
  const std::thread::id caller = std::this_thread::get_id();
  int on_caller = 0;
  std::vector<std::int32_t> out;
  for (int round = 0; round < kRounds; ++round) {
    std::int32_t value = me * 1000 + round;
    accord::AllgatherOptions o;
    o.name = "inline.gather";
    accord::allgather({&value, accord::DType::Int32, {1}, accord::Device::cpu()},
                      [&](const accord::Shape& shape) {
                        if (std::this_thread::get_id() == caller) ++on_caller;
                        out.assign(static_cast<std::size_t>(shape[0]), -1);
                        return accord::TensorView{out.data(), accord::DType::Int32, shape,
                                                  accord::Device::cpu()};
                      },
                      o);
    REQUIRE(out.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) CHECK(out[r] == r * 1000 + round);
  }
  INFO("the Allocator ran on the waiting thread in " << on_caller << " of " << kRounds
                                                     << " collectives");
  if (inlineCycles()) {
    // Which thread takes a cycle is a race each time; the waiting thread wins it often.
    CHECK(on_caller > 0);
  } else {
    CHECK(on_caller == 0);
  }
}

TEST_CASE("threads waiting at once take turns at the cycle", "[inline]") {
  constexpr int kThreads = 4;
  constexpr int kRounds = 100;
  const int n = accord::size();
  const int me = accord::rank();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<double> values(64 + t, me + 1.0 + round);
        accord::AllreduceOptions o;
        o.name = "inline.thread" + std::to_string(t);
        o.op = accord::ReduceOp::Sum;
        accord::allreduce({values.data(), accord::DType::Float64,
                           {static_cast<std::int64_t>(values.size())}, accord::Device::cpu()},
                          o);
        const double expected = n * (n + 1) / 2.0 + n * static_cast<double>(round);
        for (double v : values)
          if (v != expected) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(wrong.load() == 0);
}

int main(int argc, char** argv) { return accord_test::runMain(argc, argv); }

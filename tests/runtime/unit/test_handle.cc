// Handles: wait_for() waits in slices and then behaves as wait(), which is how the
// Python bindings stay interruptible while a collective runs.
#include "runtime/handle_state.h"

#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <thread>

using namespace accord;
using namespace std::chrono_literals;

TEST_CASE("wait_for times out while pending and returns once completed", "[handle]") {
  auto state = std::make_shared<detail::HandleState>();
  Handle handle(state);
  CHECK_FALSE(handle.wait_for(1ms));
  std::thread completer([&] { state->completePart(); });
  CHECK(handle.wait_for(60s));  // returns at completion, not after the timeout
  completer.join();
  CHECK(handle.poll());
  CHECK(handle.wait_for(0ms));
}

TEST_CASE("wait_for rethrows the failure as wait does", "[handle]") {
  auto state = std::make_shared<detail::HandleState>();
  Handle handle(state);
  state->fail(std::make_exception_ptr(MismatchError("allreduce 'x': dtype differs")));
  CHECK_THROWS_AS(handle.wait_for(0ms), MismatchError);
  CHECK_THROWS_AS(Handle().wait_for(0ms), InvalidArgument);
}

TEST_CASE("wait_for with a timeout past the clock's range waits for the collective",
          "[handle]") {
  for (const auto forever : {std::chrono::milliseconds::max(),
                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::hours(24 * 365 * 1000))}) {
    auto state = std::make_shared<detail::HandleState>();
    Handle handle(state);
    const auto start = std::chrono::steady_clock::now();
    std::thread completer([&] {
      std::this_thread::sleep_for(200ms);
      state->completePart();
    });
    CHECK(handle.wait_for(forever));  // not false at once, as an overflowed deadline gave
    completer.join();
    CHECK(std::chrono::steady_clock::now() - start >= 200ms);
  }
}

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

// HandleState: completion by parts, and the launch events behind Handle::cuda_event().
#include "runtime/handle_state.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>

using accord::detail::HandleState;

namespace {

// A stand-in for a device event: any object, whose address is what cuda_event returns.
std::shared_ptr<void> fakeEvent(int& storage) {
  return std::shared_ptr<void>(&storage, [](void*) {});
}

}  // namespace

TEST_CASE("cuda_event waits until every part was launched and gives the last part's event",
          "[handle]") {
  auto state = std::make_shared<HandleState>(2);
  accord::Handle handle(state);
  int first = 0, second = 0;
  auto event = std::async(std::launch::async, [&] { return handle.cuda_event(); });
  state->partLaunched(fakeEvent(first));
  CHECK(event.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  state->partLaunched(fakeEvent(second));
  CHECK(event.get() == &second);
  CHECK_FALSE(handle.poll());  // launched is not completed
  state->completePart();
  state->completePart();
  CHECK(handle.poll());
  CHECK(handle.cuda_event() == &second);  // still valid after completion
}

TEST_CASE("cuda_event is null for a failed collective and for a host collective", "[handle]") {
  auto failed = std::make_shared<HandleState>(2);
  int e = 0;
  failed->partLaunched(fakeEvent(e));
  auto waiting =
      std::async(std::launch::async, [&] { return accord::Handle(failed).cuda_event(); });
  failed->fail(std::make_exception_ptr(accord::CommError("lost")));
  CHECK(waiting.get() == nullptr);
  CHECK_THROWS_AS(accord::Handle(failed).wait(), accord::CommError);

  auto host = std::make_shared<HandleState>(1);
  host->completePart();
  CHECK(accord::Handle(host).cuda_event() == nullptr);
}

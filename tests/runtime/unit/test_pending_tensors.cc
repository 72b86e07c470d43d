// PendingTensors: admit, take, the join handle, and failing everything held.
#include "runtime/pending_tensors.h"

#include "handle_outcome.h"

#include <accord/error.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace accord;

namespace {

struct Submitted {
  std::shared_ptr<detail::HandleState> handle = std::make_shared<detail::HandleState>();
  Request request;
  TensorEntry entry;
};

Submitted submit(const std::string& name, RequestType type = RequestType::Allreduce) {
  Submitted s;
  s.request.type = type;
  s.request.name = name;
  s.entry.name = name;
  s.entry.handle = s.handle;
  return s;
}

void admit(PendingTensors& pending, const Submitted& s) {
  pending.admit(s.request, s.entry, Clock::now());
}

std::string failure(const detail::HandleState& handle) { return accord_test::outcomeOf(handle); }

}  // namespace

TEST_CASE("pending tensors are taken by name, once", "[pending]") {
  PendingTensors pending;
  auto a = submit("grad.a"), b = submit("grad.b");
  admit(pending, a);
  admit(pending, b);
  CHECK(pending.size() == 2);
  REQUIRE(pending.find("grad.a"));
  CHECK(pending.find("grad.a")->name == "grad.a");
  auto taken = pending.take("grad.a");
  REQUIRE(taken);
  CHECK(taken->request.name == "grad.a");
  CHECK(taken->entry.handle == a.handle);
  CHECK_FALSE(pending.take("grad.a"));  // gone after the first take
  CHECK_FALSE(pending.find("grad.a"));
  CHECK(pending.size() == 1);
  CHECK_FALSE(a.handle->done());  // taking completes nothing: the executor does
  CHECK(pending.take("grad.b"));
  CHECK(pending.empty());
}

TEST_CASE("a name already pending is refused at once, the first one kept", "[pending]") {
  PendingTensors pending;
  auto first = submit("w"), second = submit("w");
  admit(pending, first);
  admit(pending, second);
  CHECK(pending.size() == 1);
  CHECK_FALSE(first.handle->done());
  CHECK(failure(*second.handle) ==
        "allreduce 'w': a tensor of this name is already pending in this process set");
  CHECK(pending.take("w")->entry.handle == first.handle);
}

TEST_CASE("a join makes the rank joined until its response completes it", "[pending]") {
  PendingTensors pending;
  auto join = submit("join.0", RequestType::Join), w = submit("w");
  CHECK_FALSE(pending.joined());
  admit(pending, w);
  admit(pending, join);
  CHECK(pending.joined());
  CHECK(pending.takeJoinRequests() == std::vector<std::string>{"join.0"});
  CHECK(pending.size() == 1);  // other tensors stay
  CHECK(pending.joined());     // until the handle is handed over
  auto handle = pending.completeJoin();
  CHECK(handle == join.handle);
  CHECK_FALSE(pending.joined());
  CHECK_FALSE(pending.completeJoin());
}

TEST_CASE("failAll fails every held tensor and the join once, releasing names first", "[pending]") {
  PendingTensors pending;
  auto a = submit("a"), b = submit("b", RequestType::Broadcast);
  auto join = submit("join.3", RequestType::Join);
  admit(pending, a);
  admit(pending, b);
  admit(pending, join);
  std::vector<std::string> released, reasons;
  pending.failAll(
      [&](const std::string& what) {
        reasons.push_back(what);
        return std::make_exception_ptr(ShutDown(what + " did not complete"));
      },
      [&](const std::string& name) {
        // Released before the handle fails, so a woken thread may resubmit the name.
        for (auto* s : {&a, &b, &join})
          if (s->request.name == name) CHECK_FALSE(s->handle->done());
        released.push_back(name);
      });
  CHECK(pending.empty());
  CHECK_FALSE(pending.joined());
  std::sort(released.begin(), released.end());
  CHECK(released == std::vector<std::string>{"a", "b", "join.3"});
  std::sort(reasons.begin(), reasons.end());
  CHECK(reasons == std::vector<std::string>{"allreduce 'a'", "broadcast 'b'", "join"});
  CHECK(failure(*a.handle) == "allreduce 'a' did not complete");
  CHECK(failure(*b.handle) == "broadcast 'b' did not complete");
  CHECK(failure(*join.handle) == "join did not complete");
  CHECK_THROWS_AS(a.handle->wait(), ShutDown);
}

TEST_CASE("failAll on an empty table fails nothing and needs no release", "[pending]") {
  PendingTensors pending;
  int calls = 0;
  pending.failAll([&](const std::string&) {
    ++calls;
    return std::make_exception_ptr(ShutDown("x"));
  });
  CHECK(calls == 0);
  CHECK(pending.empty());
}

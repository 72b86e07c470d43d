// PeerWatch: what failure messages say about other ranks (runtime/peer_watch.h).
#include "runtime/peer_watch.h"

#include <catch2/catch.hpp>

using namespace accord;
using namespace std::chrono_literals;

TEST_CASE("a wait names its ranks once it has lasted, not before, and ends", "[peer_watch]") {
  PeerWatch watch;
  const auto t0 = PeerWatch::Clock::now();
  CHECK(watch.suspects(t0).empty());
  watch.waiting(t0, {2}, "join a negotiation round");
  CHECK(watch.suspects(t0 + 100ms).empty());  // an idle peer sleeps up to 20 ms: normal
  CHECK(watch.suspects(t0 + 3200ms) ==
        "rank 2 did not join a negotiation round in the last 3.2 s (it, or a rank it waits "
        "for in turn, has died or hangs)");
  watch.waiting(t0, {1, 3}, "send its part");
  CHECK(watch.suspects(t0 + 1s).rfind("ranks 1, 3 did not send its part in the last 1.0 s (they", 0) == 0);
  watch.waitEnded();
  CHECK(watch.suspects(t0 + 5s).empty());
}

TEST_CASE("a rank's own failure is told once; others' are kept, first reason wins",
          "[peer_watch]") {
  PeerWatch watch;
  CHECK(watch.takeOwnFailure().empty());
  watch.ownFailure("first");
  watch.ownFailure("second");
  CHECK(watch.takeOwnFailure() == "first");
  CHECK(watch.takeOwnFailure().empty());  // told already

  const auto now = PeerWatch::Clock::now();
  watch.announced(3, "cudaEventQuery: an illegal memory access was encountered on cuda:0");
  watch.announced(3, "again");
  CHECK(watch.suspects(now) ==
        "rank 3 reported that its GPU failed: cudaEventQuery: an illegal memory access was "
        "encountered on cuda:0");
  watch.waiting(now - 1s, {1}, "join a negotiation round");
  CHECK(watch.suspects(now).find("; rank 1 did not join") != std::string::npos);
  watch.reset();
  CHECK(watch.suspects(now).empty());
}

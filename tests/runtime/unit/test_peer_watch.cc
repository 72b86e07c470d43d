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

namespace {

const std::string kEnd = ". Accord cannot go on without it; every pending and later collective fails";

}  // namespace

TEST_CASE("a roll call blames the rank that stopped, not the live rank a wait was stuck on",
          "[peer_watch]") {
  // Four ranks in a ring, rank 2 frozen: rank 3 waited for it, rank 0 for rank 3.
  RollCallFinding f;
  f.size = 4;
  f.stopped = {2};
  f.me = 3;
  f.waited_for = {2};
  f.answers = {{0, {3}}, {1, {0, 2}}};
  CHECK(describeStopped(f, "pass on its part", 3000ms, 750ms) ==
        "rank 2 did not pass on its part within 3 s (ACCORD_STALL_SHUTDOWN_TIME) and stopped "
        "answering: it has died or hangs; ranks 0, 1, 3 still answer" + kEnd);
  f.me = 0;
  f.waited_for = {3};
  f.answers = {{1, {0, 2}}, {3, {2}}};
  CHECK(describeStopped(f, "send its part", 3000ms, 750ms) ==
        "rank 2 stopped answering: it has died or hangs; ranks 0, 1, 3 still answer. This rank "
        "waited for rank 3 to send its part within 3 s (ACCORD_STALL_SHUTDOWN_TIME), and in "
        "turn rank 3 waits for rank 2" + kEnd);
  // Two hops, and a wait on a stopped rank beside a live one names only the stopped one.
  f.waited_for = {1};
  f.answers = {{1, {3}}, {3, {2}}};
  CHECK(describeStopped(f, "pass on its part", 2500ms, 625ms).find(
            "This rank waited for rank 1 to pass on its part within 2.5 s "
            "(ACCORD_STALL_SHUTDOWN_TIME), and in turn rank 1 waits for rank 3, rank 3 for "
            "rank 2.") != std::string::npos);
  f.waited_for = {1, 2};
  CHECK(describeStopped(f, "pass on its part", 3000ms, 750ms).rfind(
            "rank 2 did not pass on its part within 3 s", 0) == 0);
}

TEST_CASE("a roll call blames only silent ranks that a wait leads to", "[peer_watch]") {
  // Rank 3 is silent but nobody waits for it (busy in a wait that does not answer).
  RollCallFinding f;
  f.size = 4;
  f.me = 0;
  f.waited_for = {2};
  f.stopped = {2, 3};
  f.answers = {{1, {}}};
  CHECK(describeStopped(f, "pass on the broadcast", 3000ms, 750ms) ==
        "rank 2 did not pass on the broadcast within 3 s (ACCORD_STALL_SHUTDOWN_TIME) and "
        "stopped answering: it has died or hangs; ranks 0, 1 still answer (rank 3 did not "
        "answer either, though no rank waits for it)" + kEnd);
}

TEST_CASE("a roll call that cannot tell says so", "[peer_watch]") {
  RollCallFinding f;
  f.size = 3;
  f.me = 0;
  f.waited_for = {1};
  f.answers = {{1, {2}}, {2, {0}}};  // every rank answered: nobody stopped
  CHECK(describeStopped(f, "send its part", 3000ms, 750ms) ==
        "rank 1 did not send its part within 3 s (ACCORD_STALL_SHUTDOWN_TIME), and a roll call "
        "could not tell which rank stopped: every rank answered within 0.75 s. It, or a rank it "
        "waits for in turn, hangs outside Accord's waits. Accord cannot go on; every pending "
        "and later collective fails");
  f.answers = {{1, {0}}};  // the silent rank 2 is not where any wait leads
  f.stopped = {2};
  CHECK(describeStopped(f, "send its part", 3000ms, 750ms).find(
            "could not tell which rank stopped: the ranks waited for answered within 0.75 s, "
            "and none of them waits for rank 2, which did not.") != std::string::npos);
  f.answers.clear();  // nobody answered: this rank may be the one cut off
  f.stopped = {1, 2};
  CHECK(describeStopped(f, "send its part", 3000ms, 750ms) ==
        "rank 1 did not send its part within 3 s (ACCORD_STALL_SHUTDOWN_TIME) and stopped "
        "answering: it has died or hangs (no other rank answered a roll call within 0.75 s: "
        "this rank may be the one cut off)" + kEnd);
  // Between two ranks, the other one not answering is the whole story.
  f.size = 2;
  f.stopped = {1};
  CHECK(describeStopped(f, "send its part", 3000ms, 750ms) ==
        "rank 1 did not send its part within 3 s (ACCORD_STALL_SHUTDOWN_TIME) and stopped "
        "answering: it has died or hangs" + kEnd);
}

TEST_CASE("after a roll call, suspects() names the ranks that stopped, not the wait's",
          "[peer_watch]") {
  PeerWatch watch;
  const auto now = PeerWatch::Clock::now();
  watch.waiting(now - 3s, {3}, "send its part");  // stuck on a live rank
  watch.rollCalled({2}, {0, 1, 3});
  CHECK(watch.suspects(now) == "rank 2 stopped answering (ranks 0, 1, 3 still answer)");
  watch.reset();
  CHECK(watch.suspects(now).empty());
}

namespace {
std::vector<int> g_hooked;
void recordWaiting(PeerWatch::Clock::time_point, const std::vector<int>& ranks) {
  g_hooked = ranks;
}
}  // namespace

TEST_CASE("every published wait runs the waiting hook with its ranks", "[peer_watch]") {
  // The MPI transport answers roll calls through it, from shared-memory waits too.
  PeerWatch watch;
  g_hooked.clear();
  watch.waiting(PeerWatch::Clock::now(), {3}, "reduce its block");
  CHECK(g_hooked.empty());  // no hook yet
  watch.setWaitingHook(&recordWaiting);
  watch.waiting(PeerWatch::Clock::now(), {1, 3}, "reduce its block");
  CHECK(g_hooked == std::vector<int>{1, 3});
}

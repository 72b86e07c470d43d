// The Coordinator: readiness, joined ranks, groups, barrier, join completion, repeated
// names, deterministic ordering and stall reports.
#include "runtime/coordinator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

using namespace accord;
using namespace std::chrono_literals;

namespace {

const Clock::time_point t0{};

Request req(int rank, const std::string& name, std::uint64_t seq = 0,
            RequestType type = RequestType::Allreduce) {
  Request r;
  r.rank = rank;
  r.seq = seq;
  r.type = type;
  r.name = name;
  r.shape = {2};
  return r;
}

Request member(int rank, const std::string& group, int index, int size, std::uint64_t seq = 0) {
  Request r = req(rank, group + "." + std::to_string(index), seq);
  r.group = group;
  r.group_size = size;
  r.shape = {index + 1};
  return r;
}

std::vector<std::string> names(const std::vector<Response>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs)
    for (const auto& n : r.names) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("a name is ready once every rank sent it", "[coordinator]") {
  Coordinator c(3);
  c.add({req(0, "w"), req(2, "w")}, t0);
  CHECK(c.takeReady().empty());
  CHECK_FALSE(c.empty());
  c.add({req(1, "w")}, t0 + 1s);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Allreduce);
  CHECK(ready[0].names == std::vector<std::string>{"w"});
  CHECK(c.empty());
  CHECK(c.takeReady().empty());
}

TEST_CASE("a mismatch becomes an error response, not a hang", "[coordinator]") {
  Coordinator c(2);
  Request bad = req(1, "w");
  bad.dtype = DType::Float64;
  c.add({req(0, "w"), bad}, t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Error);
  CHECK(ready[0].error == "allreduce 'w': rank 0 sent dtype float32, rank 1 sent dtype float64");
  CHECK(c.empty());
}

TEST_CASE("ready names come out by the lowest rank's counter, then by name", "[coordinator]") {
  std::vector<Request> all;
  // Rank 0 submitted c, a, b in that order; rank 1 in another order.
  for (auto [name, seq0, seq1] : {std::tuple{"c", 0, 2}, {"a", 1, 0}, {"b", 2, 1}, {"d", 2, 0}}) {
    all.push_back(req(0, name, seq0));
    all.push_back(req(1, name, seq1));
  }
  std::vector<std::string> expected = {"c", "a", "b", "d"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(all.begin(), all.end(), rng);
    Coordinator c(2);
    c.add(all, t0);
    CHECK(names(c.takeReady()) == expected);
  }
}

TEST_CASE("same requests split over several cycles give the same output", "[coordinator]") {
  Coordinator one(2), two(2);
  one.add({req(0, "x", 1), req(0, "y", 0), req(1, "x", 0), req(1, "y", 1)}, t0);
  two.add({req(1, "y", 1), req(0, "x", 1)}, t0);
  two.add({req(1, "x", 0), req(0, "y", 0)}, t0 + 1s);
  auto a = one.takeReady();
  CHECK(a == two.takeReady());
  CHECK(names(a) == std::vector<std::string>{"y", "x"});
}

TEST_CASE("joined ranks count as having submitted every pending name", "[coordinator]") {
  Coordinator c(3);
  c.add({req(0, "w"), req(1, "w")}, t0);
  CHECK(c.takeReady().empty());
  c.add({req(2, "join.0", 0, RequestType::Join)}, t0);
  CHECK(c.joined() == std::vector<bool>{false, false, true});
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Allreduce);

  // A name submitted after the join also needs only the ranks still training; an
  // allgather then fails at once on them (as in Horovod), rather than waiting.
  Request g0 = req(0, "g", 0, RequestType::Allgather);
  Request g1 = req(1, "g", 0, RequestType::Allgather);
  g1.shape = {3};
  c.add({g0, g1}, t0);
  ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error ==
        "allgather 'g': rank 2 has joined; allgather is not supported while a rank has joined "
        "(only allreduce is)");

  // Reducescatter cannot run around a joined rank: an error, not a hang.
  c.add({req(0, "rs", 0, RequestType::Reducescatter), req(1, "rs", 0, RequestType::Reducescatter)},
        t0);
  ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error ==
        "reducescatter 'rs': rank 2 has joined; reducescatter is not supported while a rank has "
        "joined (only allreduce is)");
}

TEST_CASE("join completes when every rank joined, with the last rank as root", "[coordinator]") {
  Coordinator c(3);
  c.add({req(1, "join.a", 0, RequestType::Join)}, t0);
  c.add({req(2, "w"), req(0, "w")}, t0);  // rank 1's part is covered by its join
  auto ready = c.takeReady();
  CHECK(names(ready) == std::vector<std::string>{"w"});
  // Two ranks joining in one cycle: the higher rank counts as the last, whatever the order.
  c.add({req(2, "join.b", 0, RequestType::Join), req(0, "join.a", 0, RequestType::Join)}, t0);
  ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Join);
  CHECK(ready[0].root == 2);
  CHECK(ready[0].names == std::vector<std::string>{"join.a", "join.b"});
  CHECK(c.joined() == std::vector<bool>{false, false, false});  // reset for the next epoch
  CHECK(c.empty());
}

TEST_CASE("pending names go out before the join that completes them", "[coordinator]") {
  Coordinator c(2);
  c.add({req(0, "w")}, t0);
  c.add({req(1, "join", 0, RequestType::Join)}, t0);
  c.add({req(0, "join", 0, RequestType::Join)}, t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 2);
  CHECK(ready[0].names == std::vector<std::string>{"w"});
  CHECK(ready[1].type == ResponseType::Join);
  CHECK(ready[1].root == 0);
}

TEST_CASE("barrier waits for every rank, even joined ones", "[coordinator]") {
  Coordinator c(2);
  c.add({req(1, "join", 0, RequestType::Join), req(0, "barrier", 0, RequestType::Barrier)}, t0);
  CHECK(c.takeReady().empty());
  c.add({req(1, "barrier", 1, RequestType::Barrier)}, t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Barrier);
  CHECK(c.stalled(t0, 0s).empty());
}

TEST_CASE("a barrier stalled on a joined rank says that it has joined", "[coordinator]") {
  Coordinator c(3);
  c.add({req(2, "join", 0, RequestType::Join), req(0, "barrier", 0, RequestType::Barrier)}, t0);
  const auto stalls = c.stalled(t0 + 61s, 60s);
  REQUIRE(stalls.size() == 1);
  CHECK(stalls[0].missing_ranks == std::vector<int>{1, 2});
  CHECK(stalls[0].joined_ranks == std::vector<int>{2});
  CHECK(formatStallReport(stalls, 3) ==
        "barrier 'barrier' waited 61.0 s for ranks 1,2 (submitted by rank 0); rank 2 has "
        "joined, and a barrier needs every rank, joined or not");
}

TEST_CASE("a grouped allreduce comes out once, whole, ordered by member index", "[coordinator]") {
  Coordinator c(2);
  std::vector<Request> all;
  for (int i = 0; i < 12; ++i) all.push_back(member(0, "g", i, 12, 5));
  for (int i = 0; i < 11; ++i) all.push_back(member(1, "g", i, 12, 3));
  std::shuffle(all.begin(), all.end(), std::mt19937(1));
  c.add(all, t0);
  c.add({req(0, "w", 9), req(1, "w", 9)}, t0);
  CHECK(names(c.takeReady()) == std::vector<std::string>{"w"});  // g.11 still missing on rank 1
  c.add({member(1, "g", 11, 12, 3)}, t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  const Response& g = ready[0];
  CHECK(g.type == ResponseType::Allreduce);
  REQUIRE(g.names.size() == 12);
  CHECK(g.names[2] == "g.2");
  CHECK(g.names[10] == "g.10");  // numeric, not "g.1" < "g.10" < "g.11" < "g.2"
  CHECK(g.shapes[10] == Shape{11});
  CHECK(c.empty());
}

TEST_CASE("a grouped allgather comes out whole, with every member's rows by rank",
          "[coordinator]") {
  Coordinator c(2);
  for (int rank : {0, 1})
    for (int i = 0; i < 3; ++i) {
      Request m = member(rank, "g", i, 3);
      m.type = RequestType::Allgather;
      m.shape = {rank + 1 + i, 2};  // rank r gathers r + 1 + i rows of member i
      c.add({m}, t0);
    }
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Allgather);
  CHECK(ready[0].names == std::vector<std::string>{"g.0", "g.1", "g.2"});
  CHECK(ready[0].rank_rows == std::vector<std::int64_t>{1, 2, 2, 3, 3, 4});  // tensor-major
}

TEST_CASE("a group fails as a whole", "[coordinator]") {
  Coordinator c(2);
  Request bad = member(1, "g", 1, 2);
  bad.shape = {9};
  c.add({member(0, "g", 0, 2), member(1, "g", 0, 2), member(0, "g", 1, 2), bad}, t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Error);
  CHECK(ready[0].names == std::vector<std::string>{"g.0", "g.1"});
  CHECK(ready[0].error == "allreduce 'g.1': rank 0 sent shape [2], rank 1 sent shape [9]");

  Request f64 = member(0, "h", 1, 2);
  f64.dtype = DType::Float64;
  Request f64b = f64;
  f64b.rank = 1;
  c.add({member(0, "h", 0, 2), member(1, "h", 0, 2), f64, f64b}, t0);
  ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error ==
        "allreduce 'h.1': group 'h' mixes float32 sum on cpu ('h.0') with float64 sum on cpu; the "
        "tensors of a group are fused into one buffer and must share dtype, device, op and scale "
        "factors");
  CHECK(ready[0].names == std::vector<std::string>{"h.0", "h.1"});

  Request stray = member(0, "k", 0, 2);
  stray.name = "k.02";
  Request stray1 = stray;
  stray1.rank = 1;
  c.add({stray, stray1}, t0);
  ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error ==
        "allreduce 'k.02': is not a member of group 'k' of 2 (members are named 'k.0' to 'k.1')");
}

TEST_CASE("a huge claimed group size just waits, without allocating for it", "[coordinator]") {
  Coordinator c(2);
  c.add({member(0, "big", 0, 1'000'000'000), member(1, "big", 0, 1'000'000'000)}, t0);
  CHECK(c.takeReady().empty());
  auto stalls = c.stalled(t0 + 1s, 1s);
  REQUIRE(stalls.size() == 1);
  CHECK(stalls[0].missing_ranks.empty());
}

TEST_CASE("a rank submitting a name twice fails that name on every rank", "[coordinator]") {
  Coordinator c(2);
  c.add({req(0, "w", 0), req(0, "w", 1), req(1, "w", 0)}, t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == ResponseType::Error);
  CHECK(ready[0].error_kind == Response::ErrorKind::Invalid);
  CHECK(ready[0].error ==
        "allreduce 'w': rank 0 submitted it again before the first one completed");
  CHECK(c.empty());  // rank 1's request went with it, whatever the order
  Coordinator d(2);
  d.add({req(1, "w", 0), req(0, "w", 0), req(0, "w", 1)}, t0);
  CHECK(d.takeReady() == ready);
  CHECK(d.empty());

  d.add({req(5, "x")}, t0);
  ready = d.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error ==
        "allreduce 'x': request from rank 5, which is not a rank of the process set of size 2");
}

TEST_CASE("stall reports name the tensor, the missing ranks and the wait", "[coordinator]") {
  Coordinator c(4);
  c.add({req(0, "w1"), req(1, "w1")}, t0);
  c.add({req(3, "w2"), req(1, "join", 0, RequestType::Join)}, t0 + 30s);
  CHECK(c.stalled(t0 + 59s, 60s).empty());
  auto stalls = c.stalled(t0 + 61200ms, 60s);
  REQUIRE(stalls.size() == 1);
  CHECK(stalls[0].name == "w1");
  CHECK(stalls[0].missing_ranks == std::vector<int>{2, 3});
  CHECK(stalls[0].waiting == 61200ms);
  CHECK(formatStallReport(stalls, 4) ==
        "allreduce 'w1' waited 61.2 s for ranks 2,3 (submitted by ranks 0,1)");
  stalls = c.stalled(t0 + 100s, 60s);
  REQUIRE(stalls.size() == 2);
  CHECK(stalls[1].missing_ranks == std::vector<int>{0, 2});  // rank 1 has joined
  CHECK(formatStallReport(stalls, 4) ==
        "allreduce 'w1' waited 100.0 s for ranks 2,3 (submitted by ranks 0,1)\n"
        "allreduce 'w2' waited 70.0 s for ranks 0,2 (submitted by ranks 1,3)");
  CHECK(formatStallReport({{"b", {1}, {}, 5s, RequestType::Broadcast, {}, {}}}, 2) ==
        "broadcast 'b' waited 5.0 s for rank 1 (submitted by rank 0)");
  CHECK(formatStallReport({}, 2).empty());
}

TEST_CASE("expired stalls fail with the report and leave the table", "[coordinator]") {
  Coordinator c(3);
  c.add({req(0, "w1"), req(1, "w1")}, t0);
  c.add({req(0, "late")}, t0 + 250s);
  auto expired = c.expireStalled(t0 + 300s, 300s);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].type == ResponseType::Error);
  CHECK(expired[0].error_kind == Response::ErrorKind::Stall);
  CHECK(expired[0].names == std::vector<std::string>{"w1"});
  CHECK(expired[0].error ==
        "allreduce 'w1' waited 300.0 s for rank 2 (submitted by ranks 0,1); gave up "
        "(ACCORD_STALL_SHUTDOWN_TIME): every rank of the process set must submit each collective");
  CHECK(c.stalled(t0 + 300s, 0s).size() == 1);  // "late" stays
  // Rank 2 turning up later starts over instead of completing a half-failed tensor.
  c.add({req(2, "w1")}, t0 + 301s);
  CHECK(c.takeReady().empty());
}

TEST_CASE("a stalled group member takes its whole group down", "[coordinator]") {
  Coordinator c(2);
  c.add({member(0, "g", 1, 2)}, t0);
  c.add({member(0, "g", 0, 2), member(1, "g", 0, 2)}, t0 + 5s);
  CHECK(c.takeReady().empty());
  auto stalls = c.stalled(t0 + 10s, 5s);
  REQUIRE(stalls.size() == 2);
  CHECK(formatStallReport(stalls, 2) ==
        "allreduce 'g.0' waited 5.0 s for the other tensors of its group (submitted by ranks 0,1)\n"
        "allreduce 'g.1' waited 10.0 s for rank 1 (submitted by rank 0)");
  auto expired = c.expireStalled(t0 + 10s, 10s);  // only g.1 is that old
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].names == std::vector<std::string>{"g.1"});
  CHECK(expired[1].names == std::vector<std::string>{"g.0"});
  CHECK(expired[1].error == "allreduce 'g.0': group 'g' failed because its tensor 'g.1' stalled");
  CHECK(expired[1].error_kind == Response::ErrorKind::Stall);
  CHECK(c.empty());
}

TEST_CASE("a stall where a rank used the name for another collective says so", "[coordinator]") {
  // The Python layer's names: an allreduce "x" is allreduce.x, an allgather "x"
  // allgather.x, a grouped allreduce "g" is grouped_allreduce.g.<i>.
  Coordinator c(3);
  c.add({req(0, "allreduce.x"), req(1, "allreduce.x"),
         req(2, "allgather.x", 0, RequestType::Allgather), req(0, "allreduce.noname.0"),
         req(1, "grouped_allreduce.g.0"), req(0, "allreduce.g.0"), req(2, "allreduce.g.0")},
        t0);
  CHECK(c.takeReady().empty());
  const auto stalls = c.stalled(t0 + 5s, 5s);
  REQUIRE(stalls.size() == 5);
  CHECK(formatStallReport(stalls, 3) ==
        "allgather 'x' waited 5.0 s for ranks 0,1 (submitted by rank 2); ranks 0,1 submitted "
        "allreduce 'x' under that name instead\n"
        "allreduce 'g.0' waited 5.0 s for rank 1 (submitted by ranks 0,2); rank 1 submitted "
        "grouped allreduce 'g.0' under that name instead\n"
        "allreduce 'noname.0' waited 5.0 s for ranks 1,2 (submitted by rank 0)\n"
        "allreduce 'x' waited 5.0 s for rank 2 (submitted by ranks 0,1); rank 2 submitted "
        "allgather 'x' under that name instead\n"
        "grouped allreduce 'g.0' waited 5.0 s for ranks 0,2 (submitted by rank 1); ranks 0,2 "
        "submitted allreduce 'g.0' under that name instead");
}

TEST_CASE("the other side of a name used for two collectives expires with it", "[coordinator]") {
  Coordinator c(2);
  c.add({req(0, "allreduce.x"), req(0, "allreduce.y")}, t0);
  c.add({req(1, "allgather.x", 0, RequestType::Allgather)}, t0 + 2s);
  auto expired = c.expireStalled(t0 + 5s, 5s);
  REQUIRE(expired.size() == 3);
  CHECK(names(expired) == std::vector<std::string>{"allreduce.x", "allreduce.y", "allgather.x"});
  for (const auto& r : expired) CHECK(r.error_kind == Response::ErrorKind::Stall);
  CHECK(expired[2].error ==
        "allgather 'x' waited 3.0 s for rank 0 (submitted by rank 1); rank 0 submitted "
        "allreduce 'x' under that name instead; gave up (ACCORD_STALL_SHUTDOWN_TIME): every "
        "rank of the process set must submit each collective");
  CHECK(c.empty());
}

TEST_CASE("messages show the name the caller wrote", "[coordinator]") {
  CHECK(describeCollective("allreduce", "allreduce.loss") == "allreduce 'loss'");
  CHECK(describeCollective("allreduce", "grouped_allreduce.g.3") == "grouped allreduce 'g.3'");
  CHECK(describeCollective("allreduce", "loss") == "allreduce 'loss'");
  CHECK(describeCollective("allreduce", "allreduce.") == "allreduce 'allreduce.'");
  CHECK(describeCollective("allreduce", "allreducex.y") == "allreduce 'allreducex.y'");
  CHECK(describeCollective("broadcast", "allreduce.w") == "broadcast 'allreduce.w'");
  CHECK(describeCollective("allgather", "grouped_allgather") == "allgather 'grouped_allgather'");
  CHECK(callerName("allgather", "grouped_allgather.v") == "v");

  // A group from the Python layer: its messages name it as the caller did.
  Coordinator c(2);
  Request f64 = member(0, "grouped_allreduce.h", 1, 2);
  f64.dtype = DType::Float64;
  Request f64b = f64;
  f64b.rank = 1;
  c.add({member(0, "grouped_allreduce.h", 0, 2), member(1, "grouped_allreduce.h", 0, 2), f64,
         f64b},
        t0);
  auto ready = c.takeReady();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error ==
        "grouped allreduce 'h.1': group 'h' mixes float32 sum on cpu ('h.0') with float64 sum on "
        "cpu; the tensors of a group are fused into one buffer and must share dtype, device, op "
        "and scale factors");
}

TEST_CASE("ranks grouping different tensor counts fail at once, not at the stall timeout",
          "[coordinator]") {
  Coordinator c(2);
  // Rank 0 groups three tensors under 'g', rank 1 only two: g.2 never becomes ready.
  c.add({member(0, "g", 0, 3), member(0, "g", 1, 3), member(0, "g", 2, 3)}, t0);
  c.add({member(1, "g", 0, 2), member(1, "g", 1, 2)}, t0);
  auto out = c.takeReady();
  REQUIRE(out.size() == 1);
  CHECK(out[0].type == ResponseType::Error);
  CHECK(out[0].error_kind == Response::ErrorKind::Mismatch);
  CHECK(out[0].error == "grouped allreduce 'g': rank 0 sent 3 tensors, rank 1 sent 2");
  CHECK(names(out) == std::vector<std::string>{"g.0", "g.1", "g.2"});
  CHECK(c.empty());
}

// buildResponse: the response every rank executes, or the exact message that tells the
// user which tensor, which ranks and which values disagreed.
#include "runtime/coordinator.h"

#include <catch2/catch.hpp>

using namespace accord;

namespace {

Request req(int rank, RequestType type, const std::string& name, Shape shape = {4, 3}) {
  Request r;
  r.rank = rank;
  r.type = type;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

std::vector<Request> same(int n, const Request& proto) {
  std::vector<Request> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(proto);
    out.back().rank = r;
  }
  return out;
}

std::vector<bool> none(int n) { return std::vector<bool>(n, false); }

// The error message, or "" (with the response type in the failure) if it succeeded.
std::string error(const std::vector<Request>& reqs, int n, std::vector<bool> joined = {}) {
  if (joined.empty()) joined = none(n);
  Response r = buildResponse(reqs, n, joined);
  if (r.type != ResponseType::Error) return "";
  REQUIRE(r.names == std::vector<std::string>{reqs.front().name});
  return r.error;
}

Response::ErrorKind kind(const std::vector<Request>& reqs, int n) {
  return buildResponse(reqs, n, none(n)).error_kind;
}

}  // namespace

TEST_CASE("matching allreduce requests give an allreduce response", "[validation]") {
  Request proto = req(0, RequestType::Allreduce, "w1");
  proto.dtype = DType::Float16;
  proto.op = ReduceOp::Average;
  proto.prescale = 0.5;
  proto.postscale = 2;
  proto.device = Device::cuda(0);
  auto reqs = same(3, proto);
  reqs[1].device = Device::cuda(1);  // one GPU per rank: ordinals differ, kinds agree
  Response r = buildResponse(reqs, 3, none(3));
  CHECK(r.type == ResponseType::Allreduce);
  CHECK(r.names == std::vector<std::string>{"w1"});
  CHECK(r.shapes == std::vector<Shape>{{4, 3}});
  CHECK(r.dtype == DType::Float16);
  CHECK(r.op == ReduceOp::Average);
  CHECK(r.prescale == 0.5);
  CHECK(r.postscale == 2);
  CHECK(r.device == Device::cuda(0));
  CHECK(r.totalBytes() == 24);
}

TEST_CASE("every disagreement names the tensor, both ranks and both values", "[validation]") {
  auto reqs = same(3, req(0, RequestType::Allreduce, "w1"));
  SECTION("shape") {
    reqs[2].shape = {4, 5};
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent shape [4,3], rank 2 sent shape [4,5]");
    CHECK(kind(reqs, 3) == Response::ErrorKind::Mismatch);
  }
  SECTION("dtype") {
    reqs[1].dtype = DType::Float64;
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent dtype float32, rank 1 sent dtype float64");
  }
  SECTION("op") {
    reqs[1].op = ReduceOp::Min;
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent op sum, rank 1 sent op min");
  }
  SECTION("prescale") {
    reqs[2].prescale = 0.1;
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent prescale 1, rank 2 sent prescale 0.1");
  }
  SECTION("postscale") {
    reqs[1].postscale = 0.25;
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent postscale 1, rank 1 sent postscale 0.25");
  }
  SECTION("device") {
    reqs[1].device = Device::cuda(1);
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent device cpu, rank 1 sent device cuda:1");
  }
  SECTION("type") {
    reqs[2].type = RequestType::Broadcast;
    CHECK(error(reqs, 3) ==
          "allreduce 'w1': rank 0 sent type allreduce, rank 2 sent type broadcast");
  }
  SECTION("group") {
    reqs[1].group = std::string("g");  // not a literal: GCC 12 -Wrestrict false positive
    reqs[1].group_size = 2;
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent no group, rank 1 sent group 'g' of 2");
  }
  SECTION("type is reported before the other fields") {
    reqs[1].dtype = DType::Int8;
    reqs[2].type = RequestType::Allgather;
    CHECK(error(reqs, 3) ==
          "allreduce 'w1': rank 0 sent type allreduce, rank 2 sent type allgather");
  }
  SECTION("the order the requests arrive in does not change the message") {
    reqs[2].shape = {4, 5};
    std::swap(reqs[0], reqs[2]);
    CHECK(error(reqs, 3) == "allreduce 'w1': rank 0 sent shape [4,3], rank 2 sent shape [4,5]");
  }
}

TEST_CASE("broadcast checks root, not op or scale", "[validation]") {
  auto reqs = same(2, req(0, RequestType::Broadcast, "b"));
  reqs[1].op = ReduceOp::Max;  // meaningless for broadcast
  reqs[1].prescale = 3;
  reqs[0].root = reqs[1].root = 1;
  Response r = buildResponse(reqs, 2, none(2));
  CHECK(r.type == ResponseType::Broadcast);
  CHECK(r.root == 1);
  reqs[1].root = 0;
  CHECK(error(reqs, 2) == "broadcast 'b': rank 0 sent root 1, rank 1 sent root 0");
  reqs[0].root = reqs[1].root = 2;
  CHECK(error(reqs, 2) ==
        "broadcast 'b': rank 0 sent root 2, which is not a rank of the process set of size 2");
  CHECK(kind(reqs, 2) == Response::ErrorKind::Invalid);
}

TEST_CASE("allgather lets the first dimension differ and counts rows per rank", "[validation]") {
  std::vector<Request> reqs = {req(0, RequestType::Allgather, "g", {2, 5}),
                               req(2, RequestType::Allgather, "g", {0, 5}),
                               req(1, RequestType::Allgather, "g", {3, 5}),
                               req(3, RequestType::Allgather, "g", {0, 5})};
  Response r = buildResponse(reqs, 4, none(4));
  CHECK(r.type == ResponseType::Allgather);
  CHECK(r.shapes == std::vector<Shape>{{5, 5}});
  CHECK(r.rank_rows == std::vector<std::int64_t>{2, 3, 0, 0});
  reqs[1].shape = {1, 6};
  CHECK(error(reqs, 4) ==
        "allgather 'g': rank 0 sent shape [2,5], rank 2 sent shape [1,6] (all dimensions but the "
        "first must agree)");
  reqs[1].shape = {};
  CHECK(error(reqs, 4) ==
        "allgather 'g': rank 2 sent a scalar, but allgather needs at least one dimension");
}

TEST_CASE("alltoall builds the split matrix and checks every rank's splits", "[validation]") {
  std::vector<Request> reqs = {req(0, RequestType::Alltoall, "a", {3, 2}),
                               req(1, RequestType::Alltoall, "a", {4, 2})};
  reqs[0].splits = {1, 2};
  Response r = buildResponse(reqs, 2, none(2));  // rank 1: no splits = equal parts
  CHECK(r.type == ResponseType::Alltoall);
  CHECK(r.shapes == std::vector<Shape>{{0, 2}});
  CHECK(r.rank_rows == std::vector<std::int64_t>{1, 2, 2, 2});
  reqs[1].splits = {1, 2, 1};
  CHECK(error(reqs, 2) == "alltoall 'a': rank 1 sent 3 splits for a process set of size 2");
  reqs[1].splits = {5, -1};
  CHECK(error(reqs, 2) == "alltoall 'a': rank 1 sent splits [5,-1] with a negative entry");
  reqs[1].splits = {1, 2};
  CHECK(error(reqs, 2) ==
        "alltoall 'a': rank 1 sent splits [1,2] that sum to 3, but its first dimension is 4");
  reqs[1].splits = {};
  reqs[1].shape = {5, 2};
  CHECK(error(reqs, 2) ==
        "alltoall 'a': rank 1 sent no splits, and its first dimension 5 does not divide into 2 "
        "equal parts");
  reqs[1].shape = {4, 3};
  CHECK(error(reqs, 2) ==
        "alltoall 'a': rank 0 sent shape [3,2], rank 1 sent shape [4,3] (all dimensions but the "
        "first must agree)");
}

TEST_CASE("reducescatter keeps the full shape and checks it", "[validation]") {
  Request proto = req(0, RequestType::Reducescatter, "rs", {7, 2});
  proto.op = ReduceOp::Average;
  auto reqs = same(3, proto);
  Response r = buildResponse(reqs, 3, none(3));
  CHECK(r.type == ResponseType::Reducescatter);
  CHECK(r.shapes == std::vector<Shape>{{7, 2}});
  CHECK(r.op == ReduceOp::Average);
  reqs[1].shape = {6, 2};
  CHECK(error(reqs, 3) == "reducescatter 'rs': rank 0 sent shape [7,2], rank 1 sent shape [6,2]");
}

TEST_CASE("collectives that cannot run while a rank has joined fail with Invalid", "[validation]") {
  // As in Horovod: only an allreduce runs around a joined rank; every other collective
  // fails at once on the ranks that submitted it.
  std::vector<bool> joined = {false, true, false};
  auto rs = same(3, req(0, RequestType::Reducescatter, "rs"));
  rs.erase(rs.begin() + 1);
  CHECK(error(rs, 3, joined) ==
        "reducescatter 'rs': rank 1 has joined; reducescatter is not supported while a rank has "
        "joined (only allreduce is)");
  auto a2a = same(3, req(0, RequestType::Alltoall, "a", {3, 1}));
  a2a.resize(1);
  CHECK(error(a2a, 3, {false, true, true}) ==
        "alltoall 'a': ranks 1,2 have joined; alltoall is not supported while a rank has joined "
        "(only allreduce is)");
  CHECK(buildResponse(a2a, 3, {false, true, true}).error_kind == Response::ErrorKind::Invalid);
  auto g = same(3, req(0, RequestType::Allgather, "g", {3, 1}));
  g.erase(g.begin() + 1);
  CHECK(error(g, 3, joined) ==
        "allgather 'g': rank 1 has joined; allgather is not supported while a rank has joined "
        "(only allreduce is)");
  auto b = same(3, req(0, RequestType::Broadcast, "b"));
  b.erase(b.begin() + 1);
  CHECK(error(b, 3, joined) ==
        "broadcast 'b': rank 1 has joined; broadcast is not supported while a rank has joined "
        "(only allreduce is)");
  for (auto& r : b) r.root = 1;
  CHECK(error(b, 3, joined) ==
        "broadcast 'b': root rank 1 has joined; broadcast is not supported while a rank has "
        "joined");
  auto ar = same(3, req(0, RequestType::Allreduce, "w"));
  ar.erase(ar.begin() + 1);
  CHECK(buildResponse(ar, 3, joined).type == ResponseType::Allreduce);
}

TEST_CASE("requests that could not come from a correct runtime are Invalid", "[validation]") {
  auto reqs = same(2, req(0, RequestType::Allreduce, "w"));
  SECTION("missing rank") {
    reqs.pop_back();
    CHECK(error(reqs, 2) == "allreduce 'w': rank 1 sent no request and has not joined");
  }
  SECTION("rank out of range") {
    reqs[1].rank = 2;
    CHECK(error(reqs, 2) == "allreduce 'w': rank 2 is not a rank of the process set of size 2");
  }
  SECTION("same rank twice") {
    reqs[1].rank = 0;
    CHECK(error(reqs, 2) == "allreduce 'w': rank 0 sent it twice");
  }
  SECTION("negative dimension") {
    reqs[1].shape = {-1, 3};
    CHECK(error(reqs, 2) == "allreduce 'w': rank 1 sent shape [-1,3] with a negative dimension");
    CHECK(kind(reqs, 2) == Response::ErrorKind::Invalid);
  }
  SECTION("grouped broadcast") {
    for (auto& r : reqs) {
      r.type = RequestType::Broadcast;
      r.group = std::string("g");
      r.group_size = 1;
    }
    CHECK(error(reqs, 2) ==
          "broadcast 'w': rank 0 sent group 'g' of 1: only allreduce, allgather and reducescatter "
          "can be grouped, with at least one tensor");
  }
}

TEST_CASE("barrier needs every rank, joined or not", "[validation]") {
  auto reqs = same(2, req(0, RequestType::Barrier, "barrier.noname.0", {}));
  CHECK(buildResponse(reqs, 2, none(2)).type == ResponseType::Barrier);
  reqs.pop_back();
  CHECK(error(reqs, 2, {false, true}) ==
        "barrier 'noname.0': rank 1 sent no request; every rank must take part, joined or not");
}

TEST_CASE("process set requests agree on valid, distinct ranks", "[validation]") {
  auto reqs = same(4, req(0, RequestType::AddProcessSet, "ps", {}));
  for (auto& r : reqs) r.splits = {3, 1};
  Response r = buildResponse(reqs, 4, none(4));
  CHECK(r.type == ResponseType::AddProcessSet);
  CHECK(r.rank_rows == std::vector<std::int64_t>{1, 3});
  reqs[2].splits = {1, 2};
  CHECK(error(reqs, 4) == "add_process_set 'ps': rank 0 sent ranks [3,1], rank 2 sent ranks [1,2]");
  for (auto& q : reqs) q.splits = {0, 4};
  CHECK(error(reqs, 4) ==
        "add_process_set 'ps': ranks [0,4] include 4, which is not a rank of the process set of "
        "size 4");
  for (auto& q : reqs) q.splits = {2, -1};
  CHECK(error(reqs, 4) ==
        "add_process_set 'ps': ranks [2,-1] include -1, which is not a rank of the process set of "
        "size 4");
  for (auto& q : reqs) q.splits = {2, 0, 2};
  CHECK(error(reqs, 4) == "add_process_set 'ps': ranks [2,0,2] list rank 2 twice");
  for (auto& q : reqs) q.splits = {};
  CHECK(error(reqs, 4) == "add_process_set 'ps': the list of ranks is empty");
  for (auto& q : reqs) {
    q.type = RequestType::RemoveProcessSet;
    q.splits = {0};
  }
  CHECK(error(reqs, 4) ==
        "remove_process_set 'ps': expected the id of an added process set, got [0]");
  for (auto& q : reqs) q.splits = {3};
  CHECK(buildResponse(reqs, 4, none(4)).rank_rows == std::vector<std::int64_t>{3});
  reqs[3].splits = {2};
  CHECK(error(reqs, 4) ==
        "remove_process_set 'ps': rank 0 sent process set [3], rank 3 sent process set [2]");
}

TEST_CASE("sizes summed across ranks that overflow are refused, naming the tensor",
          "[validation]") {
  const std::int64_t p62 = std::int64_t{1} << 62;
  // Each rank's shape fits; their sum 2^63 would wrap to a negative first dimension.
  std::vector<Request> reqs = {req(0, RequestType::Allgather, "g", {p62, 1}),
                               req(1, RequestType::Allgather, "g", {p62, 1})};
  reqs[0].dtype = reqs[1].dtype = DType::UInt8;
  CHECK(error(reqs, 2) ==
        "allgather 'g': the ranks' first dimensions "
        "[4611686018427387904,4611686018427387904] sum past what an int64 can "
        "count");
  CHECK(kind(reqs, 2) == Response::ErrorKind::Invalid);
  // The rows add up, the gathered buffer's bytes do not.
  reqs[0].shape = reqs[1].shape = {p62 / 2, 1};
  reqs[0].dtype = reqs[1].dtype = DType::Float32;
  CHECK(error(reqs, 2) ==
        "allgather 'g': the gathered shape [4611686018427387904,1] of float32 "
        "has more bytes than a buffer can span (at most 9223372036854775807)");
  // Alltoall splits that wrap around to exactly the first dimension.
  std::vector<Request> x = same(4, req(0, RequestType::Alltoall, "x", {0, 2}));
  for (auto& r : x) r.splits = {p62, p62, p62, p62};
  CHECK(error(x, 4) ==
        "alltoall 'x': rank 0 sent splits [4611686018427387904,4611686018427387904,"
        "4611686018427387904,4611686018427387904] whose sum overflows an int64");
}

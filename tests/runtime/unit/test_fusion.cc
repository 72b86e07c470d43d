// Fusion planning: threshold edges, incompatible neighbours, groups kept whole.
#include "runtime/fusion.h"

#include <catch2/catch.hpp>

using namespace accord;

namespace {

// An allreduce of `floats` float32 elements (4 bytes each).
Response allreduce(const std::string& name, std::int64_t floats) {
  Response r;
  r.type = ResponseType::Allreduce;
  r.names = {name};
  r.shapes = {{floats}};
  return r;
}

std::vector<std::vector<std::string>> groups(const std::vector<Response>& plan) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : plan) out.push_back(r.names);
  return out;
}

using Groups = std::vector<std::vector<std::string>>;

}  // namespace

TEST_CASE("neighbours fuse up to exactly the threshold", "[fusion]") {
  std::vector<Response> rs = {allreduce("a", 10), allreduce("b", 15), allreduce("c", 1)};
  CHECK(groups(planFusion(rs, 100)) == Groups{{"a", "b"}, {"c"}});  // 40 + 60 = 100
  CHECK(groups(planFusion(rs, 104)) == Groups{{"a", "b", "c"}});    // 100 + 4
  CHECK(groups(planFusion(rs, 103)) == Groups{{"a", "b"}, {"c"}});
  CHECK(groups(planFusion(rs, 99)) == Groups{{"a"}, {"b", "c"}});  // one byte short
  auto fused = planFusion(rs, 100);
  CHECK(fused[0].shapes == std::vector<Shape>{{10}, {15}});
  CHECK(fused[0].totalBytes() == 100);
}

TEST_CASE("threshold 0 disables fusion", "[fusion]") {
  std::vector<Response> rs = {allreduce("a", 0), allreduce("b", 0)};
  CHECK(groups(planFusion(rs, 0)) == Groups{{"a"}, {"b"}});
  CHECK(groups(planFusion(rs, 1)) == Groups{{"a", "b"}});  // empty tensors weigh nothing
  CHECK(planFusion({}, 64).empty());
}

TEST_CASE("a response over the threshold stays alone", "[fusion]") {
  std::vector<Response> rs = {allreduce("a", 1), allreduce("big", 1000), allreduce("c", 1)};
  CHECK(groups(planFusion(rs, 64)) == Groups{{"a"}, {"big"}, {"c"}});
}

TEST_CASE("only compatible neighbours fuse", "[fusion]") {
  Response a = allreduce("a", 1), b = allreduce("b", 1);
  CHECK(fusible(a, b));
  auto differ = [&](auto change) {
    Response c = b;
    change(c);
    return !fusible(a, c);
  };
  CHECK(differ([](Response& r) { r.dtype = DType::Float64; }));
  CHECK(differ([](Response& r) { r.device = Device::cuda(0); }));
  CHECK(differ([](Response& r) { r.op = ReduceOp::Max; }));
  CHECK(differ([](Response& r) { r.prescale = 0.5; }));
  CHECK(differ([](Response& r) { r.postscale = 0.5; }));
  CHECK(differ([](Response& r) { r.type = ResponseType::Reducescatter; }));
  for (auto t : {ResponseType::Broadcast, ResponseType::Alltoall, ResponseType::Barrier,
                 ResponseType::Join, ResponseType::Error}) {
    Response x = a, y = b;
    x.type = y.type = t;
    CHECK_FALSE(fusible(x, y));
  }
  Response g1 = a, g2 = b;
  g1.type = g2.type = ResponseType::Allgather;
  g2.op = ReduceOp::Max;  // meaningless for allgather
  CHECK(fusible(g1, g2));

  // An incompatible response in between keeps its neighbours apart: order is kept.
  Response f64 = allreduce("x", 1);
  f64.dtype = DType::Float64;
  CHECK(groups(planFusion({a, f64, b}, 1 << 20)) == Groups{{"a"}, {"x"}, {"b"}});
}

TEST_CASE("allgather fusion concatenates rank_rows tensor-major", "[fusion]") {
  Response a = allreduce("a", 5), b = allreduce("b", 3);
  a.type = b.type = ResponseType::Allgather;
  a.rank_rows = {2, 3};
  b.rank_rows = {0, 3};
  auto plan = planFusion({a, b}, 1 << 20);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].rank_rows == std::vector<std::int64_t>{2, 3, 0, 3});
}

TEST_CASE("grouped responses stay whole and are never split", "[fusion]") {
  Response group = allreduce("g.0", 10);
  group.names.push_back("g.1");
  group.shapes.push_back({10});  // 80 bytes in all
  std::vector<Response> rs = {allreduce("a", 10), group, allreduce("b", 10)};
  CHECK(groups(planFusion(rs, 60)) == Groups{{"a"}, {"g.0", "g.1"}, {"b"}});
  CHECK(groups(planFusion(rs, 120)) == Groups{{"a", "g.0", "g.1"}, {"b"}});
  CHECK(groups(planFusion(rs, 0)) == Groups{{"a"}, {"g.0", "g.1"}, {"b"}});
}

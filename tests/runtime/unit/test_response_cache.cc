// The response cache: hits, misses, invalidation, LRU eviction and slot determinism.
#include "runtime/response_cache.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace accord;

namespace {

Request request(const std::string& name, Shape shape = {4}) {
  Request r;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

Response response(const Request& r) {
  Response out;
  out.type = static_cast<ResponseType>(r.type);
  out.names = {r.name};
  out.shapes = {r.shape};
  return out;
}

void put(ResponseCache& c, const Request& r) { c.put(response(r), r); }

}  // namespace

TEST_CASE("a cached request hits whatever its rank and seq", "[cache]") {
  ResponseCache c(4);
  Request w = request("w");
  CHECK(c.lookup(w).status == ResponseCache::Status::Miss);
  put(c, w);
  Request again = w;
  again.rank = 3;
  again.seq = 99;
  auto hit = c.lookup(again);
  CHECK(hit.status == ResponseCache::Status::Hit);
  CHECK(hit.slot == 0);
  CHECK(c.contains(0));
  CHECK(c.response(0).names == std::vector<std::string>{"w"});
  CHECK(c.size() == 1);
  CHECK(c.lookup(request("other")).status == ResponseCache::Status::Miss);
}

TEST_CASE("a changed signature is Invalid, and erase forgets the slot", "[cache]") {
  ResponseCache c(4);
  put(c, request("w"));
  auto changed = [&](auto change) {
    Request r = request("w");
    change(r);
    return c.lookup(r).status == ResponseCache::Status::Invalid;
  };
  CHECK(changed([](Request& r) { r.shape = {5}; }));
  CHECK(changed([](Request& r) { r.dtype = DType::Int32; }));
  CHECK(changed([](Request& r) { r.op = ReduceOp::Average; }));
  CHECK(changed([](Request& r) { r.device = Device::cuda(0); }));
  CHECK(changed([](Request& r) { r.root = 1; }));
  CHECK(changed([](Request& r) { r.prescale = 2; }));
  CHECK(changed([](Request& r) { r.postscale = 2; }));
  CHECK(changed([](Request& r) { r.splits = {4}; }));
  CHECK(changed([](Request& r) { r.type = RequestType::Broadcast; }));
  CHECK(changed([](Request& r) { r.group = std::string("g"); }));
  c.erase(0);
  CHECK_FALSE(c.contains(0));
  CHECK(c.lookup(request("w")).status == ResponseCache::Status::Miss);
  c.erase(0);  // erasing twice is harmless
  CHECK(c.size() == 0);
}

TEST_CASE("a slot cached on a joined rank is Invalid there", "[cache]") {
  ResponseCache c(2);
  c.put(response(request("w")), std::nullopt);
  CHECK(c.contains(0));
  CHECK(c.lookup(request("w")).status == ResponseCache::Status::Invalid);
}

TEST_CASE("new names take the lowest free slot", "[cache]") {
  ResponseCache c(4);
  for (auto name : {"a", "b", "c"}) put(c, request(name));
  CHECK(c.lookup(request("c")).slot == 2);
  c.erase(1);
  put(c, request("d"));
  CHECK(c.lookup(request("d")).slot == 1);
  put(c, request("e"));
  CHECK(c.lookup(request("e")).slot == 3);
  put(c, request("a", {8}));  // re-negotiated with a new shape: same slot, new contents
  CHECK(c.lookup(request("a", {8})).status == ResponseCache::Status::Hit);
  CHECK(c.lookup(request("a", {8})).slot == 0);
  CHECK(c.size() == 4);
}

TEST_CASE("a full cache evicts the least recently used entry", "[cache]") {
  ResponseCache c(3);
  for (auto name : {"a", "b", "c"}) put(c, request(name));
  c.touch(0);  // a is now the most recent; b the least
  put(c, request("d"));
  CHECK(c.lookup(request("b")).status == ResponseCache::Status::Miss);
  CHECK(c.lookup(request("d")).slot == 1);
  put(c, request("e"));  // c is next
  CHECK(c.lookup(request("c")).status == ResponseCache::Status::Miss);
  CHECK(c.lookup(request("e")).slot == 2);
  put(c, request("f"));  // then a
  CHECK(c.lookup(request("f")).slot == 0);
  CHECK(c.size() == 3);
}

TEST_CASE("two caches fed the same sequence agree on every slot", "[cache]") {
  ResponseCache x(5), y(5);
  auto name = [](int i) {
    std::string s = "t";
    s += std::to_string(i);
    return s;
  };
  for (ResponseCache* c : {&x, &y}) {
    for (int i = 0; i < 20; ++i) {
      put(*c, request(name(i % 7)));
      if (i % 3 == 0) c->touch(c->lookup(request(name(i % 7))).slot);
      if (i % 4 == 0) c->erase(static_cast<std::uint32_t>(i % 5));
    }
  }
  for (int i = 0; i < 7; ++i) {
    auto a = x.lookup(request(name(i)));
    auto b = y.lookup(request(name(i)));
    CHECK(a.status == b.status);
    CHECK(a.slot == b.slot);
  }
}

TEST_CASE("only single-tensor collectives are cached, and capacity 0 caches nothing", "[cache]") {
  ResponseCache c(4);
  Response barrier;
  barrier.type = ResponseType::Barrier;
  barrier.names = {"barrier"};
  c.put(barrier, std::nullopt);
  Response fused = response(request("a"));
  fused.names.push_back("b");
  fused.shapes.push_back({1});
  c.put(fused, request("a"));
  Response error = response(request("e"));
  error.type = ResponseType::Error;
  c.put(error, request("e"));
  CHECK(c.size() == 0);

  ResponseCache off(0);
  put(off, request("a"));
  CHECK(off.size() == 0);
  CHECK(off.lookup(request("a")).status == ResponseCache::Status::Miss);
  CHECK(off.words() == 0);
  CHECK(ResponseCache(64).words() == 1);
  CHECK(ResponseCache(65).words() == 2);
}

TEST_CASE("touching or reading an empty slot is an error", "[cache]") {
  ResponseCache c(2);
  CHECK_THROWS_AS(c.touch(1), InvalidArgument);
  CHECK_THROWS_AS(c.response(5), InvalidArgument);
  CHECK_FALSE(c.contains(7));
}

TEST_CASE("the exchanged bit vector covers exactly the slots in use", "[cache]") {
  ResponseCache c(200);
  CHECK(c.activeWords() == 0);
  for (int i = 0; i < 65; ++i) put(c, request(std::to_string(i)));
  CHECK(c.activeWords() == 2);  // slot 64 is in use
  c.erase(c.lookup(request("3")).slot);
  CHECK(c.activeWords() == 2);  // a hole below the highest slot changes nothing
  c.erase(c.lookup(request("64")).slot);
  CHECK(c.activeWords() == 1);  // slots 0..63 remain (3 is free)
  put(c, request("again"));     // refills the hole, slot 3
  CHECK(c.lookup(request("again")).slot == 3);
  CHECK(c.activeWords() == 1);
  for (int i = 0; i < 64; ++i) c.erase(static_cast<std::uint32_t>(i));
  CHECK(c.activeWords() == 0);
}

// The list below must name every field of RequestSignature (device twice: type and
// index); the count stops the build when a new field has no line here.
static_assert(detail::fieldCount<RequestSignature>() == 12, "add the new field to the list below");

TEST_CASE("changing any one signature field misses the cache; rank and seq do not", "[cache]") {
  Request base = request("w", {4, 3});
  base.type = RequestType::Allreduce;
  base.group = std::string("g");  // not a literal: GCC 12 -Wrestrict false positive
  base.group_size = 2;
  base.splits = {1, 3};
  ResponseCache c(4);
  put(c, base);
  const std::vector<std::pair<const char*, std::function<void(Request&)>>> changes = {
      {"type", [](Request& r) { r.type = RequestType::Allgather; }},
      {"name", [](Request& r) { r.name += "x"; }},
      {"dtype", [](Request& r) { r.dtype = DType::BFloat16; }},
      {"op", [](Request& r) { r.op = ReduceOp::Product; }},
      {"device type", [](Request& r) { r.device.type = DeviceType::CUDA; }},
      {"device index", [](Request& r) { r.device.index = 1; }},
      {"shape", [](Request& r) { r.shape.back() = 4; }},
      {"root", [](Request& r) { r.root = 2; }},
      {"prescale", [](Request& r) { r.prescale = -1; }},
      {"postscale", [](Request& r) { r.postscale = 0.5; }},
      {"splits", [](Request& r) { r.splits.push_back(0); }},
      {"group", [](Request& r) { r.group += "h"; }},
      {"group_size", [](Request& r) { r.group_size = 3; }},
  };
  for (const auto& [field, change] : changes) {
    INFO(field);
    Request r = base;
    change(r);
    REQUIRE_FALSE(r == base);  // the change is real
    // Same name: the stored signature no longer matches. A new name: simply unknown.
    CHECK(c.lookup(r).status ==
          (r.name == base.name ? ResponseCache::Status::Invalid : ResponseCache::Status::Miss));
  }
  Request envelope = base;
  envelope.rank = 7;
  envelope.seq = 12345;
  CHECK(c.lookup(envelope).status == ResponseCache::Status::Hit);
}

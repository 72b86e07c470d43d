// Negotiation message encoding: every field survives a round trip, and no corrupt
// message (truncated anywhere, trailing bytes, bad enums, absurd lengths) decodes.
#include "runtime/wire.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>

using namespace accord;

namespace {

Request fullRequest(RequestType type) {
  Request r;
  r.rank = 3;
  r.seq = 0x0102030405060708ull;
  r.type = type;
  r.name = "grad.layer1.conv.weight";
  r.dtype = DType::BFloat16;
  r.op = ReduceOp::Max;
  r.device = Device::cuda(7);
  r.shape = {64, 3, 7, -7};
  r.root = -2;
  r.prescale = 0.125;
  r.postscale = -3.5e-300;
  r.splits = {1, 0, INT64_MAX, INT64_MIN};
  r.group = "g";
  r.group_size = 2;
  return r;
}

Response fullResponse(ResponseType type) {
  Response r;
  r.type = type;
  r.names = {"a", "", "c.d"};
  r.shapes = {{1, 2}, {}, {0}};
  r.dtype = DType::Int64;
  r.op = ReduceOp::Product;
  r.device = Device::cuda(1);
  r.root = 5;
  r.prescale = 2.0;
  r.postscale = 1.0 / 3;
  r.rank_rows = {4, -1, 0};
  r.error = "allreduce 'a': rank 0 sent dtype float32, rank 1 sent dtype float64";
  r.error_kind = Response::ErrorKind::Stall;
  return r;
}

std::vector<Request> everyRequestType() {
  std::vector<Request> out;
  for (int t = 0; t <= static_cast<int>(RequestType::RemoveProcessSet); ++t)
    out.push_back(fullRequest(static_cast<RequestType>(t)));
  out.push_back(Request{});  // all defaults, empty strings and vectors
  return out;
}

ResponseList everyResponseType() {
  ResponseList list;
  for (int t = 0; t <= static_cast<int>(ResponseType::Error); ++t)
    list.responses.push_back(fullResponse(static_cast<ResponseType>(t)));
  list.responses.push_back(Response{});
  list.shutdown = true;
  return list;
}

std::string decodeError(const std::vector<std::uint8_t>& bytes, bool requests) {
  try {
    if (requests) {
      decodeRequests(bytes);
    } else {
      decodeResponses(bytes);
    }
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("requests of every type round-trip with every field", "[wire]") {
  auto requests = everyRequestType();
  CHECK(decodeRequests(encodeRequests(requests)) == requests);
  CHECK(decodeRequests(encodeRequests({})).empty());
}

TEST_CASE("responses of every type round-trip with every field", "[wire]") {
  auto list = everyResponseType();
  CHECK(decodeResponses(encodeResponses(list)) == list);
  ResponseList empty;
  CHECK(decodeResponses(encodeResponses(empty)) == empty);
  for (auto kind : {Response::ErrorKind::Mismatch, Response::ErrorKind::Invalid}) {
    ResponseList one;
    one.responses.push_back(fullResponse(ResponseType::Error));
    one.responses[0].error_kind = kind;
    CHECK(decodeResponses(encodeResponses(one)) == one);
  }
}

TEST_CASE("request encoding is little-endian and starts with magic and version", "[wire]") {
  Request r;
  r.rank = 0x01020304;
  auto bytes = encodeRequests({r});
  REQUIRE(bytes.size() > 14);
  CHECK(std::memcmp(bytes.data(), "ACRQ", 4) == 0);
  CHECK(bytes[4] == 1);  // version
  CHECK(bytes[5] == 0);
  CHECK(bytes[6] == 1);      // one request
  CHECK(bytes[10] == 0x04);  // rank, low byte first
  CHECK(bytes[13] == 0x01);
  CHECK(std::memcmp(encodeResponses({}).data(), "ACRS", 4) == 0);
}

TEST_CASE("a request list truncated at any length is rejected", "[wire]") {
  auto bytes = encodeRequests(everyRequestType());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("length " << n);
    CHECK_THAT(decodeError(cut, true), Catch::StartsWith("corrupt negotiation message: "));
  }
}

TEST_CASE("a response list truncated at any length is rejected", "[wire]") {
  auto bytes = encodeResponses(everyResponseType());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("length " << n);
    CHECK_THAT(decodeError(cut, false), Catch::StartsWith("corrupt negotiation message: "));
  }
}

TEST_CASE("truncation messages say where and what", "[wire]") {
  Request r;
  r.name = std::string(100, 'x');
  auto bytes = encodeRequests({r});
  bytes.resize(128);  // header 10, rank 4, seq 8, type 1, name 4 + 100, dtype 1: op is cut
  CHECK(decodeError(bytes, true) ==
        "corrupt negotiation message: truncated at byte 128: needs 1 bytes, 0 left (request 0 "
        "reduce op)");
  bytes.resize(12);  // too short for even one request's fixed part
  CHECK(decodeError(bytes, true) ==
        "corrupt negotiation message: request count 1 at byte 6 exceeds the 2 bytes left (list "
        "header)");
  CHECK(decodeError({}, true) ==
        "corrupt negotiation message: truncated at byte 0: needs 4 bytes, 0 left (list header)");
}

TEST_CASE("trailing bytes are rejected", "[wire]") {
  auto bytes = encodeRequests({Request{}});
  std::size_t end = bytes.size();
  bytes.push_back(0);
  CHECK(decodeError(bytes, true) == "corrupt negotiation message: 1 trailing bytes at byte " +
                                        std::to_string(end) + " after the last request");
  auto responses = encodeResponses({});
  responses.push_back(7);
  responses.push_back(7);
  CHECK(decodeError(responses, false) ==
        "corrupt negotiation message: 2 trailing bytes at byte 11 after the last response");
}

TEST_CASE("a wrong magic word or version is rejected", "[wire]") {
  auto requests = encodeRequests({});
  CHECK(decodeError(requests, false) ==
        "corrupt negotiation message: magic word 0x51524341 is not that of a response list "
        "(0x53524341)");
  requests[4] = 2;
  CHECK(decodeError(requests, true) ==
        "corrupt negotiation message: version 2, this build speaks version 1: every rank must run "
        "the same Accord build");
}

TEST_CASE("string lengths beyond the message are rejected before allocating", "[wire]") {
  auto bytes = encodeRequests({Request{}});
  // Header 10 bytes, rank 4, seq 8, type 1: the name's length is at byte 23.
  std::uint32_t huge = 0xffffffff;
  std::memcpy(bytes.data() + 23, &huge, 4);
  CHECK(decodeError(bytes, true) ==
        "corrupt negotiation message: string length 4294967295 at byte 23 exceeds the " +
            std::to_string(bytes.size() - 27) + " bytes left (request 0 name)");
}

TEST_CASE("absurd element counts are rejected", "[wire]") {
  auto bytes = encodeRequests({});
  bytes[6] = bytes[7] = bytes[8] = bytes[9] = 0xff;  // 4 billion requests in 0 bytes
  CHECK(decodeError(bytes, true) ==
        "corrupt negotiation message: request count 4294967295 at byte 6 exceeds the 0 bytes left "
        "(list header)");
  // A shape of 2 dims claims 1000: each dim needs 8 bytes.
  Request r;
  r.shape = {1, 2};
  auto one = encodeRequests({r});
  std::size_t at = 10 + 4 + 8 + 1 + 4 + 1 + 1 + 1 + 4;  // shape count
  REQUIRE(one[at] == 2);
  one[at] = 0xe8;
  one[at + 1] = 0x03;
  CHECK_THAT(decodeError(one, true),
             Catch::StartsWith("corrupt negotiation message: vector length 1000 at byte " +
                               std::to_string(at)) &&
                 Catch::EndsWith("(request 0 shape)"));
}

TEST_CASE("enum values out of range are rejected", "[wire]") {
  auto bytes = encodeRequests({Request{}});
  auto at = [&](std::size_t offset, std::uint8_t value) {
    auto copy = bytes;
    copy[offset] = value;
    return decodeError(copy, true);
  };
  CHECK(at(22, 9) ==
        "corrupt negotiation message: value 9 at byte 22 is out of range (0..8) (request 0 request "
        "type)");
  CHECK(at(27, 11) ==
        "corrupt negotiation message: value 11 at byte 27 is out of range (0..10) (request 0 "
        "dtype)");
  CHECK(at(28, 6) ==
        "corrupt negotiation message: value 6 at byte 28 is out of range (0..5) (request 0 reduce "
        "op)");
  CHECK(at(29, 2) ==
        "corrupt negotiation message: value 2 at byte 29 is out of range (0..1) (request 0 device "
        "type)");
  auto responses = encodeResponses({});
  responses[6] = 2;
  CHECK(decodeError(responses, false) ==
        "corrupt negotiation message: value 2 at byte 6 is not 0 or 1 (shutdown flag)");
  ResponseList one;
  one.responses.push_back(Response{});
  auto r = encodeResponses(one);
  r[11] = 10;
  CHECK(decodeError(r, false) ==
        "corrupt negotiation message: value 10 at byte 11 is out of range (0..9) (response 0 "
        "response type)");
  r[11] = 0;
  r.back() = 3;
  CHECK_THAT(decodeError(r, false),
             Catch::EndsWith("is out of range (0..2) (response 0 error kind)"));
}

TEST_CASE("random corruption never decodes into a crash", "[wire]") {
  auto good = encodeResponses(everyResponseType());
  std::mt19937 rng(42);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    auto bytes = good;
    for (int flips = 0; flips < 3; ++flips)
      bytes[rng() % bytes.size()] = static_cast<std::uint8_t>(rng());
    try {
      decodeResponses(bytes);  // a flip inside a payload can still decode: that is fine
    } catch (const CommError&) {
      ++rejected;
    }
  }
  CHECK(rejected > 0);
}

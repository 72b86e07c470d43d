// Value types: dtype sizes and names, devices, shapes, reducescatter row blocks and the
// names that appear in every message.
#include "runtime/message.h"

#include <catch2/catch.hpp>

using namespace accord;

TEST_CASE("dtypes have their sizes and names", "[tensor]") {
  struct Expect {
    DType dtype;
    std::size_t size;
    const char* name;
    bool floating;
  };
  for (auto e : {Expect{DType::UInt8, 1, "uint8", false},
                 {DType::Int8, 1, "int8", false},
                 {DType::Int32, 4, "int32", false},
                 {DType::Int64, 8, "int64", false},
                 {DType::Float16, 2, "float16", true},
                 {DType::BFloat16, 2, "bfloat16", true},
                 {DType::Float32, 4, "float32", true},
                 {DType::Float64, 8, "float64", true}}) {
    CHECK(dtypeSize(e.dtype) == e.size);
    CHECK(std::string(dtypeName(e.dtype)) == e.name);
    CHECK(isFloatingPoint(e.dtype) == e.floating);
  }
  CHECK_THROWS_AS(dtypeSize(static_cast<DType>(kNumDTypes)), InvalidArgument);
}

TEST_CASE("devices, shapes and element counts", "[tensor]") {
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(shapeString({4, 3}) == "[4,3]");
  CHECK(shapeString({}) == "[]");
  CHECK(numElements({}) == 1);
  CHECK(numElements({4, 0, 3}) == 0);
  CHECK(numElements({64, 3, 7, 7}) == 9408);
  CHECK_THROWS_WITH(numElements({2, -1}), "shape [2,-1] has a negative dimension");
  TensorView v{nullptr, DType::Float64, {2, 3}, Device::cpu()};
  CHECK(v.bytes() == 48);
}

TEST_CASE("reducescatter gives the first ranks one extra row", "[tensor]") {
  CHECK(reducescatterRows(10, 0, 4) == 3);
  CHECK(reducescatterRows(10, 1, 4) == 3);
  CHECK(reducescatterRows(10, 2, 4) == 2);
  CHECK(reducescatterRows(10, 3, 4) == 2);
  CHECK(reducescatterRows(2, 3, 4) == 0);
  CHECK(reducescatterRows(8, 1, 4) == 2);
  CHECK(reducescatterRows(0, 0, 1) == 0);
  std::int64_t total = 0;
  for (int r = 0; r < 7; ++r) total += reducescatterRows(100, r, 7);
  CHECK(total == 100);
  CHECK_THROWS_AS(reducescatterRows(4, 4, 4), InvalidArgument);
  CHECK_THROWS_AS(reducescatterRows(4, 0, 0), InvalidArgument);
}

TEST_CASE("type and op names match the public function names", "[tensor]") {
  CHECK(std::string(reduceOpName(ReduceOp::Average)) == "average");
  CHECK(std::string(reduceOpName(ReduceOp::Product)) == "product");
  CHECK(std::string(requestTypeName(RequestType::Reducescatter)) == "reducescatter");
  CHECK(std::string(requestTypeName(RequestType::AddProcessSet)) == "add_process_set");
  CHECK(std::string(responseTypeName(ResponseType::Error)) == "error");
  CHECK(std::string(responseTypeName(ResponseType::RemoveProcessSet)) == "remove_process_set");
  Response r;
  r.dtype = DType::Float16;
  r.shapes = {{3, 2}, {5}};
  CHECK(r.tensorBytes(0) == 12);
  CHECK(r.totalBytes() == 22);
  CHECK_THROWS_AS(r.tensorBytes(2), InvalidArgument);
}

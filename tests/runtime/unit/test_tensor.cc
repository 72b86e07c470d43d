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
                 {DType::Float64, 8, "float64", true},
                 {DType::Int16, 2, "int16", false},
                 {DType::UInt16, 2, "uint16", false},
                 {DType::Bool, 1, "bool", false}}) {
    CHECK(dtype_size(e.dtype) == e.size);
    CHECK(std::string(dtype_name(e.dtype)) == e.name);
    CHECK(is_floating_point(e.dtype) == e.floating);
  }
  CHECK_THROWS_AS(dtype_size(static_cast<DType>(kNumDTypes)), InvalidArgument);
}

TEST_CASE("devices, shapes and element counts", "[tensor]") {
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(shape_string({4, 3}) == "[4,3]");
  CHECK(shape_string({}) == "[]");
  CHECK(num_elements({}) == 1);
  CHECK(num_elements({4, 0, 3}) == 0);
  CHECK(num_elements({64, 3, 7, 7}) == 9408);
  CHECK_THROWS_WITH(num_elements({2, -1}), "shape [2,-1] has a negative dimension");
  TensorView v{nullptr, DType::Float64, {2, 3}, Device::cpu()};
  CHECK(v.bytes() == 48);
}

TEST_CASE("reducescatter gives the first ranks one extra row", "[tensor]") {
  CHECK(reducescatter_rows(10, 0, 4) == 3);
  CHECK(reducescatter_rows(10, 1, 4) == 3);
  CHECK(reducescatter_rows(10, 2, 4) == 2);
  CHECK(reducescatter_rows(10, 3, 4) == 2);
  CHECK(reducescatter_rows(2, 3, 4) == 0);
  CHECK(reducescatter_rows(8, 1, 4) == 2);
  CHECK(reducescatter_rows(0, 0, 1) == 0);
  std::int64_t total = 0;
  for (int r = 0; r < 7; ++r) total += reducescatter_rows(100, r, 7);
  CHECK(total == 100);
  CHECK_THROWS_AS(reducescatter_rows(4, 4, 4), InvalidArgument);
  CHECK_THROWS_AS(reducescatter_rows(4, 0, 0), InvalidArgument);
}

TEST_CASE("type and op names match the public function names", "[tensor]") {
  CHECK(std::string(reduce_op_name(ReduceOp::Average)) == "average");
  CHECK(std::string(reduce_op_name(ReduceOp::Product)) == "product");
  CHECK(std::string(requestTypeName(RequestType::Reducescatter)) == "reducescatter");
  CHECK(std::string(requestTypeName(RequestType::AddProcessSet)) == "add_process_set");
  CHECK(std::string(responseTypeName(ResponseType::Error)) == "error");
  CHECK(std::string(responseTypeName(ResponseType::RemoveProcessSet)) == "remove_process_set");
  // The timeline's phases: Horovod's words.
  CHECK(std::string(negotiatePhaseName(RequestType::Allreduce)) == "NEGOTIATE_ALLREDUCE");
  CHECK(std::string(negotiatePhaseName(RequestType::AddProcessSet)) ==
        "NEGOTIATE_ADD_PROCESS_SET");
  CHECK(std::string(negotiatePhaseName(static_cast<RequestType>(200))) == "NEGOTIATE_INVALID");
  CHECK(std::string(collectivePhaseName(ResponseType::Reducescatter)) == "REDUCESCATTER");
  CHECK(std::string(collectivePhaseName(ResponseType::Error)) == "ERROR");
  CHECK(std::string(collectivePhaseName(static_cast<ResponseType>(200))) == "INVALID");
  Response r;
  r.dtype = DType::Float16;
  r.shapes = {{3, 2}, {5}};
  CHECK(r.tensorBytes(0) == 12);
  CHECK(r.totalBytes() == 22);
  CHECK_THROWS_AS(r.tensorBytes(2), InvalidArgument);
}

TEST_CASE("element and byte counts that overflow are rejected, naming the shape", "[tensor]") {
  const std::int64_t p31 = std::int64_t{1} << 31, p32 = std::int64_t{1} << 32;
  const std::int64_t p62 = std::int64_t{1} << 62;
  // 2^64 elements wrapped to 0 (an "empty" tensor); 2^63 + 2^32 to a negative count.
  CHECK_THROWS_WITH(num_elements({p62, 4}),
                    "shape [4611686018427387904,4] has more elements than an int64 can count");
  CHECK_THROWS_WITH(num_elements({p32, p31 + 1}),
                    "shape [4294967296,2147483649] has more elements than an int64 can count");
  CHECK_THROWS_AS(num_elements({p32, p32, p32}), InvalidArgument);
  CHECK(num_elements({INT64_MAX}) == INT64_MAX);
  CHECK(num_elements({p62, 4, 0}) == 0);  // a zero dimension makes any shape empty
  CHECK_THROWS_WITH(num_elements({p62, 4, 0, -1}),
                    "shape [4611686018427387904,4,0,-1] has a negative dimension");
  // Countable elements, but more bytes than any buffer (or ptrdiff_t) can hold.
  TensorView big{nullptr, DType::Float64, {p62}, Device::cpu()};
  CHECK_THROWS_WITH(big.bytes(),
                    "shape [4611686018427387904] of float64 has more bytes than a "
                    "buffer can span (at most 9223372036854775807)");
  TensorView half{nullptr, DType::Float32, {p62 / 2 - 1}, Device::cpu()};
  CHECK(half.bytes() == static_cast<std::size_t>(p62 / 2 - 1) * 4);
  Response r;
  r.dtype = DType::Int64;
  r.shapes = {{p62}};
  CHECK_THROWS_AS(r.tensorBytes(0), InvalidArgument);
}

TEST_CASE("values outside an enum are named with the range the enum derives", "[tensor]") {
  for (int v = 0; v < kNumReduceOps; ++v) CHECK(invalidEnum(static_cast<ReduceOp>(v)).empty());
  for (int v = 0; v < kNumDTypes; ++v) CHECK(invalidEnum(static_cast<DType>(v)).empty());
  for (int v = 0; v < kNumDeviceTypes; ++v) CHECK(invalidEnum(static_cast<DeviceType>(v)).empty());
  CHECK(invalidEnum(static_cast<ReduceOp>(17)) ==
        "op 17 is not a ReduceOp (expected 0..5: sum, average, min, max, product, adasum)");
  CHECK(invalidEnum(static_cast<ReduceOp>(kNumReduceOps)) ==
        "op 6 is not a ReduceOp (expected 0..5: sum, average, min, max, product, adasum)");
  CHECK(invalidEnum(static_cast<DType>(kNumDTypes)) ==
        "dtype 11 is not a DType (expected 0..10: uint8, int8, int32, int64, float16, bfloat16, "
        "float32, float64, int16, uint16, bool)");
  CHECK(invalidEnum(static_cast<DeviceType>(255)) ==
        "device type 255 is not a DeviceType (expected 0..1: cpu, cuda)");
  // The names printed for such values stay printable.
  CHECK(std::string(reduce_op_name(static_cast<ReduceOp>(17))) == "invalid-op");
  CHECK(std::string(dtype_name(static_cast<DType>(kNumDTypes + 1))) == "invalid-dtype");
  CHECK(Device{static_cast<DeviceType>(7), 0}.str() == "invalid device type 7");
}

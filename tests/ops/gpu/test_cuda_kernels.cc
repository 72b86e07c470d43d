// The CUDA kernels against the host kernels they must equal, bit for bit: scaling every
// dtype, fp16/bf16 compression, and the batched copy with odd sizes and misaligned
// pointers.
#include "ops/cpu/half.h"
#include "ops/cpu/kernels.h"
#include "ops/cuda/kernels.h"

#include <accord/error.h>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using accord::DType;

void ok(cudaError_t status) {
  INFO(cudaGetErrorString(status));
  REQUIRE(status == cudaSuccess);
}

// Device memory holding `bytes`, plus `slack` bytes on each side that must stay as
// they were (they catch a kernel writing out of bounds).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes, std::size_t slack = 64) : bytes_(bytes), slack_(slack) {
    ok(cudaMalloc(&base_, bytes + 2 * slack));
    ok(cudaMemset(base_, 0xA5, bytes + 2 * slack));
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return static_cast<char*>(base_) + slack_; }
  void upload(const void* host, std::size_t bytes, std::size_t at = 0) {
    ok(cudaMemcpy(static_cast<char*>(data()) + at, host, bytes, cudaMemcpyHostToDevice));
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> all(bytes_ + 2 * slack_);
    ok(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost));
    return all;
  }
  // The buffer's bytes, after checking that the slack on both sides is untouched.
  std::vector<unsigned char> contents() const {
    const auto all = download();
    for (std::size_t i = 0; i < slack_; ++i) {
      INFO("guard byte " << i);
      REQUIRE(all[i] == 0xA5);
      REQUIRE(all[slack_ + bytes_ + i] == 0xA5);
    }
    return {all.begin() + slack_, all.begin() + slack_ + bytes_};
  }

 private:
  void* base_ = nullptr;
  std::size_t bytes_, slack_;
};

// Random bytes that are valid, finite values of `dtype`, of both signs and many
// magnitudes (so scaling rounds, saturates and underflows).
std::vector<unsigned char> randomValues(DType dtype, std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<unsigned char> out(count * accord::dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const double v = std::ldexp(mantissa(rng), exponent(rng));
    unsigned char* p = out.data() + i * accord::dtype_size(dtype);
    switch (dtype) {
      case DType::UInt8: {
        const auto x = static_cast<std::uint8_t>(rng());
        std::memcpy(p, &x, 1);
        break;
      }
      case DType::Int8: {
        const auto x = static_cast<std::int8_t>(rng());
        std::memcpy(p, &x, 1);
        break;
      }
      case DType::Int16: {
        const auto x = static_cast<std::int16_t>(rng());
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::UInt16: {
        const auto x = static_cast<std::uint16_t>(rng());
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::Bool: {
        const auto x = static_cast<std::uint8_t>(rng() & 1);
        std::memcpy(p, &x, 1);
        break;
      }
      case DType::Int32: {
        const auto x = static_cast<std::int32_t>(rng());
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::Int64: {
        const auto x = static_cast<std::int64_t>((std::uint64_t{rng()} << 32) | rng()) >> (rng() % 60);
        std::memcpy(p, &x, 8);
        break;
      }
      case DType::Float16: {
        const std::uint16_t x = accord::cpu::floatToHalf(static_cast<float>(std::ldexp(mantissa(rng), exponent(rng) / 3)));
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::BFloat16: {
        const std::uint16_t x = accord::cpu::floatToBfloat16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::Float32: {
        const auto x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::Float64:
        std::memcpy(p, &v, 8);
        break;
    }
  }
  return out;
}

// Bool is not here: it cannot be scaled (refused on both devices), and its copies and
// fills are those of uint8.
const DType kAllDTypes[] = {DType::UInt8,   DType::Int8,     DType::Int16,   DType::UInt16,
                            DType::Int32,   DType::Int64,    DType::Float16, DType::BFloat16,
                            DType::Float32, DType::Float64};

}  // namespace

TEST_CASE("cuda::scale equals cpu::scale for every dtype, size and alignment", "[scale]") {
  const std::pair<double, double> scalings[] = {
      {0.5, 1.0}, {1.0, 3.0}, {2.5, 4.0}, {1.0, 2.0}, {0.1, 1.0}, {1e10, 1.0}, {3.0, 7.0}};
  for (DType dtype : kAllDTypes) {
    const std::size_t elem = accord::dtype_size(dtype);
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000},
                              std::size_t{(1 << 20) + 3}}) {
      for (std::size_t misalign : {std::size_t{0}, std::size_t{1}}) {
        for (auto [factor, divisor] : scalings) {
          INFO(accord::dtype_name(dtype) << " x" << count << " offset " << misalign
                                         << " elements, * " << factor << " / " << divisor);
          auto host = randomValues(dtype, count, static_cast<std::uint32_t>(count * 31 + misalign));
          DeviceBuffer device((count + misalign) * elem);
          device.upload(host.data(), host.size(), misalign * elem);
          auto* at = static_cast<char*>(device.data()) + misalign * elem;
          accord::cuda::scale(at, count, dtype, factor, divisor, nullptr);
          ok(cudaDeviceSynchronize());
          accord::cpu::scale(host.data(), count, dtype, factor, divisor);
          const auto got = device.contents();
          REQUIRE(std::memcmp(got.data() + misalign * elem, host.data(), host.size()) == 0);
        }
      }
    }
  }
}

TEST_CASE("cuda::compress and decompress round like the host converters", "[compress]") {
  std::vector<float> values;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  std::uniform_int_distribution<int> exponent(-140, 140);  // subnormal, normal, overflow
  for (int i = 0; i < 100003; ++i)
    values.push_back(static_cast<float>(std::ldexp(mantissa(rng), exponent(rng))));
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(-std::numeric_limits<float>::infinity());
  values.push_back(65504.0f);  // float16's largest
  values.push_back(65520.0f);  // rounds up to float16 infinity
  values.push_back(-0.0f);
  const std::size_t n = values.size();
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    INFO(accord::dtype_name(dtype));
    DeviceBuffer in(n * 4), packed(n * 2), out(n * 4);
    in.upload(values.data(), n * 4);
    accord::cuda::compress(static_cast<const float*>(in.data()), packed.data(), n, dtype, nullptr);
    accord::cuda::decompress(packed.data(), static_cast<float*>(out.data()), n, dtype, nullptr);
    ok(cudaDeviceSynchronize());
    std::vector<std::uint16_t> expect_packed(n);
    std::vector<float> expect_out(n);
    if (dtype == DType::Float16) {
      accord::cpu::floatToHalf(values.data(), expect_packed.data(), n);
      accord::cpu::halfToFloat(expect_packed.data(), expect_out.data(), n);
    } else {
      accord::cpu::floatToBfloat16(values.data(), expect_packed.data(), n);
      accord::cpu::bfloat16ToFloat(expect_packed.data(), expect_out.data(), n);
    }
    const auto got_packed = packed.contents();
    const auto got_out = out.contents();
    REQUIRE(std::memcmp(got_packed.data(), expect_packed.data(), n * 2) == 0);
    REQUIRE(std::memcmp(got_out.data(), expect_out.data(), n * 4) == 0);
  }
}

TEST_CASE("cuda::batchedCopy moves many odd, misaligned pieces and nothing else", "[copy]") {
  std::mt19937 rng(11);
  // 300 small pieces (three launches) of 0..5000 bytes at any offset, and one of 8 MiB.
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 300; ++i) sizes.push_back(rng() % 5001);
  sizes.push_back((std::size_t{8} << 20) + 5);
  std::size_t total = 0;
  std::vector<std::size_t> src_at, dst_at;
  for (std::size_t s : sizes) {
    src_at.push_back(total + rng() % 17);
    dst_at.push_back(total + rng() % 17);
    total += s + 32;  // room for the offsets and a gap that must stay untouched
  }
  std::vector<unsigned char> source(total);
  for (auto& b : source) b = static_cast<unsigned char>(rng());
  DeviceBuffer src(total), dst(total);
  src.upload(source.data(), total);
  std::vector<accord::cuda::CopyPiece> pieces;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    pieces.push_back({static_cast<char*>(dst.data()) + dst_at[i],
                      static_cast<char*>(src.data()) + src_at[i], sizes[i]});
  accord::cuda::batchedCopy(pieces, nullptr);
  ok(cudaDeviceSynchronize());
  auto expect = std::vector<unsigned char>(total, 0xA5);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    std::memcpy(expect.data() + dst_at[i], source.data() + src_at[i], sizes[i]);
  const auto got = dst.contents();
  for (std::size_t i = 0; i < total; ++i) {
    if (got[i] != expect[i]) {
      INFO("first wrong byte at " << i);
      REQUIRE(got[i] == expect[i]);
    }
  }
}

TEST_CASE("cuda::fill writes the neutral elements cpu::fillNeutral writes", "[fill]") {
  for (DType dtype : kAllDTypes) {
    for (auto op : {accord::ReduceOp::Sum, accord::ReduceOp::Min, accord::ReduceOp::Max,
                    accord::ReduceOp::Product}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{333}, std::size_t{(1 << 20) + 1}}) {
        INFO(accord::dtype_name(dtype) << " x" << count << ", op " << accord::reduce_op_name(op));
        const std::size_t elem = accord::dtype_size(dtype);
        std::vector<unsigned char> expect(count * elem);
        accord::cpu::fillNeutral(expect.data(), count, dtype, op);
        std::uint64_t one = 0;
        std::memcpy(&one, expect.data(), elem);
        DeviceBuffer device(count * elem);
        accord::cuda::fill(device.data(), count, elem, &one, nullptr);
        ok(cudaDeviceSynchronize());
        const auto got = device.contents();
        REQUIRE(std::memcmp(got.data(), expect.data(), expect.size()) == 0);
      }
    }
  }
}

TEST_CASE("CUDA kernels refuse what they cannot do with a clear error", "[errors]") {
  DeviceBuffer buffer(64);
  CHECK_THROWS_AS(accord::cuda::compress(static_cast<const float*>(buffer.data()), buffer.data(), 4,
                                         DType::Float32, nullptr),
                  accord::InvalidArgument);
  CHECK_THROWS_WITH(accord::cuda::decompress(buffer.data(), static_cast<float*>(buffer.data()), 4,
                                             DType::Int8, nullptr),
                    Catch::Contains("float16 or bfloat16") && Catch::Contains("int8"));
  CHECK_THROWS_AS(accord::cuda::scale(buffer.data(), 4, static_cast<DType>(200), 2.0, 1.0, nullptr),
                  accord::InvalidArgument);
  // Nothing to do is not an error and launches nothing.
  CHECK_NOTHROW(accord::cuda::scale(nullptr, 0, DType::Float32, 2.0, 1.0, nullptr));
  CHECK_NOTHROW(accord::cuda::batchedCopy({}, nullptr));
  const std::uint32_t three = 3;
  CHECK_THROWS_WITH(accord::cuda::fill(buffer.data(), 4, 3, &three, nullptr),
                    Catch::Contains("3 bytes"));
  ok(cudaDeviceSynchronize());
}

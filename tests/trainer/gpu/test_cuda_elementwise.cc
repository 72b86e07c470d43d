// The element-wise kernels (nn/cuda/elementwise.cu) at every length and alignment their
// two paths meet: 16-byte vector accesses where all pointers allow them, one value at a
// time for the rest and for pointers off 16 bytes. In float32, bf16 and fp16 storage,
// each result must be the value rounded to the storage type, exactly as the host
// computes it, and nothing outside the output range may be written.
#include "device_bytes.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>

namespace accord::test {
namespace {

// Element offsets of (a, b, y) from a 256-byte-aligned allocation (c goes at a's):
// all aligned; all off 16 bytes; only the output off; one input off; all 16 bytes in
// (16-bit) or 32 (float); all 16 bytes in (float) or 8 (16-bit).
const size_t kOffsets[][3] = {{0, 0, 0}, {1, 1, 1}, {0, 0, 3}, {0, 5, 0}, {8, 8, 8}, {4, 4, 4}};
const size_t kLengths[] = {1, 3, 4, 7, 8, 9, 31, 4096 + 5, (size_t(1) << 20) + 3};

// An op on inputs (a, b, c) and output y; y holds a's values first where `in_place`.
struct Op {
  const char* what;
  std::function<void(const float* a, const float* b, const float* c, float* y, size_t n)> run;
  std::function<float(float a, float b, float c)> expect;
  bool in_place = false;
};

const Op kOps[] = {
    {"add",
     [](const float* a, const float* b, const float*, float* y, size_t n) {
       nn::cuda::add_forward(a, b, y, n);
     },
     [](float a, float b, float) { return a + b; }},
    {"add and relu",
     [](const float* a, const float* b, const float*, float* y, size_t n) {
       nn::cuda::add_relu_forward(a, b, y, n);
     },
     [](float a, float b, float) { return std::max(a + b, 0.0f); }},
    {"relu",
     [](const float* a, const float*, const float*, float* y, size_t n) {
       nn::cuda::relu_forward(a, y, n);
     },
     [](float a, float, float) { return std::max(a, 0.0f); }},
    {"relu backward",
     [](const float* a, const float* b, const float*, float* y, size_t n) {
       nn::cuda::relu_backward(a, b, y, n);
     },
     [](float relu_y, float dy, float) { return relu_y > 0.0f ? dy : 0.0f; }},
    {"accumulate",
     [](const float*, const float* b, const float*, float* y, size_t n) {
       nn::cuda::accumulate(y, b, n);
     },
     [](float a, float b, float) { return a + b; }, true},
    {"accumulate and relu backward",
     [](const float*, const float* b, const float* c, float* y, size_t n) {
       nn::cuda::accumulate_relu_backward(y, b, c, n);
     },
     [](float a, float b, float relu_y) { return relu_y > 0.0f ? a + b : 0.0f; }, true},
};

// Runs op at the offsets and checks y against its expectation (host floats, rounded
// here to the storage type), and that no byte around y changed.
void check(Math math, const Op& op, size_t n, const size_t* off, const std::vector<float>& a,
           const std::vector<float>& b, const std::vector<float>& c) {
  const size_t w = widthOf(math), room = (n + 16) * w;
  Bytes da(room), db(room), dc(room), dy(room);
  da.put(off[0] * w, encode(a, math));
  db.put(off[1] * w, encode(b, math));
  dc.put(off[0] * w, encode(c, math));
  if (op.in_place) dy.put(off[2] * w, encode(a, math));
  op.run(da.at(off[0] * w), db.at(off[1] * w), dc.at(off[0] * w), dy.at(off[2] * w), n);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = op.expect(a[i], b[i], c[i]);
  const std::vector<unsigned char> got = dy.all(), bytes = encode(stored(want, math), math);
  INFO(op.what << " n " << n << " offsets " << off[0] << " " << off[1] << " " << off[2]);
  REQUIRE(std::memcmp(got.data() + off[2] * w, bytes.data(), bytes.size()) == 0);
  size_t changed = room;  // the first byte outside the output that is not the sentinel
  for (size_t i = 0; i < room && changed == room; ++i)
    if ((i < off[2] * w || i >= (off[2] + n) * w) && got[i] != Bytes::kSentinel) changed = i;
  INFO("byte " << changed << " outside the output was written");
  REQUIRE(changed == room);
}

TEST_CASE("element-wise kernels: vector and single-value paths at any length and offset",
          "[elementwise]") {
  for (Math math : {Math::Fp32, Math::Bf16, Math::Fp16}) {
    HalfMode mode(math);
    INFO(nameOfMath(math));
    std::mt19937_64 rng(31);
    for (size_t n : kLengths) {
      // Inputs already in the storage type: the host's float sums then match the GPU's.
      auto a = stored(randomVector(n, rng), math), c = stored(randomVector(n, rng), math);
      const auto b = stored(randomVector(n, rng), math);
      // A ReLU's output (a for relu backward, c for the masked sum) is often exactly 0.
      for (size_t i = 0; i < n; i += 5) a[i] = c[i] = 0.0f;
      for (const auto& off : kOffsets)
        for (const Op& op : kOps) check(math, op, n, off, a, b, c);
    }
    // Long enough that each thread of the largest grid takes several Packs.
    const size_t n = (size_t(1) << 24) + 5;
    const auto a = stored(randomVector(n, rng), math), b = stored(randomVector(n, rng), math);
    for (const auto& off : {kOffsets[0], kOffsets[2]})
      check(math, kOps[1], n, off, a, b, a);  // add and relu
  }
}

TEST_CASE("element-wise kernels in place: accumulate, and add and relu onto an input",
          "[elementwise]") {
  for (Math math : {Math::Fp32, Math::Bf16, Math::Fp16}) {
    HalfMode mode(math);
    INFO(nameOfMath(math));
    std::mt19937_64 rng(32);
    const size_t n = 4096 + 5, w = widthOf(math);
    const auto a = stored(randomVector(n, rng), math), b = stored(randomVector(n, rng), math);
    std::vector<float> sum(n), sum_relu(n);
    for (size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i], sum_relu[i] = std::max(sum[i], 0.0f);
    for (size_t o : {size_t(0), size_t(1)}) {
      INFO("offset " << o);
      Bytes da(2 * n * w + 64), db(2 * n * w + 64);
      da.put(o * w, encode(a, math));
      db.put(o * w, encode(b, math));
      nn::cuda::accumulate(da.at(o * w), db.at(o * w), n);
      std::vector<unsigned char> got = da.all(), want = encode(stored(sum, math), math);
      REQUIRE(std::memcmp(got.data() + o * w, want.data(), want.size()) == 0);
      da.put(o * w, encode(a, math));
      nn::cuda::add_relu_forward(da.at(o * w), db.at(o * w), da.at(o * w), n);
      got = da.all(), want = encode(stored(sum_relu, math), math);
      REQUIRE(std::memcmp(got.data() + o * w, want.data(), want.size()) == 0);
    }
  }
}

}  // namespace
}  // namespace accord::test

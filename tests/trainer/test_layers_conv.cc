// conv2d: forward against a naive direct convolution (1x1, 3x3, 7x7; strides 1 and 2;
// with and without padding and bias), backward (input, weight and bias gradients)
// against central finite differences, and the He initialisation.
#include "nn/layers.h"
#include "test_layers_util.h"

#include <accord/error.h>

#include <sstream>
#include <string>

namespace accord::nn::test {
namespace {

struct ConvCase {
  int N, C_in, C_out, H, W, K, stride, pad;
  bool bias;
};

std::string name(const ConvCase& c) {
  std::ostringstream os;
  os << "N" << c.N << " " << c.C_in << "->" << c.C_out << " " << c.H << "x" << c.W << " K" << c.K
     << " s" << c.stride << " p" << c.pad << (c.bias ? " bias" : "");
  return os.str();
}

std::vector<double> naiveConv(const Conv2d& c, const Tensor& x, int N, int H, int W) {
  int Ho = c.out_h(H), Wo = c.out_w(W);
  std::vector<double> y(static_cast<size_t>(N) * c.C_out * Ho * Wo);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < c.C_out; ++o)
      for (int i = 0; i < Ho; ++i)
        for (int j = 0; j < Wo; ++j) {
          double s = c.bias ? c.b[o] : 0.0;
          for (int ci = 0; ci < c.C_in; ++ci)
            for (int ki = 0; ki < c.K; ++ki)
              for (int kj = 0; kj < c.K; ++kj) {
                int h = i * c.stride - c.pad + ki, w = j * c.stride - c.pad + kj;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                s += static_cast<double>(x[((n * c.C_in + ci) * H + h) * W + w]) *
                     c.w[((o * c.C_in + ci) * c.K + ki) * c.K + kj];
              }
          y[((n * c.C_out + o) * Ho + i) * Wo + j] = s;
        }
  return y;
}

struct ConvFixture {
  ConvCase cc;
  Conv2d conv;
  Tensor x, w, b, dw, db, y;
  int Ho, Wo;

  explicit ConvFixture(const ConvCase& c, uint64_t seed) : cc(c) {
    std::mt19937_64 rng(seed);
    conv = Conv2d{c.C_in, c.C_out, c.K, c.stride, c.pad, c.bias};
    Ho = conv.out_h(c.H);
    Wo = conv.out_w(c.W);
    x = randomTensor(static_cast<size_t>(c.N) * c.C_in * c.H * c.W, rng);
    w = randomTensor(static_cast<size_t>(c.C_out) * c.C_in * c.K * c.K, rng);
    b = randomTensor(c.C_out, rng);
    dw.assign(w.size(), 0.0f);
    db.assign(b.size(), 0.0f);
    y.assign(static_cast<size_t>(c.N) * c.C_out * Ho * Wo, 0.0f);
    conv.w = w.data();
    conv.dw = dw.data();
    conv.b = c.bias ? b.data() : nullptr;
    conv.db = c.bias ? db.data() : nullptr;
  }
  void forward() { conv2d_forward(conv, x.data(), y.data(), cc.N, cc.H, cc.W); }
};

const ConvCase kCases[] = {
    {2, 3, 4, 7, 6, 1, 1, 0, false},    // 1x1
    {2, 4, 8, 8, 8, 1, 2, 0, false},    // 1x1 stride 2: the downsample shortcut
    {2, 3, 5, 6, 7, 3, 1, 1, true},     // 3x3 same, with bias
    {1, 16, 16, 9, 9, 3, 1, 1, false},  // 3x3, channels a multiple of the SIMD block
    {2, 8, 16, 9, 8, 3, 2, 1, false},   // 3x3 stride 2, odd size
    {2, 3, 6, 5, 5, 3, 1, 0, true},     // no padding
    {2, 3, 8, 14, 13, 7, 2, 3, false},  // the ImageNet stem
};

TEST_CASE("conv2d forward equals a naive convolution", "[layers][conv2d]") {
  for (const ConvCase& c : kCases) {
    SECTION(name(c)) {
      ConvFixture f(c, 1);
      f.forward();
      checkClose("y", f.y.data(), naiveConv(f.conv, f.x, c.N, c.H, c.W), 1e-4, 1e-4);
    }
  }
}

TEST_CASE("conv2d backward equals finite differences", "[layers][conv2d]") {
  for (const ConvCase& c : kCases) {
    SECTION(name(c)) {
      ConvFixture f(c, 2);
      SingleThreaded one_thread;
      std::mt19937_64 rng(3);
      Tensor r = randomTensor(f.y.size(), rng);  // dL/dy
      Tensor dx(f.x.size(), -7.0f);              // overwritten, not accumulated
      f.forward();
      conv2d_backward(f.conv, f.x.data(), r.data(), dx.data(), c.N, c.H, c.W);
      auto loss = [&] {
        f.forward();
        return project(r, f.y.data());
      };
      // The loss is linear in x, w and b: any step is exact up to float rounding.
      Tensor dw = f.dw, db = f.db;
      checkGradient("dx", f.x, dx, loss, 0.5, 1e-3, 1e-3);
      checkGradient("dw", f.w, dw, loss, 0.5, 1e-3, 1e-3);
      if (c.bias) checkGradient("db", f.b, db, loss, 0.5, 1e-3, 1e-3);
    }
  }
}

TEST_CASE("conv2d backward without dx still writes the weight gradient", "[layers][conv2d]") {
  ConvFixture f(kCases[6], 4);
  std::mt19937_64 rng(5);
  Tensor r = randomTensor(f.y.size(), rng);
  Tensor dx(f.x.size());
  f.forward();
  conv2d_backward(f.conv, f.x.data(), r.data(), dx.data(), 2, 14, 13);
  Tensor with_dx = f.dw;
  std::fill(f.dw.begin(), f.dw.end(), 0.0f);
  conv2d_backward(f.conv, f.x.data(), r.data(), nullptr, 2, 14, 13);
  CHECK(f.dw == with_dx);
}

TEST_CASE("conv2d rejects unbound parameters and impossible shapes", "[layers][conv2d]") {
  Conv2d c{3, 4, 3, 1, 0, false};
  Tensor x(2 * 3 * 5 * 5), y(2 * 4 * 3 * 3);
  CHECK_THROWS_AS(conv2d_forward(c, x.data(), y.data(), 2, 5, 5), InvalidArgument);
  Tensor w(4 * 3 * 3 * 3);
  c.w = w.data();
  CHECK_THROWS_AS(conv2d_forward(c, x.data(), y.data(), 2, 2, 2), InvalidArgument);
  CHECK_NOTHROW(conv2d_forward(c, x.data(), y.data(), 2, 5, 5));
}

TEST_CASE("conv2d init is He normal (fan_out), seeded", "[layers][conv2d][init]") {
  Conv2d c{64, 128, 3, 1, 1, true};
  Tensor w(c.num_params() - 128), b(128, 1.0f), w2(w.size());
  c.w = w.data();
  c.b = b.data();
  std::mt19937_64 rng(42);
  conv2d_init(c, rng);
  double sum = 0, sq = 0;
  for (float v : w) sum += v, sq += static_cast<double>(v) * v;
  double mean = sum / w.size(), sd = std::sqrt(sq / w.size() - mean * mean);
  CHECK(std::abs(mean) < 0.002);
  CHECK(sd == Approx(std::sqrt(2.0 / (128 * 9))).epsilon(0.02));
  CHECK(b == Tensor(128, 0.0f));
  c.w = w2.data();
  std::mt19937_64 rng2(42);
  conv2d_init(c, rng2);
  CHECK(w == w2);
}

}  // namespace
}  // namespace accord::nn::test

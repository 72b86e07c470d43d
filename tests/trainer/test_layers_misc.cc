// The small layers: ReLU, max pool, global average pool, linear, residual add and
// accumulate; forward against naive loops, backward against finite differences.
#include "test_layers_util.h"

#include <accord/error.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace accord::nn::test {
namespace {

// Values spaced at least 0.01 apart and at least 0.005 from zero, so a finite-difference
// step of 1e-3 never crosses a ReLU kink or changes which element is a pool's max.
Tensor spacedTensor(size_t n, std::mt19937_64& rng) {
  Tensor t(n);
  for (size_t i = 0; i < n; ++i) t[i] = (static_cast<float>(i) - n / 2.0f) * 0.01f + 0.005f;
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

TEST_CASE("relu forward, in place, and backward from its output", "[layers][relu]") {
  std::mt19937_64 rng(1);
  Tensor x = spacedTensor(1000, rng), y(1000), r = randomTensor(1000, rng), dx(1000);
  relu_forward(x.data(), y.data(), x.size());
  std::vector<double> expect(x.size());
  for (size_t i = 0; i < x.size(); ++i) expect[i] = std::max(x[i], 0.0f);
  checkClose("y", y.data(), expect, 0, 0);
  relu_backward(y.data(), r.data(), dx.data(), x.size());
  SingleThreaded one_thread;
  checkGradient(
      "dx", x, dx,
      [&] {
        relu_forward(x.data(), y.data(), x.size());
        return project(r, y.data());
      },
      1e-3, 1e-4, 1e-4, 1000);
  Tensor in_place = x;
  relu_forward(in_place.data(), in_place.data(), x.size());
  CHECK(in_place == y);
  relu_backward(y.data(), r.data(), r.data(), x.size());
  CHECK(r == dx);
}

std::vector<double> naiveMaxPool(const MaxPool2d& p, const Tensor& x, int N, int C, int H, int W) {
  int Ho = p.out_h(H), Wo = p.out_w(W);
  std::vector<double> y(static_cast<size_t>(N) * C * Ho * Wo, -1e30);
  for (int nc = 0; nc < N * C; ++nc)
    for (int i = 0; i < Ho; ++i)
      for (int j = 0; j < Wo; ++j)
        for (int ki = 0; ki < p.K; ++ki)
          for (int kj = 0; kj < p.K; ++kj) {
            int h = i * p.stride - p.pad + ki, w = j * p.stride - p.pad + kj;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double& out = y[(static_cast<size_t>(nc) * Ho + i) * Wo + j];
            out = std::max(out, static_cast<double>(x[(static_cast<size_t>(nc) * H + h) * W + w]));
          }
  return y;
}

TEST_CASE("maxpool2d 3x3/2 pad 1 forward and backward", "[layers][pool]") {
  for (int H : {7, 8}) {
    SECTION("H = " + std::to_string(H)) {
      const int N = 2, C = 3, W = H + 1;
      MaxPool2d p;
      int Ho = p.out_h(H), Wo = p.out_w(W);
      std::mt19937_64 rng(2);
      size_t nx = static_cast<size_t>(N) * C * H * W, ny = static_cast<size_t>(N) * C * Ho * Wo;
      Tensor x = spacedTensor(nx, rng), y(ny), ws(ny), r = randomTensor(ny, rng), dx(nx, -7.0f);
      maxpool2d_forward(p, x.data(), y.data(), ws.data(), N, C, H, W);
      checkClose("y", y.data(), naiveMaxPool(p, x, N, C, H, W), 0, 0);
      maxpool2d_backward(p, r.data(), ws.data(), dx.data(), N, C, H, W);
      SingleThreaded one_thread;
      Tensor ws2(ny);
      checkGradient(
          "dx", x, dx,
          [&] {
            maxpool2d_forward(p, x.data(), y.data(), ws2.data(), N, C, H, W);
            return project(r, y.data());
          },
          1e-3, 1e-4, 1e-4, 1000);
    }
  }
}

TEST_CASE("global average pool forward and backward", "[layers][pool]") {
  const int N = 2, C = 5, H = 3, W = 4;
  std::mt19937_64 rng(3);
  Tensor x = randomTensor(N * C * H * W, rng), y(N * C), r = randomTensor(N * C, rng);
  Tensor dx(x.size(), -7.0f);
  avgpool_forward(x.data(), y.data(), N, C, H, W);
  std::vector<double> expect(N * C);
  for (int i = 0; i < N * C; ++i)
    expect[i] = std::accumulate(x.begin() + i * H * W, x.begin() + (i + 1) * H * W, 0.0) / (H * W);
  checkClose("y", y.data(), expect, 1e-6, 1e-5);
  avgpool_backward(r.data(), dx.data(), N, C, H, W);
  for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == Approx(r[i / (H * W)] / (H * W)));
}

struct LinearFixture {
  static constexpr int N = 3, in = 7, out = 5;
  Linear l{in, out};
  Tensor x, w, b, dw, db, y;
  explicit LinearFixture(uint64_t seed) {
    std::mt19937_64 rng(seed);
    x = randomTensor(N * in, rng);
    w = randomTensor(out * in, rng);
    b = randomTensor(out, rng);
    dw.assign(w.size(), 0.0f);
    db.assign(b.size(), 0.0f);
    y.assign(N * out, 0.0f);
    l.w = w.data(), l.b = b.data(), l.dw = dw.data(), l.db = db.data();
  }
  void forward() { linear_forward(l, x.data(), y.data(), N); }
};

TEST_CASE("linear forward is x W^T + b", "[layers][linear]") {
  LinearFixture f(4);
  f.forward();
  std::vector<double> expect(f.N * f.out);
  for (int n = 0; n < f.N; ++n)
    for (int o = 0; o < f.out; ++o) {
      double s = f.b[o];
      for (int i = 0; i < f.in; ++i)
        s += static_cast<double>(f.x[n * f.in + i]) * f.w[o * f.in + i];
      expect[n * f.out + o] = s;
    }
  checkClose("y", f.y.data(), expect, 1e-5, 1e-5);
}

TEST_CASE("linear backward equals finite differences", "[layers][linear]") {
  SingleThreaded one_thread;
  LinearFixture f(5);
  std::mt19937_64 rng(6);
  Tensor r = randomTensor(f.y.size(), rng), dx(f.x.size(), -7.0f);
  f.forward();
  linear_backward(f.l, f.x.data(), r.data(), dx.data(), f.N);
  Tensor dw = f.dw, db = f.db;
  auto loss = [&] {
    f.forward();
    return project(r, f.y.data());
  };
  checkGradient("dx", f.x, dx, loss, 0.5, 1e-4, 1e-4);
  checkGradient("dw", f.w, dw, loss, 0.5, 1e-4, 1e-4);
  checkGradient("db", f.b, db, loss, 0.5, 1e-4, 1e-4);
  linear_backward(f.l, f.x.data(), r.data(), nullptr, f.N);
  CHECK(f.dw == dw);
}

TEST_CASE("linear init is torchvision's uniform(-1/sqrt(in), 1/sqrt(in)), seeded",
          "[layers][linear][init]") {
  Linear l{512, 10};
  Tensor w(512 * 10), b(10), w2(w.size()), b2(10);
  l.w = w.data(), l.b = b.data();
  std::mt19937_64 rng(7);
  linear_init(l, rng);
  float bound = 1.0f / std::sqrt(512.0f);
  CHECK(*std::max_element(w.begin(), w.end()) <= bound);
  CHECK(*std::min_element(w.begin(), w.end()) >= -bound);
  CHECK(*std::max_element(w.begin(), w.end()) > 0.95f * bound);  // fills the whole range
  CHECK(*std::max_element(b.begin(), b.end()) <= bound);
  l.w = w2.data(), l.b = b2.data();
  std::mt19937_64 rng2(7);
  linear_init(l, rng2);
  CHECK(w == w2);
  CHECK(b == b2);
}

TEST_CASE("residual add and accumulate", "[layers][add]") {
  std::mt19937_64 rng(8);
  const size_t n = 1037;  // not a multiple of any vector width
  Tensor a = randomTensor(n, rng), b = randomTensor(n, rng), y(n);
  add_forward(a.data(), b.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) REQUIRE(y[i] == a[i] + b[i]);
  Tensor a2 = a, b2 = b;
  add_forward(a2.data(), b.data(), a2.data(), n);  // in place on a
  add_forward(a.data(), b2.data(), b2.data(), n);  // in place on b
  CHECK(a2 == y);
  CHECK(b2 == y);
  accumulate(a.data(), b.data(), n);
  CHECK(a == y);
}

TEST_CASE("residual add and ReLU in one pass", "[layers][add]") {
  std::mt19937_64 rng(10);
  const size_t n = 1037;
  Tensor a = randomTensor(n, rng), b = randomTensor(n, rng), y(n, -7.0f);
  add_relu_forward(a.data(), b.data(), y.data(), n);
  size_t zeros = 0;
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(y[i] == std::max(a[i] + b[i], 0.0f));
    zeros += y[i] == 0.0f;
  }
  CHECK(zeros > n / 4);  // the inputs reach both sides of zero
  CHECK(zeros < 3 * n / 4);
  // The same as the two calls it replaces, in place on either input too.
  Tensor two(n), a2 = a, b2 = b;
  add_forward(a.data(), b.data(), two.data(), n);
  relu_forward(two.data(), two.data(), n);
  CHECK(y == two);
  add_relu_forward(a2.data(), b.data(), a2.data(), n);
  add_relu_forward(a.data(), b2.data(), b2.data(), n);
  CHECK(a2 == y);
  CHECK(b2 == y);
}

TEST_CASE("set_num_threads changes nothing but speed", "[layers][backend]") {
  LinearFixture f(9);
  f.forward();
  Tensor y = f.y;
  int previous = set_num_threads(1);
  f.forward();
  set_num_threads(previous);
  CHECK(f.y == y);
}

}  // namespace
}  // namespace accord::nn::test

// batchnorm2d: training forward against the textbook formula (batch mean, biased
// variance), the running-statistics update (momentum 0.1, unbiased variance, like
// PyTorch), inference mode on the running statistics, and backward in both modes
// against central finite differences.
#include "test_layers_util.h"

#include <algorithm>
#include <cmath>

namespace accord::nn::test {
namespace {

constexpr int N = 3, C = 4, H = 3, W = 5;
constexpr size_t kSize = static_cast<size_t>(N) * C * H * W;

struct BnFixture {
  BatchNorm2d bn;
  Tensor x, y, gamma, beta, dgamma, dbeta, rmean, rvar, smean, svar;

  explicit BnFixture(uint64_t seed) {
    std::mt19937_64 rng(seed);
    x = randomTensor(kSize, rng, -2.0f, 3.0f);
    y.assign(kSize, 0.0f);
    gamma = randomTensor(C, rng, 0.5f, 1.5f);
    beta = randomTensor(C, rng);
    rmean = randomTensor(C, rng);
    rvar = randomTensor(C, rng, 0.5f, 2.0f);
    dgamma.assign(C, 0.0f);
    dbeta.assign(C, 0.0f);
    smean.assign(C, 0.0f);
    svar.assign(C, 0.0f);
    bn = BatchNorm2d{C};
    bn.gamma = gamma.data();
    bn.beta = beta.data();
    bn.dgamma = dgamma.data();
    bn.dbeta = dbeta.data();
    bn.running_mean = rmean.data();
    bn.running_var = rvar.data();
    bn.save_mean = smean.data();
    bn.save_var = svar.data();
  }
  void forward(bool training) { batchnorm2d_forward(bn, x.data(), y.data(), N, H, W, training); }
  float& at(Tensor& t, int n, int c, int i) { return t[(n * C + c) * H * W + i]; }
};

// Per-channel mean and biased variance of x, in double.
void stats(BnFixture& f, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(C, 0.0);
  var.assign(C, 0.0);
  for (int c = 0; c < C; ++c) {
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < H * W; ++i) mean[c] += f.at(f.x, n, c, i);
    mean[c] /= N * H * W;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < H * W; ++i) var[c] += std::pow(f.at(f.x, n, c, i) - mean[c], 2);
    var[c] /= N * H * W;
  }
}

std::vector<double> normalise(BnFixture& f, const std::vector<double>& mean,
                              const std::vector<double>& var) {
  std::vector<double> y(kSize);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < H * W; ++i)
        y[(n * C + c) * H * W + i] =
            f.gamma[c] * (f.at(f.x, n, c, i) - mean[c]) / std::sqrt(var[c] + 1e-5) + f.beta[c];
  return y;
}

TEST_CASE("batchnorm2d training forward uses batch statistics", "[layers][batchnorm]") {
  BnFixture f(1);
  std::vector<double> mean, var;
  stats(f, mean, var);
  Tensor rmean0 = f.rmean, rvar0 = f.rvar;
  f.forward(true);
  checkClose("y", f.y.data(), normalise(f, mean, var), 1e-4, 1e-4);
  checkClose("save_mean", f.smean.data(), mean, 1e-5, 1e-5);
  checkClose("save_var", f.svar.data(), var, 1e-5, 1e-4);
  // running = 0.9 running + 0.1 batch, with the unbiased variance (M / (M - 1)).
  double M = N * H * W;
  std::vector<double> rmean(C), rvar(C);
  for (int c = 0; c < C; ++c) {
    rmean[c] = 0.9 * rmean0[c] + 0.1 * mean[c];
    rvar[c] = 0.9 * rvar0[c] + 0.1 * var[c] * M / (M - 1);
  }
  checkClose("running_mean", f.rmean.data(), rmean, 1e-5, 1e-5);
  checkClose("running_var", f.rvar.data(), rvar, 1e-5, 1e-5);
}

TEST_CASE("batchnorm2d inference uses running statistics and leaves them alone",
          "[layers][batchnorm]") {
  BnFixture f(2);
  Tensor rmean0 = f.rmean, rvar0 = f.rvar;
  f.forward(false);
  std::vector<double> mean(f.rmean.begin(), f.rmean.end()), var(f.rvar.begin(), f.rvar.end());
  checkClose("y", f.y.data(), normalise(f, mean, var), 1e-4, 1e-4);
  CHECK(f.rmean == rmean0);
  CHECK(f.rvar == rvar0);
  // In place is allowed in inference.
  Tensor y = f.y;
  batchnorm2d_forward(f.bn, f.x.data(), f.x.data(), N, H, W, false);
  CHECK(f.x == y);
}

TEST_CASE("batchnorm2d init: gamma 1 (or 0), beta 0, running 0 / 1", "[layers][batchnorm]") {
  BnFixture f(3);
  batchnorm2d_init(f.bn, false);
  CHECK(f.gamma == Tensor(C, 1.0f));
  CHECK(f.beta == Tensor(C, 0.0f));
  CHECK(f.rmean == Tensor(C, 0.0f));
  CHECK(f.rvar == Tensor(C, 1.0f));
  batchnorm2d_init(f.bn, true);
  CHECK(f.gamma == Tensor(C, 0.0f));
}

TEST_CASE("batchnorm2d backward equals finite differences", "[layers][batchnorm]") {
  SingleThreaded one_thread;
  for (bool training : {true, false}) {
    SECTION(training ? "training" : "inference") {
      BnFixture f(4);
      std::mt19937_64 rng(5);
      Tensor r = randomTensor(kSize, rng);  // dL/dy
      Tensor dx(kSize, -7.0f);
      f.forward(training);
      batchnorm2d_backward(f.bn, f.x.data(), r.data(), dx.data(), N, H, W, training);
      Tensor dgamma = f.dgamma, dbeta = f.dbeta;
      auto loss = [&] {
        f.forward(training);
        return project(r, f.y.data());
      };
      checkGradient("dx", f.x, dx, loss, 1e-2, 2e-3, 1e-2, 1000);
      checkGradient("dgamma", f.gamma, dgamma, loss, 1e-2, 2e-3, 1e-2);
      checkGradient("dbeta", f.beta, dbeta, loss, 1e-2, 2e-3, 1e-2);
      // In training, sum over a channel of dx is 0 (the mean is subtracted).
      if (training) {
        double s = 0;
        for (int n = 0; n < N; ++n)
          for (int i = 0; i < H * W; ++i) s += f.at(dx, n, 1, i);
        CHECK(std::abs(s) < 1e-4);
      }
    }
  }
}

TEST_CASE("batchnorm2d backward may run in place on dy", "[layers][batchnorm]") {
  BnFixture f(6);
  std::mt19937_64 rng(7);
  Tensor r = randomTensor(kSize, rng), dx(kSize);
  f.forward(true);
  batchnorm2d_backward(f.bn, f.x.data(), r.data(), dx.data(), N, H, W, true);
  batchnorm2d_backward(f.bn, f.x.data(), r.data(), r.data(), N, H, W, true);
  for (size_t i = 0; i < kSize; ++i) REQUIRE(r[i] == Approx(dx[i]).margin(1e-6));
}

TEST_CASE("batchnorm2d with a fused relu equals batchnorm2d then relu", "[layers][batchnorm]") {
  for (bool training : {true, false}) {
    SECTION(training ? "training" : "inference") {
      BnFixture plain(9), fused(9);
      fused.bn.relu = true;
      std::mt19937_64 rng(10);
      Tensor r = randomTensor(kSize, rng), dx_plain(kSize), dx_fused(kSize);
      plain.forward(training);
      relu_forward(plain.y.data(), plain.y.data(), kSize);
      fused.forward(training);
      CHECK(fused.y == plain.y);
      CHECK(fused.rmean == plain.rmean);
      size_t zeros = std::count(fused.y.begin(), fused.y.end(), 0.0f);
      CHECK(zeros > kSize / 4);  // the mask matters
      CHECK(zeros < 3 * kSize / 4);
      Tensor g = r;
      relu_backward(plain.y.data(), g.data(), g.data(), kSize);
      batchnorm2d_backward(plain.bn, plain.x.data(), g.data(), dx_plain.data(), N, H, W, training);
      batchnorm2d_backward(fused.bn, fused.x.data(), r.data(), dx_fused.data(), N, H, W, training);
      std::vector<double> expect(dx_plain.begin(), dx_plain.end());
      checkClose("dx", dx_fused.data(), expect, 1e-5, 1e-5);
      checkClose("dgamma", fused.dgamma.data(), {plain.dgamma.begin(), plain.dgamma.end()}, 1e-5,
                 1e-5);
      checkClose("dbeta", fused.dbeta.data(), {plain.dbeta.begin(), plain.dbeta.end()}, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("batchnorm2d on larger planes with an offset mean, same on any thread count",
          "[layers][batchnorm]") {
  // 17 x 19 planes: many 8-lane blocks plus a tail; a large mean tests the variance pass.
  const int n = 2, c = 3, h = 17, w = 19;
  std::mt19937_64 rng(8);
  Tensor x = randomTensor(size_t(n) * c * h * w, rng, 99.0f, 101.0f), y(x.size()), y1(x.size());
  Tensor gamma{1.0f, 2.0f, 0.5f}, beta{0.0f, 1.0f, -1.0f}, rm(c, 0.0f), rv(c, 1.0f), sm(c), sv(c);
  BatchNorm2d bn{c};
  bn.gamma = gamma.data(), bn.beta = beta.data(), bn.running_mean = rm.data();
  bn.running_var = rv.data(), bn.save_mean = sm.data(), bn.save_var = sv.data();
  batchnorm2d_forward(bn, x.data(), y.data(), n, h, w, true);
  std::vector<double> expect(x.size());
  for (int ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0, count = n * h * w;
    for (int b = 0; b < n; ++b)
      for (int i = 0; i < h * w; ++i) mean += x[(b * c + ch) * h * w + i] / count;
    for (int b = 0; b < n; ++b)
      for (int i = 0; i < h * w; ++i)
        var += std::pow(x[(b * c + ch) * h * w + i] - mean, 2) / count;
    for (int b = 0; b < n; ++b)
      for (int i = 0; i < h * w; ++i) {
        size_t k = (b * c + ch) * h * w + i;
        expect[k] = gamma[ch] * (x[k] - mean) / std::sqrt(var + 1e-5) + beta[ch];
      }
  }
  checkClose("y", y.data(), expect, 2e-3, 1e-3);
  int previous = set_num_threads(1);
  batchnorm2d_forward(bn, x.data(), y1.data(), n, h, w, true);
  set_num_threads(previous);
  CHECK(y1 == y);
}

}  // namespace
}  // namespace accord::nn::test

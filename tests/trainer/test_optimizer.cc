// SGD follows torch.optim.SGD: momentum, Nesterov, weight decay, and no decay on BN
// parameters and biases when so configured.
#include "optimizer.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

using namespace accord::resnet;

namespace {

// The formula of optimizer.h in double precision, for one scalar.
double reference(double w, const std::vector<double>& grads, double lr, double mu, double wd,
                 bool nesterov) {
  double buf = 0;
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const double g = grads[t] + wd * w;
    buf = t == 0 ? g : mu * buf + g;
    w -= lr * (nesterov ? g + mu * buf : buf);
  }
  return w;
}

}  // namespace

TEST_CASE("SGD with momentum, Nesterov and selective weight decay", "[optimizer]") {
  const std::vector<double> grads = {0.5, -0.25, 1.0, 0.125};
  for (bool nesterov : {false, true}) {
    for (bool bn_decay : {true, false}) {
      std::vector<float> w = {1.0f, 2.0f}, g(2);
      std::vector<ParamRef> params = {{"conv.weight", &w[0], &g[0], 1, false},
                                      {"bn.weight", &w[1], &g[1], 1, true}};
      Sgd sgd(params, {0.9, nesterov, 0.01, bn_decay});
      for (double grad : grads) {
        g[0] = g[1] = static_cast<float>(grad);
        sgd.step(0.1);
      }
      CHECK(w[0] == Approx(reference(1.0, grads, 0.1, 0.9, 0.01, nesterov)).epsilon(1e-5));
      CHECK(w[1] ==
            Approx(reference(2.0, grads, 0.1, 0.9, bn_decay ? 0.01 : 0.0, nesterov)).epsilon(1e-5));
    }
  }
}

TEST_CASE("SGD without momentum is plain gradient descent", "[optimizer]") {
  std::vector<float> w(100000, 1.0f), g(100000, 2.0f);  // spans several parallel chunks
  Sgd sgd({{"w", w.data(), g.data(), w.size(), false}}, {0.0, false, 0.0, true});
  sgd.step(0.5);
  CHECK(std::count(w.begin(), w.end(), 0.0f) == static_cast<long>(w.size()));
  CHECK_THROWS(Sgd({}, {0.0, true, 0.0, true}));  // Nesterov needs momentum
}

TEST_CASE("the loss scale halves on overflow, doubles after enough good steps, and has bounds") {
  LossScaler s(1024.0f, 3);
  CHECK(s.scale() == 1024.0f);
  CHECK_FALSE(s.update(false));  // overflow: skip the step
  CHECK(s.scale() == 512.0f);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 512.0f);
  CHECK(s.update(true));  // the third good step in a row
  CHECK(s.scale() == 1024.0f);
  // An overflow restarts the count of good steps.
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 512.0f);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 512.0f);
  // Never above 2^24.
  LossScaler top(16777216.0f, 1);
  CHECK(top.update(true));
  CHECK(top.scale() == 16777216.0f);
  // Down to 1, and an overflow there is divergence.
  LossScaler low(2.0f, 100);
  CHECK_FALSE(low.update(false));
  CHECK(low.scale() == 1.0f);
  CHECK_THROWS_AS(low.update(false), accord::Error);
  CHECK_THROWS_AS(LossScaler(0.5f), accord::InvalidArgument);
  CHECK_THROWS_AS(LossScaler(1024.0f, 0), accord::InvalidArgument);
}

TEST_CASE("a loss scaler restored from a checkpoint goes on where it was") {
  LossScaler original(1024.0f, 4);
  REQUIRE(original.update(true));
  REQUIRE(original.update(true));
  REQUIRE_FALSE(original.update(false));  // 512, counting again
  REQUIRE(original.update(true));
  LossScaler resumed(65536.0f, 4);  // as a fresh run of the same settings starts
  resumed.restore(original.scale(), original.goodSteps());
  CHECK(resumed.scale() == 512.0f);
  CHECK(resumed.goodSteps() == 1);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(resumed.update(true));
    REQUIRE(original.update(true));
  }
  CHECK(resumed.scale() == 1024.0f);  // doubled after the interval, as the original did
  CHECK(resumed.scale() == original.scale());
  CHECK_THROWS_AS(resumed.restore(0.5, 0), accord::InvalidArgument);
  CHECK_THROWS_AS(resumed.restore(33554432.0, 0), accord::InvalidArgument);
  CHECK_THROWS_AS(resumed.restore(1024.0, 4), accord::InvalidArgument);
  CHECK_THROWS_AS(resumed.restore(1024.0, -1), accord::InvalidArgument);
}

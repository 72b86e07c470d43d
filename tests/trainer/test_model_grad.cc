// The whole model's backward: gradients against finite differences of the loss, every
// parameter's gradient handed to the sink exactly once under its name, and the mean
// gradient of a batch of 2B equal to the average over its two halves (what the
// data-parallel allreduce relies on; BN in inference mode).
#include "model.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <vector>

using namespace accord::resnet;

namespace {

void tinyModel(Model& m, int depth, bool cifar, int image, int batch) {
  ModelConfig cfg;
  cfg.depth = depth;
  cfg.classes = 7;
  cfg.in_channels = 2;
  cfg.cifar_stem = cifar;
  cfg.width = 0.0625;  // 4 channels in the stem
  cfg.max_batch = batch;
  cfg.image_size = image;
  cfg.seed = 3;
  buildModel(m, cfg);
  // Non-trivial BN statistics and affine parameters, so inference mode is not identity.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (const ParamRef& p : bufferList(m))
    for (std::size_t i = 0; i < p.n; ++i) p.w[i] = p.name.ends_with("var") ? u(rng) : u(rng) - 1.0f;
  for (const ParamRef& p : parameterList(m))
    if (p.is_bn_or_bias)
      for (std::size_t i = 0; i < p.n; ++i) p.w[i] = u(rng) - 0.5f;
}

std::vector<std::int32_t> fillBatch(Model& m, int N, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t n =
      static_cast<std::size_t>(N) * m.cfg.in_channels * m.cfg.image_size * m.cfg.image_size;
  for (std::size_t i = 0; i < n; ++i) m.input[i] = normal(rng);
  std::vector<std::int32_t> labels(N);
  for (int i = 0; i < N; ++i) labels[i] = static_cast<std::int32_t>(rng() % m.cfg.classes);
  return labels;
}

double lossAt(Model& m, const std::vector<std::int32_t>& labels, int N) {
  forward(m, N);
  return loss(m, labels.data(), N, 0.1f, false);
}

}  // namespace

TEST_CASE("model gradients match finite differences", "[model][grad]") {
  for (bool bn_training : {false, true}) {
    Model m;
    // 16x16 images and 4 of them: BN's batch statistics over the 2x2 maps of layer4
    // still see 16 values, so the loss is smooth enough for finite differences.
    tinyModel(m, 18, true, 16, 4);
    m.bn_training = bn_training;
    const auto labels = fillBatch(m, 4, 5);
    lossAt(m, labels, 4);
    loss(m, labels.data(), 4, 0.1f, true);
    backward(m, 4);
    // Copy the analytic gradients: the finite-difference forwards do not touch them,
    // but keep the test independent of that.
    std::map<std::string, std::vector<float>> grads;
    for (const ParamRef& p : parameterList(m)) grads[p.name].assign(p.g, p.g + p.n);
    int checked = 0, agreed = 0;
    std::mt19937_64 rng(17);
    for (const ParamRef& p : parameterList(m)) {
      for (int k = 0; k < 2; ++k) {
        const std::size_t i = rng() % p.n;
        const float saved = p.w[i];
        const float h = 2e-3f;
        p.w[i] = saved + h;
        const double up = lossAt(m, labels, 4);
        p.w[i] = saved - h;
        const double down = lossAt(m, labels, 4);
        p.w[i] = saved;
        const double numeric = (up - down) / (2 * h);
        const double analytic = grads[p.name][i];
        ++checked;
        // ReLU kinks and float32 make a rare coordinate disagree; count, don't fail.
        if (std::fabs(numeric - analytic) <= 2e-3 + 5e-2 * std::fabs(numeric))
          ++agreed;
        else
          WARN(p.name << "[" << i << "]: numeric " << numeric << " analytic " << analytic);
      }
    }
    INFO("BN training mode: " << bn_training);
    CHECK(agreed >= checked * 9 / 10);
  }
}

TEST_CASE("backward hands every parameter's gradient to the sink once", "[model]") {
  for (int depth : {18, 50}) {
    Model m;
    tinyModel(m, depth, false, 32, 2);
    std::map<std::string, std::pair<float*, std::size_t>> seen;
    int calls = 0;
    m.sink = [&](const std::string& name, float* g, std::size_t n) {
      seen[name] = {g, n};
      ++calls;
    };
    const auto labels = fillBatch(m, 2, 1);
    forward(m, 2);
    loss(m, labels.data(), 2, 0.0f, true);
    backward(m, 2);
    const auto params = parameterList(m);
    CHECK(calls == static_cast<int>(params.size()));
    for (const ParamRef& p : params) {
      INFO(p.name);
      REQUIRE(seen.count(p.name) == 1);
      CHECK(seen[p.name].first == p.g);
      CHECK(seen[p.name].second == p.n);
    }
    // The first gradient out is the last layer's: the allreduce of fc starts while
    // the convolutions below it are still in backward.
  }
}

TEST_CASE("the gradient of 2B images is the average over two halves of B", "[model]") {
  Model m;
  tinyModel(m, 18, true, 8, 4);
  m.bn_training = false;  // batch statistics would differ between the halves by design
  auto labels = fillBatch(m, 4, 9);
  const std::size_t per = static_cast<std::size_t>(m.cfg.in_channels) * 64;
  std::vector<float> images(m.input, m.input + 4 * per);
  forward(m, 4);
  loss(m, labels.data(), 4, 0.1f, true);
  backward(m, 4);
  std::vector<std::vector<float>> full, half_sum;
  for (const ParamRef& p : parameterList(m)) full.emplace_back(p.g, p.g + p.n);
  for (int h = 0; h < 2; ++h) {
    std::copy_n(images.data() + h * 2 * per, 2 * per, m.input);
    forward(m, 2);
    loss(m, labels.data() + 2 * h, 2, 0.1f, true);
    backward(m, 2);
    const auto params = parameterList(m);
    for (std::size_t t = 0; t < params.size(); ++t) {
      if (h == 0) half_sum.emplace_back(params[t].n, 0.0f);
      for (std::size_t i = 0; i < params[t].n; ++i) half_sum[t][i] += 0.5f * params[t].g[i];
    }
  }
  double worst = 0;
  bool finite = true;  // std::max would drop a NaN
  for (std::size_t t = 0; t < full.size(); ++t)
    for (std::size_t i = 0; i < full[t].size(); ++i) {
      const double d =
          std::fabs(double(full[t][i]) - half_sum[t][i]) / (1e-3 + std::fabs(double(full[t][i])));
      finite = finite && std::isfinite(d);
      worst = std::max(worst, d);
    }
  CHECK(finite);
  CHECK(worst < 1e-3);
}

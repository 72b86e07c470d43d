// The trainer's step on the GPU (resnet::deviceTrainStep: queued without waiting, and
// with --cuda-graphs as a CUDA graph, or as several: graphSegments) against the same
// steps through forward / loss / accuracy / backward, each of which waits for the GPU.
// Models built from one seed train on the GPU (trainOnDevice) on the same batches and
// must end alike: every step's loss and hits, the gradients the sink received (the same
// names in the same order, and the same values, read when the sink is called), the
// parameters, the momentum and the BN statistics. All of them run the same kernels with the same
// arguments, and with nn::cuda::set_deterministic none of them sums with atomics, so
// they must agree to rounding: a tolerance of 1e-5 of each tensor's scale (without it,
// a last bit that differs can round a 16-bit activation the other way, and nine steps
// of training carry that further). Tag [graphs].
#include "cudnn_layers_util.h"
#include "device_model.h"
#include "model.h"
#include "model_device.h"
#include "optimizer.h"
#include "small_model.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

namespace {

using namespace accord;
using test::checkClose;
using test::randomVector;
using test::smallConfig;

// The algorithms that repeat bit for bit, for as long as it lives.
struct Deterministic {
  Deterministic() : old(nn::cuda::set_deterministic(true)) {}
  ~Deterministic() { nn::cuda::set_deterministic(old); }
  bool old;
};

struct Trained {
  resnet::Model model;
  std::unique_ptr<resnet::Sgd> sgd;
  std::vector<std::string> order;                   // sink names, every step
  std::map<std::string, std::vector<float>> grads;  // their values, last step
  std::vector<float> losses;
  std::vector<int> top1;
};

void build(Trained& t, const char* precision) {
  resnet::buildModel(t.model, smallConfig());
  resnet::useDevice(t.model, "cuda", 0, precision);
  resnet::SgdOptions so;
  so.momentum = 0.9;
  so.weight_decay = 1e-4;
  t.sgd = std::make_unique<resnet::Sgd>(resnet::parameterList(t.model), so);
  resnet::trainOnDevice(t.model, *t.sgd);
  t.model.sink = [&t](const std::string& name, float* g, std::size_t n) {
    t.order.push_back(name);
    std::vector<float>& host = t.grads[name];
    host.resize(n);
    nn::cuda::copy_to_host(host.data(), g, n);  // waits for the stream
  };
}

// `count` steps at loss scale `scale` on batches drawn from rng (the same sequence for
// both models: each gets its own rng from the same seed).
enum class Way { Passes, Queued, Graphed, WhereItWorks };

void train(Trained& t, Way way, int count, float scale, std::mt19937_64& rng) {
  const resnet::ModelConfig& cfg = t.model.cfg;
  const int N = cfg.max_batch;
  const size_t in = size_t(N) * cfg.in_channels * cfg.image_size * cfg.image_size;
  for (int step = 0; step < count; ++step) {
    const std::vector<float> x = randomVector(in, rng);
    std::copy(x.begin(), x.end(), t.model.input);
    std::vector<int32_t> labels(N);
    for (int i = 0; i < N; ++i) labels[i] = int32_t(rng() % cfg.classes);
    t.model.loss_scale = scale;
    t.grads.clear();
    if (way != Way::Passes) {
      resnet::deviceTrainStep(t.model, labels.data(), N, 0.1f,
                              way == Way::Graphed        ? resnet::StepLaunch::Graph
                              : way == Way::WhereItWorks ? resnet::StepLaunch::GraphWhereItWorks
                                                         : resnet::StepLaunch::LayerByLayer);
      const resnet::DeviceStepResult r = resnet::deviceStepResult(t.model);
      CHECK(r.loss_average == r.loss);  // one rank: nothing averaged it
      t.losses.push_back(r.loss);
      t.top1.push_back(r.hits.top1);
    } else {
      resnet::forward(t.model, N);
      t.losses.push_back(resnet::loss(t.model, labels.data(), N, 0.1f, true));
      t.top1.push_back(resnet::accuracy(t.model, labels.data(), N).top1);
      resnet::backward(t.model, N);
    }
    resnet::deviceSgdStep(t.model, 0.05);
  }
}

std::vector<float> copyOf(const float* p, size_t n) { return std::vector<float>(p, p + n); }

// checkClose, which needs a tensor with a scale: an all-zero one (a gradient behind a
// zero-initialized BN gamma, say) must be all zero in both.
void same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  const auto zero = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
  };
  if (zero(want)) {
    INFO(what);
    CHECK(zero(got));
    return;
  }
  checkClose(got, want, 1e-5, what);
}

void compare(Trained& eager, Trained& graphed) {
  REQUIRE(graphed.losses.size() == eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(graphed.losses[i] == Approx(eager.losses[i]).epsilon(1e-5));
    CHECK(std::abs(graphed.top1[i] - eager.top1[i]) <= 1);  // a near tie may flip
  }
  CHECK(graphed.order == eager.order);
  REQUIRE(graphed.grads.size() == eager.grads.size());
  for (auto& [name, g] : eager.grads) same(graphed.grads[name], g, "gradient " + name);
  resnet::pullToHost(eager.model, *eager.sgd);
  resnet::pullToHost(graphed.model, *graphed.sgd);
  const nn::Arena &ep = eager.model.params, &gp = graphed.model.params;
  same(copyOf(gp.base, gp.capacity), copyOf(ep.base, ep.capacity), "parameters");
  const nn::Arena &eb = eager.model.buffers, &gb = graphed.model.buffers;
  same(copyOf(gb.base, gb.capacity), copyOf(eb.base, eb.capacity), "BN statistics");
  for (size_t i = 0; i < eager.sgd->momentum().size(); ++i)
    same(graphed.sgd->momentum()[i], eager.sgd->momentum()[i],
         "momentum of " + eager.sgd->params()[i].name);
}

TEST_CASE("the queued and the graphed step, in one graph or several, train as the passes",
          "[graphs]") {
  Deterministic same_bits;
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    INFO("precision " << precision);
    const float scale = std::string(precision) == "fp16" ? 1024.0f : 1.0f;
    // `segmented` cuts each graphed step into graphs of 16 KiB of gradients (many, for
    // this model), each one's gradients sent after its launch.
    Trained eager, queued, graphed, segmented;
    build(eager, precision);
    build(queued, precision);
    build(graphed, precision);
    build(segmented, precision);
    resnet::graphSegments(segmented.model, 16 << 10);
    std::mt19937_64 rng_e(3), rng_q(3), rng_g(3), rng_s(3);
    // `count` steps of all four at loss scale `at`; then the graphed models' counts.
    const auto phase = [&](int count, float at, int eager_steps, int captured, int replayed) {
      train(eager, Way::Passes, count, at, rng_e);
      train(queued, Way::Queued, count, at, rng_q);
      train(graphed, Way::Graphed, count, at, rng_g);
      train(segmented, Way::Graphed, count, at, rng_s);
      for (Trained* t : {&graphed, &segmented}) {
        const resnet::GraphStats s = resnet::deviceGraphStats(t->model);
        CHECK(s.eager == eager_steps);
        CHECK(s.captured == captured);
        CHECK(s.replayed == replayed);
      }
      CHECK(resnet::deviceGraphStats(graphed.model).segments == 1);
      CHECK(resnet::deviceGraphStats(segmented.model).segments > 4);
    };
    phase(4, scale, 1, 1, 3);      // one kind of step: run, captured, replayed twice
    phase(3, 2 * scale, 2, 2, 5);  // a new loss scale is a new kind: run, captured, replayed
    // Memory the graphs read freed (the plans dropped): run and captured again.
    nn::cuda::clear_plan_cache();
    phase(2, 2 * scale, 3, 3, 6);
    CHECK(resnet::deviceGraphStats(queued.model).replayed == 0);
    {
      INFO("queued");
      compare(eager, queued);
    }
    {
      INFO("graphed");
      compare(eager, graphed);
    }
    {
      INFO("graphed in segments");
      compare(eager, segmented);
    }
  }
}

TEST_CASE("where a capture fails, the default goes on layer by layer, and asked-for graphs stop",
          "[graphs]") {
  Deterministic same_bits;
  for (const char* precision : {"fp32", "bf16"}) {
    INFO("precision " << precision);
    Trained eager, fallback;
    build(eager, precision);
    build(fallback, precision);
    std::mt19937_64 rng_e(5), rng_f(5);
    train(eager, Way::Passes, 5, 1.0f, rng_e);
    train(fallback, Way::WhereItWorks, 1, 1.0f, rng_f);  // run layer by layer
    fallback.model.device->break_next_capture = true;
    train(fallback, Way::WhereItWorks, 4, 1.0f, rng_f);  // the capture fails at once
    const resnet::GraphStats s = resnet::deviceGraphStats(fallback.model);
    CHECK(s.eager == 1);
    CHECK(s.captured == 0);
    CHECK(s.replayed == 0);
    CHECK_THAT(s.failure, Catch::Contains("capturing the training step") &&
                              Catch::Contains("waiting for the stream"));
    // The step whose capture failed ran, once, and so did every step after it.
    compare(eager, fallback);
  }
  // Asked for, a capture that fails is an error, and the stream goes on working.
  Trained t;
  build(t, "fp32");
  std::mt19937_64 rng(9);
  train(t, Way::Graphed, 1, 1.0f, rng);
  t.model.device->break_next_capture = true;
  CHECK_THROWS_WITH(train(t, Way::Graphed, 1, 1.0f, rng),
                    Catch::Contains("capturing the training step"));
  train(t, Way::Graphed, 3, 1.0f, rng);  // captured now, and replayed
  CHECK(resnet::deviceGraphStats(t.model).captured == 1);
  CHECK(resnet::deviceGraphStats(t.model).replayed == 3);
  CHECK(std::isfinite(t.losses.back()));
}

TEST_CASE("a graphed step with a label outside the classes fails clearly", "[graphs]") {
  Trained t;
  build(t, "fp32");
  const resnet::ModelConfig& cfg = t.model.cfg;
  const int N = cfg.max_batch;
  std::fill(t.model.input, t.model.input + size_t(N) * 3 * 16 * 16, 0.5f);
  std::vector<int32_t> labels(N, 1);
  for (int round = 0; round < 3; ++round) {  // eager, captured, replayed
    INFO("round " << round);
    labels[N - 1] = round == 1 ? 3 : 10;
    resnet::deviceTrainStep(t.model, labels.data(), N, 0.0f, resnet::StepLaunch::Graph);
    if (round == 1) {
      CHECK_NOTHROW(resnet::deviceStepResult(t.model));
      continue;
    }
    CHECK_THROWS_WITH(resnet::deviceStepResult(t.model),
                      Catch::Contains("1 label(s) outside [0, 10)"));
  }
  CHECK(resnet::deviceGraphStats(t.model).replayed == 2);
}

TEST_CASE("the step needs a model trained on the GPU, and graphs no profile", "[graphs]") {
  resnet::Model m;
  resnet::buildModel(m, smallConfig());
  std::vector<int32_t> labels(8, 0);
  CHECK_THROWS_WITH(
      resnet::deviceTrainStep(m, labels.data(), 8, 0.0f, resnet::StepLaunch::LayerByLayer),
      Catch::Contains("not trained on a GPU"));
  resnet::useDevice(m, "cuda", 0, "fp32");
  CHECK_THROWS_WITH(resnet::deviceTrainStep(m, labels.data(), 8, 0.0f, resnet::StepLaunch::Graph),
                    Catch::Contains("not trained on a GPU"));
  resnet::Sgd sgd(resnet::parameterList(m), resnet::SgdOptions{});
  resnet::trainOnDevice(m, sgd);
  resnet::profileDevice(m);
  CHECK_THROWS_WITH(resnet::deviceTrainStep(m, labels.data(), 8, 0.0f, resnet::StepLaunch::Graph),
                    Catch::Contains("--gpu-profile"));
  // Queued, the profile times the step as the passes' would be.
  std::fill(m.input, m.input + size_t(8) * 3 * 16 * 16, 0.25f);
  resnet::deviceTrainStep(m, labels.data(), 8, 0.0f, resnet::StepLaunch::LayerByLayer);
  CHECK(std::isfinite(resnet::deviceStepResult(m).loss));
  // Graphs by default are not graphs under the profile: queued, never captured.
  for (int step = 0; step < 3; ++step) {
    resnet::deviceTrainStep(m, labels.data(), 8, 0.0f, resnet::StepLaunch::GraphWhereItWorks);
    CHECK(std::isfinite(resnet::deviceStepResult(m).loss));
  }
  CHECK(resnet::deviceGraphStats(m).captured == 0);
  const std::string table = resnet::deviceProfileReport(m, 4);
  CHECK_THAT(table, Catch::Contains("conv forward") && Catch::Contains("softmax cross-entropy") &&
                        Catch::Contains("copies from the GPU"));
}

}  // namespace

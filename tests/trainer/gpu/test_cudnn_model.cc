// The whole model on the GPU (useDevice(m, "cuda"): --device cuda) against the same
// model on the CPU: same seed, same batches, so the logits and every gradient the sink
// receives in the first step, and the losses, parameters and BN statistics of a few
// SGD steps must agree. Tag [model].
//
// Tolerance 2e-3 of each tensor's largest value: the per-layer differences (see
// test_cudnn_layers.cc) compound through a ResNet-18's 20 layers and batch norms.
// Gradients are compared in the first step only, where both start from the same
// parameters: after a step, parameters that differ in the last bits can flip a ReLU
// or a max-pool choice near a tie, and in a model this small (8 channels, 4 images,
// batch norm over as few as 4 values) one flip moves a gradient by percent.
#include "cudnn_layers_util.h"
#include "model.h"
#include "model_device.h"
#include "optimizer.h"
#include "small_model.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

namespace {

using namespace accord;
using test::checkClose;
using test::smallConfig;

struct Run {
  resnet::Model model;
  std::map<std::string, std::vector<float>> grads;        // what the sink received
  std::map<std::string, std::vector<float>> first_grads;  // ... in the first step
  std::vector<float> losses;
};

void build(Run& r, const resnet::ModelConfig& cfg, bool gpu, const char* precision = "fp32") {
  resnet::buildModel(r.model, cfg);
  if (gpu) resnet::useDevice(r.model, "cuda", 0, precision);
  r.model.sink = [&r](const std::string& name, float* g, std::size_t n) {
    r.grads[name].assign(g, g + n);  // host memory on both paths
  };
}

void steps(Run& r, int N, int count) {
  std::mt19937_64 rng(11);
  const size_t in =
      size_t(N) * r.model.cfg.in_channels * r.model.cfg.image_size * r.model.cfg.image_size;
  resnet::SgdOptions so;
  resnet::Sgd sgd(resnet::parameterList(r.model), so);
  for (int step = 0; step < count; ++step) {
    auto x = test::randomVector(in, rng);
    std::copy(x.begin(), x.end(), r.model.input);
    std::vector<int32_t> labels(N);
    for (int i = 0; i < N; ++i) labels[i] = int32_t(rng() % r.model.cfg.classes);
    resnet::forward(r.model, N);
    r.losses.push_back(resnet::loss(r.model, labels.data(), N, 0.1f, true));
    resnet::backward(r.model, N);
    if (step == 0) r.first_grads = r.grads;
    sgd.step(0.05);
  }
}

std::vector<float> copyOf(const float* p, size_t n) { return std::vector<float>(p, p + n); }

// The "calls" column (the last) of the profile's row for `kind`; -1 where there is none.
long long callsOf(const std::string& table, const std::string& kind) {
  std::istringstream rows(table);
  for (std::string row; std::getline(rows, row);) {
    const std::string head = "  " + kind + " ";
    if (row.compare(0, head.size(), head) != 0) continue;
    const std::size_t value = row.find_first_not_of(' ', head.size());
    if (value == std::string::npos || !std::isdigit(static_cast<unsigned char>(row[value])))
      continue;  // a longer kind that starts with this one
    return std::stoll(row.substr(row.find_last_of(' ') + 1));
  }
  return -1;
}

void compare(Run& cpu, Run& gpu, const resnet::ModelConfig& cfg, int N) {
  INFO(cfg.describe() << " N=" << N);
  REQUIRE(gpu.losses.size() == cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    CHECK(gpu.losses[i] == Approx(cpu.losses[i]).epsilon(2e-3));
  const size_t nl = size_t(N) * cfg.classes;
  checkClose(copyOf(gpu.model.logits, nl), copyOf(cpu.model.logits, nl), 2e-3, "last logits");
  REQUIRE(gpu.first_grads.size() == cpu.first_grads.size());
  for (auto& [name, g] : cpu.first_grads) {
    REQUIRE(gpu.first_grads.count(name) == 1);
    bool all_zero = std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; });
    if (!all_zero) checkClose(gpu.first_grads[name], g, 2e-3, "first step's gradient " + name);
  }
  const nn::Arena &gb = gpu.model.buffers, &cb = cpu.model.buffers;
  checkClose(copyOf(gb.base, gb.capacity), copyOf(cb.base, cb.capacity), 2e-3,
             "BN running statistics");
  const nn::Arena &gp = gpu.model.params, &cp = cpu.model.params;
  checkClose(copyOf(gp.base, gp.capacity), copyOf(cp.base, cp.capacity), 2e-3,
             "parameters after the steps");
}

TEST_CASE("a ResNet-18 on the GPU trains like on the CPU", "[model]") {
  for (bool cifar : {true, false}) {
    resnet::ModelConfig cfg;
    cfg.depth = 18, cfg.classes = 10, cfg.in_channels = 3, cfg.cifar_stem = cifar;
    cfg.width = 0.125, cfg.max_batch = 4, cfg.image_size = cifar ? 16 : 40;
    const int N = 4;
    Run cpu, gpu;
    build(cpu, cfg, false);
    build(gpu, cfg, true);
    steps(cpu, N, 3);
    steps(gpu, N, 3);
    compare(cpu, gpu, cfg, N);
  }
}

// One step of `cpu` and `gpu` (built from cfg, the GPU in reduced precision): the loss
// within loss_eps, the logits and the last layer's gradient within tol of their scale.
void oneStepClose(Run& cpu, Run& gpu, const resnet::ModelConfig& cfg, int N, double loss_eps,
                  double tol) {
  steps(cpu, N, 1);
  steps(gpu, N, 1);
  REQUIRE(gpu.losses.size() == 1);
  CHECK(gpu.losses[0] == Approx(cpu.losses[0]).epsilon(loss_eps));
  const size_t nl = size_t(N) * cfg.classes;
  checkClose(copyOf(gpu.model.logits, nl), copyOf(cpu.model.logits, nl), tol, "logits");
  checkClose(gpu.first_grads["fc.weight"], cpu.first_grads["fc.weight"], tol, "fc.weight gradient");
}

TEST_CASE("a ResNet-18 on the GPU in tf32 stays close to the CPU", "[model]") {
  // Tensor cores round float32 inputs to 10-bit mantissas (about 1e-3 relative per
  // product), so one step's loss and logits agree to about 1e-2 here, not 2e-3.
  const resnet::ModelConfig cfg = smallConfig();
  Run cpu, gpu;
  build(cpu, cfg, false);
  build(gpu, cfg, true, "tf32");
  oneStepClose(cpu, gpu, cfg, 8, 1e-2, 2e-2);
}

TEST_CASE("a ResNet-18 on the GPU in bf16 and fp16 stays close to the CPU and learns", "[model]") {
  // Activations in 16 bits (bf16: 8-bit mantissas, 2^-9 relative per stored value; fp16
  // 2^-12) through 20 layers: one step's loss within 3e-2, the logits and the last
  // layer's gradient within 5e-2 of their scale. Then 20 steps on one batch must drive
  // the loss down as they do on the CPU. (No loss scaling here: this small model's
  // gradients stay within fp16's range; the trainer's fp16 runs scale.)
  for (const char* precision : {"bf16", "fp16"}) {
    INFO(precision);
    const resnet::ModelConfig cfg = smallConfig();
    const int N = 8;
    Run cpu, gpu;
    build(cpu, cfg, false);
    build(gpu, cfg, true, precision);
    oneStepClose(cpu, gpu, cfg, N, 3e-2, 5e-2);

    // One fixed batch, trained repeatedly: the loss must fall on both.
    auto fit = [&](Run& r) {
      std::mt19937_64 rng(5);
      const size_t in = size_t(N) * cfg.in_channels * cfg.image_size * cfg.image_size;
      auto x = test::randomVector(in, rng);
      std::vector<int32_t> labels(N);
      for (int i = 0; i < N; ++i) labels[i] = int32_t(i % cfg.classes);
      resnet::SgdOptions so;
      resnet::Sgd sgd(resnet::parameterList(r.model), so);
      float first = 0.0f, last = 0.0f;
      for (int step = 0; step < 20; ++step) {
        std::copy(x.begin(), x.end(), r.model.input);
        resnet::forward(r.model, N);
        last = resnet::loss(r.model, labels.data(), N, 0.0f, true);
        if (step == 0) first = last;
        resnet::backward(r.model, N);
        sgd.step(0.05);
      }
      return std::make_pair(first, last);
    };
    const auto [cpu_first, cpu_last] = fit(cpu);
    const auto [gpu_first, gpu_last] = fit(gpu);
    INFO("loss on one batch over 20 steps: CPU " << cpu_first << " -> " << cpu_last << ", GPU "
                                                 << gpu_first << " -> " << gpu_last);
    CHECK(cpu_last < 0.5f * cpu_first);
    CHECK(gpu_last < 0.5f * gpu_first);
  }
  nn::cuda::set_math(nn::cuda::Math::Fp32);  // later tests start from plain fp32
}

TEST_CASE("the GPU profile times every layer kind a step runs", "[model]") {
  resnet::ModelConfig cfg;
  cfg.depth = 18, cfg.classes = 10, cfg.in_channels = 3, cfg.cifar_stem = false;
  cfg.width = 0.125, cfg.max_batch = 4, cfg.image_size = 32;
  Run gpu;
  build(gpu, cfg, true);
  resnet::profileDevice(gpu.model);
  steps(gpu, 4, 2);
  const std::string table = resnet::deviceProfileReport(gpu.model, 2);
  INFO(table);
  for (const char* kind :
       {"conv forward", "conv backward (data + filter)", "batch norm forward",
        "batch norm backward", "max pool forward", "max pool backward", "linear forward",
        "linear backward", "softmax cross-entropy", "copies to the GPU", "copies from the GPU"})
    CHECK(table.find(kind) != std::string::npos);
  // ResNet-18: 20 convolutions a forward pass (stem, 16 in blocks, 3 downsamples), 2 steps.
  CHECK(callsOf(table, "conv forward") == 40);
}

TEST_CASE("an unknown device is refused", "[model]") {
  resnet::ModelConfig cfg;
  cfg.width = 0.125, cfg.classes = 10, cfg.cifar_stem = true, cfg.image_size = 16;
  cfg.max_batch = 2;
  resnet::Model m;
  resnet::buildModel(m, cfg);
  CHECK_THROWS_AS(resnet::useDevice(m, "tpu", 0), InvalidArgument);
  CHECK_THROWS_AS(resnet::useDevice(m, "cpu", 0, "tf32"), InvalidArgument);  // GPU only
  CHECK_THROWS_AS(resnet::useDevice(m, "cuda", 0, "fp64"), InvalidArgument);
  CHECK_NOTHROW(resnet::useDevice(m, "cpu", 0));
  CHECK(!m.device);
}

}  // namespace

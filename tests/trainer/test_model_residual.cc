// The fused block end's wiring (Model::fuse_residual, model_pass.cc) on the CPU: a table
// of the CPU's layers with the reference bn_add_relu_forward (nn/residual.cc: the
// unfused calls in one entry) must train bit for bit as the unfused passes. What this
// pins down is the model's side of --fuse-residual: which buffers the block's end reads
// and writes, which batch norms' statistics move, and that backward reads only what the
// fused forward leaves (it never writes the blocks' last or shortcut batch-norm outputs
// on the GPU). The GPU's kernels are checked against the unfused calls in
// tests/trainer/gpu/test_cuda_bn_residual.cc and test_cuda_residual_block.cc.
#include "model.h"
#include "optimizer.h"

#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

using namespace accord;
using namespace accord::resnet;

namespace {

const nn::LayerOps& fusedReferenceLayers() {
  static const nn::LayerOps ops = [] {
    nn::LayerOps o = nn::cpuLayers();
    o.name = "cpu with the reference block end";
    o.bn_add_relu_forward = &nn::bn_add_relu_forward;
    return o;
  }();
  return ops;
}

struct Trained {
  std::vector<float> losses, logits, params, buffers;
  std::map<std::string, std::vector<float>> grads;  // the last step's, by name
};

// Two SGD steps of a small model on random batches, the block ends fused or not.
Trained train(int depth, bool fused) {
  ModelConfig cfg;
  cfg.depth = depth, cfg.classes = 10, cfg.in_channels = 3, cfg.cifar_stem = true;
  cfg.width = 0.125, cfg.max_batch = 4, cfg.image_size = 16, cfg.seed = 5;
  const int N = 4;
  Model m;
  buildModel(m, cfg);
  if (fused) {
    m.ops = &fusedReferenceLayers();
    m.fuse_residual = true;
  }
  Trained t;
  m.sink = [&t](const std::string& name, float* g, std::size_t n) {
    t.grads[name].assign(g, g + n);
  };
  Sgd sgd(parameterList(m), SgdOptions{});
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 2; ++step) {
    for (std::size_t i = 0; i < std::size_t(N) * 3 * 16 * 16; ++i) m.input[i] = normal(rng);
    std::vector<std::int32_t> labels(N);
    for (int i = 0; i < N; ++i) labels[i] = std::int32_t(rng() % cfg.classes);
    forward(m, N);
    t.losses.push_back(loss(m, labels.data(), N, 0.0f, true));
    backward(m, N);
    sgd.step(0.05);
  }
  t.logits.assign(m.logits, m.logits + N * cfg.classes);
  t.params.assign(m.params.base, m.params.base + m.params.capacity);
  t.buffers.assign(m.buffers.base, m.buffers.base + m.buffers.capacity);
  return t;
}

}  // namespace

TEST_CASE("the fused block end's wiring trains bit for bit as the unfused passes", "[model]") {
  // ResNet-18's blocks end with 2 convolutions, ResNet-50's with 3; both have blocks
  // with a shortcut batch norm (the first of stages 2-4, and of stage 1 in ResNet-50)
  // and blocks whose shortcut is their input.
  for (int depth : {18, 50}) {
    INFO("ResNet-" << depth);
    const Trained plain = train(depth, false), fused = train(depth, true);
    CHECK(fused.losses == plain.losses);
    CHECK(fused.logits == plain.logits);
    CHECK(fused.buffers == plain.buffers);
    CHECK(fused.params == plain.params);
    REQUIRE(fused.grads.size() == plain.grads.size());
    for (const auto& [name, g] : plain.grads) {
      INFO(name);
      REQUIRE(fused.grads.count(name) == 1);
      CHECK(fused.grads.at(name) == g);
    }
  }
}

TEST_CASE("the block passes alone repeat what the model's forward computed", "[model]") {
  ModelConfig cfg;
  cfg.depth = 50, cfg.classes = 10, cfg.in_channels = 3, cfg.cifar_stem = true;
  cfg.width = 0.125, cfg.max_batch = 2, cfg.image_size = 16;
  Model m;
  buildModel(m, cfg);
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t i = 0; i < std::size_t(2) * 3 * 16 * 16; ++i) m.input[i] = normal(rng);
  m.bn_training = false;  // running statistics: a block's second forward sees the same map
  forward(m, 2);
  for (std::size_t k : {std::size_t(0), std::size_t(1), m.blocks.size() - 1}) {
    Block& b = m.blocks[k];
    const std::size_t n =
        std::size_t(2) * b.convs.back().conv.C_out * b.convs.back().H * b.convs.back().W;
    const std::vector<float> y(b.y, b.y + n);
    blockForward(m, b, b.x, 2);
    CHECK(std::vector<float>(b.y, b.y + n) == y);
  }
}

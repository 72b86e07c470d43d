// One residual block's forward and backward as the model runs them (resnet::blockForward
// and blockBackward on the GPU model's device copy), with the fused block end
// (--fuse-residual) and without, on the same 16-bit input and output gradient: against
// each other, and each against the CPU model's same block (the reference). Tag [block].
//
// Why a block and not the whole model: a bottleneck ResNet this small is chaotic in 16
// bits. Measured on the CPU (the model of test_cuda_bn_residual.cc's first version, a
// ResNet-50 of width 1/8 on 16x16 images, batch 8): a relative noise of 2^-9 on the
// input alone, in float32, moves the first step's gradient by 60% of its largest value
// and the parameters after two steps by 49%; 16-bit rounding, fused or not, by as much.
// A model-level comparison there cannot tell a bug from rounding. One block can: the
// same CPU emulation puts rounding at under 1% of y and 12% (2-norm) of any gradient,
// and a wrong batch-norm backward in the fused path (no mean terms in dx, dgamma
// doubled, dbeta lost) at 45-100%.
//
// The output gradient is given as already through the block's ReLU (dy_masked), so the
// backward of both paths starts from the same values (the fused y rounds differently,
// and a ReLU flipped there would move single elements). Tolerances: y within 2e-2 of its
// largest value (one 16-bit rounding apart); dx and every gradient within 0.1 in the
// 2-norm between the paths, 0.25 against the CPU (16-bit rounding through a block, as
// measured above: 0.12 at most); running statistics within 1e-3 between the paths, 5e-3
// against the CPU (whose convolution outputs are not rounded to 16 bits).
#include "cudnn_half_util.h"
#include "cudnn_layers_util.h"
#include "device_model.h"
#include "model.h"
#include "model_device.h"
#include "nn/cuda/layers_cuda.h"

#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

using namespace accord;
using namespace accord::test;  // cudnn_layers_util.h, cudnn_half_util.h

namespace {

// What one run of a block leaves.
struct BlockRun {
  std::vector<float> y, dx, buffers;
  std::map<std::string, std::vector<float>> grads;  // the block's, as the sink got them
  std::string tail_backward;                        // the path of its last BN's backward
};

size_t inputSize(const resnet::Block& b, int N) {
  const resnet::ConvBn& c = b.convs.front();
  return size_t(N) * c.conv.C_in * c.H_in * c.W_in;
}

size_t outputSize(const resnet::Block& b, int N) {
  const resnet::ConvBn& c = b.convs.back();
  return size_t(N) * c.conv.C_out * c.H * c.W;
}

// The CPU model's block k from input x and masked output gradient dy, the running
// statistics starting at `buffers`.
BlockRun cpuBlock(resnet::Model& m, size_t k, const std::vector<float>& x,
                  const std::vector<float>& dy, const std::vector<float>& buffers, int N) {
  resnet::Block& b = m.blocks[k];
  std::copy(buffers.begin(), buffers.end(), m.buffers.base);
  float* in = const_cast<float*>(b.x);  // the output of the block before, or of the stem
  std::copy(x.begin(), x.end(), in);
  BlockRun r;
  m.sink = [&r](const std::string& name, float* g, size_t n) { r.grads[name].assign(g, g + n); };
  resnet::blockForward(m, b, in, N);
  r.y.assign(b.y, b.y + outputSize(b, N));
  std::copy(dy.begin(), dy.end(), m.scratch[0]);
  const int j = resnet::blockBackward(m, b, 0, N, true, k > 0);
  r.dx.assign(m.scratch[j], m.scratch[j] + x.size());
  r.buffers.assign(m.buffers.base, m.buffers.base + m.buffers.capacity);
  m.sink = nullptr;
  return r;
}

// The same on the GPU model's device copy, fused or not.
BlockRun gpuBlock(resnet::Model& host, size_t k, bool fused, const std::vector<float>& x,
                  const std::vector<float>& dy, const std::vector<float>& buffers, int N) {
  resnet::Model& d = host.device->mirror;
  resnet::Block& b = d.blocks[k];
  const resnet::ConvBn &first = b.convs.front(), &last = b.convs.back();
  resnet::fuseResidual(host, fused);
  nn::cuda::copy_to_device(d.buffers.base, buffers.data(), buffers.size());
  float* in = const_cast<float*>(b.x);
  nn::cuda::upload_input_async(in, x.data(), N, first.conv.C_in, first.H_in, first.W_in);
  BlockRun r;
  // The device copy's sink brings each gradient down to the host model and hands it on.
  host.sink = [&r](const std::string& name, float* g, size_t n) { r.grads[name].assign(g, g + n); };
  resnet::blockForward(d, b, in, N);
  r.y.resize(outputSize(b, N));
  nn::cuda::activations_to_host(r.y.data(), b.y, N, last.conv.C_out, last.H, last.W);
  nn::cuda::upload_input_async(d.scratch[0], dy.data(), N, last.conv.C_out, last.H, last.W);
  const int j = resnet::blockBackward(d, b, 0, N, true, k > 0);
  r.dx.resize(x.size());
  nn::cuda::activations_to_host(r.dx.data(), d.scratch[j], N, first.conv.C_in, first.H_in,
                                first.W_in);
  r.buffers.resize(buffers.size());
  nn::cuda::copy_to_host(r.buffers.data(), d.buffers.base, buffers.size());
  r.tail_backward = nn::cuda::batchnorm2d_backward_path(last.bn);
  host.sink = nullptr;
  resnet::fuseResidual(host, false);
  return r;
}

void compare(const BlockRun& got, const BlockRun& want, double tol_y, double tol_grad,
             double tol_stats, const std::string& what) {
  INFO(what);
  checkClose(got.y, want.y, tol_y, "y");
  checkCloseL2(got.dx, want.dx, tol_grad, "dx (the block's input gradient)");
  checkClose(got.buffers, want.buffers, tol_stats, "running statistics");
  REQUIRE(got.grads.size() == want.grads.size());
  for (const auto& [name, g] : want.grads) {
    REQUIRE(got.grads.count(name) == 1);
    checkCloseL2(got.grads.at(name), g, tol_grad, name + " gradient");
  }
}

}  // namespace

TEST_CASE("a residual block with its end fused trains as without, and as on the CPU", "[block]") {
  resnet::ModelConfig cfg;
  cfg.depth = 50, cfg.classes = 10, cfg.in_channels = 3, cfg.cifar_stem = true;
  cfg.width = 0.25, cfg.max_batch = 8, cfg.image_size = 32;
  const int N = 8;
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    resnet::Model cpu, gpu;
    resnet::buildModel(cpu, cfg);
    resnet::buildModel(gpu, cfg);
    resnet::useDevice(gpu, "cuda", 0, nameOf(math));
    std::mt19937_64 rng(71);
    const auto batch = randomVector(size_t(N) * 3 * 32 * 32, rng);
    // Every block's input as the CPU's forward makes it; the GPU's forward puts the
    // parameters on the device and lays out its copy's activations.
    std::copy(batch.begin(), batch.end(), cpu.input);
    std::copy(batch.begin(), batch.end(), gpu.input);
    resnet::forward(cpu, N);
    resnet::forward(gpu, N);
    const std::vector<float> buffers(cpu.buffers.base, cpu.buffers.base + cpu.buffers.capacity);
    // layer1.0 (shortcut batch norm, 32x32, 8192 values a channel), layer1.1 (identity),
    // layer2.0 (shortcut batch norm with stride 2), layer4.2 (identity, 512 channels of
    // 4x4: 128 values a channel, where the kernels' many-channel launches run).
    for (size_t k : {size_t(0), size_t(1), size_t(3), cpu.blocks.size() - 1}) {
      resnet::Block& b = cpu.blocks[k];
      INFO("block " << cpu.block_names[k] << (b.has_down ? ", shortcut batch norm" : ""));
      const auto x = rounded(std::vector<float>(b.x, b.x + inputSize(b, N)), math);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> dy(outputSize(b, N));
      for (float& v : dy) v = normal(rng);
      dy = rounded(dy, math);
      const BlockRun want = cpuBlock(cpu, k, x, dy, buffers, N);
      const BlockRun plain = gpuBlock(gpu, k, false, x, dy, buffers, N);
      const BlockRun fused = gpuBlock(gpu, k, true, x, dy, buffers, N);
      INFO("the block's last batch-norm backward: " << plain.tail_backward << " unfused, "
                                                    << fused.tail_backward << " fused");
      CHECK(fused.tail_backward == "ours");
      compare(fused, plain, 2e-2, 0.1, 1e-3, "fused against unfused");
      compare(plain, want, 2e-2, 0.25, 5e-3, "unfused against the CPU");
      compare(fused, want, 2e-2, 0.25, 5e-3, "fused against the CPU");
    }
  }
  nn::cuda::set_math(nn::cuda::Math::Fp32);  // later tests start from plain fp32
}

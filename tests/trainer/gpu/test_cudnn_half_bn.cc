// Training batch norm with 16-bit activations at the shapes a ResNet has, where
// cuDNN's NHWC persistent kernels and its fused ReLU apply, where the layers' own
// backward does, and the layers' deterministic mode, against the CPU backend or
// themselves. Tag [half]; the tolerances are those of test_cudnn_half.cc.
#include "cudnn_half_util.h"
#include "cudnn_layers_util.h"
#include "nn/cuda/layers_cuda.h"
#include "nn/layers.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace accord;
using namespace accord::test;  // cudnn_layers_util.h, cudnn_half_util.h

namespace {
// nn::cuda::set_deterministic(true) for the scope.
struct Deterministic {
  Deterministic() : old(nn::cuda::set_deterministic(true)) {}
  ~Deterministic() { nn::cuda::set_deterministic(old); }
  bool old;
};
}  // namespace

// Training batch norm at the shapes of a ResNet's (channels a multiple of 8, where
// cuDNN's NHWC persistent kernels and its fused ReLU apply), with and without the ReLU,
// backward in place as the model runs it, twice (the second forward and backward go
// the way the first left the plan): the same values as the CPU's.
TEST_CASE("16-bit: training batch norm at ResNet's shapes matches the CPU", "[half]") {
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    nn::cuda::clear_plan_cache();
    std::mt19937_64 rng(24);
    const int N = 8, C = 64, H = 14, W = 14;
    const size_t n = size_t(N) * C * H * W;
    for (const bool relu : {true, false}) {
      for (int round = 0; round < 2; ++round) {
        INFO("ReLU " << relu << ", round " << round);
        nn::BatchNorm2d bn;
        bn.C = C, bn.relu = relu, bn.momentum = 0.1f, bn.eps = 1e-5f;
        auto x = rounded(randomVector(n, rng, -1.5f, 2.5f), math);
        auto dy = rounded(randomVector(n, rng), math);
        std::vector<float> gamma = randomVector(C, rng, 0.5f, 1.5f), beta = randomVector(C, rng);
        BnBuffers st(gamma, beta, std::vector<float>(C, 0.0f), std::vector<float>(C, 1.0f));
        std::vector<float> y(n), dx(n);
        nn::BatchNorm2d cpu = st.cpu(bn), gpu = st.gpu(bn);
        nn::batchnorm2d_forward(cpu, x.data(), y.data(), N, H, W, true);
        nn::batchnorm2d_backward(cpu, x.data(), dy.data(), dx.data(), N, H, W, true);
        Activations gx(x, N, C, H, W), gy(1e3f, N, C, H, W), gdy(dy, N, C, H, W);
        nn::cuda::batchnorm2d_forward(gpu, gx.get(), gy.get(), N, H, W, true);
        const std::string path = nn::cuda::batchnorm2d_forward_path(gpu);
        if (round == 0) WARN(nameOf(math) << ", ReLU " << relu << ": cuDNN's " << path);
        if (!relu) CHECK(path != "Ex with the ReLU");
        nn::cuda::batchnorm2d_backward(gpu, gx.get(), gdy.get(), gdy.get(), N, H, W, true);
        checkClose(gy.host(), y, 1e-2, "y");
        checkClose(st.d_mean.host(), st.mean, 1e-3, "running mean");
        checkClose(st.d_var.host(), st.var, 1e-3, "running variance");
        checkClose(gdy.host(), dx, 2e-2, "dx (in place of dy)");
        checkClose(st.d_dgamma.host(), st.dgamma, 1e-2, "dgamma");
        checkClose(st.d_dbeta.host(), st.dbeta, 1e-2, "dbeta");
      }
    }
  }
}

// Where the forward takes no Ex call of cuDNN's (here: the deterministic mode, as after a
// convolution that summed the statistics), backward runs the layers' own kernels on
// whole Packs of channels: at ResNet's shapes, at one with three Packs per position
// (a block's threads do not divide by it) and at one wider than a block's Packs, with
// and without the ReLU, in place of dy, the same values as the CPU's.
TEST_CASE("16-bit: training batch norm without cuDNN's Ex call matches the CPU", "[half]") {
  Deterministic plain;
  struct Shape {
    int N, C, H, W;
  };
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    std::mt19937_64 rng(31);
    for (const Shape& k : {Shape{8, 64, 14, 14}, Shape{4, 24, 9, 9}, Shape{2, 2560, 3, 3}}) {
      for (const bool relu : {true, false}) {
        INFO("N=" << k.N << " C=" << k.C << " " << k.H << "x" << k.W << " ReLU " << relu);
        const size_t n = size_t(k.N) * k.C * k.H * k.W;
        nn::BatchNorm2d bn;
        bn.C = k.C, bn.relu = relu, bn.momentum = 0.1f, bn.eps = 1e-5f;
        auto x = rounded(randomVector(n, rng, -1.5f, 2.5f), math);
        auto dy = rounded(randomVector(n, rng), math);
        std::vector<float> gamma = randomVector(k.C, rng, 0.5f, 1.5f);
        std::vector<float> beta = randomVector(k.C, rng);
        BnBuffers st(gamma, beta, std::vector<float>(k.C, 0.0f), std::vector<float>(k.C, 1.0f));
        std::vector<float> y(n), dx(n);
        nn::BatchNorm2d cpu = st.cpu(bn), gpu = st.gpu(bn);
        nn::batchnorm2d_forward(cpu, x.data(), y.data(), k.N, k.H, k.W, true);
        nn::batchnorm2d_backward(cpu, x.data(), dy.data(), dx.data(), k.N, k.H, k.W, true);
        Activations gx(x, k.N, k.C, k.H, k.W), gy(1e3f, k.N, k.C, k.H, k.W);
        Activations gdy(dy, k.N, k.C, k.H, k.W);
        nn::cuda::batchnorm2d_forward(gpu, gx.get(), gy.get(), k.N, k.H, k.W, true);
        CHECK(nn::cuda::batchnorm2d_forward_path(gpu) == "plain");
        nn::cuda::batchnorm2d_backward(gpu, gx.get(), gdy.get(), gdy.get(), k.N, k.H, k.W, true);
        CHECK(nn::cuda::batchnorm2d_backward_path(gpu) == "ours");
        checkClose(gy.host(), y, 1e-2, "y");
        checkClose(gdy.host(), dx, 2e-2, "dx (in place of dy)");
        checkClose(st.d_dgamma.host(), st.dgamma, 1e-2, "dgamma");
        checkClose(st.d_dbeta.host(), st.dbeta, 1e-2, "dbeta");
      }
    }
  }
}

// nn::cuda::set_deterministic: the same convolution and batch norm, forward and
// backward, twice on the same inputs give the same bits (the algorithms cuDNN would
// pick otherwise may sum with atomics, in an order that changes from run to run).
TEST_CASE("16-bit: deterministic layers repeat forward and backward bit for bit", "[half]") {
  Deterministic same_bits;
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    std::mt19937_64 rng(29);
    const int N = 16, C = 64, H = 28;
    nn::Conv2d c;
    c.C_in = C, c.C_out = C, c.K = 3, c.stride = 1, c.pad = 1;
    const size_t n = size_t(N) * C * H * H, nw = size_t(C) * C * 9;
    const auto x = rounded(randomVector(n, rng), math);
    const auto w = rounded(randomVector(nw, rng, -0.1f, 0.1f), math);
    const auto dy = rounded(randomVector(n, rng), math);
    const std::vector<float> gamma = randomVector(C, rng, 0.5f, 1.5f), beta = randomVector(C, rng);
    std::vector<std::vector<float>> runs[2];
    for (auto& out : runs) {
      BnBuffers st(gamma, beta, std::vector<float>(C, 0.0f), std::vector<float>(C, 1.0f));
      nn::BatchNorm2d bn;
      bn.C = C, bn.relu = true;
      nn::BatchNorm2d gbn = st.gpu(bn);
      Activations gx(x, N, C, H, H), ga(0.0f, N, C, H, H), gb(0.0f, N, C, H, H);
      Activations gdy(dy, N, C, H, H), gda(0.0f, N, C, H, H), gdx(0.0f, N, C, H, H);
      Device gw(w), gdw(nw, 0.0f);
      nn::Conv2d gc = c;
      gc.w = gw.get(), gc.dw = gdw.get();
      nn::cuda::conv2d_forward(gc, gx.get(), ga.get(), N, H, H);
      nn::cuda::batchnorm2d_forward(gbn, ga.get(), gb.get(), N, H, H, true);
      CHECK(nn::cuda::batchnorm2d_forward_path(gbn) == "plain");  // spatial, in a fixed order
      nn::cuda::batchnorm2d_backward(gbn, ga.get(), gdy.get(), gda.get(), N, H, H, true);
      nn::cuda::conv2d_backward(gc, gx.get(), gda.get(), gdx.get(), N, H, H);
      out = {ga.host(),  gb.host(),          gda.host(),        gdx.host(),
             gdw.host(), st.d_dgamma.host(), st.d_dbeta.host(), st.d_var.host()};
    }
    const char* names[] = {"conv output", "BN output", "BN dx", "conv dx",
                           "conv dw",     "dgamma",    "dbeta", "running variance"};
    for (size_t i = 0; i < runs[0].size(); ++i) {
      INFO(names[i]);
      CHECK(runs[0][i] == runs[1][i]);
    }
  }
}

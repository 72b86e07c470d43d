// The GPU layers (accord::nn::cuda: cuDNN, cuBLAS, own kernels) against the CPU backend
// (accord::nn, oneDNN), the reference, on the same random inputs, at ResNet's shapes and
// odd ones. Tags: [conv] [batchnorm] [pool] [linear] [elementwise] [softmax] [sgd] [arena].
//
// Tolerances are relative to the largest reference value of each tensor (checkClose):
//   conv: 5e-4 forward and backward-data, 1e-3 backward-filter. Both sides sum in fp32
//     in different orders; cuDNN may also pick Winograd or FFT algorithms, whose fp32
//     error is ~1e-5..1e-4 of the output's scale; the filter gradient sums N*Ho*Wo
//     products, the longest sums here.
//   batch norm: 1e-4 (outputs, statistics), 2e-4 for training's dx, which subtracts
//     two per-channel means from dy and so loses a few bits to cancellation.
//   linear: 1e-4 (cuBLAS fp32 without TF32). Pools, relu, add: exact or 1e-6 (the same
//     operations, at most a different order of a few additions).
//   SGD: 1e-6; it is the same float arithmetic as the CPU and should match bit for bit.
// Every GPU output is first filled with garbage, so a layer that skips writing part of
// it, or accumulates into it (backward must overwrite), fails.
#include "cudnn_layers_util.h"
#include "nn/cuda/layers_cuda.h"
#include "nn/layers.h"
#include "optimizer.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

namespace {

using namespace accord;
using test::checkClose;
using test::Device;
using test::randomVector;

constexpr float kGarbage = 1e3f;

// ---- conv2d -------------------------------------------------------------------------

struct ConvCase {
  int N, C_in, C_out, H, W, K, stride, pad;
  bool bias, dx;
};

void checkConv(const ConvCase& k, std::mt19937_64& rng) {
  nn::Conv2d c;
  c.C_in = k.C_in, c.C_out = k.C_out, c.K = k.K, c.stride = k.stride, c.pad = k.pad;
  c.bias = k.bias;
  const int Ho = c.out_h(k.H), Wo = c.out_w(k.W);
  const size_t nx = size_t(k.N) * k.C_in * k.H * k.W, ny = size_t(k.N) * k.C_out * Ho * Wo;
  const size_t nw = size_t(k.C_out) * k.C_in * k.K * k.K;
  std::ostringstream os;
  os << "conv N=" << k.N << " " << k.C_in << "->" << k.C_out << " " << k.H << "x" << k.W
     << " K=" << k.K << " stride=" << k.stride << " pad=" << k.pad << " bias=" << k.bias;
  INFO(os.str());

  auto x = randomVector(nx, rng), w = randomVector(nw, rng, -0.3f, 0.3f);
  auto b = randomVector(k.C_out, rng), dy = randomVector(ny, rng);
  std::vector<float> y(ny), dx(nx), dw(nw), db(k.C_out);
  nn::Conv2d cpu = c;
  cpu.w = w.data(), cpu.b = k.bias ? b.data() : nullptr;
  cpu.dw = dw.data(), cpu.db = k.bias ? db.data() : nullptr;
  nn::conv2d_forward(cpu, x.data(), y.data(), k.N, k.H, k.W);
  nn::conv2d_backward(cpu, x.data(), dy.data(), k.dx ? dx.data() : nullptr, k.N, k.H, k.W);

  Device gx(x), gw(w), gb(b), gdy(dy);
  Device gy(ny, kGarbage), gdx(nx, kGarbage), gdw(nw, kGarbage), gdb(k.C_out, kGarbage);
  nn::Conv2d gpu = c;
  gpu.w = gw.get(), gpu.b = k.bias ? gb.get() : nullptr;
  gpu.dw = gdw.get(), gpu.db = k.bias ? gdb.get() : nullptr;
  nn::cuda::conv2d_forward(gpu, gx.get(), gy.get(), k.N, k.H, k.W);
  nn::cuda::conv2d_backward(gpu, gx.get(), gdy.get(), k.dx ? gdx.get() : nullptr, k.N, k.H, k.W);
  checkClose(gy.host(), y, 5e-4, "y");
  checkClose(gdw.host(), dw, 1e-3, "dw");
  if (k.bias) checkClose(gdb.host(), db, 1e-3, "db");
  if (k.dx) checkClose(gdx.host(), dx, 5e-4, "dx");
  // A second backward over the first's results: overwritten, not accumulated.
  nn::cuda::conv2d_backward(gpu, gx.get(), gdy.get(), k.dx ? gdx.get() : nullptr, k.N, k.H, k.W);
  checkClose(gdw.host(), dw, 1e-3, "dw after a second backward");
}

TEST_CASE("conv2d forward and backward match the CPU", "[conv]") {
  std::mt19937_64 rng(1);
  const ConvCase cases[] = {
      {2, 3, 16, 33, 33, 7, 2, 3, false, false},  // the stem on an odd size; no dx (first conv)
      {3, 16, 32, 15, 15, 1, 2, 0, false, true},  // 1x1 stride-2 downsample, odd size
      {4, 16, 16, 14, 14, 3, 1, 1, false, true},  // the 3x3 pad-1 of a basic block
      {2, 8, 12, 9, 11, 3, 2, 1, true, true},     // 3x3 stride 2, non-square, with bias
      {8, 32, 64, 7, 7, 1, 1, 0, false, true},    // bottleneck expansion at the last stage
  };
  for (const ConvCase& k : cases) checkConv(k, rng);
}

TEST_CASE("conv2d rejects a bad shape with the layer named", "[conv]") {
  nn::Conv2d c;
  c.C_in = 3, c.C_out = 8, c.K = 7, c.stride = 2, c.pad = 0;
  Device w(size_t(8) * 3 * 49, 0.0f), x(3 * 4 * 4, 0.0f), y(64, 0.0f);
  c.w = w.get();
  try {
    nn::cuda::conv2d_forward(c, x.get(), y.get(), 1, 4, 4);  // 7x7 on 4x4 without padding
    FAIL("no exception");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("conv2d_forward") != std::string::npos);
  }
}

// ---- batchnorm2d --------------------------------------------------------------------

struct BnCase {
  int N, C, H, W;
  bool relu;
};

struct BnHost {
  std::vector<float> gamma, beta, mean, var, save_mean, save_var, dgamma, dbeta;
  nn::BatchNorm2d bind(nn::BatchNorm2d bn) {
    bn.gamma = gamma.data(), bn.beta = beta.data(), bn.running_mean = mean.data();
    bn.running_var = var.data(), bn.save_mean = save_mean.data(), bn.save_var = save_var.data();
    bn.dgamma = dgamma.data(), bn.dbeta = dbeta.data();
    return bn;
  }
};

void checkBatchNorm(const BnCase& k, bool training, std::mt19937_64& rng) {
  INFO("batchnorm N=" << k.N << " C=" << k.C << " " << k.H << "x" << k.W << " relu=" << k.relu
                      << (training ? " training" : " inference"));
  nn::BatchNorm2d bn;
  bn.C = k.C, bn.relu = k.relu, bn.momentum = 0.1f, bn.eps = 1e-5f;
  const size_t n = size_t(k.N) * k.C * k.H * k.W, C = k.C;
  // Inputs off centre and scaled, so the statistics are not those of the init.
  std::vector<float> x = randomVector(n, rng, -1.5f, 2.5f), dy = randomVector(n, rng);
  BnHost h{randomVector(C, rng, -1.5f, 1.5f),
           randomVector(C, rng, -0.5f, 0.5f),
           randomVector(C, rng, -0.2f, 0.2f),
           randomVector(C, rng, 0.5f, 2.0f),
           std::vector<float>(C),
           std::vector<float>(C),
           std::vector<float>(C),
           std::vector<float>(C)};
  Device g_gamma(h.gamma), g_beta(h.beta), g_mean(h.mean), g_var(h.var);
  Device g_save_mean(C, kGarbage), g_save_var(C, kGarbage), g_dgamma(C, kGarbage),
      g_dbeta(C, kGarbage);
  nn::BatchNorm2d cpu = h.bind(bn);
  nn::BatchNorm2d gpu = bn;
  gpu.gamma = g_gamma.get(), gpu.beta = g_beta.get(), gpu.running_mean = g_mean.get();
  gpu.running_var = g_var.get(), gpu.save_mean = g_save_mean.get();
  gpu.save_var = g_save_var.get(), gpu.dgamma = g_dgamma.get(), gpu.dbeta = g_dbeta.get();

  std::vector<float> y(n), dx(n);
  nn::batchnorm2d_forward(cpu, x.data(), y.data(), k.N, k.H, k.W, training);
  nn::batchnorm2d_backward(cpu, x.data(), dy.data(), dx.data(), k.N, k.H, k.W, training);

  Device gx(x), gy(n, kGarbage), gdy(dy), gdx(n, kGarbage);
  nn::cuda::batchnorm2d_forward(gpu, gx.get(), gy.get(), k.N, k.H, k.W, training);
  nn::cuda::batchnorm2d_backward(gpu, gx.get(), gdy.get(), gdx.get(), k.N, k.H, k.W, training);
  checkClose(gy.host(), y, 1e-4, "y");
  checkClose(g_mean.host(), h.mean, 1e-4, "running_mean");
  checkClose(g_var.host(), h.var, 1e-4, "running_var (unbiased batch variance folded in)");
  checkClose(gdx.host(), dx, training ? 2e-4 : 1e-4, "dx");
  checkClose(g_dgamma.host(), h.dgamma, 1e-4, "dgamma");
  checkClose(g_dbeta.host(), h.dbeta, 1e-4, "dbeta");
  if (training) {
    checkClose(g_save_mean.host(), h.save_mean, 1e-4, "save_mean");
    // This backend saves cuDNN's inverse standard deviation where the CPU saves the variance.
    std::vector<float> invstd(C);
    for (size_t c = 0; c < C; ++c) invstd[c] = 1.0f / std::sqrt(h.save_var[c] + bn.eps);
    checkClose(g_save_var.host(), invstd, 1e-4, "save_var (inverse std)");
  }
  // dx in place over dy (the model does this) gives the same.
  nn::cuda::batchnorm2d_backward(gpu, gx.get(), gdy.get(), gdy.get(), k.N, k.H, k.W, training);
  checkClose(gdy.host(), dx, training ? 2e-4 : 1e-4, "dx written over dy");
  if (!training) {  // inference may run in place over x
    nn::cuda::batchnorm2d_forward(gpu, gx.get(), gx.get(), k.N, k.H, k.W, false);
    checkClose(gx.host(), y, 1e-4, "y written over x");
  }
}

TEST_CASE("batchnorm2d training and inference match the CPU, fused ReLU included", "[batchnorm]") {
  std::mt19937_64 rng(2);
  const BnCase cases[] = {
      {4, 16, 14, 14, false}, {4, 16, 14, 14, true}, {2, 8, 7, 9, true},
      {8, 3, 5, 5, false},    {2, 64, 2, 3, true},   {3, 32, 28, 28, true},
  };
  for (bool training : {true, false})
    for (const BnCase& k : cases) checkBatchNorm(k, training, rng);
}

TEST_CASE("batchnorm2d running statistics follow several training steps", "[batchnorm]") {
  std::mt19937_64 rng(3);
  nn::BatchNorm2d bn;
  bn.C = 5, bn.momentum = 0.25f;
  const int N = 3, H = 6, W = 4;
  const size_t n = size_t(N) * bn.C * H * W;
  BnHost h{randomVector(5, rng),        randomVector(5, rng),  std::vector<float>(5, 0.0f),
           std::vector<float>(5, 1.0f), std::vector<float>(5), std::vector<float>(5),
           std::vector<float>(5),       std::vector<float>(5)};
  nn::BatchNorm2d cpu = h.bind(bn);
  Device gg(h.gamma), gb(h.beta), gm(h.mean), gv(h.var), gsm(5, 0.0f), gsv(5, 0.0f);
  nn::BatchNorm2d gpu = bn;
  gpu.gamma = gg.get(), gpu.beta = gb.get(), gpu.running_mean = gm.get();
  gpu.running_var = gv.get(), gpu.save_mean = gsm.get(), gpu.save_var = gsv.get();
  std::vector<float> y(n);
  Device gy(n, 0.0f);
  for (int step = 0; step < 4; ++step) {
    auto x = randomVector(n, rng, -2.0f + step, 3.0f + step);
    Device gx(x);
    nn::batchnorm2d_forward(cpu, x.data(), y.data(), N, H, W, true);
    nn::cuda::batchnorm2d_forward(gpu, gx.get(), gy.get(), N, H, W, true);
  }
  checkClose(gm.host(), h.mean, 1e-4, "running_mean after 4 steps");
  checkClose(gv.host(), h.var, 1e-4, "running_var after 4 steps");
}

// ---- pools --------------------------------------------------------------------------

TEST_CASE("max pool and global average pool match the CPU", "[pool]") {
  std::mt19937_64 rng(4);
  struct Case {
    int N, C, H, W;
  };
  for (Case k : {Case{2, 5, 15, 15}, Case{3, 4, 8, 8}, Case{1, 3, 112, 112}, Case{2, 2, 7, 10}}) {
    INFO("pool N=" << k.N << " C=" << k.C << " " << k.H << "x" << k.W);
    nn::MaxPool2d p;
    const int Ho = p.out_h(k.H), Wo = p.out_w(k.W);
    const size_t nx = size_t(k.N) * k.C * k.H * k.W, ny = size_t(k.N) * k.C * Ho * Wo;
    auto x = randomVector(nx, rng), dy = randomVector(ny, rng);
    std::vector<float> y(ny), ws(ny), dx(nx);
    nn::maxpool2d_forward(p, x.data(), y.data(), ws.data(), k.N, k.C, k.H, k.W);
    nn::maxpool2d_backward(p, dy.data(), ws.data(), dx.data(), k.N, k.C, k.H, k.W);
    Device gx(x), gy(ny, kGarbage), gws(ny, kGarbage), gdy(dy), gdx(nx, kGarbage);
    nn::cuda::maxpool2d_forward(p, gx.get(), gy.get(), gws.get(), k.N, k.C, k.H, k.W);
    nn::cuda::maxpool2d_backward(p, gdy.get(), gws.get(), gdx.get(), k.N, k.C, k.H, k.W);
    checkClose(gy.host(), y, 0.0, "max pool y (a maximum is exact)");
    checkClose(gdx.host(), dx, 1e-6, "max pool dx");

    std::vector<float> a(size_t(k.N) * k.C), da = randomVector(a.size(), rng), dxa(nx);
    nn::avgpool_forward(x.data(), a.data(), k.N, k.C, k.H, k.W);
    nn::avgpool_backward(da.data(), dxa.data(), k.N, k.C, k.H, k.W);
    Device ga(a.size(), kGarbage), gda(da), gdxa(nx, kGarbage);
    nn::cuda::avgpool_forward(gx.get(), ga.get(), k.N, k.C, k.H, k.W);
    nn::cuda::avgpool_backward(gda.get(), gdxa.get(), k.N, k.C, k.H, k.W);
    checkClose(ga.host(), a, 1e-5, "avg pool y");
    checkClose(gdxa.host(), dxa, 1e-6, "avg pool dx");
  }
}

// ---- linear -------------------------------------------------------------------------

TEST_CASE("linear forward and backward match the CPU", "[linear]") {
  std::mt19937_64 rng(5);
  struct Case {
    int N, in, out;
  };
  for (Case k : {Case{5, 64, 10}, Case{8, 37, 13}, Case{2, 2048, 1000}, Case{1, 3, 1}}) {
    INFO("linear N=" << k.N << " in=" << k.in << " out=" << k.out);
    nn::Linear l;
    l.in = k.in, l.out = k.out;
    const size_t nx = size_t(k.N) * k.in, ny = size_t(k.N) * k.out, nw = size_t(k.out) * k.in;
    auto x = randomVector(nx, rng), w = randomVector(nw, rng), b = randomVector(k.out, rng);
    auto dy = randomVector(ny, rng);
    std::vector<float> y(ny), dx(nx), dw(nw), db(k.out);
    nn::Linear cpu = l;
    cpu.w = w.data(), cpu.b = b.data(), cpu.dw = dw.data(), cpu.db = db.data();
    nn::linear_forward(cpu, x.data(), y.data(), k.N);
    nn::linear_backward(cpu, x.data(), dy.data(), dx.data(), k.N);
    Device gx(x), gw(w), gb(b), gdy(dy), gy(ny, kGarbage), gdx(nx, kGarbage), gdw(nw, kGarbage),
        gdb(k.out, kGarbage);
    nn::Linear gpu = l;
    gpu.w = gw.get(), gpu.b = gb.get(), gpu.dw = gdw.get(), gpu.db = gdb.get();
    nn::cuda::linear_forward(gpu, gx.get(), gy.get(), k.N);
    nn::cuda::linear_backward(gpu, gx.get(), gdy.get(), gdx.get(), k.N);
    checkClose(gy.host(), y, 1e-4, "y");
    checkClose(gdx.host(), dx, 1e-4, "dx");
    checkClose(gdw.host(), dw, 1e-4, "dw");
    checkClose(gdb.host(), db, 1e-4, "db");
  }
}

// ---- relu, add, accumulate ----------------------------------------------------------

TEST_CASE("relu, add and accumulate match the CPU exactly", "[elementwise]") {
  std::mt19937_64 rng(6);
  const size_t n = 1000003;  // odd: a grid-stride tail
  auto x = randomVector(n, rng), dy = randomVector(n, rng), b = randomVector(n, rng);
  std::vector<float> y(n), dx(n), s(n);
  nn::relu_forward(x.data(), y.data(), n);
  nn::relu_backward(y.data(), dy.data(), dx.data(), n);
  nn::add_forward(x.data(), b.data(), s.data(), n);
  Device gx(x), gdy(dy), gb(b), gy(n, kGarbage), gdx(n, kGarbage), gs(n, kGarbage);
  nn::cuda::relu_forward(gx.get(), gy.get(), n);
  nn::cuda::relu_backward(gy.get(), gdy.get(), gdx.get(), n);
  nn::cuda::add_forward(gx.get(), gb.get(), gs.get(), n);
  checkClose(gy.host(), y, 0.0, "relu y");
  checkClose(gdx.host(), dx, 0.0, "relu dx");
  checkClose(gs.host(), s, 0.0, "add");
  nn::accumulate(s.data(), dy.data(), n);
  nn::cuda::accumulate(gs.get(), gdy.get(), n);
  checkClose(gs.host(), s, 0.0, "accumulate");
  nn::cuda::relu_forward(gx.get(), gx.get(), n);  // in place
  checkClose(gx.host(), y, 0.0, "relu in place");
}

}  // namespace

// The GPU layers with 16-bit activations (nn::cuda::Math::Bf16 and Math::Fp16,
// --precision bf16 / fp16) against the CPU backend. Tag [half]; every case runs in both.
//
// Activations are 16-bit on the GPU, in NHWC order (the helpers convert to and from the
// CPU's NCHW): the inputs here are rounded to the 16-bit type first and the CPU
// computes on the same rounded values (and, for convolutions and the linear layer, the
// same rounded weights), so what remains is the rounding of each result (2^-9 relative
// in bf16, 2^-12 in fp16) and, for the products, the order of float32 accumulation.
// Tolerances, bf16's bound for both, relative to each tensor's largest reference
// value: 1e-2 for results stored in 16 bits, 2e-2 for batch norm's training dx (a
// difference of means) and for products of rounded gradients; float32 outputs
// (statistics, weight gradients, the logits) 1e-2 or tighter.
#include "cudnn_half_util.h"
#include "cudnn_layers_util.h"
#include "nn/cuda/layers_cuda.h"
#include "nn/layers.h"

#include <accord/error.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <utility>

namespace {

using namespace accord;
using namespace accord::test;  // cudnn_layers_util.h, cudnn_half_util.h

// The stem's max pool: 3x3, stride 2, padding 1.
nn::MaxPool2d stemPool() {
  nn::MaxPool2d p;
  p.K = 3, p.stride = 2, p.pad = 1;
  return p;
}

// The stem's max pool forward and backward on x (N, C, H, W), rounded to `math`, against
// the CPU's: y exactly (a choice among 16-bit values), dx within rounding.
void checkMaxPool(const std::vector<float>& x, int N, int C, int H, int W, Math math,
                  std::mt19937_64& rng) {
  nn::MaxPool2d p = stemPool();
  const int Ho = p.out_h(H), Wo = p.out_w(W);
  const size_t n = size_t(N) * C * H * W, np = size_t(N) * C * Ho * Wo;
  auto dy = rounded(randomVector(np, rng), math);
  std::vector<float> y(np), ws(np), dx(n);
  nn::maxpool2d_forward(p, x.data(), y.data(), ws.data(), N, C, H, W);
  nn::maxpool2d_backward(p, dy.data(), ws.data(), dx.data(), N, C, H, W);
  Activations gx(x, N, C, H, W), gy(1e3f, N, C, Ho, Wo), gdy(dy, N, C, Ho, Wo),
      gdx(1e3f, N, C, H, W);
  Device gws(np, 0.0f);
  nn::cuda::maxpool2d_forward(p, gx.get(), gy.get(), gws.get(), N, C, H, W);
  nn::cuda::maxpool2d_backward(p, gdy.get(), gws.get(), gdx.get(), N, C, H, W);
  checkClose(gy.host(), y, 1e-6, "max pool y (exact)");
  checkClose(gdx.host(), dx, 1e-2, "max pool dx");
}

TEST_CASE("16-bit: convolutions match the CPU on 16-bit values", "[half]") {
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    std::mt19937_64 rng(21);
    struct Case {
      int N, C_in, C_out, H, W, K, stride, pad;
      bool dx;
    };
    const Case cases[] = {{2, 3, 16, 33, 33, 7, 2, 3, false},
                          {3, 16, 32, 15, 15, 1, 2, 0, true},
                          {4, 16, 16, 14, 14, 3, 1, 1, true}};
    for (const Case& k : cases) {
      INFO("conv N=" << k.N << " " << k.C_in << "->" << k.C_out << " " << k.H << "x" << k.W
                     << " K=" << k.K);
      nn::Conv2d c;
      c.C_in = k.C_in, c.C_out = k.C_out, c.K = k.K, c.stride = k.stride, c.pad = k.pad;
      const int Ho = c.out_h(k.H), Wo = c.out_w(k.W);
      const size_t nx = size_t(k.N) * k.C_in * k.H * k.W, ny = size_t(k.N) * k.C_out * Ho * Wo;
      const size_t nw = size_t(k.C_out) * k.C_in * k.K * k.K;
      auto x = rounded(randomVector(nx, rng), math);
      auto w = rounded(randomVector(nw, rng, -0.3f, 0.3f), math);
      auto dy = rounded(randomVector(ny, rng), math);
      std::vector<float> y(ny), dx(nx), dw(nw);
      nn::Conv2d cpu = c;
      cpu.w = w.data(), cpu.dw = dw.data();
      nn::conv2d_forward(cpu, x.data(), y.data(), k.N, k.H, k.W);
      nn::conv2d_backward(cpu, x.data(), dy.data(), k.dx ? dx.data() : nullptr, k.N, k.H, k.W);

      Activations gx(x, k.N, k.C_in, k.H, k.W), gy(1e3f, k.N, k.C_out, Ho, Wo);
      Activations gdy(dy, k.N, k.C_out, Ho, Wo), gdx(1e3f, k.N, k.C_in, k.H, k.W);
      Device gw(w), gdw(nw, 1e3f);
      nn::Conv2d gpu = c;
      gpu.w = gw.get(), gpu.dw = gdw.get();
      nn::cuda::conv2d_forward(gpu, gx.get(), gy.get(), k.N, k.H, k.W);
      nn::cuda::conv2d_backward(gpu, gx.get(), gdy.get(), k.dx ? gdx.get() : nullptr, k.N, k.H,
                                k.W);
      checkClose(gy.host(), y, 1e-2, "y (16-bit)");
      checkClose(gdw.host(), dw, 2e-2, "dw (float32 from a 16-bit filter gradient)");
      if (k.dx) checkClose(gdx.host(), dx, 1e-2, "dx (16-bit)");
    }
  }
}

TEST_CASE("16-bit: the stem's input padded with zero channels gives the unpadded results",
          "[half]") {
  // --pad-input: the input uploaded with 4 channels (the 4th zeros) and the convolution
  // told so (x_channels) against the CPU on the 3 real ones: y, and dw of the real
  // channels only. No data gradient is asked of a padded input, and fp32 refuses it.
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    std::mt19937_64 rng(23);
    const int N = 2, C = 3, H = 33, W = 33, Cp = 4;
    nn::Conv2d c;
    c.C_in = C, c.C_out = 16, c.K = 7, c.stride = 2, c.pad = 3;
    const int Ho = c.out_h(H), Wo = c.out_w(W);
    const size_t nx = size_t(N) * C * H * W, ny = size_t(N) * c.C_out * Ho * Wo;
    const size_t nw = size_t(c.C_out) * C * c.K * c.K;
    auto x = rounded(randomVector(nx, rng), math);
    auto w = rounded(randomVector(nw, rng, -0.3f, 0.3f), math);
    auto dy = rounded(randomVector(ny, rng), math);
    std::vector<float> y(ny), dw(nw);
    nn::Conv2d cpu = c;
    cpu.w = w.data(), cpu.dw = dw.data();
    nn::conv2d_forward(cpu, x.data(), y.data(), N, H, W);
    nn::conv2d_backward(cpu, x.data(), dy.data(), nullptr, N, H, W);

    Device gx(nx, 1e3f);  // 4 16-bit values a pixel fit in 3 floats' room
    nn::cuda::upload_input_async(gx.get(), x.data(), N, C, H, W, Cp);
    Activations gy(1e3f, N, c.C_out, Ho, Wo), gdy(dy, N, c.C_out, Ho, Wo);
    Device gw(w), gdw(nw, 1e3f);
    nn::Conv2d gpu = c;
    gpu.x_channels = Cp;
    gpu.w = gw.get(), gpu.dw = gdw.get();
    nn::cuda::conv2d_forward(gpu, gx.get(), gy.get(), N, H, W);
    nn::cuda::conv2d_backward(gpu, gx.get(), gdy.get(), nullptr, N, H, W);
    checkClose(gy.host(), y, 1e-2, "y (16-bit, padded input)");
    checkClose(gdw.host(), dw, 2e-2, "dw (the real channels of a padded filter's gradient)");
    Device gdx(nx, 0.0f);
    CHECK_THROWS_AS(nn::cuda::conv2d_backward(gpu, gx.get(), gdy.get(), gdx.get(), N, H, W),
                    InvalidArgument);
  }
  nn::Conv2d c;
  c.C_in = 3, c.C_out = 8, c.K = 3, c.stride = 1, c.pad = 1, c.x_channels = 4;
  Device w(size_t(8) * 3 * 9, 0.1f), x(size_t(4) * 8 * 8, 0.0f), y(size_t(8) * 8 * 8, 0.0f);
  c.w = w.get();
  CHECK_THROWS_AS(nn::cuda::conv2d_forward(c, x.get(), y.get(), 1, 8, 8), InvalidArgument);
  const std::vector<float> host(size_t(3) * 8 * 8, 1.0f);
  CHECK_THROWS_AS(nn::cuda::upload_input_async(x.get(), host.data(), 1, 3, 8, 8, 4),
                  InvalidArgument);
}

TEST_CASE("16-bit: batch norm, pools, relu and add match the CPU on 16-bit values", "[half]") {
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    std::mt19937_64 rng(22);
    const int N = 4, C = 6, H = 9, W = 7;
    const size_t n = size_t(N) * C * H * W;
    for (bool training : {true, false}) {
      INFO((training ? "training" : "inference"));
      nn::BatchNorm2d bn;
      bn.C = C, bn.relu = true, bn.momentum = 0.1f, bn.eps = 1e-5f;
      auto x = rounded(randomVector(n, rng, -1.5f, 2.5f), math);
      auto dy = rounded(randomVector(n, rng), math);
      std::vector<float> gamma = randomVector(C, rng, 0.5f, 1.5f), beta = randomVector(C, rng);
      std::vector<float> mean = randomVector(C, rng, -0.2f, 0.2f);
      BnBuffers st(gamma, beta, mean, randomVector(C, rng, 0.5f, 2));
      std::vector<float> y(n), dx(n);
      nn::BatchNorm2d cpu = st.cpu(bn), gpu = st.gpu(bn);
      nn::batchnorm2d_forward(cpu, x.data(), y.data(), N, H, W, training);
      nn::batchnorm2d_backward(cpu, x.data(), dy.data(), dx.data(), N, H, W, training);
      Activations gx(x, N, C, H, W), gy(1e3f, N, C, H, W), gdy(dy, N, C, H, W),
          gdx(1e3f, N, C, H, W);
      nn::cuda::batchnorm2d_forward(gpu, gx.get(), gy.get(), N, H, W, training);
      nn::cuda::batchnorm2d_backward(gpu, gx.get(), gdy.get(), gdx.get(), N, H, W, training);
      checkClose(gy.host(), y, 1e-2, "batch norm y (16-bit)");
      checkClose(st.d_mean.host(), st.mean, 1e-3, "running_mean (float32)");
      checkClose(st.d_var.host(), st.var, 1e-3, "running_var (float32)");
      checkClose(gdx.host(), dx, 2e-2, "batch norm dx (16-bit)");
      checkClose(st.d_dgamma.host(), st.dgamma, 1e-2, "dgamma (float32)");
      checkClose(st.d_dbeta.host(), st.dbeta, 1e-2, "dbeta (float32)");
    }

    // Max pool and the global average pool.
    auto x = rounded(randomVector(n, rng), math);
    checkMaxPool(x, N, C, H, W, math, rng);
    Activations gx(x, N, C, H, W);

    const size_t nc = size_t(N) * C;
    std::vector<float> ya(nc), dxa(n);
    auto dya = rounded(randomVector(nc, rng), math);
    nn::avgpool_forward(x.data(), ya.data(), N, C, H, W);
    nn::avgpool_backward(dya.data(), dxa.data(), N, C, H, W);
    Activations gya(1e3f, N, C, 1, 1), gdya(dya, N, C, 1, 1), gdxa(1e3f, N, C, H, W);
    nn::cuda::avgpool_forward(gx.get(), gya.get(), N, C, H, W);
    nn::cuda::avgpool_backward(gdya.get(), gdxa.get(), N, C, H, W);
    checkClose(gya.host(), ya, 1e-2, "average pool y");
    checkClose(gdxa.host(), dxa, 1e-2, "average pool dx");

    auto b = rounded(randomVector(n, rng), math);
    std::vector<float> sum(n), relu(n), drelu(n);
    for (size_t i = 0; i < n; ++i) sum[i] = x[i] + b[i];
    for (size_t i = 0; i < n; ++i) relu[i] = std::max(x[i], 0.0f);
    for (size_t i = 0; i < n; ++i) drelu[i] = relu[i] > 0.0f ? b[i] : 0.0f;
    Activations gb(b, N, C, H, W), gsum(1e3f, N, C, H, W), grelu(1e3f, N, C, H, W),
        gdrelu(1e3f, N, C, H, W);
    nn::cuda::add_forward(gx.get(), gb.get(), gsum.get(), n);
    nn::cuda::relu_forward(gx.get(), grelu.get(), n);
    nn::cuda::relu_backward(grelu.get(), gb.get(), gdrelu.get(), n);
    checkClose(gsum.host(), sum, 1e-2, "add");
    checkClose(grelu.host(), relu, 1e-6, "relu (exact)");
    checkClose(gdrelu.host(), drelu, 1e-6, "relu backward (exact)");
    nn::cuda::accumulate(gsum.get(), gb.get(), n);
    for (size_t i = 0; i < n; ++i) sum[i] += b[i];
    checkClose(gsum.host(), sum, 2e-2, "accumulate");
  }
}

// A copy of the n 16-bit values at `from`, moved by one value: no longer on 16 bytes, so
// the pools take their one-value-at-a-time kernels on it.
class Misaligned {
 public:
  Misaligned(const float* from, size_t n) : d_(n + 8, 0.0f) {
    REQUIRE(cudaMemcpy(get(), from, n * 2, cudaMemcpyDeviceToDevice) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the layers' stream does not wait
  }
  float* get() const { return reinterpret_cast<float*>(reinterpret_cast<char*>(d_.get()) + 2); }

 private:
  Device d_;
};

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("16-bit: max pool over whole Packs of channels matches the CPU and the per-value path",
          "[half]") {
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    std::mt19937_64 rng(24);
    for (const int C : {16, 64}) {
      INFO("C=" << C);
      const int N = 3, H = 9, W = 11;
      nn::MaxPool2d p = stemPool();
      const int Ho = p.out_h(H), Wo = p.out_w(W);
      const size_t n = size_t(N) * C * H * W, np = size_t(N) * C * Ho * Wo;
      checkMaxPool(rounded(randomVector(n, rng), math), N, C, H, W, math, rng);

      // Ties in every window and a NaN: the packed kernels pick and sum exactly as the
      // per-value ones do on the same values.
      std::uniform_int_distribution<int> level(-3, 3);
      std::vector<float> t(n);
      for (float& v : t) v = 0.5f * float(level(rng));
      t[5] = std::nanf("");
      Activations tx(t, N, C, H, W), gdy(rounded(randomVector(np, rng), math), N, C, Ho, Wo);
      Misaligned tx1(tx.get(), n), dy1(gdy.get(), np);
      Device y0(np, 0.0f), y1(np, 0.0f), ws0(np, 0.0f), ws1(np, 0.0f), dx0(n, 0.0f), dx1(n, 0.0f);
      nn::cuda::maxpool2d_forward(p, tx.get(), y0.get(), ws0.get(), N, C, H, W);
      nn::cuda::maxpool2d_forward(p, tx1.get(), y1.get(), ws1.get(), N, C, H, W);
      nn::cuda::maxpool2d_backward(p, gdy.get(), ws0.get(), dx0.get(), N, C, H, W);
      nn::cuda::maxpool2d_backward(p, dy1.get(), ws0.get(), dx1.get(), N, C, H, W);
      CHECK(sameBits(y0.host(), y1.host()));
      CHECK(sameBits(ws0.host(), ws1.host()));
      CHECK(sameBits(dx0.host(), dx1.host()));
    }
  }
}

TEST_CASE("16-bit: the linear layer takes 16-bit features and gives float32 logits", "[half]") {
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    nn::cuda::clear_plan_cache();  // the report below then speaks of this math only
    std::mt19937_64 rng(23);
    const int N = 8, in = 64, out = 10;
    nn::Linear l;
    l.in = in, l.out = out;
    auto x = rounded(randomVector(size_t(N) * in, rng), math);
    auto w = rounded(randomVector(size_t(out) * in, rng, -0.3f, 0.3f), math);
    auto b = randomVector(out, rng);
    auto dy = rounded(randomVector(size_t(N) * out, rng), math);  // float32 logits' gradient
    std::vector<float> y(size_t(N) * out), dx(size_t(N) * in), dw(w.size()), db(out);
    nn::Linear cpu = l;
    cpu.w = w.data(), cpu.b = b.data(), cpu.dw = dw.data(), cpu.db = db.data();
    nn::linear_forward(cpu, x.data(), y.data(), N);
    nn::linear_backward(cpu, x.data(), dy.data(), dx.data(), N);
    Activations gx(x, N, in, 1, 1), gdx(1e3f, N, in, 1, 1);
    Device gw(w), gb(b), gy(y.size(), 1e3f), gdy(dy), gdw(w.size(), 1e3f), gdb(out, 1e3f);
    nn::Linear gpu = l;
    gpu.w = gw.get(), gpu.b = gb.get(), gpu.dw = gdw.get(), gpu.db = gdb.get();
    nn::cuda::linear_forward(gpu, gx.get(), gy.get(), N);
    nn::cuda::linear_backward(gpu, gx.get(), gdy.get(), gdx.get(), N);
    checkClose(gy.host(), y, 1e-3, "logits (float32 from 16-bit operands)");
    checkClose(gdw.host(), dw, 1e-3, "dW (float32)");
    checkClose(gdb.host(), db, 1e-5, "db (float32)");
    checkClose(gdx.host(), dx, 1e-2, "dx (16-bit)");
  }
}

TEST_CASE("16-bit: a backward before any forward is refused", "[half]") {
  HalfMode mode(Math::Bf16);
  nn::Conv2d c;
  c.C_in = 2, c.C_out = 2, c.K = 1, c.stride = 1, c.pad = 0;
  Device w(4, 0.5f), dw(4, 0.0f);
  Activations x(1.0f, 2, 2, 2, 1), dy(1.0f, 2, 2, 2, 1);
  c.w = w.get(), c.dw = dw.get();
  nn::cuda::clear_plan_cache();
  CHECK_THROWS_AS(nn::cuda::conv2d_backward(c, x.get(), dy.get(), nullptr, 2, 2, 1),
                  InvalidArgument);
}

}  // namespace

// conv_bn_forward with the statistics summed by the convolution (cuDNN's graph API,
// Fusion::WhereSupported) against the CPU's convolution, batch norm (training) and
// batch norm backward on the same 16-bit values: the saved mean and inverse standard
// deviation must be what cuDNN's batch norm backward expects. The CPU's batch norm
// reads the convolution's output rounded to 16 bits, as the GPU's does. With the ReLU
// fused in, the outputs are compared; without it, also the backward (with it, a value
// that normalises to about zero may pass the ReLU on one side only, and its gradient
// then differs by far more than rounding). The second pass runs the plan the first
// checked and timed. fp16 must find a fused engine for a 3x3 and a 1x1 convolution;
// bf16 may run either way.
TEST_CASE("16-bit: convolution with fused batch-norm statistics matches the CPU", "[fusion]") {
  struct FusionMode {
    explicit FusionMode(nn::cuda::Fusion f) : old(nn::cuda::set_conv_bn_fusion(f)) {}
    ~FusionMode() { nn::cuda::set_conv_bn_fusion(old); }
    nn::cuda::Fusion old;
  } fusion(nn::cuda::Fusion::WhereSupported);
  for (Math math : kHalfMaths) {
    INFO(nameOf(math));
    HalfMode mode(math);
    nn::cuda::clear_plan_cache();  // the report below then speaks of this math only
    std::mt19937_64 rng(23);
    struct Case {
      int N, C_in, C_out, H, K, stride, pad;
    };
    for (const Case& k : {Case{8, 32, 64, 28, 3, 1, 1}, Case{8, 64, 128, 28, 1, 2, 0}}) {
      INFO("conv+bn N=" << k.N << " " << k.C_in << "->" << k.C_out << " " << k.H << " K=" << k.K);
      nn::Conv2d c;
      c.C_in = k.C_in, c.C_out = k.C_out, c.K = k.K, c.stride = k.stride, c.pad = k.pad;
      const int Ho = c.out_h(k.H), C = k.C_out;
      const size_t nx = size_t(k.N) * k.C_in * k.H * k.H, ny = size_t(k.N) * C * Ho * Ho;
      const size_t nw = size_t(C) * k.C_in * k.K * k.K;
      auto x = rounded(randomVector(nx, rng), math);
      auto w = rounded(randomVector(nw, rng, -0.2f, 0.2f), math);
      auto dy = rounded(randomVector(ny, rng), math);
      std::vector<float> gamma = randomVector(C, rng, 0.5f, 1.5f), beta = randomVector(C, rng);
      std::vector<float> a(ny);
      nn::Conv2d cpu_c = c;
      cpu_c.w = w.data();
      nn::conv2d_forward(cpu_c, x.data(), a.data(), k.N, k.H, k.H);
      const std::vector<float> a16 = rounded(a, math);
      for (const bool relu : {true, false}) {
        INFO("ReLU fused: " << relu);
        BnBuffers st(gamma, beta, std::vector<float>(C, 0.1f), std::vector<float>(C, 1.5f));
        std::vector<float> b(ny), dx(ny);
        nn::BatchNorm2d bn;
        bn.C = C, bn.relu = relu;
        nn::BatchNorm2d cpu = st.cpu(bn), gpu = st.gpu(bn);
        nn::batchnorm2d_forward(cpu, a16.data(), b.data(), k.N, Ho, Ho, true);
        nn::batchnorm2d_backward(cpu, a16.data(), dy.data(), dx.data(), k.N, Ho, Ho, true);

        Activations gx(x, k.N, k.C_in, k.H, k.H), ga(1e3f, k.N, C, Ho, Ho),
            gb(1e3f, k.N, C, Ho, Ho);
        Activations gdy(dy, k.N, C, Ho, Ho), gdx(1e3f, k.N, C, Ho, Ho);
        Device gw(w);
        nn::Conv2d gc = c;
        gc.w = gw.get();
        nn::cuda::conv_bn_forward(gc, gpu, gx.get(), ga.get(), gb.get(), k.N, k.H, k.H);
        nn::cuda::batchnorm2d_backward(gpu, ga.get(), gdy.get(), gdx.get(), k.N, Ho, Ho, true);
        checkClose(ga.host(), a, 1e-2, "the convolution's output");
        checkClose(gb.host(), b, 2e-2, relu ? "batch norm + ReLU" : "batch norm");
        checkClose(st.d_save_mean.host(), st.save_mean, 1e-2, "the saved mean");
        std::vector<float> invstd(C);  // the GPU saves 1 / sqrt(var + eps)
        for (int i = 0; i < C; ++i) invstd[i] = 1.0f / std::sqrt(st.save_var[i] + bn.eps);
        checkClose(st.d_save_var.host(), invstd, 1e-2, "the saved inverse standard deviation");
        checkClose(st.d_mean.host(), st.mean, 1e-2, "the running mean");
        checkClose(st.d_var.host(), st.var, 1e-2, "the running variance");
        if (relu) continue;
        checkClose(gdx.host(), dx, 2e-2, "batch norm backward's dx");
        checkClose(st.d_dgamma.host(), st.dgamma, 1e-2, "dgamma");
        checkClose(st.d_dbeta.host(), st.dbeta, 1e-2, "dbeta");
      }
    }
    const std::string report = nn::cuda::conv_bn_fusion_report();
    INFO(report);
    if (math == Math::Fp16) CHECK(report.find("fused for 2 of 2 shapes") != std::string::npos);
  }
}

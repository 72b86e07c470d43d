// The GPU loss, accuracy counts, fused SGD and device arenas against the CPU backend and
// optimizer. Tags: [softmax] [sgd] [arena]. See test_cudnn_layers.cc for the tolerances.
#include "cudnn_layers_util.h"
#include "nn/cuda/layers_cuda.h"
#include "nn/layers.h"
#include "optimizer.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

using namespace accord;
using test::checkClose;
using test::Device;
using test::DeviceLabels;
using test::randomVector;

std::vector<int32_t> randomLabels(int N, int C, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> u(0, C - 1);
  std::vector<int32_t> labels(N);
  for (auto& l : labels) l = u(rng);
  return labels;
}

TEST_CASE("softmax cross-entropy: loss and dlogits match the CPU", "[softmax]") {
  std::mt19937_64 rng(7);
  struct Case {
    int N, C;
    float smoothing;
  };
  for (Case k : {Case{6, 10, 0.0f}, Case{6, 10, 0.1f}, Case{8, 1000, 0.1f}, Case{3, 1, 0.0f},
                 Case{5, 300, 0.0f}}) {
    INFO("softmax_xent N=" << k.N << " C=" << k.C << " smoothing=" << k.smoothing);
    const size_t n = size_t(k.N) * k.C;
    auto logits = randomVector(n, rng, -4.0f, 4.0f);
    auto labels = randomLabels(k.N, k.C, rng);
    std::vector<float> d(n);
    const float loss =
        nn::softmax_xent(logits.data(), labels.data(), d.data(), k.N, k.C, k.smoothing);
    Device gz(logits), gd(n, 1e3f);
    DeviceLabels gl(labels);
    const float gloss = nn::cuda::softmax_xent(gz.get(), gl.get(), gd.get(), k.N, k.C, k.smoothing);
    CHECK(gloss == Approx(loss).epsilon(1e-6).margin(1e-7));
    if (k.C > 1) checkClose(gd.host(), d, 1e-6, "dlogits");
    // Without dlogits, and in place over the logits.
    CHECK(nn::cuda::softmax_xent(gz.get(), gl.get(), nullptr, k.N, k.C, k.smoothing) == gloss);
    CHECK(nn::cuda::softmax_xent(gz.get(), gl.get(), gz.get(), k.N, k.C, k.smoothing) == gloss);
    if (k.C > 1) checkClose(gz.host(), d, 1e-6, "dlogits over the logits");
  }
}

TEST_CASE("softmax cross-entropy and topk reject labels outside [0, C)", "[softmax]") {
  Device z(size_t(2) * 4, 0.5f);
  DeviceLabels bad({1, 4});
  CHECK_THROWS_AS(nn::cuda::softmax_xent(z.get(), bad.get(), nullptr, 2, 4, 0.0f), InvalidArgument);
  CHECK_THROWS_AS(nn::cuda::topk_correct(z.get(), bad.get(), 2, 4), InvalidArgument);
  DeviceLabels good({1, 3});
  CHECK(std::isfinite(nn::cuda::softmax_xent(z.get(), good.get(), nullptr, 2, 4, 0.0f)));
}

TEST_CASE("topk counts ties against the label and NaN rows as wrong", "[softmax]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // C = 6, so top-5 means fewer than 5 others >= the label's logit.
  const std::vector<float> logits = {
      0, 1, 5, 2,   3, 4,  // label 2 is the strict maximum: top-1 and top-5
      0, 5, 5, 2,   3, 4,  // label 2 ties the maximum: top-5 only
      0, 1, 5, nan, 3, 4,  // a NaN: neither
      9, 8, 7, 6,   5, 1,  // label 5 is the smallest: neither (5 others are larger)
      1, 1, 1, 1,   1, 1,  // all equal: neither top-1 nor top-5
      0, 1, 2, 3,   4, 5,  // label 1: four others above it: top-5 only
  };
  const std::vector<int32_t> labels = {2, 2, 2, 5, 0, 1};
  const nn::TopK want = nn::topk_correct(logits.data(), labels.data(), 6, 6);
  CHECK(want.top1 == 1);
  CHECK(want.top5 == 3);
  Device z(logits);
  DeviceLabels l(labels);
  const nn::TopK got = nn::cuda::topk_correct(z.get(), l.get(), 6, 6);
  CHECK(got.top1 == want.top1);
  CHECK(got.top5 == want.top5);

  std::mt19937_64 rng(8);
  auto big = randomVector(size_t(64) * 1000, rng);
  auto big_labels = randomLabels(64, 1000, rng);
  for (int i = 0; i < 64; i += 3) big[size_t(i) * 1000 + big_labels[i]] = 2.0f;  // some right
  const nn::TopK w2 = nn::topk_correct(big.data(), big_labels.data(), 64, 1000);
  Device gz(big);
  DeviceLabels gl(big_labels);
  const nn::TopK g2 = nn::cuda::topk_correct(gz.get(), gl.get(), 64, 1000);
  CHECK(w2.top1 >= 22);
  CHECK(g2.top1 == w2.top1);
  CHECK(g2.top5 == w2.top5);
}

// The queued variants (what a CUDA graph holds) leave in device memory exactly what the
// waiting ones return, and count bad labels instead of throwing.
TEST_CASE("softmax cross-entropy and topk queued give the waiting ones' values", "[softmax]") {
  std::mt19937_64 rng(9);
  for (int C : {1, 4, 1000}) {
    INFO("C=" << C);
    const int N = 37;
    auto logits = randomVector(size_t(N) * C, rng, -4.0f, 4.0f);
    auto labels = randomLabels(N, C, rng);
    Device gz(logits), gd(size_t(N) * C, 0.0f), gd2(size_t(N) * C, 0.0f);
    DeviceLabels gl(labels);
    const float want = nn::cuda::softmax_xent(gz.get(), gl.get(), gd.get(), N, C, 0.1f);
    const nn::TopK hits = nn::cuda::topk_correct(gz.get(), gl.get(), N, C);
    // out: loss (as float bits), top1, top5, bad
    std::vector<int32_t> host = {-1, -1, -1, 0};
    int32_t* out = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(int32_t) * 4) == cudaSuccess);
    REQUIRE(cudaMemcpy(out, host.data(), sizeof(int32_t) * 4, cudaMemcpyHostToDevice) ==
            cudaSuccess);
    nn::cuda::softmax_xent_async(gz.get(), gl.get(), gd2.get(), N, C, 0.1f,
                                 reinterpret_cast<float*>(out), out + 3);
    nn::cuda::topk_correct_async(gz.get(), gl.get(), N, C, out + 1, out + 3);
    nn::cuda::synchronize();
    REQUIRE(cudaMemcpy(host.data(), out, sizeof(int32_t) * 4, cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    float got = 0;
    std::memcpy(&got, &host[0], sizeof(float));
    CHECK(got == want);  // the same sum in the same order: the same bits
    CHECK(host[1] == hits.top1);
    CHECK(host[2] == hits.top5);
    CHECK(host[3] == 0);
    CHECK(gd2.host() == gd.host());
    // Two labels outside [0, C): counted by each, nothing thrown.
    auto wrong = labels;
    wrong[0] = C;
    wrong[N - 1] = -1;
    DeviceLabels gw(wrong);
    nn::cuda::softmax_xent_async(gz.get(), gw.get(), nullptr, N, C, 0.0f,
                                 reinterpret_cast<float*>(out), out + 3);
    nn::cuda::topk_correct_async(gz.get(), gw.get(), N, C, out + 1, out + 3);
    nn::cuda::synchronize();
    REQUIRE(cudaMemcpy(host.data(), out, sizeof(int32_t) * 4, cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(host[3] == 4);
    cudaFree(out);
  }
}

// Parameters laid out by the arenas as the trainer does: the same take() sequence on a
// host and a device arena, which must give the same offsets.
TEST_CASE("fused SGD steps like the CPU optimizer", "[sgd]") {
  const std::vector<size_t> sizes = {9408, 64, 64, 36864, 1000, 10, 1, 4097};
  const std::vector<bool> bn_or_bias = {false, true, true, false, false, true, true, false};
  for (bool nesterov : {false, true}) {
    INFO("nesterov " << nesterov);
    nn::Arena hw, hg;
    nn::cuda::DeviceArena dw, dg, dbuf;
    std::vector<float*> hp, dp;
    for (int pass = 0; pass < 2; ++pass) {
      hp.clear(), dp.clear();
      for (size_t n : sizes) {
        hp.push_back(hw.take(n)), hg.take(n);
        dp.push_back(dw.take(n)), dg.take(n), dbuf.take(n);
      }
      if (pass == 0) hw.allocate(), hg.allocate(), dw.allocate(), dg.allocate(), dbuf.allocate();
    }
    REQUIRE(dw.capacity == hw.capacity);
    resnet::SgdOptions options;
    options.momentum = 0.9, options.nesterov = nesterov, options.weight_decay = 0.01;
    options.bn_bias_decay = false;
    std::vector<resnet::ParamRef> params;
    std::vector<nn::cuda::SgdSegment> segments;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t offset = size_t(hp[i] - hw.base);
      REQUIRE(size_t(dp[i] - dw.base) == offset);
      params.push_back({std::to_string(i), hp[i], hg.base + offset, sizes[i], bn_or_bias[i]});
      segments.push_back({offset, sizes[i], bn_or_bias[i] ? 0.0f : float(options.weight_decay)});
    }
    std::mt19937_64 rng(9);
    auto w0 = randomVector(hw.capacity, rng);
    std::copy(w0.begin(), w0.end(), hw.base);
    nn::cuda::copy_to_device(dw.base, hw.base, hw.capacity);
    resnet::Sgd cpu(params, options);
    nn::cuda::FusedSgd gpu(segments, float(options.momentum), nesterov);
    for (int step = 0; step < 5; ++step) {
      auto g = randomVector(hg.capacity, rng);
      std::copy(g.begin(), g.end(), hg.base);
      nn::cuda::copy_to_device(dg.base, hg.base, hg.capacity);
      const double lr = 0.1 / (step + 1);
      cpu.step(lr);
      gpu.step(dw.base, dg.base, dbuf.base, float(lr));
    }
    std::vector<float> w(hw.capacity), buf(hw.capacity), want_buf(hw.capacity, 0.0f);
    nn::cuda::copy_to_host(w.data(), dw.base, w.size());
    nn::cuda::copy_to_host(buf.data(), dbuf.base, buf.size());
    for (size_t i = 0; i < sizes.size(); ++i)
      std::copy(cpu.momentum()[i].begin(), cpu.momentum()[i].end(),
                want_buf.begin() + (hp[i] - hw.base));
    checkClose(w, std::vector<float>(hw.base, hw.base + hw.capacity), 1e-6, "weights");
    checkClose(buf, want_buf, 1e-6, "momentum buffers");
    // The update did something: a broken kernel that leaves w alone must fail above.
    double moved = 0.0;
    for (size_t k = 0; k < w.size(); ++k) moved = std::max(moved, double(std::fabs(w[k] - w0[k])));
    CHECK(moved > 0.1);
  }
}

TEST_CASE("device arenas and inits give the CPU's layout and values", "[arena]") {
  nn::Conv2d hc, dc;
  hc.C_in = dc.C_in = 3, hc.C_out = dc.C_out = 17, hc.K = dc.K = 7;
  nn::Linear hl, dl;
  hl.in = dl.in = 33, hl.out = dl.out = 10;
  nn::BatchNorm2d hb, db;
  hb.C = db.C = 17;
  nn::Arena hp, hg, hacts;
  nn::cuda::DeviceArena dp, dg, dacts;
  for (int pass = 0; pass < 2; ++pass) {
    nn::conv2d_bind(hc, hp, hg);
    nn::batchnorm2d_bind(hb, hp, hg, hp, hacts);
    nn::linear_bind(hl, hp, hg);
    nn::cuda::conv2d_bind(dc, dp, dg);
    nn::cuda::batchnorm2d_bind(db, dp, dg, dp, dacts);
    nn::cuda::linear_bind(dl, dp, dg);
    if (pass == 0)
      hp.allocate(), hg.allocate(), hacts.allocate(), dp.allocate(), dg.allocate(),
          dacts.allocate();
  }
  REQUIRE(dp.capacity == hp.capacity);
  CHECK(dl.w - dp.base == hl.w - hp.base);
  std::mt19937_64 r1(10), r2(10);
  nn::conv2d_init(hc, r1);
  nn::batchnorm2d_init(hb, true);
  nn::linear_init(hl, r1);
  nn::cuda::conv2d_init(dc, r2);
  nn::cuda::batchnorm2d_init(db, true);
  nn::cuda::linear_init(dl, r2);
  std::vector<float> got(dp.capacity);
  nn::cuda::copy_to_host(got.data(), dp.base, got.size());
  checkClose(got, std::vector<float>(hp.base, hp.base + hp.capacity), 0.0, "initial parameters");
}

}  // namespace

// Conv throughput, to compare with oneDNN's own speed on this machine: hidden from the
// default run ("[.]"); run it with `accord_trainer_tests "[bench]"`. Prints the best of
// a few runs of forward and of backward (data + weights), in GFLOP/s: 2 * N * C_out *
// C_in * K * K * Ho * Wo per pass, twice that for backward.
#include "test_layers_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace accord::nn::test {
namespace {

double seconds(const std::function<void()>& f, int runs) {
  f();  // builds the primitives and touches the scratch buffers
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Shape {
  int N, C_in, C_out, H, K, stride;
};

TEST_CASE("conv2d throughput on ResNet shapes", "[.][bench]") {
  for (Shape s :
       {Shape{32, 64, 64, 56, 3, 1}, Shape{32, 128, 128, 28, 3, 1}, Shape{32, 64, 256, 56, 1, 1},
        Shape{32, 256, 128, 56, 3, 2}, Shape{32, 3, 64, 224, 7, 2}}) {
    Conv2d c{s.C_in, s.C_out, s.K, s.stride, s.K / 2, false};
    int Ho = c.out_h(s.H);
    Tensor w(c.num_params()), dw(w.size()), x(size_t(s.N) * s.C_in * s.H * s.H, 0.5f);
    Tensor dx(x.size()), y(size_t(s.N) * s.C_out * Ho * Ho), dy(y.size(), 0.1f);
    std::mt19937_64 rng(1);
    c.w = w.data(), c.dw = dw.data();
    conv2d_init(c, rng);
    double flop = 2.0 * s.N * s.C_out * s.C_in * s.K * s.K * Ho * Ho;
    double tf = seconds([&] { conv2d_forward(c, x.data(), y.data(), s.N, s.H, s.H); }, 3);
    double tb =
        seconds([&] { conv2d_backward(c, x.data(), dy.data(), dx.data(), s.N, s.H, s.H); }, 3);
    std::printf(
        "conv %dx%d/%d %4d->%-4d on %dx%dx%dx%d: forward %7.1f ms %5.0f GFLOP/s | "
        "backward %7.1f ms %5.0f GFLOP/s\n",
        s.K, s.K, s.stride, s.C_in, s.C_out, s.N, s.C_in, s.H, s.H, tf * 1e3, flop / tf / 1e9,
        tb * 1e3, 2 * flop / tb / 1e9);
    CHECK(tf > 0);
  }
}

}  // namespace
}  // namespace accord::nn::test

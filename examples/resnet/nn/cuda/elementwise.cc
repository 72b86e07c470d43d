// ReLU, residual add (with the ReLU after it or not), accumulate and the two pools:
// argument checks, then our kernels (elementwise.cu, kernels.cu). Max pool is ours
// rather than cuDNN's because cudnnPoolingBackward needs the forward's x and y, and
// layers.h's backward gets only dy and the workspace: the workspace records each
// output's arg-max instead.
#include "nn/cuda/backend_cuda.h"

namespace accord::nn::cuda {

using namespace detail;

void relu_forward(const float* x, float* y, size_t n) {
  launchRelu(x, y, n);
  checkLaunch(key("relu_forward n", n));
}

void relu_backward(const float* y, const float* dy, float* dx, size_t n) {
  launchReluBackward(y, dy, dx, n);
  checkLaunch(key("relu_backward n", n));
}

void add_forward(const float* a, const float* b, float* y, size_t n) {
  launchAdd(a, b, y, n);
  checkLaunch(key("add_forward n", n));
}

void accumulate(float* y, const float* x, size_t n) {
  launchAdd(y, x, y, n);
  checkLaunch(key("accumulate n", n));
}

void add_relu_forward(const float* a, const float* b, float* y, size_t n) {
  launchAddRelu(a, b, y, n);
  checkLaunch(key("add_relu_forward n", n));
}

void accumulate_relu_backward(float* y, const float* x, const float* relu_y, size_t n) {
  launchAccumulateReluBackward(y, x, relu_y, n);
  checkLaunch(key("accumulate_relu_backward n", n));
}

namespace {
std::string checkPool(const MaxPool2d& p, int N, int C, int H, int W, const char* fn) {
  std::string what = key(fn, "(N C H W)", N, C, H, W, "K", p.K, "stride", p.stride, "pad", p.pad);
  if (N <= 0 || C <= 0 || H <= 0 || W <= 0 || p.K <= 0 || p.stride <= 0 || p.pad < 0 ||
      p.pad >= p.K || p.out_h(H) <= 0 || p.out_w(W) <= 0)
    throw InvalidArgument(what + ": invalid shape");
  return what;
}
}  // namespace

// ws: one int32 per output (the floats' storage reused; both are 4 bytes).
static_assert(sizeof(int32_t) == sizeof(float));

void maxpool2d_forward(MaxPool2d& p, const float* x, float* y, float* ws, int N, int C, int H,
                       int W) {
  const std::string what = checkPool(p, N, C, H, W, "maxpool2d_forward");
  launchMaxPool(x, y, reinterpret_cast<int32_t*>(ws), N, C, H, W, p.out_h(H), p.out_w(W), p.K,
                p.stride, p.pad);
  checkLaunch(what);
}

void maxpool2d_backward(MaxPool2d& p, const float* dy, const float* ws, float* dx, int N, int C,
                        int H, int W) {
  const std::string what = checkPool(p, N, C, H, W, "maxpool2d_backward");
  launchMaxPoolBackward(dy, reinterpret_cast<const int32_t*>(ws), dx, N, C, H, W, p.out_h(H),
                        p.out_w(W), p.K, p.stride, p.pad);
  checkLaunch(what);
}

void avgpool_forward(const float* x, float* y, int N, int C, int H, int W) {
  const std::string what = key("avgpool_forward (N C H W)", N, C, H, W);
  if (N <= 0 || C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  launchAvgPool(x, y, N, C, H * W);
  checkLaunch(what);
}

void avgpool_backward(const float* dy, float* dx, int N, int C, int H, int W) {
  const std::string what = key("avgpool_backward (N C H W)", N, C, H, W);
  if (N <= 0 || C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  launchAvgPoolBackward(dy, dx, N, C, H * W);
  checkLaunch(what);
}

}  // namespace accord::nn::cuda

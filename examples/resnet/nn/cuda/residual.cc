// The end of a residual block in training, y = max(bn(a) + shortcut, 0), in one pass over
// the activations instead of three (--fuse-residual; see layers_cuda.h).
//
// Unfused, the block's last batch norm reads its input a twice (statistics, then the
// map) and writes b; the shortcut's batch norm, where there is one, does the same with
// its own input; then add_relu reads b and the shortcut and writes y. Here each batch
// norm only sums its statistics (launchBnStatistics: one read), and one kernel reads a
// and the shortcut's input and writes y (launchBnAddRelu): for ResNet-50's blocks, four
// passes over an activation saved where the shortcut is the block's input, and eight
// where it has its own batch norm. Neither b is written: backward never reads them (a
// batch norm's backward reads its input and the saved statistics, the block's ReLU
// mask reads y).
//
// Both batch norms' backward then run the layers' own kernels (bn_backward.cu), as after
// conv_bn_forward's fused statistics: no Ex call of cuDNN's took their forward. The
// sums run in a fixed order, so the deterministic mode may take this too. Where the
// kernels cannot take the tensors (float32 activations, channels not a multiple of 8,
// pointers off 16 bytes), the unfused calls.
#include "nn/cuda/backend_cuda.h"

#include <cstdint>
#include <string>

namespace accord::nn::cuda {

using namespace detail;

namespace {

std::string checkResidual(const BatchNorm2d& bn, const BatchNorm2d* shortcut_bn, int N, int H,
                          int W) {
  std::string what = key("bn_add_relu_forward (N C H W)", N, bn.C, H, W,
                         shortcut_bn ? "shortcut batch norm" : "identity shortcut");
  if (N <= 0 || bn.C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  if (size_t(N) * H * W < 2)
    throw InvalidArgument(what + ": training needs more than one value per channel");
  for (const BatchNorm2d* b : {&bn, shortcut_bn}) {
    if (!b) continue;
    if (b->C != bn.C)
      throw InvalidArgument(key(what.c_str(), ": the shortcut's batch norm has", b->C, "channels"));
    if (!b->gamma || !b->beta || !b->running_mean || !b->running_var || !b->save_mean ||
        !b->save_var)
      throw InvalidArgument(what + ": buffers not bound");
  }
  return what;
}

// bn's statistics of x, from which backward's own kernels start.
bool statistics(const BatchNorm2d& bn, const float* x, int N, size_t HW) {
  if (!launchBnStatistics(x, N, bn.C, HW, bn.momentum, bn.eps, bn.save_mean, bn.save_var,
                          bn.running_mean, bn.running_var))
    return false;
  bnForwardWithoutEx(bn);
  return true;
}

BnAffine trainingAffine(const BatchNorm2d& bn) {
  return {bn.gamma, bn.beta, bn.save_mean, nullptr, bn.save_var, bn.eps};
}

}  // namespace

void bn_add_relu_forward(BatchNorm2d& bn, const float* a, BatchNorm2d* shortcut_bn,
                         const float* shortcut, float* shortcut_out, float* y, int N, int H,
                         int W) {
  const std::string what = checkResidual(bn, shortcut_bn, N, H, W);
  if (shortcut_bn && !shortcut_out)
    throw InvalidArgument(what + ": no buffer for the shortcut's batch norm output");
  const size_t HW = size_t(H) * W;
  bn.relu = false;
  if (shortcut_bn) shortcut_bn->relu = false;
  // The shortcut's statistics can be summed where the block's can, but for its pointer:
  // checked first, so that the block's running statistics never move twice.
  const bool summable = !shortcut_bn || reinterpret_cast<uintptr_t>(shortcut) % 16 == 0;
  if (summable && statistics(bn, a, N, HW)) {
    if (shortcut_bn && !statistics(*shortcut_bn, shortcut, N, HW))
      throw Error(what + ": the shortcut's statistics were refused after the block's");
    const BnAffine f = trainingAffine(bn);
    if (shortcut_bn) {
      const BnAffine g = trainingAffine(*shortcut_bn);
      launchBnAddRelu(a, f, shortcut, &g, y, N, bn.C, HW);
    } else {
      launchBnAddRelu(a, f, shortcut, nullptr, y, N, bn.C, HW);
    }
    checkLaunch(what);
    return;
  }
  cuda::batchnorm2d_forward(bn, a, y, N, H, W, true);
  if (shortcut_bn) {
    cuda::batchnorm2d_forward(*shortcut_bn, shortcut, shortcut_out, N, H, W, true);
    shortcut = shortcut_out;
  }
  cuda::add_relu_forward(y, shortcut, y, size_t(N) * bn.C * HW);
}

}  // namespace accord::nn::cuda

// The end of a residual block in training as one call (layers.h): on the CPU, the
// reference of the GPU's one-pass kernel (nn/cuda/residual.cc, --fuse-residual), made of
// the same calls the unfused block end makes, so that the model's fused wiring
// (model_pass.cc: which buffers the block end reads and writes, which batch norms'
// backward then run) can be checked on the CPU bit for bit against the unfused passes.
#include "nn/layers.h"

#include <accord/error.h>

#include <cstddef>

namespace accord::nn {

void bn_add_relu_forward(BatchNorm2d& bn, const float* a, BatchNorm2d* shortcut_bn,
                         const float* shortcut, float* shortcut_out, float* y, int N, int H,
                         int W) {
  if (shortcut_bn && !shortcut_out)
    throw InvalidArgument("bn_add_relu_forward: no buffer for the shortcut's batch norm output");
  bn.relu = false;
  batchnorm2d_forward(bn, a, y, N, H, W, true);
  if (shortcut_bn) {
    shortcut_bn->relu = false;
    batchnorm2d_forward(*shortcut_bn, shortcut, shortcut_out, N, H, W, true);
    shortcut = shortcut_out;
  }
  add_relu_forward(y, shortcut, y, static_cast<std::size_t>(N) * bn.C * H * W);
}

}  // namespace accord::nn

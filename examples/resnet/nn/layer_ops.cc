// The CPU backend's table (see layer_ops.h).
#include "nn/layer_ops.h"

namespace accord::nn {

const LayerOps& cpuLayers() {
  static const LayerOps ops{"cpu",
                            &conv2d_forward,
                            &conv2d_backward,
                            &batchnorm2d_forward,
                            &batchnorm2d_backward,
                            &relu_forward,
                            &relu_backward,
                            &maxpool2d_forward,
                            &maxpool2d_backward,
                            &avgpool_forward,
                            &avgpool_backward,
                            &linear_forward,
                            &linear_backward,
                            &add_forward,
                            &accumulate,
                            &add_relu_forward,
                            &accumulate_relu_backward,
                            &softmax_xent,
                            &topk_correct,
                            nullptr,
                            nullptr};
  return ops;
}

}  // namespace accord::nn

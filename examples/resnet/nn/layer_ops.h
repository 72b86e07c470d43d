// The layer functions of one backend as a table, so that code written once (the model's
// forward and backward passes) runs on either: nn::cpuLayers() (oneDNN, host pointers)
// or nn::cuda::layers() (cuDNN, device pointers). The entries have exactly the
// signatures of nn/layers.h, which both backends implement.
#pragma once

#include "nn/layers.h"

namespace accord::nn {

struct LayerOps {
  const char* name;  // "cpu", "cuda"
  void (*conv2d_forward)(Conv2d&, const float*, float*, int, int, int);
  void (*conv2d_backward)(Conv2d&, const float*, const float*, float*, int, int, int);
  void (*batchnorm2d_forward)(BatchNorm2d&, const float*, float*, int, int, int, bool);
  void (*batchnorm2d_backward)(BatchNorm2d&, const float*, const float*, float*, int, int, int,
                               bool);
  void (*relu_forward)(const float*, float*, size_t);
  void (*relu_backward)(const float*, const float*, float*, size_t);
  void (*maxpool2d_forward)(MaxPool2d&, const float*, float*, float*, int, int, int, int);
  void (*maxpool2d_backward)(MaxPool2d&, const float*, const float*, float*, int, int, int, int);
  void (*avgpool_forward)(const float*, float*, int, int, int, int);
  void (*avgpool_backward)(const float*, float*, int, int, int, int);
  void (*linear_forward)(Linear&, const float*, float*, int);
  void (*linear_backward)(Linear&, const float*, const float*, float*, int);
  void (*add_forward)(const float*, const float*, float*, size_t);
  void (*accumulate)(float*, const float*, size_t);
  void (*add_relu_forward)(const float*, const float*, float*, size_t);
  void (*accumulate_relu_backward)(float* y, const float* x, const float* relu_y, size_t);
  float (*softmax_xent)(const float*, const int32_t*, float*, int, int, float);
  TopK (*topk_correct)(const float*, const int32_t*, int, int);
  // A convolution and the batch norm after it in training, fused where the backend can
  // (nn::cuda::conv_bn_forward); nullptr: the two calls above.
  void (*conv_bn_forward)(Conv2d&, BatchNorm2d&, const float*, float*, float*, int, int, int);
  // The end of a residual block in training, y = relu(bn(a) + shortcut_bn(shortcut) or
  // shortcut), in one pass where the backend can (nn::cuda::bn_add_relu_forward); nullptr:
  // batchnorm2d_forward and add_relu_forward.
  void (*bn_add_relu_forward)(BatchNorm2d&, const float*, BatchNorm2d*, const float*, float*,
                              float*, int, int, int);
};

const LayerOps& cpuLayers();

}  // namespace accord::nn

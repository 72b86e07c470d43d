// The operation graphs accord-fusion-probe asks cuDNN about (fusion_probe.cc): ResNet's
// fused patterns and the single operations they would replace, for one convolution
// shape (or, for the block's end, one activation shape), built on nn/cuda/cudnn_graph.h.
#pragma once

#include "nn/cuda/cudnn_graph.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accord::resnet::probe {

namespace graph = nn::cuda::graph;

// A convolution of a bottleneck: C -> K channels, R x R filter, input H x H.
struct ConvShape {
  int C, K, H, R, stride;
  int out() const { return (H + 2 * (R / 2) - R) / stride + 1; }
  std::string name() const;  // "3x3 64->64 @56/1"
};

enum class Pattern {
  // The fused patterns.
  SbrConvStats,   // y = conv(relu(x * scale + bias)), and y's channel sums (BN fwd folded)
  ConvStats,      // y = conv(x), and y's channel sums (--cudnn-fusion today)
  DgradDreluDbn,  // g = relu'(bn(x)) * dgrad(dy), and BN's weight gradient of g
  SbrWgrad,       // dw = wgrad(relu(x * scale + bias), dy)
  DualBnAddRelu,  // y = relu(a * s1 + b1 + x * s2 + b2): the block's end (activation shape)
  // What they replace, alone.
  ConvFwd,
  ConvDgrad,
  ConvWgrad,
};
const char* nameOf(Pattern p);

// The probe's buffers a graph's tensors are bound to. Activations are sized for the
// largest shape; channel buffers hold K or C floats (or 16-bit values).
enum class Slot { X, W, Y, DY, DX, DW, X2, Sum, SqSum, Scale, Bias, Mean, InvStd, Scale2, Bias2,
                  DScale, DBias, EqDy, EqX, EqBias };
constexpr int kSlots = int(Slot::EqBias) + 1;

struct Built {
  std::unique_ptr<graph::Graph> graph;
  std::vector<std::pair<int64_t, Slot>> bindings;  // uid -> buffer
};

// The finalized graph of `p` at shape s and batch N: 16-bit activations of `io`,
// per-channel parameters of `channel` (cuDNN's fused engines differ in which they take).
// For DualBnAddRelu, s.K and s.H give the activation shape. Throws graph::Refused.
Built build(Pattern p, const ConvShape& s, int N, cudnnDataType_t io, cudnnDataType_t channel,
            cudnnHandle_t handle);

}  // namespace accord::resnet::probe

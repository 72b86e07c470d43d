// ResNet's fused patterns as cuDNN operation graphs (see fusion_graphs.h). Their shapes
// follow cuDNN's own descriptions of the patterns its fused engines take: 16-bit NHWC
// activations and filters, per-channel (1, C, 1, 1) parameters, intermediates that
// never reach memory (virtual) in float, except the scale-bias-ReLU before a weight
// gradient, whose engines take them in the activations' type.
#include "bench/fusion_graphs.h"

#include <sstream>

namespace accord::resnet::probe {

std::string ConvShape::name() const {
  std::ostringstream os;
  os << R << "x" << R << " " << C << "->" << K << " @" << H << "/" << stride;
  return os.str();
}

const char* nameOf(Pattern p) {
  switch (p) {
    case Pattern::SbrConvStats:
      return "scale-bias-relu-conv-stats";
    case Pattern::ConvStats:
      return "conv-stats";
    case Pattern::DgradDreluDbn:
      return "dgrad-drelu-dbn";
    case Pattern::SbrWgrad:
      return "scale-bias-relu-wgrad";
    case Pattern::DualBnAddRelu:
      return "dual-bn-add-relu";
    case Pattern::ConvFwd:
      return "conv fwd";
    case Pattern::ConvDgrad:
      return "conv dgrad";
    case Pattern::ConvWgrad:
      return "conv wgrad";
  }
  return "?";
}

namespace {

// Adds tensors bound to the probe's buffers (uid = slot + 1) and virtual ones (uids from
// 100), recording the bindings.
class Builder {
 public:
  Builder(cudnnHandle_t handle, Built& out) : out_(out) {
    out_.graph = std::make_unique<graph::Graph>(handle);
  }
  graph::Graph& g() { return *out_.graph; }
  const graph::Desc& bound(Slot s, graph::Dims d, cudnnDataType_t type) {
    const int64_t uid = int64_t(s) + 1;
    out_.bindings.emplace_back(uid, s);
    return g().tensor(uid, d, type);
  }
  const graph::Desc& inner(graph::Dims d, cudnnDataType_t type) {
    return g().tensor(next_++, d, type, true);
  }
  // relu(x * scale + bias), per channel, in `type`.
  const graph::Desc& scaleBiasRelu(const graph::Desc& x, graph::Dims d, Slot scale, Slot bias,
                                   cudnnDataType_t channel, cudnnDataType_t type) {
    const graph::Dims c = {1, d[1], 1, 1};
    const graph::Desc& s = bound(scale, c, channel);
    const graph::Desc& b = bound(bias, c, channel);
    const graph::Desc& scaled = inner(d, type);
    g().pointwise(CUDNN_POINTWISE_MUL, x, &s, scaled);
    const graph::Desc& shifted = inner(d, type);
    g().pointwise(CUDNN_POINTWISE_ADD, scaled, &b, shifted);
    const graph::Desc& relu = inner(d, type);
    g().pointwise(CUDNN_POINTWISE_RELU_FWD, shifted, nullptr, relu);
    return relu;
  }

 private:
  Built& out_;
  int64_t next_ = 100;
};

}  // namespace

Built build(Pattern p, const ConvShape& s, int N, cudnnDataType_t io, cudnnDataType_t channel,
            cudnnHandle_t handle) {
  Built out;
  Builder b(handle, out);
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  const int64_t Ho = s.out();
  const graph::Dims in = {N, s.C, s.H, s.H}, outd = {N, s.K, Ho, Ho}, filter = {s.K, s.C, s.R, s.R};
  const graph::Dims per_in = {1, s.C, 1, 1}, per_out = {1, s.K, 1, 1};
  const graph::ConvGeometry geo{s.stride, s.R / 2};
  graph::Graph& g = b.g();
  switch (p) {
    case Pattern::SbrConvStats:
    case Pattern::ConvStats: {
      const graph::Desc& x = b.bound(Slot::X, in, io);
      const graph::Desc& input =
          p == Pattern::ConvStats ? x : b.scaleBiasRelu(x, in, Slot::Scale, Slot::Bias, channel, fp32);
      const graph::Desc& w = b.bound(Slot::W, filter, io);
      const graph::Desc& y = b.bound(Slot::Y, outd, io);
      g.convForward(input, w, y, geo);
      g.genStats(y, b.bound(Slot::Sum, per_out, fp32), b.bound(Slot::SqSum, per_out, fp32));
      break;
    }
    case Pattern::DgradDreluDbn: {
      // dy is the gradient of this convolution's output; x the input of the batch norm
      // (with its ReLU) that made this convolution's input.
      const graph::Desc& dy = b.bound(Slot::DY, outd, io);
      const graph::Desc& w = b.bound(Slot::W, filter, io);
      const graph::Desc& dgrad = b.inner(in, fp32);
      g.convData(dy, w, dgrad, geo);
      const graph::Desc& x = b.bound(Slot::X, in, io);
      const graph::Desc& mean = b.bound(Slot::Mean, per_in, channel);
      const graph::Desc& invstd = b.bound(Slot::InvStd, per_in, channel);
      const graph::Desc& scale = b.bound(Slot::Scale, per_in, channel);
      const graph::Desc& bias = b.bound(Slot::Bias, per_in, channel);
      const graph::Desc& centred = b.inner(in, fp32);
      g.pointwise(CUDNN_POINTWISE_SUB, x, &mean, centred);
      const graph::Desc& normed = b.inner(in, fp32);
      g.pointwise(CUDNN_POINTWISE_MUL, centred, &invstd, normed);
      const graph::Desc& scaled = b.inner(in, fp32);
      g.pointwise(CUDNN_POINTWISE_MUL, normed, &scale, scaled);
      const graph::Desc& bn = b.inner(in, fp32);
      g.pointwise(CUDNN_POINTWISE_ADD, scaled, &bias, bn);
      const graph::Desc& grad = b.bound(Slot::DX, in, io);
      g.reluBackward(dgrad, bn, grad);
      g.bnWeights({&x, &mean, &invstd, &scale, &grad, &b.bound(Slot::DScale, per_in, fp32),
                   &b.bound(Slot::DBias, per_in, fp32), &b.bound(Slot::EqDy, per_in, fp32),
                   &b.bound(Slot::EqX, per_in, fp32), &b.bound(Slot::EqBias, per_in, fp32)});
      break;
    }
    case Pattern::SbrWgrad: {
      const graph::Desc& x = b.bound(Slot::X, in, io);
      const graph::Desc& input = b.scaleBiasRelu(x, in, Slot::Scale, Slot::Bias, channel, io);
      g.convFilter(input, b.bound(Slot::DY, outd, io), b.bound(Slot::DW, filter, io), geo);
      break;
    }
    case Pattern::DualBnAddRelu: {
      const graph::Dims d = {N, s.K, s.H, s.H}, c = {1, s.K, 1, 1};
      const auto mapped = [&](Slot x, Slot scale, Slot bias) -> const graph::Desc& {
        const graph::Desc& scaled = b.inner(d, fp32);
        g.pointwise(CUDNN_POINTWISE_MUL, b.bound(x, d, io), &b.bound(scale, c, channel), scaled);
        const graph::Desc& shifted = b.inner(d, fp32);
        g.pointwise(CUDNN_POINTWISE_ADD, scaled, &b.bound(bias, c, channel), shifted);
        return shifted;
      };
      const graph::Desc& main = mapped(Slot::X, Slot::Scale, Slot::Bias);
      const graph::Desc& shortcut = mapped(Slot::X2, Slot::Scale2, Slot::Bias2);
      const graph::Desc& sum = b.inner(d, fp32);
      g.pointwise(CUDNN_POINTWISE_ADD, main, &shortcut, sum);
      g.pointwise(CUDNN_POINTWISE_RELU_FWD, sum, nullptr, b.bound(Slot::Y, d, io));
      break;
    }
    case Pattern::ConvFwd:
      g.convForward(b.bound(Slot::X, in, io), b.bound(Slot::W, filter, io),
                    b.bound(Slot::Y, outd, io), geo);
      break;
    case Pattern::ConvDgrad:
      g.convData(b.bound(Slot::DY, outd, io), b.bound(Slot::W, filter, io),
                 b.bound(Slot::DX, in, io), geo);
      break;
    case Pattern::ConvWgrad:
      g.convFilter(b.bound(Slot::X, in, io), b.bound(Slot::DY, outd, io),
                   b.bound(Slot::DW, filter, io), geo);
      break;
  }
  g.finalize();
  return out;
}

}  // namespace accord::resnet::probe

// Building a ResNet: lay out the layers (shapes and names), carve every buffer from
// the arenas in two passes (plan, then allocate), initialise. forward/backward live
// in model_pass.cc.
#include "model.h"

#include <accord/error.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

namespace accord::resnet {
namespace {

struct DepthSpec {
  bool bottleneck;
  int blocks[4];
};

DepthSpec depthSpec(int depth) {
  switch (depth) {
    case 18:
      return {false, {2, 2, 2, 2}};
    case 34:
      return {false, {3, 4, 6, 3}};
    case 50:
      return {true, {3, 4, 6, 3}};
    case 101:
      return {true, {3, 4, 23, 3}};
    case 152:
      return {true, {3, 8, 36, 3}};
  }
  throw InvalidArgument("unsupported ResNet depth " + std::to_string(depth) +
                        " (expected 18, 34, 50, 101 or 152)");
}

int channels(double base, double width) {
  return std::max(1, static_cast<int>(std::lround(base * width)));
}

// Sets a ConvBn's shapes from its input size; buffers come later in bindAll.
void layoutConvBn(ConvBn& c, const std::string& conv_name, const std::string& bn_name, int C_in,
                  int C_out, int K, int stride, int H_in, int W_in) {
  c.conv = nn::Conv2d{};
  c.conv.C_in = C_in;
  c.conv.C_out = C_out;
  c.conv.K = K;
  c.conv.stride = stride;
  c.conv.pad = K / 2;
  c.bn = nn::BatchNorm2d{};
  c.bn.C = C_out;
  c.conv_name = conv_name;
  c.bn_name = bn_name;
  c.H_in = H_in;
  c.W_in = W_in;
  c.H = c.conv.out_h(H_in);
  c.W = c.conv.out_w(W_in);
}

// One residual block (torchvision's BasicBlock or Bottleneck, v1.5); returns its
// output channel count and updates H, W to its output size.
int layoutBlock(Block& b, const std::string& name, bool bottleneck, int C_in, int planes,
                int stride, int& H, int& W) {
  const int C_out = bottleneck ? planes * 4 : planes;
  b.convs.assign(bottleneck ? 3 : 2, ConvBn{});
  if (bottleneck) {
    layoutConvBn(b.convs[0], name + ".conv1", name + ".bn1", C_in, planes, 1, 1, H, W);
    layoutConvBn(b.convs[1], name + ".conv2", name + ".bn2", planes, planes, 3, stride, H, W);
    const int h = b.convs[1].H, w = b.convs[1].W;
    layoutConvBn(b.convs[2], name + ".conv3", name + ".bn3", planes, C_out, 1, 1, h, w);
  } else {
    layoutConvBn(b.convs[0], name + ".conv1", name + ".bn1", C_in, planes, 3, stride, H, W);
    const int h = b.convs[0].H, w = b.convs[0].W;
    layoutConvBn(b.convs[1], name + ".conv2", name + ".bn2", planes, C_out, 3, 1, h, w);
  }
  b.has_down = stride != 1 || C_in != C_out;
  if (b.has_down)
    layoutConvBn(b.down, name + ".downsample.0", name + ".downsample.1", C_in, C_out, 1, stride, H,
                 W);
  H = b.convs.back().H;
  W = b.convs.back().W;
  return C_out;
}

void layout(Model& m) {
  const ModelConfig& cfg = m.cfg;
  const DepthSpec spec = depthSpec(cfg.depth);
  const int S = cfg.image_size;
  int C = channels(64, cfg.width);
  if (cfg.cifar_stem)
    layoutConvBn(m.stem, "conv1", "bn1", cfg.in_channels, C, 3, 1, S, S);
  else
    layoutConvBn(m.stem, "conv1", "bn1", cfg.in_channels, C, 7, 2, S, S);
  m.has_maxpool = !cfg.cifar_stem;
  m.Hp = m.has_maxpool ? m.maxpool.out_h(m.stem.H) : m.stem.H;
  m.Wp = m.has_maxpool ? m.maxpool.out_w(m.stem.W) : m.stem.W;
  int H = m.Hp, W = m.Wp;
  m.blocks.clear();
  m.block_names.clear();
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = channels(64 << stage, cfg.width);
    for (int i = 0; i < spec.blocks[stage]; ++i) {
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      const int stride = (stage > 0 && i == 0) ? 2 : 1;
      m.blocks.emplace_back();
      C = layoutBlock(m.blocks.back(), name, spec.bottleneck, C, planes, stride, H, W);
      m.block_names.push_back(name);
    }
  }
  m.fc = nn::Linear{};
  m.fc.in = C;
  m.fc.out = cfg.classes;
}

std::size_t actSize(const ConvBn& c, int N) {
  return static_cast<std::size_t>(N) * c.conv.C_out * c.H * c.W;
}

void bindConvBn(Model& m, ConvBn& c) {
  nn::conv2d_bind(c.conv, m.params, m.grads);
  nn::batchnorm2d_bind(c.bn, m.params, m.grads, m.buffers, m.acts);
  c.a = m.acts.take(actSize(c, m.cfg.max_batch));
  c.b = m.acts.take(actSize(c, m.cfg.max_batch));
}

// The same sequence of take() calls runs in the planning and the real pass.
void bindAll(Model& m) {
  const int N = m.cfg.max_batch;
  const std::size_t S = m.cfg.image_size;
  m.input = m.acts.take(static_cast<std::size_t>(N) * m.cfg.in_channels * S * S);
  bindConvBn(m, m.stem);
  std::size_t biggest = actSize(m.stem, N);
  const std::size_t pooled = static_cast<std::size_t>(N) * m.stem.conv.C_out * m.Hp * m.Wp;
  m.pool_y = m.has_maxpool ? m.acts.take(pooled) : nullptr;
  m.pool_ws = m.has_maxpool ? m.acts.take(pooled) : nullptr;
  for (Block& b : m.blocks) {
    for (ConvBn& c : b.convs) {
      bindConvBn(m, c);
      biggest = std::max(biggest, actSize(c, N));
    }
    if (b.has_down) bindConvBn(m, b.down);
    b.y = b.convs.back().b;
  }
  m.features = m.acts.take(static_cast<std::size_t>(N) * m.fc.in);
  nn::linear_bind(m.fc, m.params, m.grads);
  m.logits = m.acts.take(static_cast<std::size_t>(N) * m.fc.out);
  m.dlogits = m.acts.take(static_cast<std::size_t>(N) * m.fc.out);
  biggest = std::max(biggest, static_cast<std::size_t>(N) * m.fc.in);
  for (float*& s : m.scratch) s = m.acts.take(biggest);
  m.bn_dx = m.acts.take(biggest);
}

void initAll(Model& m) {
  std::mt19937_64 rng(m.cfg.seed);
  auto init = [&](ConvBn& c, bool zero_gamma) {
    nn::conv2d_init(c.conv, rng);
    nn::batchnorm2d_init(c.bn, zero_gamma);
  };
  init(m.stem, false);
  for (Block& b : m.blocks) {
    for (std::size_t i = 0; i < b.convs.size(); ++i)
      init(b.convs[i], m.cfg.zero_init_residual && i + 1 == b.convs.size());
    if (b.has_down) init(b.down, false);
  }
  nn::linear_init(m.fc, rng);
}

void checkConfig(const ModelConfig& cfg) {
  depthSpec(cfg.depth);
  if (cfg.classes < 1 || cfg.in_channels < 1 || cfg.max_batch < 1 || cfg.width <= 0)
    throw InvalidArgument("model: classes, input channels, batch and width must be positive");
  const int smallest = cfg.cifar_stem ? 8 : 32;
  if (cfg.image_size < smallest)
    throw InvalidArgument("model: image size " + std::to_string(cfg.image_size) +
                          " is too small for the " + (cfg.cifar_stem ? "cifar" : "imagenet") +
                          " stem (each stage halves it): at least " + std::to_string(smallest));
}

}  // namespace

std::string ModelConfig::describe() const {
  std::ostringstream os;
  os << "resnet" << depth << " classes=" << classes << " in=" << in_channels
     << " stem=" << (cifar_stem ? "cifar" : "imagenet") << " width=" << width;
  return os.str();
}

void buildModel(Model& m, const ModelConfig& cfg, bool initialise) {
  checkConfig(cfg);
  m.cfg = cfg;
  layout(m);
  bindAll(m);  // planning pass: counts only
  m.params.allocate();
  m.grads.allocate();
  m.buffers.allocate();
  m.acts.reserve = !cfg.host_of_device;
  try {
    m.acts.allocate();
  } catch (const Error& e) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f", double(m.acts.used) * sizeof(float) / (1 << 30));
    throw InvalidArgument("model " + cfg.describe() + ": the activations of a batch of " +
                          std::to_string(cfg.max_batch) + " images need " + gib +
                          " GiB of host memory, more than this host can give (" + e.what() +
                          "); use a smaller batch");
  }
  bindAll(m);  // real pass: same sequence, real pointers
  if (initialise) initAll(m);
}

namespace {

// Visits every ConvBn in torchvision's state_dict order.
template <typename F>
void forEachConvBn(Model& m, F&& f) {
  f(m.stem);
  for (Block& b : m.blocks) {
    for (ConvBn& c : b.convs) f(c);
    if (b.has_down) f(b.down);
  }
}

std::size_t weightCount(const nn::Conv2d& c) {
  return static_cast<std::size_t>(c.C_out) * c.C_in * c.K * c.K;
}

}  // namespace

std::vector<ParamRef> parameterList(Model& m) {
  std::vector<ParamRef> out;
  forEachConvBn(m, [&](ConvBn& c) {
    out.push_back({c.conv_name + ".weight", c.conv.w, c.conv.dw, weightCount(c.conv), false});
    const auto C = static_cast<std::size_t>(c.bn.C);
    out.push_back({c.bn_name + ".weight", c.bn.gamma, c.bn.dgamma, C, true});
    out.push_back({c.bn_name + ".bias", c.bn.beta, c.bn.dbeta, C, true});
  });
  const std::size_t fc_w = static_cast<std::size_t>(m.fc.out) * m.fc.in;
  out.push_back({"fc.weight", m.fc.w, m.fc.dw, fc_w, false});
  out.push_back({"fc.bias", m.fc.b, m.fc.db, static_cast<std::size_t>(m.fc.out), true});
  return out;
}

std::vector<ParamRef> bufferList(Model& m) {
  std::vector<ParamRef> out;
  forEachConvBn(m, [&](ConvBn& c) {
    const auto C = static_cast<std::size_t>(c.bn.C);
    out.push_back({c.bn_name + ".running_mean", c.bn.running_mean, nullptr, C, true});
    out.push_back({c.bn_name + ".running_var", c.bn.running_var, nullptr, C, true});
  });
  return out;
}

std::size_t parameterCount(const Model& m) {
  std::size_t n = 0;
  for (const ParamRef& p : parameterList(const_cast<Model&>(m))) n += p.n;
  return n;
}

}  // namespace accord::resnet

// The forward and backward passes: a flat list of layer calls, and the same list in
// reverse, through the model's layer table (m.ops: the CPU's or the GPU's layers, the
// same calls either way). Backward hands each layer's gradients to the sink right after
// that layer's backward so their allreduce overlaps the rest of backward.
//
// Activation gradients live in three scratch buffers of the largest activation size.
// A block's backward takes dy in one buffer and returns the buffer that holds dx: the
// branch alternates between the other two, and the shortcut's gradient is added at the
// end, so three buffers suffice at any depth. A batch norm's backward writes to a
// fourth (m.bn_dx), which its convolution's backward reads: never in place, which
// cuDNN does not promise, so the GPU's batch norm need not copy its input gradient
// first.
#include "model.h"
#include "model_device.h"

#include <utility>

namespace accord::resnet {
namespace {

std::size_t numel(const ConvBn& c, int N) {
  return static_cast<std::size_t>(N) * c.conv.C_out * c.H * c.W;
}

void send(Model& m, const std::string& name, float* g, std::size_t n) {
  if (m.sink) m.sink(name, g, n);
}

// The ReLU after a batch norm runs inside it (BatchNorm2d::relu): b is max(bn(a), 0)
// after one pass, and backward masks the gradient by recomputing bn(a) > 0, instead of a
// ReLU pass over b each way.
void convBnForward(Model& m, ConvBn& c, const float* x, int N, bool relu) {
  c.bn.relu = relu;
  if (m.bn_training && m.ops->conv_bn_forward)
    return m.ops->conv_bn_forward(c.conv, c.bn, x, c.a, c.b, N, c.H_in, c.W_in);
  m.ops->conv2d_forward(c.conv, x, c.a, N, c.H_in, c.W_in);                // a (N, C, H, W)
  m.ops->batchnorm2d_forward(c.bn, c.a, c.b, N, c.H, c.W, m.bn_training);  // b (N, C, H, W)
}

// The block's last conv and its shortcut's, then their batch norms, the add and the
// ReLU in one call (Model::fuse_residual).
void blockTailForward(Model& m, Block& b, const float* h, int N) {
  ConvBn& c = b.convs.back();
  m.ops->conv2d_forward(c.conv, h, c.a, N, c.H_in, c.W_in);  // a (N, C_out, H, W)
  nn::BatchNorm2d* shortcut_bn = nullptr;
  const float* shortcut = b.x;
  if (b.has_down) {
    m.ops->conv2d_forward(b.down.conv, b.x, b.down.a, N, b.down.H_in, b.down.W_in);
    shortcut_bn = &b.down.bn;
    shortcut = b.down.a;
  }
  // y (N, C_out, H, W) = relu(bn(a) + shortcut)
  m.ops->bn_add_relu_forward(c.bn, c.a, shortcut_bn, shortcut, b.down.b, b.y, N, c.H, c.W);
}

}  // namespace

void blockForward(Model& m, Block& b, const float* x, int N) {
  b.x = x;
  const float* h = x;
  const bool fused = m.fuse_residual && m.bn_training && m.ops->bn_add_relu_forward;
  for (std::size_t i = 0; i < b.convs.size(); ++i) {
    if (fused && i + 1 == b.convs.size()) return blockTailForward(m, b, h, N);
    convBnForward(m, b.convs[i], h, N, i + 1 < b.convs.size());
    h = b.convs[i].b;
  }
  const float* shortcut = x;
  if (b.has_down) {
    convBnForward(m, b.down, x, N, false);
    shortcut = b.down.b;
  }
  const std::size_t n = numel(b.convs.back(), N);
  m.ops->add_relu_forward(b.y, shortcut, b.y, n);  // y (N, C_out, H, W) = relu(branch + shortcut)
}

namespace {

void sendBn(Model& m, ConvBn& c) {
  send(m, c.bn_name + ".weight", c.bn.dgamma, static_cast<std::size_t>(c.bn.C));
  send(m, c.bn_name + ".bias", c.bn.dbeta, static_cast<std::size_t>(c.bn.C));
}

void sendConv(Model& m, ConvBn& c) {
  const nn::Conv2d& k = c.conv;
  send(m, c.conv_name + ".weight", k.dw, static_cast<std::size_t>(k.C_out) * k.C_in * k.K * k.K);
}

// dy: gradient w.r.t. the ConvBn's output (after its ReLU where forward fused one);
// left as it was. dx: gradient w.r.t. its input (nullable for the stem).
void convBnBackward(Model& m, ConvBn& c, const float* x, const float* dy, float* dx, int N) {
  m.ops->batchnorm2d_backward(c.bn, c.a, dy, m.bn_dx, N, c.H, c.W, m.bn_training);
  sendBn(m, c);
  m.ops->conv2d_backward(c.conv, x, m.bn_dx, dx, N, c.H_in, c.W_in);
  sendConv(m, c);
}

}  // namespace

// dy is in scratch[in], w.r.t. the block's output, or (dy_masked) already through the
// ReLU that ends the block; returns the scratch index of dx, w.r.t. the block's input, or
// (mask_dx, where the input is the block before's output) through that block's ReLU.
int blockBackward(Model& m, Block& b, int in, int N, bool dy_masked, bool mask_dx) {
  float* dy = m.scratch[in];
  if (!dy_masked) m.ops->relu_backward(b.y, dy, dy, numel(b.convs.back(), N));
  int cur = (in + 1) % 3, spare = (in + 2) % 3;
  const int last = static_cast<int>(b.convs.size()) - 1;
  ConvBn& c_last = b.convs[last];
  // The last BN must not work in place: dy is still needed for the shortcut.
  m.ops->batchnorm2d_backward(c_last.bn, c_last.a, dy, m.scratch[spare], N, c_last.H, c_last.W,
                              m.bn_training);
  sendBn(m, c_last);
  // Invariant: the gradient w.r.t. conv i's output is in scratch[spare]; its dx goes
  // to scratch[cur], and the swap puts it in scratch[spare] for conv i - 1.
  for (int i = last; i >= 0; --i) {
    ConvBn& c = b.convs[i];
    const float* x = i > 0 ? b.convs[i - 1].b : b.x;
    if (i == last) {
      m.ops->conv2d_backward(c.conv, x, m.scratch[spare], m.scratch[cur], N, c.H_in, c.W_in);
      sendConv(m, c);
    } else {
      convBnBackward(m, c, x, m.scratch[spare], m.scratch[cur], N);
    }
    std::swap(cur, spare);
  }
  // The branch's dx is now in scratch[spare]; scratch[cur] is free.
  const std::size_t n_in =
      static_cast<std::size_t>(N) * b.convs[0].conv.C_in * b.convs[0].H_in * b.convs[0].W_in;
  const float* shortcut_dx = dy;
  if (b.has_down) {
    convBnBackward(m, b.down, b.x, dy, m.scratch[cur], N);
    shortcut_dx = m.scratch[cur];
  }
  if (mask_dx) {
    m.ops->accumulate_relu_backward(m.scratch[spare], shortcut_dx, b.x, n_in);
  } else {
    m.ops->accumulate(m.scratch[spare], shortcut_dx, n_in);
  }
  return spare;
}

void forward(Model& m, int N) {
  if (m.device) return deviceForward(m, N);
  convBnForward(m, m.stem, m.input, N, true);
  const float* h = m.stem.b;
  const int C0 = m.stem.conv.C_out;
  if (m.has_maxpool) {
    m.ops->maxpool2d_forward(m.maxpool, h, m.pool_y, m.pool_ws, N, C0, m.stem.H, m.stem.W);
    h = m.pool_y;
  }
  for (Block& b : m.blocks) {
    blockForward(m, b, h, N);
    h = b.y;
  }
  const ConvBn& last = m.blocks.back().convs.back();
  m.ops->avgpool_forward(h, m.features, N, m.fc.in, last.H, last.W);  // (N, C)
  m.ops->linear_forward(m.fc, m.features, m.logits, N);               // (N, classes)
}

float loss(Model& m, const int32_t* labels, int N, float smoothing, bool with_grad) {
  if (m.device) return deviceLoss(m, labels, N, smoothing, with_grad);
  return m.ops->softmax_xent(m.logits, labels, with_grad ? m.dlogits : nullptr, N, m.fc.out,
                             smoothing);
}

nn::TopK accuracy(Model& m, const int32_t* labels, int N) {
  if (m.device) return deviceAccuracy(m, labels, N);
  return m.ops->topk_correct(m.logits, labels, N, m.fc.out);
}

void backward(Model& m, int N) {
  if (m.device) return deviceBackward(m, N);
  m.ops->linear_backward(m.fc, m.features, m.dlogits, m.scratch[0], N);  // dfeatures (N, C)
  send(m, "fc.weight", m.fc.dw, static_cast<std::size_t>(m.fc.out) * m.fc.in);
  send(m, "fc.bias", m.fc.db, static_cast<std::size_t>(m.fc.out));
  const ConvBn& last = m.blocks.back().convs.back();
  m.ops->avgpool_backward(m.scratch[0], m.scratch[1], N, m.fc.in, last.H, last.W);
  int cur = 1;
  // A block's input gradients are summed and masked by the ReLU that ended the block
  // before it in one call, so that block's backward starts past its ReLU.
  for (auto b = m.blocks.rbegin(); b != m.blocks.rend(); ++b) {
    const bool first_block = b + 1 == m.blocks.rend(), last_block = b == m.blocks.rbegin();
    cur = blockBackward(m, *b, cur, N, !last_block, !first_block);
  }
  float* dy = m.scratch[cur];
  if (m.has_maxpool) {
    float* dx = m.scratch[(cur + 1) % 3];
    m.ops->maxpool2d_backward(m.maxpool, dy, m.pool_ws, dx, N, m.stem.conv.C_out, m.stem.H,
                              m.stem.W);
    dy = dx;
  }
  convBnBackward(m, m.stem, m.input, dy, nullptr, N);
}

}  // namespace accord::resnet

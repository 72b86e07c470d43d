// SGD with momentum, optional Nesterov and weight decay, with PyTorch's semantics
// (torch.optim.SGD, dampening 0) so runs compare one to one:
//
//   g   = grad + wd * w          (wd = 0 for BN and bias when --no-bn-decay)
//   buf = momentum * buf + g     (buf = g on the first step)
//   d   = nesterov ? g + momentum * buf : buf
//   w  -= lr * d
//
// The optimizer owns the momentum buffers (one per parameter tensor, in the model's
// order) so a checkpoint can save and restore them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace accord::resnet {

// One parameter tensor of the model: its weights, its gradient and whether weight
// decay applies to it (false for BN scale/shift and biases when so configured).
struct ParamRef {
  std::string name;    // e.g. "layer1.0.conv1.weight"
  float* w = nullptr;  // (n)
  float* g = nullptr;  // (n)
  std::size_t n = 0;
  bool is_bn_or_bias = false;
};

struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 1e-4;
  bool bn_bias_decay = true;  // false: no weight decay on BN parameters and biases
};

class Sgd {
 public:
  Sgd(std::vector<ParamRef> params, SgdOptions options);

  void step(double lr);  // one update of every parameter from its gradient
  bool gradientsFinite() const;  // no NaN or infinity in any gradient
  const std::vector<ParamRef>& params() const { return params_; }
  std::vector<std::vector<float>>& momentum() { return buf_; }  // (one per param)
  const std::vector<std::vector<float>>& momentum() const { return buf_; }
  const SgdOptions& options() const { return options_; }

 private:
  void update(std::size_t i, double lr);

  std::vector<ParamRef> params_;
  SgdOptions options_;
  std::vector<std::vector<float>> buf_;
};

// Dynamic loss scaling for float16 training: the loss's gradient is multiplied by
// scale() so that small gradients survive fp16's narrow range, and the weight gradients
// are divided by it again before the update. A step whose gradients overflowed is
// skipped and the scale halved; after `growth_interval` good steps in a row it doubles.
// The scale stays within [1, 2^24].
class LossScaler {
 public:
  explicit LossScaler(float initial = 65536.0f, int growth_interval = 2000);

  float scale() const { return scale_; }
  int goodSteps() const { return good_steps_; }  // finite steps since the scale last moved
  // Continues from a checkpoint's (scale, goodSteps()); InvalidArgument for a scale out
  // of [1, 2^24] or steps out of [0, growth interval).
  void restore(double scale, std::int64_t good_steps);
  // After a step: `finite` says whether every gradient was finite (the same on every
  // rank). Returns false when the step must be skipped. Throws Error when the
  // gradients overflow at the smallest scale: that is divergence, not range.
  bool update(bool finite);

 private:
  float scale_;
  int growth_interval_;
  int good_steps_ = 0;
};

}  // namespace accord::resnet

// SGD update; see optimizer.h. Each tensor is updated in parallel chunks with oneTBB:
// the update is memory bound and a ResNet-50 has 25M parameters.
#include "optimizer.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <accord/error.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace accord::resnet {

Sgd::Sgd(std::vector<ParamRef> params, SgdOptions options)
    : params_(std::move(params)), options_(options) {
  if (options_.momentum < 0) throw std::invalid_argument("SGD: momentum must be >= 0");
  if (options_.nesterov && options_.momentum <= 0)
    throw std::invalid_argument("SGD: Nesterov needs a momentum > 0");
  buf_.reserve(params_.size());
  for (const ParamRef& p : params_) buf_.emplace_back(p.n, 0.0f);
}

void Sgd::step(double lr) {
  for (std::size_t i = 0; i < params_.size(); ++i) update(i, lr);
}

bool Sgd::gradientsFinite() const {
  for (const ParamRef& p : params_) {
    const bool finite = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, p.n, 16384), true,
        [&](const tbb::blocked_range<std::size_t>& r, bool ok) {
          for (std::size_t k = r.begin(); ok && k < r.end(); ++k) ok = std::isfinite(p.g[k]);
          return ok;
        },
        [](bool a, bool b) { return a && b; });
    if (!finite) return false;
  }
  return true;
}

void Sgd::update(std::size_t i, double lr) {
  const ParamRef& p = params_[i];
  const bool decay = options_.bn_bias_decay || !p.is_bn_or_bias;
  const float wd = decay ? static_cast<float>(options_.weight_decay) : 0.0f;
  const float mu = static_cast<float>(options_.momentum);
  const float rate = static_cast<float>(lr);
  const bool nesterov = options_.nesterov;
  // A zero buffer gives mu*0 + g = g, i.e. PyTorch's "buf = g on the first step",
  // also after a restart from a checkpoint (which restores the buffers).
  float* buf = buf_[i].data();
  float* w = p.w;
  const float* g = p.g;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, p.n, 16384),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t k = r.begin(); k < r.end(); ++k) {
                        const float gk = g[k] + wd * w[k];
                        float d = gk;
                        if (mu != 0.0f) {
                          buf[k] = mu * buf[k] + gk;
                          d = nesterov ? gk + mu * buf[k] : buf[k];
                        }
                        w[k] -= rate * d;
                      }
                    });
}

namespace {
constexpr float kMaxLossScale = 16777216.0f;  // 2^24
}  // namespace

LossScaler::LossScaler(float initial, int growth_interval)
    : scale_(initial), growth_interval_(growth_interval) {
  if (!(initial >= 1.0f && initial <= kMaxLossScale))
    throw InvalidArgument("loss scale " + std::to_string(initial) + " is not within [1, 2^24]");
  if (growth_interval < 1)
    throw InvalidArgument("loss scale growth interval " + std::to_string(growth_interval) +
                          " is not positive");
}

void LossScaler::restore(double scale, std::int64_t good_steps) {
  if (!(scale >= 1.0 && scale <= kMaxLossScale))
    throw InvalidArgument("loss scale " + std::to_string(scale) + " is not within [1, 2^24]");
  if (good_steps < 0 || good_steps >= growth_interval_)
    throw InvalidArgument("loss scale's good steps " + std::to_string(good_steps) +
                          " is not within [0, " + std::to_string(growth_interval_) + ")");
  scale_ = static_cast<float>(scale);
  good_steps_ = static_cast<int>(good_steps);
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    if (scale_ <= 1.0f)
      throw Error(
          "the gradients overflow even with a loss scale of 1: training has diverged "
          "(lower --lr)");
    scale_ = std::max(1.0f, scale_ / 2.0f);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ = std::min(kMaxLossScale, scale_ * 2.0f);
    good_steps_ = 0;
  }
  return true;
}

}  // namespace accord::resnet

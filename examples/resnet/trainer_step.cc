// The training step (see trainer.h): data, forward, loss, backward with the gradients'
// allreduces in flight, the wait for them, and the update, or the decision to skip it.
#include "trainer.h"

#include <accord/error.h>

#include <algorithm>
#include <cmath>

namespace accord::resnet {

// The step's phases also go to Accord's timeline (ACCORD_TIMELINE), on a track of
// their own beside the tensors' (nothing is recorded without a timeline). On a GPU the
// compute phase is the queueing of the step's work: the wait for the GPU falls in the
// communication wait (several ranks: the allreduces wait for backward) or the update
// (one rank).
void Trainer::trainStep(StepTimes& t) {
  constexpr const char* kTrack = "trainer (rank 0)";
  accord::timeline_begin(kTrack, "data wait");
  auto t0 = Clock::now();
  const int n = train_loader_->borrow(&model_.input, labels_.data(),
                                      pool_indices_.empty() ? nullptr : pool_indices_.data());
  if (n > 0 && !pool_indices_.empty()) deviceInputFromPool(model_, pool_indices_.data(), n);
  t.data += since(t0);
  accord::timeline_begin(kTrack, "compute");
  t0 = Clock::now();
  if (opt_.skip_nonfinite_steps || loss_scaler_)
    bn_before_.assign(model_.buffers.base, model_.buffers.base + model_.buffers.capacity);
  if (loss_scaler_) model_.loss_scale = loss_scaler_->scale();
  model_.bn_training = opt_.train_bn_mode == "batch";
  const auto smoothing = static_cast<float>(opt_.label_smoothing);
  float loss_value = 0;
  nn::TopK hits;
  if (model_.device) {
    // Queued without waiting for the GPU (graphed, as one launch); the loss is averaged
    // there with the gradients, and read back after them.
    deviceTrainStep(model_, labels_.data(), n, smoothing, launch_);
    grads_.submitDeviceValue("loss", deviceStepLoss(model_));
  } else {
    forward(model_, n);
    loss_value = loss(model_, labels_.data(), n, smoothing, true);
    step_loss_ = loss_value;
    grads_.submitValue("loss", &step_loss_);
    hits = accuracy(model_, labels_.data(), n);
    backward(model_, n);  // hands every layer's gradients to grads_ as it goes
  }
  t.compute += since(t0);
  accord::timeline_begin(kTrack, "comm wait");
  t.comm += grads_.waitAll();
  accord::timeline_begin(kTrack, "update");
  t0 = Clock::now();
  if (model_.device) {  // waits for the GPU (with one rank, the whole step)
    const DeviceStepResult r = deviceStepResult(model_);
    loss_value = r.loss;
    step_loss_ = r.loss_average;
    hits = r.hits;
  }
  // NaN on any rank makes the average NaN: all ranks take the same decision below.
  last_lr_ = schedule_->forStep(state_.global_step, train_loader_->steps());
  if (const std::string reason = nonFiniteReason(); !reason.empty()) {
    skipNonFiniteStep(reason, t);
  } else if (lossScaleAllows(t)) {
    if (model_.device)
      deviceSgdStep(model_, last_lr_);
    else
      sgd_->step(last_lr_);
    nonfinite_in_a_row_ = 0;
    t.loss_sum += static_cast<double>(loss_value) * n;
    t.correct += hits.top1;
    t.scored += n;
  }
  t.compute += since(t0);
  accord::timeline_end(kTrack);
  t.seen += n;
  ++state_.global_step;
  ++state_.step_in_epoch;
}

// Why this step must not update the model, the same on every rank: the loss is averaged
// over the ranks (NaN anywhere makes the average NaN). When skipping, the gradients are
// checked too, as a finite loss can come with infinite gradients whose update would make
// the parameters infinite for good; the ranks vote, so all skip together.
std::string Trainer::nonFiniteReason() {
  if (std::isnan(step_loss_)) return "the loss is NaN";
  if (std::isinf(step_loss_)) return "the loss is infinite";
  // Under loss scaling, overflowing gradients are the scaler's to handle.
  if (!opt_.skip_nonfinite_steps || loss_scaler_) return "";
  const bool finite =
      model_.device ? deviceGradientsFinite(model_, *sgd_) : sgd_->gradientsFinite();
  std::vector<double> bad = {finite ? 0.0 : 1.0};
  sumDoubles(bad, "step.nonfinite_gradients");
  return bad[0] > 0 ? "the gradients are not finite" : "";
}

// Stops every rank, or with --skip-nonfinite-steps skips the step: no update, so the
// parameters and momentum stay as they were, and the BN statistics the forward pass
// moved are restored.
void Trainer::skipNonFiniteStep(const std::string& reason, StepTimes& t) {
  if (!opt_.skip_nonfinite_steps)
    throw Error(reason + " at " + stepName() +
                ": training has diverged (lower --lr, or pass --skip-nonfinite-steps to skip "
                "such steps)");
  std::copy(bn_before_.begin(), bn_before_.end(), model_.buffers.base);
  ++t.skipped;
  if (++nonfinite_in_a_row_ >= kMaxNonFiniteInARow)
    throw Error(reason + " at " + stepName() + ", the " + std::to_string(kMaxNonFiniteInARow) +
                " steps up to it all skipped: the model has diverged (lower --lr)");
  metrics_->message("skipped " + stepName() + ": " + reason);
}

// fp16: gradients that overflowed at this step's loss scale (on any rank: the ranks
// vote) skip the step, as a non-finite one is skipped, and halve the scale; that is
// range finding, not divergence, so it does not count towards the skips in a row.
bool Trainer::lossScaleAllows(StepTimes& t) {
  if (!loss_scaler_) return true;
  std::vector<double> bad = {deviceGradientsFinite(model_, *sgd_) ? 0.0 : 1.0};
  sumDoubles(bad, "step.gradients_overflow");
  const float scale = loss_scaler_->scale();
  if (loss_scaler_->update(bad[0] == 0.0)) return true;
  std::copy(bn_before_.begin(), bn_before_.end(), model_.buffers.base);
  ++t.skipped;
  metrics_->message("skipped " + stepName() + ": the gradients overflowed at loss scale " +
                    std::to_string(static_cast<long long>(scale)) + "; the scale is now " +
                    std::to_string(static_cast<long long>(loss_scaler_->scale())));
  return false;
}

}  // namespace accord::resnet

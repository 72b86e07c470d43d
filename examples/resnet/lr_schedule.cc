// See lr_schedule.h for the formulas; this file only evaluates them.
#include "lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace accord::resnet {

ScheduleKind parseScheduleKind(const std::string& name) {
  if (name == "step") return ScheduleKind::Step;
  if (name == "cosine") return ScheduleKind::Cosine;
  if (name == "exponential" || name == "exp") return ScheduleKind::Exponential;
  if (name == "constant") return ScheduleKind::Constant;
  throw std::invalid_argument("unknown LR schedule '" + name +
                              "' (expected step, cosine, exponential or constant)");
}

const char* scheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Step:
      return "step";
    case ScheduleKind::Cosine:
      return "cosine";
    case ScheduleKind::Exponential:
      return "exponential";
    case ScheduleKind::Constant:
      return "constant";
  }
  return "?";
}

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  if (options_.global_batch <= 0)
    throw std::invalid_argument("LR schedule: global batch must be > 0");
  if (options_.warmup_epochs < 0)
    throw std::invalid_argument("LR schedule: warm-up epochs must be >= 0");
  peak_ = options_.base_lr * options_.global_batch / 256.0;
  if (options_.kind == ScheduleKind::Cosine && options_.min_lr > peak_)
    throw std::invalid_argument(
        "--min-lr " + std::to_string(options_.min_lr) + " is above the peak LR " +
        std::to_string(peak_) + " (--lr " + std::to_string(options_.base_lr) + " x global batch " +
        std::to_string(options_.global_batch) +
        " / 256): the cosine schedule would climb to it; expected at most the peak");
}

double LrSchedule::at(double epoch) const {
  const double w = options_.warmup_epochs;
  if (epoch < w) return peak_ * std::max(epoch, 0.0) / w;
  return afterWarmup(epoch);
}

double LrSchedule::afterWarmup(double epoch) const {
  const double t = epoch - options_.warmup_epochs;
  switch (options_.kind) {
    case ScheduleKind::Step: {
      double lr = peak_;
      for (double m : options_.milestones)
        if (std::floor(epoch + 1e-9) >= m) lr *= options_.step_factor;
      return lr;
    }
    case ScheduleKind::Cosine: {
      const double t_max = options_.total_epochs - options_.warmup_epochs;
      if (t_max <= 0) return peak_;
      const double frac = std::min(t / t_max, 1.0);
      return options_.min_lr +
             0.5 * (peak_ - options_.min_lr) * (1.0 + std::cos(std::numbers::pi * frac));
    }
    case ScheduleKind::Exponential:
      return peak_ * std::pow(options_.gamma, std::floor(t + 1e-9));
    case ScheduleKind::Constant:
      return peak_;
  }
  return peak_;
}

double LrSchedule::forStep(long step, long steps_per_epoch) const {
  if (steps_per_epoch <= 0) throw std::invalid_argument("LR schedule: steps per epoch must be > 0");
  const double start = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
  const double end = static_cast<double>(step + 1) / static_cast<double>(steps_per_epoch);
  if (end <= options_.warmup_epochs) return at(end);
  return afterWarmup(std::max(start, options_.warmup_epochs));
}

}  // namespace accord::resnet

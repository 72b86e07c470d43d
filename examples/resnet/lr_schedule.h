// Learning-rate schedules as the reference study defines them (Aach et al., 2023):
//
//   LR_max = base_lr * global_batch / 256                      (linear scaling rule)
//   warm-up, epoch e < W:   LR(e) = LR_max * e / W             (linear from 0)
//   then, with t = epochs since warm-up ended:
//     step:         LR = LR_max * factor^(number of milestones <= floor(e))
//     cosine:       LR = LR_min + 1/2 (LR_max - LR_min)(1 + cos(pi t / t_max)),
//                   t_max = total_epochs - W
//     exponential:  LR = LR_max * gamma^floor(t)
//
// The schedule is a pure function of a (fractional) epoch so tests can check it
// against the formulas. The trainer asks once per step (forStep): during warm-up at the
// epoch reached after the step, e = (step + 1) / steps_per_epoch, so the first step
// does not waste a batch on LR 0 and the last warm-up step reaches LR_max; afterwards
// at the epoch where the step starts, so a milestone takes effect with its epoch's
// first step.
#pragma once

#include <string>
#include <vector>

namespace accord::resnet {

enum class ScheduleKind { Step, Cosine, Exponential, Constant };

ScheduleKind parseScheduleKind(const std::string& name);  // throws std::invalid_argument
const char* scheduleKindName(ScheduleKind kind);

struct LrScheduleOptions {
  ScheduleKind kind = ScheduleKind::Step;
  double base_lr = 0.1;  // at a global batch of 256
  int global_batch = 256;
  double warmup_epochs = 5;
  double total_epochs = 90;  // t_max for cosine is total_epochs - warmup_epochs
  std::vector<double> milestones = {30, 60, 80};  // step: absolute epochs
  double step_factor = 0.1;
  double gamma = 0.95;  // exponential, per epoch
  double min_lr = 0.0;  // cosine's LR_min
};

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleOptions options);

  double peakLr() const { return peak_; }  // LR_max after linear scaling
  double at(double epoch) const;           // LR at a fractional epoch
  // LR for the optimizer step with this global index, given the epoch length.
  double forStep(long step, long steps_per_epoch) const;
  const LrScheduleOptions& options() const { return options_; }

 private:
  double afterWarmup(double epoch) const;

  LrScheduleOptions options_;
  double peak_;
};

}  // namespace accord::resnet

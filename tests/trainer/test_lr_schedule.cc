// LR schedules at chosen epochs equal the reference study's formulas, warm-up included.
#include "lr_schedule.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>

using namespace accord::resnet;

namespace {

LrScheduleOptions opts(ScheduleKind kind) {
  LrScheduleOptions o;
  o.kind = kind;
  o.base_lr = 0.1;
  o.global_batch = 1024;  // LR_max = 0.1 * 1024 / 256 = 0.4
  o.warmup_epochs = 5;
  o.total_epochs = 90;
  return o;
}

}  // namespace

TEST_CASE("linear scaling and warm-up", "[lr]") {
  LrSchedule s(opts(ScheduleKind::Step));
  CHECK(s.peakLr() == Approx(0.4));
  CHECK(s.at(0.0) == Approx(0.0));
  CHECK(s.at(1.0) == Approx(0.4 * 1 / 5));
  CHECK(s.at(2.5) == Approx(0.4 * 2.5 / 5));
  CHECK(s.at(5.0) == Approx(0.4));
  // Per step: the first step already moves, the last warm-up step reaches LR_max.
  CHECK(s.forStep(0, 100) == Approx(0.4 * (1.0 / 100) / 5));
  CHECK(s.forStep(499, 100) == Approx(0.4));
  CHECK(s.forStep(500, 100) == Approx(0.4));
}

TEST_CASE("step schedule decays by 0.1 at 30, 60, 80", "[lr]") {
  LrSchedule s(opts(ScheduleKind::Step));
  CHECK(s.at(29.9) == Approx(0.4));
  CHECK(s.at(30) == Approx(0.04));
  CHECK(s.at(59) == Approx(0.04));
  CHECK(s.at(60) == Approx(0.004));
  CHECK(s.at(85) == Approx(0.0004));
  // A milestone takes effect with the first step of its epoch, not one step early.
  CHECK(s.forStep(2999, 100) == Approx(0.4));
  CHECK(s.forStep(3000, 100) == Approx(0.04));
  auto o = opts(ScheduleKind::Step);
  o.milestones = {10, 20};
  o.step_factor = 0.5;
  LrSchedule custom(o);
  CHECK(custom.at(15) == Approx(0.2));
  CHECK(custom.at(25) == Approx(0.1));
}

TEST_CASE("cosine schedule follows LR_min + (LR_max - LR_min)(1 + cos(pi t/t_max))/2", "[lr]") {
  auto o = opts(ScheduleKind::Cosine);
  o.min_lr = 0.001;
  LrSchedule s(o);
  const double t_max = 85;
  for (double e : {5.0, 20.0, 47.5, 70.0, 90.0}) {
    const double t = e - 5;
    const double want = 0.001 + 0.5 * (0.4 - 0.001) * (1 + std::cos(std::numbers::pi * t / t_max));
    CHECK(s.at(e) == Approx(want));
  }
  CHECK(s.at(47.5) == Approx(0.001 + 0.5 * 0.399));  // half way
  CHECK(s.at(90) == Approx(0.001));
  CHECK(s.at(3) == Approx(0.4 * 3 / 5));  // warm-up first
}

TEST_CASE("exponential schedule is LR_max * gamma^t", "[lr]") {
  LrSchedule s(opts(ScheduleKind::Exponential));
  CHECK(s.at(5) == Approx(0.4));
  CHECK(s.at(6) == Approx(0.4 * 0.95));
  CHECK(s.at(15.5) == Approx(0.4 * std::pow(0.95, 10)));
  CHECK(s.at(45) == Approx(0.4 * std::pow(0.95, 40)));
}

TEST_CASE("schedule names parse and bad values are rejected", "[lr]") {
  CHECK(parseScheduleKind("cosine") == ScheduleKind::Cosine);
  CHECK(parseScheduleKind("exponential") == ScheduleKind::Exponential);
  CHECK_THROWS_AS(parseScheduleKind("linear"), std::invalid_argument);
  auto o = opts(ScheduleKind::Step);
  o.global_batch = 0;
  CHECK_THROWS_AS(LrSchedule(o), std::invalid_argument);
  auto z = opts(ScheduleKind::Constant);
  z.warmup_epochs = 0;
  CHECK(LrSchedule(z).at(0) == Approx(0.4));
}

TEST_CASE("a cosine floor above the peak is refused, naming both", "[lr]") {
  auto o = opts(ScheduleKind::Cosine);
  o.min_lr = 0.4;  // the peak itself: a flat schedule, allowed
  CHECK(LrSchedule(o).at(90) == Approx(0.4));
  o.min_lr = 5;
  CHECK_THROWS_WITH(LrSchedule(o),
                    Catch::Contains("--min-lr 5.000000 is above the peak LR 0.400000") &&
                        Catch::Contains("global batch 1024"));
  o.kind = ScheduleKind::Step;  // the step schedule does not use it
  CHECK_NOTHROW(LrSchedule(o));
}

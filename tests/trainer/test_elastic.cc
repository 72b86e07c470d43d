// The trainer's elastic pieces that need no job: where a commit's position lands with a
// new number of ranks (reshard), and which ranks a runtime error blames (blamedRanks),
// read from messages the runtime itself words (describeStopped).
#include "elastic.h"

#include "runtime/peer_watch.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

using namespace accord;
using namespace accord::resnet;
using std::chrono::milliseconds;

TEST_CASE("reshard: a commit on 4 ranks x 32 resumes on 2 ranks x 32", "[elastic]") {
  TrainState saved;
  saved.epoch = 2;
  saved.step_in_epoch = 40;  // 40 steps of 128 samples: 5120 samples of the epoch done
  saved.global_step = 2 * 90 + 40;
  const StepGeometry four{32, 4, 12000}, two{32, 2, 12000};
  const TrainState now = reshard(saved, four, two, 187);  // 12000 / 64 steps an epoch
  CHECK(now.epoch == 2);
  CHECK(now.step_in_epoch == 80);          // the same 5120 samples, in 64-sample steps
  CHECK(now.global_step == 2 * 187 + 80);  // the LR schedule at the same fraction
  CHECK(reshard(saved, four, four, 93).step_in_epoch == 40);  // same geometry: unchanged
}

TEST_CASE("reshard: samples short of a whole new step are redone, never skipped", "[elastic]") {
  TrainState saved;
  saved.epoch = 0;
  saved.step_in_epoch = 3;  // 3 x 96 = 288 samples
  const StepGeometry three{32, 3, 1000}, two{32, 2, 1000};
  const TrainState now = reshard(saved, three, two, 15);
  CHECK(now.step_in_epoch == 4);  // 256 samples: 32 of the 288 are done again
  CHECK(now.step_in_epoch * two.globalBatch() <= saved.step_in_epoch * three.globalBatch());
  // Growing: 2 x 32 -> 4 x 32, 5 steps (320 samples) -> 2 steps (256), 64 redone.
  saved.step_in_epoch = 5;
  CHECK(reshard(saved, two, StepGeometry{32, 4, 1000}, 7).step_in_epoch == 2);
  // Never past the epoch's end.
  saved.step_in_epoch = 15;
  CHECK(reshard(saved, two, three, 10).step_in_epoch == 10);
}

TEST_CASE("blamedRanks reads the ranks the runtime's own messages name", "[elastic]") {
  RollCallFinding f;
  f.me = 0;
  f.size = 4;
  f.waited_for = {3};
  f.stopped = {2};
  f.answers = {{1, {2}}, {3, {2}}};
  const std::string behind =
      describeStopped(f, "pass on its part", milliseconds(3000), milliseconds(750));
  INFO(behind);
  CHECK(blamedRanks(behind) == std::vector<int>{2});  // not rank 3, which it waited for

  f.waited_for = {2};
  const std::string direct =
      describeStopped(f, "pass on its part", milliseconds(3000), milliseconds(750));
  INFO(direct);
  CHECK(blamedRanks(direct) == std::vector<int>{2});

  f.waited_for = {2, 3};
  f.stopped = {2, 3};
  f.answers = {{1, {2}}};
  const std::string two =
      describeStopped(f, "send its part", milliseconds(3000), milliseconds(750));
  INFO(two);
  CHECK(blamedRanks(two) == std::vector<int>{2, 3});

  CHECK(blamedRanks("allreduce 'x': shapes differ").empty());
}

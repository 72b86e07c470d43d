// The trainer's elastic pieces that need no job: where a commit's position lands with a
// new number of ranks (reshard), which ranks a runtime error blames (blamedRanks), read
// from messages the runtime itself words (describeStopped), the commit's copy and
// background write (CommitWriter), and the failure reports' single write.
#include "commit_writer.h"
#include "elastic.h"
#include "scratch_dir.h"

#include "runtime/peer_watch.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <fstream>
#include <functional>
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

namespace {

// What `report` writes to standard error (fd 2), read through a pipe.
std::string writtenToStderr(const std::function<void()>& report) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const int saved = dup(2);
  dup2(fds[1], 2);
  report();
  dup2(saved, 2);
  close(saved);
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  close(fds[0]);
  return out;
}

}  // namespace

TEST_CASE("a failure report is one line, within one whole write to a pipe", "[elastic]") {
  CHECK(reportedError("E: x\nthe rest") == "E: x");
  CHECK(reportedError(std::string(600, 'x')) == std::string(600, 'x'));
  CHECK(reportedError(std::string(601, 'x')) == std::string(600, 'x') + " ...");
  // Control characters are quoted as six-byte escapes: the longest a line can grow.
  const std::string error = std::string(10000, '\x01') + "\nsecond line";
  for (const std::string& line : {writtenToStderr([&] { reportRaised(3, error); }),
                                  writtenToStderr([&] { reportFailure(3, error, 12, 2); })}) {
    INFO(line.substr(0, 80));
    CHECK(line.size() <= PIPE_BUF);
    CHECK(line.rfind("[accord-elastic] {", 0) == 0);
    CHECK(std::count(line.begin(), line.end(), '\n') == 1);
    CHECK(line.find(" ...\"") != std::string::npos);
    CHECK(line.find("second line") == std::string::npos);
  }
}

TEST_CASE("CommitWriter writes the state as it was at start(), on its own thread", "[elastic]") {
  const auto dir = accord_test::scratchDir("commit_writer");
  const std::string path = (dir / "host" / "accord-resnet.ckpt").string();  // made by the write
  std::vector<float> w = {1, 2, 3}, m = {4, 5};
  const std::vector<TensorRef> tensors = {{"w", w.data(), w.size()}, {"momentum.w", m.data(), 2}};
  CommitWriter writer;
  writer.start(path, "model", {1, 2, 7}, tensors, {32, 2, 100});
  // Training goes on at once: what it changes now is not in this commit.
  w[0] = -1;
  m[1] = -5;
  CHECK(writer.wait().empty());
  CHECK_FALSE(writer.writing());
  CheckpointContents c = readCheckpoint(path);
  CHECK(c.state.global_step == 7);
  CHECK(c.geometry.ranks == 2);
  CHECK(c.values == std::vector<std::vector<float>>{{1, 2, 3}, {4, 5}});

  // The next commit replaces it, from the same snapshot buffer.
  writer.start(path, "model", {1, 3, 8}, tensors, {32, 2, 100});
  CHECK(writer.wait().empty());
  c = readCheckpoint(path);
  CHECK(c.state.global_step == 8);
  CHECK(c.values == std::vector<std::vector<float>>{{-1, 2, 3}, {4, -5}});
}

TEST_CASE("CommitWriter: a failed write is reported once, by the next wait()", "[elastic]") {
  const auto dir = accord_test::scratchDir("commit_writer_fails");
  std::ofstream(dir / "file") << "not a folder";
  const std::string bad = (dir / "file" / "accord-resnet.ckpt").string();
  std::vector<float> w = {1};
  const std::vector<TensorRef> tensors = {{"w", w.data(), 1}};
  CommitWriter writer;
  writer.start(bad, "model", {}, tensors, {});
  // A start() after a failed write keeps the failure for wait(), with this write's own.
  writer.start(bad, "model", {}, tensors, {});
  const std::string error = writer.wait();
  INFO(error);
  CHECK(error.find((dir / "file").string()) != std::string::npos);
  CHECK(error.find("; then ") != std::string::npos);
  CHECK(writer.wait().empty());
  const std::string good = (dir / "ok.ckpt").string();
  writer.start(good, "model", {}, tensors, {});
  CHECK(writer.wait().empty());
  CHECK(readCheckpoint(good).values.size() == 1);
}

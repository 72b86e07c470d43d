// accord-commit-bench: what one elastic commit of the trainer (--commit-every) costs the
// training thread, against copying the committed state once. The state is what a
// commit holds: a model's parameters, BN running statistics and SGD momentum, on the CPU.
//
//   copy    std::copy of every tensor into a buffer already written once: the floor
//   commit  CommitWriter::start(), the training thread's part of a commit
//   write   the disk write that follows on the writer's thread (waited for here)
//   sync    saveCheckpoint() on the training thread: the disk write a commit would cost
//           if training waited for it
//
// Each is run --repeat times after one unmeasured round (which allocates the buffers);
// the median and the fastest are printed. Copy and commit are timed in the same rounds,
// each after the previous write is done. The collective part of a commit (one
// allreduce of the BN statistics and one of a flag) is left out: it is the same either
// way. Run it where the commits go (--dir): a commit is written to the host's local disk.
#include "checkpoint.h"
#include "commit_writer.h"
#include "model.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

using namespace accord::resnet;

namespace {

using Clock = std::chrono::steady_clock;

struct Times {
  double median = 0, fastest = 0;
};

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Times summary(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

Times timeIt(int repeat, const std::function<void()>& once) {
  std::vector<double> ms;
  for (int i = 0; i <= repeat; ++i) {
    const auto t0 = Clock::now();
    once();
    if (i > 0) ms.push_back(msSince(t0));  // round 0 allocates and first touches the buffers
  }
  return summary(ms);
}

void print(const char* what, const Times& t, double copy_ms) {
  std::printf("%-7s median %8.1f ms  fastest %8.1f ms  (%.2f x copy)\n", what, t.median, t.fastest,
              t.median / copy_ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accord-commit-bench: the trainer's elastic commit against one copy of its state"};
  int depth = 50, classes = 1000, repeat = 5;
  std::string dir = std::filesystem::temp_directory_path() / "accord-commit-bench";
  app.add_option("--depth", depth, "ResNet depth: 18, 34, 50, 101, 152")->capture_default_str();
  app.add_option("--classes", classes, "classes of the last layer")->capture_default_str();
  app.add_option("--repeat", repeat, "measured rounds of each")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--dir", dir, "where the commits are written (removed after)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  ModelConfig cfg;
  cfg.depth = depth;
  cfg.classes = classes;
  cfg.max_batch = 1;  // activations are not committed: keep their arena small
  Model model;
  buildModel(model, cfg);
  std::vector<TensorRef> state;
  std::vector<std::vector<float>> momentum;
  for (const ParamRef& p : parameterList(model)) {
    state.push_back({p.name, p.w, p.n});
    momentum.emplace_back(p.n, 0.5f);
  }
  for (const ParamRef& p : bufferList(model)) state.push_back({p.name, p.w, p.n});
  const std::vector<ParamRef> params = parameterList(model);
  for (std::size_t i = 0; i < params.size(); ++i)
    state.push_back({"momentum." + params[i].name, momentum[i].data(), params[i].n});
  std::size_t values = 0;
  for (const TensorRef& t : state) values += t.n;
  std::printf("%s: %zu tensors, %.1f MiB (parameters, BN statistics, momentum), %d rounds\n",
              cfg.describe().c_str(), state.size(), values * 4.0 / (1 << 20), repeat);

  std::filesystem::create_directories(dir);
  const std::string path = dir + "/accord-resnet.ckpt";
  const TrainState at{0, 1, 1};
  const StepGeometry geometry{32, 4, 12000};

  // Each round times a plain copy and then a commit, both after the previous round's
  // write is done: the same conditions for both (the machine may be busy with others).
  std::vector<float> copy(values);
  CommitWriter writer;
  std::vector<double> copy_ms, commit_ms, write_ms;
  for (int round = 0; round <= repeat; ++round) {
    auto t0 = Clock::now();
    float* out = copy.data();
    for (const TensorRef& t : state) out = std::copy(t.data, t.data + t.n, out);
    const double c_ms = msSince(t0);
    t0 = Clock::now();
    writer.start(path, cfg.describe(), at, state, geometry);
    const double s_ms = msSince(t0);
    t0 = Clock::now();
    const std::string error = writer.wait();
    if (!error.empty()) std::fprintf(stderr, "accord-commit-bench: %s\n", error.c_str());
    if (round == 0) continue;  // allocates and first touches the buffers
    copy_ms.push_back(c_ms);
    commit_ms.push_back(s_ms);
    write_ms.push_back(msSince(t0));
  }
  const Times c = summary(copy_ms);
  print("copy", c, c.median);
  print("commit", summary(commit_ms), c.median);
  print("write", summary(write_ms), c.median);

  const Times sync =
      timeIt(repeat, [&] { saveCheckpoint(path, cfg.describe(), at, state, geometry); });
  print("sync", sync, c.median);
  std::filesystem::remove_all(dir);
  return 0;
}

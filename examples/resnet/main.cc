// accord-resnet: data-parallel ResNet training on the CPU with Accord.
//
//   mpirun -np 2 accord-resnet                      # small ResNet on Fashion-MNIST
//   mpirun -np 4 accord-resnet --model resnet50 --dataset synthetic
//       --stem imagenet --width 1 --batch-size 32 --steps 100   # throughput
//   accord-resnet compare a.params b.params         # the equivalence tests' check
#include "elastic.h"
#include "options.h"
#include "trainer.h"

#include <accord/accord.h>
#include <accord/error.h>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

using namespace accord::resnet;

namespace {

// `accord-resnet compare A B`: 0 if every value is within tolerance, 1 if not, 2 if the
// files hold different tensors.
int compareParams(const std::string& a_path, const std::string& b_path, double atol, double rtol) {
  const TensorDiff d = compareTensors(readCheckpoint(a_path), readCheckpoint(b_path), atol, rtol);
  if (!d.same_tensors) {
    std::fprintf(stderr, "compare: %s and %s hold different tensors: %s\n", a_path.c_str(),
                 b_path.c_str(), d.mismatch.c_str());
    return 2;
  }
  std::printf("compare: %zu tensors, max |a-b| = %.3g (tightest: %s) -> %s\n", d.tensors, d.max_abs,
              d.tightest.c_str(), d.equal ? "EQUAL within tolerance" : "DIFFERENT");
  return d.equal ? 0 : 1;
}

// oneDNN (Debian's build) runs on OpenMP, whose idle threads spin between parallel
// regions. Here they spin against our oneTBB loops, the data loader and the runtime's
// background thread: ResNet-18/0.25 on 2 cores trained 8x slower (20 vs 157 img/s)
// with the default policy than with PASSIVE. libgomp reads OMP_WAIT_POLICY once, when
// it is loaded (before main), so set it and re-execute this binary, once; a policy the
// user set is left alone.
void preferPassiveOpenMp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  // The binary's own path rather than /proc/self/exe, whose name ps and top would show.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  execv(self, argv);  // returns only on failure: go on with the default
}

int train(const TrainOptions& opt) {
  try {
    accord::init();
  } catch (const std::exception& e) {  // a bad ACCORD_* variable: the same on every rank
    std::fprintf(stderr, "accord-resnet: error: %s\n", e.what());
    return 1;
  }
  int rc = 0;
  std::unique_ptr<Trainer> trainer;
  try {
    trainer = std::make_unique<Trainer>(opt);
    const EvalResult result = trainer->run();
    if (accord::rank() == 0 && opt.eval)
      std::printf("final test accuracy: %.2f%% (top-1)\n", 100.0 * result.top1);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "accord-resnet (rank %d): error: out of memory (std::bad_alloc); a smaller "
                 "--batch-size, --prefetch, --image-size or model needs less\n",
                 accord::rank());
    rc = 1;
  } catch (const std::exception& e) {
    // The ranks shut down together at the end: before it, one that failed on its own
    // (a bad file in its shard) shut down early, and its line says why.
    const bool left = dynamic_cast<const accord::ShutDown*>(&e) != nullptr;
    std::fprintf(stderr, "accord-resnet (rank %d): error: %s%s\n", accord::rank(), e.what(),
                 left ? ": it stopped first, and its own error line says why" : "");
    // Under the elastic driver a lost rank is not the end: report whom the runtime
    // blamed and leave at once with the status that restarts the job from its last
    // commit, without a shutdown that would wait on the lost ranks.
    const bool comm = dynamic_cast<const accord::CommError*>(&e) != nullptr ||
                      dynamic_cast<const accord::Timeout*>(&e) != nullptr ||
                      dynamic_cast<const accord::ShutDown*>(&e) != nullptr;
    if (comm && opt.commit_every > 0 && !elasticStoreDirectory().empty()) {
      if (trainer) trainer->finishCommits();  // the last commit on this host's disk first
      reportFailure(accord::rank(), e.what(), trainer ? trainer->globalStep() : 0,
                    trainer ? trainer->lastCommit() : -1);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(kExitRestart);
    }
    // Any other error is this rank's own (the driver blames its host), or, raised alike
    // on every host, the job's (the driver stops with it).
    if (opt.commit_every > 0 && !elasticStoreDirectory().empty())
      reportRaised(accord::rank(), e.what());
    rc = 1;
  }
  // Negotiated with the other ranks: a rank that failed alone releases the others'
  // pending collectives (they fail with ShutDown) instead of leaving them hanging.
  accord::shutdown();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "accord-resnet: data-parallel ResNet training with Accord (oneDNN on the CPU; cuDNN on\n"
      "the GPU with --device cuda, in builds with cuDNN).\n"
      "With no flags: a small ResNet-18 on Fashion-MNIST; run it under mpirun."};
  app.set_help_all_flag("--help-all", "help including subcommands");
  TrainOptions opt;
  addTrainOptions(app, opt);
  CompareOptions c;
  CLI::App* cmp = addCompareCommand(app, c);
  CLI11_PARSE(app, argc, argv);
  if (!*cmp) preferPassiveOpenMp(argv);
  try {
    if (*cmp) return compareParams(c.a, c.b, c.atol, c.rtol);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-resnet compare: error: %s\n", e.what());
    return 2;
  }
  return train(opt);
}

// accord-resnet: data-parallel ResNet training on the CPU with Accord.
//
//   mpirun -np 2 accord-resnet                      # small ResNet on Fashion-MNIST
//   mpirun -np 4 accord-resnet --model resnet50 --dataset synthetic
//       --stem imagenet --width 1 --batch-size 32 --steps 100   # throughput
//   accord-resnet compare a.params b.params         # the equivalence tests' check
#include "options.h"
#include "trainer.h"

#include <accord/accord.h>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace accord::resnet;

namespace {

void addModelOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--model", o.model, "resnet18, resnet34, resnet50, resnet101 or resnet152")
      ->capture_default_str();
  app.add_option("--stem", o.stem,
                 "cifar (3x3 conv, stride 1, no max pool) or imagenet (7x7/2 + max pool)")
      ->check(CLI::IsMember({"cifar", "imagenet"}))
      ->capture_default_str();
  app.add_option("--width", o.width, "channel multiplier (1 = torchvision's widths)")
      ->capture_default_str();
  app.add_option("--classes", o.classes, "output classes (0: the dataset's)")
      ->capture_default_str();
  app.add_flag("--zero-init-residual", o.zero_init_residual,
               "start each block's last BN scale at 0");
}

void addDataOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--dataset", o.dataset, "fashion-mnist or synthetic")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic"}))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 "Fashion-MNIST folder (default: /usr/share/datasets/fashion-mnist)");
  app.add_option("--image-size", o.image_size,
                 "image height = width (0: 28 for Fashion-MNIST, 224 synthetic)")
      ->capture_default_str();
  app.add_option("--channels", o.channels, "synthetic image channels (0: 3)")
      ->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "train on the first N images only (0: all)")
      ->capture_default_str();
  app.add_option("--synthetic-size", o.synthetic_size, "images per synthetic epoch")
      ->capture_default_str();
  app.add_flag_callback(
      "--no-augment", [&o] { o.augment = false; },
      "no random 2-pixel crop and flip of Fashion-MNIST images");
  app.add_option("--prefetch", o.prefetch, "batches prepared ahead per rank")
      ->capture_default_str();
}

void addOptimOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--batch-size", o.batch_size, "images per rank per step")->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs to train")->capture_default_str();
  app.add_option("--steps", o.max_steps, "stop after this many optimizer steps in all (0: no cap)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "base LR at a global batch of 256 (scaled by global batch / 256)")
      ->capture_default_str();
  app.add_option("--warmup-epochs", o.warmup_epochs,
                 "linear warm-up from 0 over these epochs (default: 5, or a fifth of --epochs if "
                 "that is less)");
  app.add_option("--schedule", o.schedule, "after warm-up: step, cosine, exponential or constant")
      ->check(CLI::IsMember({"step", "cosine", "exponential", "constant"}))
      ->capture_default_str();
  app.add_option("--milestones", o.milestones,
                 "step schedule: epochs where LR is multiplied by 0.1")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--gamma", o.gamma, "exponential schedule: factor per epoch")
      ->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "cosine schedule: final LR")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_flag("--no-bn-decay", o.no_bn_decay, "no weight decay on BN parameters and biases");
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing of the cross-entropy")
      ->capture_default_str();
  app.add_option("--train-bn-mode", o.train_bn_mode,
                 "BN while training: batch statistics, or running (inference mode)")
      ->check(CLI::IsMember({"batch", "running"}))
      ->capture_default_str();
  app.add_option("--eval-bn-mode", o.eval_bn_mode,
                 "BN while evaluating: running statistics or batch")
      ->check(CLI::IsMember({"running", "batch"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed,
                 "seed for init, shuffling and augmentation (shared by all ranks)")
      ->capture_default_str();
}

void addRunOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--threads", o.threads, "compute threads per rank (0: cores / ranks on this host)")
      ->capture_default_str();
  app.add_flag_callback(
      "--no-eval", [&o] { o.eval = false; }, "skip the test-set evaluation after each epoch");
  app.add_option("--checkpoint", o.checkpoint, "checkpoint file written by rank 0");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "write a checkpoint every N epochs (and at the end)")
      ->capture_default_str();
  app.add_option("--resume", o.resume, "checkpoint to resume from (read on rank 0, broadcast)");
  app.add_option("--metrics", o.metrics, "JSON-lines file with one object per epoch");
  app.add_option("--dump-params", o.dump_params, "write the final parameters here (for `compare`)");
  app.add_flag_callback(
      "--no-progress", [&o] { o.progress = false; },
      "no progress bar (drawn only when stdout is a terminal)");
}

// `accord-resnet compare A B`: max |a - b| <= atol + rtol * |b| for every parameter.
int compareParams(const std::string& a_path, const std::string& b_path, double atol, double rtol) {
  const CheckpointContents a = readCheckpoint(a_path), b = readCheckpoint(b_path);
  if (a.names != b.names) {
    std::fprintf(stderr, "compare: %s and %s hold different tensors\n", a_path.c_str(),
                 b_path.c_str());
    return 2;
  }
  double worst = 0, worst_excess = -1;
  std::string worst_name;
  for (std::size_t t = 0; t < a.names.size(); ++t) {
    if (a.values[t].size() != b.values[t].size()) return 2;
    for (std::size_t i = 0; i < a.values[t].size(); ++i) {
      const double d = std::fabs(double(a.values[t][i]) - b.values[t][i]);
      const double excess = d - (atol + rtol * std::fabs(double(b.values[t][i])));
      worst = std::max(worst, d);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst_name = a.names[t];
      }
    }
  }
  std::printf("compare: %zu tensors, max |a-b| = %.3g (tightest: %s) -> %s\n", a.names.size(),
              worst, worst_name.c_str(),
              worst_excess <= 0 ? "EQUAL within tolerance" : "DIFFERENT");
  return worst_excess <= 0 ? 0 : 1;
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
  execv("/proc/self/exe", argv);  // returns only on failure: go on with the default
}

int train(const TrainOptions& opt) {
  accord::init();
  int rc = 0;
  try {
    Trainer trainer(opt);
    const EvalResult result = trainer.run();
    if (accord::rank() == 0 && opt.eval)
      std::printf("final test accuracy: %.2f%% (top-1)\n", 100.0 * result.top1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-resnet (rank %d): error: %s\n", accord::rank(), e.what());
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
      "accord-resnet: data-parallel ResNet training with Accord (CPU, oneDNN).\n"
      "With no flags: a small ResNet-18 on Fashion-MNIST; run it under mpirun."};
  app.set_help_all_flag("--help-all", "help including subcommands");
  TrainOptions opt;
  addModelOptions(app, opt);
  addDataOptions(app, opt);
  addOptimOptions(app, opt);
  addRunOptions(app, opt);
  std::string a, b;
  double atol = 1e-5, rtol = 1e-4;
  CLI::App* cmp = app.add_subcommand("compare", "compare two --dump-params files");
  cmp->add_option("a", a, "first dump")->required();
  cmp->add_option("b", b, "second dump")->required();
  cmp->add_option("--atol", atol, "absolute tolerance")->capture_default_str();
  cmp->add_option("--rtol", rtol, "relative tolerance")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!*cmp) preferPassiveOpenMp(argv);
  try {
    if (*cmp) return compareParams(a, b, atol, rtol);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-resnet compare: error: %s\n", e.what());
    return 2;
  }
  return train(opt);
}

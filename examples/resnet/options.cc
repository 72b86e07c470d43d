// The command line of `accord-resnet`: one long flag per TrainOptions field, each with
// the range of values that make sense, so a bad value stops the run at parse time
// with the flag, the value and the accepted range (`--threads: -5 is not an integer
// in [0, 1024]`) instead of being clamped, ignored or failing later under another name.
//
// CLI11's own Range lets NaN through (every comparison with NaN is false) and prints
// its bounds with six decimals, hence the two validators here. Upper bounds are far
// above any real run and low enough that what they size can be allocated.
#include "options.h"

#include <accord/error.h>

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

namespace accord::resnet {
namespace {

constexpr long long kNoLimit = std::numeric_limits<long long>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The help shows the range as an interval ("[0, 1024]", "[0, inf)"); a value outside
// is refused as "-5 is not an integer in [0, 1024]".
CLI::Validator integerIn(long long lo, long long hi) {
  const std::string range =
      "[" + std::to_string(lo) + ", " + (hi == kNoLimit ? "inf)" : std::to_string(hi) + "]");
  return CLI::Validator(
      [lo, hi, range](std::string& input) -> std::string {
        // from_chars refuses what does not fit, where a lexical_cast may saturate.
        long long v = 0;
        const char* end = input.data() + input.size();
        const auto [stop, error] = std::from_chars(input.data(), end, v);
        if (error != std::errc() || stop != end || v < lo || v > hi)
          return input + " is not an integer in " + range;
        return {};
      },
      range);
}

std::string number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// A finite number between lo and hi, each bound included or not (hi = kInf: none).
CLI::Validator realIn(double lo, bool lo_included, double hi, bool hi_included) {
  const std::string range =
      (lo_included ? "[" : "(") + number(lo) + ", " + number(hi) + (hi_included ? "]" : ")");
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(input, v) && std::isfinite(v) &&
                        (lo_included ? v >= lo : v > lo) && (hi_included ? v <= hi : v < hi);
        return ok ? std::string() : input + " is not a finite number in " + range;
      },
      range);
}

CLI::Validator nonNegative() { return realIn(0, true, kInf, false); }

// A path, not the next flag: `--checkpoint --no-eval` (the value left out) would
// otherwise name a file "--no-eval" and drop the flag.
CLI::Validator path() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        // "$CKPT" with CKPT unset: silently no checkpoint, or no resume, otherwise.
        if (input.empty()) return "an empty path (expected a file or folder name)";
        if (input.size() < 2 || input[0] != '-') return {};
        return "'" + input + "' looks like a flag, not a path (for a file of that name: ./" +
               input + ")";
      },
      "PATH");
}

void addModelOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--model", o.model, "resnet18, resnet34, resnet50, resnet101 or resnet152")
      ->capture_default_str();
  app.add_option("--stem", o.stem,
                 "cifar (3x3 conv, stride 1, no max pool), imagenet (7x7/2 + max pool) or "
                 "auto (cifar for images up to " +
                     std::to_string(kCifarStemLargest) + " px, imagenet above)")
      ->check(CLI::IsMember({"auto", "cifar", "imagenet"}))
      ->capture_default_str();
  // 16: sixteen times torchvision's channels, far past any ResNet in use.
  app.add_option("--width", o.width, "channel multiplier (1 = torchvision's widths)")
      ->check(realIn(0, false, 16, true))
      ->capture_default_str();
  app.add_option("--classes", o.classes, "output classes (0: the dataset's)")
      ->check(integerIn(0, 100000))  // ImageNet-21k has 21,841
      ->capture_default_str();
  app.add_flag("--zero-init-residual", o.zero_init_residual,
               "start each block's last BN scale at 0");
}

void addDataOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--dataset", o.dataset,
                 "fashion-mnist, synthetic, folder (JPEGs in one subfolder per class) or packed "
                 "(shards written by accord-pack)")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic", "folder", "packed"}))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 "Fashion-MNIST folder (default: /usr/share/datasets/fashion-mnist); for folder "
                 "and packed, the folder holding train/ and val/")
      ->check(path());
  app.add_option("--image-size", o.image_size,
                 "image height = width (0: 28 for Fashion-MNIST, 224 otherwise)")
      ->check(integerIn(0, 2048))  // one 3 x 2048 x 2048 image is 48 MiB of floats
      ->capture_default_str();
  app.add_option("--channels", o.channels, "synthetic image channels (0: 3)")
      ->check(integerIn(0, 256))
      ->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "train on the first N images only (0: all)")
      ->check(integerIn(0, kNoLimit))
      ->capture_default_str();
  // 10^8: 80 times ImageNet; the epoch's shuffled order alone takes 800 MB.
  app.add_option("--synthetic-size", o.synthetic_size, "images per synthetic epoch")
      ->check(integerIn(1, 100000000))
      ->capture_default_str();
  app.add_flag_callback(
      "--no-augment", [&o] { o.augment = false; },
      "no random crop and flip (Fashion-MNIST: 2-pixel shift; photos: centre crop)");
  app.add_option("--prefetch", o.prefetch, "batches prepared ahead per rank")
      ->check(integerIn(1, 64))
      ->capture_default_str();
  app.add_option("--data-workers", o.data_workers,
                 "threads decoding images per rank (0: cores / ranks on this host)")
      ->check(integerIn(0, 1024))
      ->capture_default_str();
  app.add_option("--corrupt", o.corrupt,
                 "folder and packed: an image that cannot be read or decoded, or a record that "
                 "fails its checksum, stops the run (reject) or is left out of its batch and "
                 "counted (skip); either way it is reported with its file and offset")
      ->check(CLI::IsMember({"reject", "skip"}))
      ->capture_default_str();
}

void addScheduleOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--lr", o.lr, "base LR at a global batch of 256 (scaled by global batch / 256)")
      ->check(nonNegative())
      ->capture_default_str();
  app.add_option("--warmup-epochs", o.warmup_epochs,
                 "linear warm-up from 0 over these epochs (default: 5, or a fifth of --epochs if "
                 "that is less)")
      ->check(nonNegative());
  app.add_option("--schedule", o.schedule, "after warm-up: step, cosine, exponential or constant")
      ->check(CLI::IsMember({"step", "cosine", "exponential", "constant"}))
      ->capture_default_str();
  app.add_option("--milestones", o.milestones,
                 "step schedule: epochs where LR is multiplied by 0.1 (the LR steps at an "
                 "epoch's start: a fraction takes effect at the next whole epoch)")
      ->delimiter(',')
      ->check(nonNegative())
      ->capture_default_str();
  app.add_option("--gamma", o.gamma, "exponential schedule: factor per epoch")
      ->check(realIn(0, false, 1, true))
      ->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "cosine schedule: final LR")
      ->check(nonNegative())
      ->capture_default_str();
}

void addOptimOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--batch-size", o.batch_size, "images per rank per step")
      ->check(integerIn(1, 65536))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs to train")
      ->check(integerIn(1, 100000))
      ->capture_default_str();
  app.add_option("--steps", o.max_steps, "stop after this many optimizer steps in all (0: no cap)")
      ->check(integerIn(0, kNoLimit))
      ->capture_default_str();
  addScheduleOptions(app, o);
  // 1 and above never forgets a gradient: the update grows without bound.
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->check(realIn(0, true, 1, false))
      ->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")
      ->check(nonNegative())
      ->capture_default_str();
  app.add_flag("--no-bn-decay", o.no_bn_decay, "no weight decay on BN parameters and biases");
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing of the cross-entropy")
      ->check(realIn(0, true, 1, false))
      ->capture_default_str();
  app.add_flag("--skip-nonfinite-steps", o.skip_nonfinite_steps,
               "skip a step whose loss or gradients are NaN or infinite on any rank, leaving "
               "parameters, momentum and BN statistics as they were (default: a non-finite "
               "loss stops the run); " +
                   std::to_string(kMaxNonFiniteInARow) + " such steps in a row still stop the run");
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
      ->check(integerIn(0, kNoLimit))
      ->capture_default_str();
}

void addRunOptions(CLI::App& app, TrainOptions& o) {
  app.add_option("--device", o.device,
                 "where the layers run: cpu (oneDNN) or cuda (cuDNN, GPU local rank modulo the "
                 "GPUs; builds with cuDNN only)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option(
         "--precision", o.precision,
         "arithmetic of the GPU layers: auto (bf16 on GPUs with bf16 tensor cores, "
         "compute capability 8.0 and up; fp32 on older ones and on the CPU), fp32 "
         "(plain float32, matches the CPU), tf32 "
         "(tensor cores on float32 data, about 1e-3 relative), bf16 (activations in "
         "bfloat16 on bf16 tensor cores, float32 weights, gradients and statistics) or "
         "fp16 (the same in IEEE half, with dynamic loss scaling); tf32, bf16 and fp16 need "
         "--device cuda")
      ->check(CLI::IsMember({"auto", "fp32", "tf32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_flag("--gpu-profile", o.gpu_profile,
               "--device cuda: time the GPU's work by layer kind (conv, batch norm, ...), and "
               "the host's time queueing it, and the convolutions by shape with their TFLOP/s; "
               "print the tables at the end (rank 0)");
  app.add_flag("--cudnn-search", o.cudnn_search,
               "--device cuda: time cuDNN's convolution algorithms once per shape and take the "
               "fastest (as PyTorch's torch.backends.cudnn.benchmark), instead of its "
               "heuristics' pick; the first step of each shape pays for the search");
  app.add_flag("--cudnn-deterministic", o.cudnn_deterministic,
               "--device cuda: only convolution and batch-norm algorithms that sum in a fixed "
               "order, so that a run repeats bit for bit (as PyTorch's "
               "torch.backends.cudnn.deterministic); not with --cudnn-fusion");
  app.add_flag_callback(
      "--no-copy-stream", [&o] { o.copy_stream = false; },
      "--device cuda: copy each training batch to the GPU on the layers' stream when its step "
      "starts, instead of ahead on a stream of its own while earlier steps compute");
  CLI::Option* graphs = app.add_flag_callback(
      "--cuda-graphs", [&o] { o.cuda_graphs = "on"; },
      "--device cuda: launch each training step's GPU work (forward, loss, backward) as one "
      "CUDA graph, captured on the second step of each batch size, instead of layer by layer "
      "from the host; on more than one rank cut into graphs by --cuda-graph-segment, whose "
      "gradients go to the allreduce after each one's launch; by default on for one rank "
      "only (where a capture fails, that run goes on layer by layer with a warning; with "
      "this flag, it stops)");
  app.add_flag_callback(
         "--no-cuda-graphs", [&o] { o.cuda_graphs = "off"; },
         "--device cuda: launch each step's GPU work layer by layer, even on one rank")
      ->excludes(graphs);
  app.add_option_function<std::size_t>(
         "--cuda-graph-segment",
         [&o](std::size_t bytes) {
           o.cuda_graph_segment = bytes;
           o.cuda_graph_segment_given = true;
         },
         "--device cuda, with graphed steps: cut each step into graphs after every SIZE of "
         "gradients (e.g. 25M, the default; 0: one graph), each one's gradients going to the "
         "allreduce as soon as it is launched, so that they overlap the rest of backward as "
         "layer by layer; on more than one rank, or on one where given")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--cudnn-fusion", o.cudnn_fusion,
               "--device cuda, --precision bf16 or fp16: sum each training batch norm's "
               "statistics in the pass of the convolution before it (cuDNN's graph API), for "
               "the shapes where that checks out and pays; the run ends with what was fused");
  app.add_flag("--fuse-residual", o.fuse_residual,
               "--device cuda, --precision bf16 or fp16: end each residual block in training "
               "with one pass (its last batch norm, the shortcut's batch norm, the add and the "
               "ReLU) instead of three, the batch norms' statistics summed in a fixed order");
  app.add_option("--pad-input", o.pad_input,
                 "--device cuda, --precision bf16 or fp16: give the first convolution the "
                 "images with their channels padded with zeros to N on the GPU (4 for RGB: "
                 "cuDNN has tensor-core kernels for 4 channels, not 3); at most twice the "
                 "images' channels; 0: as they are")
      ->check(integerIn(0, 8))
      ->capture_default_str();
  app.add_flag("--synthetic-on-host", o.synthetic_on_host,
               "--dataset synthetic --device cuda: upload each batch from the host loader, as "
               "real data travels, instead of building it on the GPU from the synthetic image "
               "pool kept there (the default)");
  app.add_option("--threads", o.threads, "compute threads per rank (0: cores / ranks on this host)")
      ->check(integerIn(0, 1024))
      ->capture_default_str();
  app.add_flag_callback(
      "--no-eval", [&o] { o.eval = false; }, "skip the test-set evaluation after each epoch");
  app.add_option("--checkpoint", o.checkpoint, "checkpoint file written by rank 0")->check(path());
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "write a checkpoint every N epochs and at the end (0: only at the end)")
      ->check(integerIn(0, kNoLimit))
      ->capture_default_str();
  app.add_option("--commit-every", o.commit_every,
                 "under accordrun's elastic driver: commit the training state every N steps to "
                 "each host's disk, and after a restart resume from the newest commit on any "
                 "host with the new number of ranks (0: off; docs/elastic.md)")
      ->check(integerIn(0, kNoLimit))
      ->capture_default_str();
  app.add_option("--resume", o.resume, "checkpoint to resume from (read on rank 0, broadcast)")
      ->check(path());
  app.add_option("--metrics", o.metrics, "JSON-lines file with one object per epoch")
      ->check(path());
  app.add_option("--dump-params", o.dump_params, "write the final parameters here (for `compare`)")
      ->check(path());
  app.add_flag_callback(
      "--no-progress", [&o] { o.progress = false; },
      "no progress bar (else drawn on rank 0 when ACCORD_PROGRESS=1, or when run without a "
      "launcher on a terminal)");
}

}  // namespace

void addTrainOptions(CLI::App& app, TrainOptions& o) {
  addModelOptions(app, o);
  addDataOptions(app, o);
  addOptimOptions(app, o);
  addRunOptions(app, o);
}

CLI::App* addCompareCommand(CLI::App& app, CompareOptions& c) {
  CLI::App* cmp = app.add_subcommand("compare", "compare two --dump-params files");
  cmp->add_option("a", c.a, "first dump")->required();
  cmp->add_option("b", c.b, "second dump")->required();
  cmp->add_option("--atol", c.atol, "absolute tolerance")
      ->check(nonNegative())
      ->capture_default_str();
  cmp->add_option("--rtol", c.rtol, "relative tolerance")
      ->check(nonNegative())
      ->capture_default_str();
  return cmp;
}

bool cifarStem(const std::string& stem, int image_size) {
  if (stem == "auto") return image_size <= kCifarStemLargest;
  if (stem == "cifar" || stem == "imagenet") return stem == "cifar";
  throw InvalidArgument("unknown --stem '" + stem + "' (expected auto, cifar or imagenet)");
}

}  // namespace accord::resnet

// Everything a training run can be told, with the defaults of `accord-resnet` run with
// no flags: a small ResNet-18 (cifar stem, width 1/8) on Fashion-MNIST that trains in a
// few minutes on a laptop's CPU. options.cc maps one long flag onto each field and
// bounds its value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace accord::resnet {

// With --skip-nonfinite-steps, this many skipped steps in a row stop the run anyway: a
// bad batch fails one step, a model that has diverged fails every step from then on.
inline constexpr int kMaxNonFiniteInARow = 16;

// --stem auto: the largest images (side, pixels) that get the cifar stem. Fashion-MNIST,
// CIFAR and Tiny ImageNet (28-64 px) would lose most of their pixels to a 7x7/2
// convolution and a max pool; photos at ImageNet's sizes would cost 16 times the
// compute of the imagenet stem's first layers with the cifar one.
constexpr int kCifarStemLargest = 64;

struct TrainOptions {
  // model
  std::string model = "resnet18";
  // cifar: 3x3/1 conv, no max pool; imagenet: 7x7/2 + pool; auto: cifar for images up
  // to kCifarStemLargest pixels, imagenet above
  std::string stem = "auto";
  double width = 0.125;
  int classes = 0;  // 0: the dataset's
  bool zero_init_residual = false;
  // data
  std::string dataset = "fashion-mnist";  // or synthetic, folder, packed
  std::string data_dir;  // empty: the Debian package's path; folder, packed: train/ + val/
  int image_size = 0;    // 0: the dataset's (28; synthetic, folder, packed 224)
  int channels = 0;                       // synthetic only; 0: 3
  std::int64_t train_limit = 0;           // use only the first N training images
  std::int64_t synthetic_size = 12800;    // images per synthetic epoch
  bool augment = true;
  int prefetch = 2;
  int data_workers = 0;            // decode threads per rank; 0: cores / ranks on this host
  std::string corrupt = "reject";  // reject | skip: what a bad image or record does
  // optimisation
  int batch_size = 64;  // per rank
  int epochs = 2;
  std::int64_t max_steps = 0;  // 0: no cap
  double lr = 0.2;             // at a global batch of 256 (peak 0.1 at the default 2 x 64)
  double warmup_epochs = -1;   // < 0: 5, or a fifth of the run if that is shorter
  std::string schedule = "cosine";
  std::vector<double> milestones = {30, 60, 80};
  double gamma = 0.95;
  double min_lr = 0.0;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-5;
  bool no_bn_decay = false;
  double label_smoothing = 0.1;
  bool skip_nonfinite_steps = false;     // false: a NaN or infinite loss stops the run
  std::string train_bn_mode = "batch";   // batch | running (BN in inference mode)
  std::string eval_bn_mode = "running";  // running | batch
  std::uint64_t seed = 42;
  // run
  std::string device = "cpu";  // cpu | cuda
  // auto (bf16 on GPUs with bf16 tensor cores, fp32 elsewhere) | fp32 | tf32 | bf16 | fp16
  // (tf32, bf16, fp16: --device cuda)
  std::string precision = "auto";
  bool gpu_profile = false;        // --gpu-profile: GPU time by layer kind at the end
  // --synthetic-on-host: with --device cuda, synthetic batches cross the bus as real data
  // does, rather than being built on the GPU from its copy of the image pool
  bool synthetic_on_host = false;
  bool cudnn_search = false;  // --cudnn-search: time cuDNN's convolution algorithms
  bool cudnn_deterministic = false;  // --cudnn-deterministic: no atomics, same bits each run
  bool copy_stream = true;    // --no-copy-stream: batches go up on the layers' stream
  // --cuda-graphs (on) / --no-cuda-graphs (off): each step's GPU work replayed as one
  // graph; auto: on for one rank on a GPU, where the step can be captured
  std::string cuda_graphs = "auto";
  // --cuda-graph-segment: a graphed step is cut into graphs after each this many bytes of
  // gradients, whose allreduces start while the later graphs run; 0: one graph. Applies
  // on more than one rank, or on one where given.
  std::size_t cuda_graph_segment = std::size_t(25) << 20;
  bool cuda_graph_segment_given = false;
  bool cudnn_fusion = false;  // --cudnn-fusion: conv + BN statistics fused where it pays
  bool fuse_residual = false;  // --fuse-residual: BN + residual add + ReLU in one pass
  int pad_input = 0;           // --pad-input: the images' channels padded to this on the GPU
  int threads = 0;  // per rank; 0: the cores divided among the ranks on this host
  bool eval = true;
  std::string checkpoint;  // path; empty: no checkpoints
  int checkpoint_every = 1;
  std::string resume;
  // Under accordrun's elastic driver: commit every N steps to each host's disk, resume
  // from the newest commit after a restart (elastic.h); 0: off
  int commit_every = 0;
  std::string metrics;      // JSON-lines file
  std::string dump_params;  // write the final parameters here (rank 0)
  bool progress = true;
};

// `accord-resnet compare A B`: the equivalence tests' parameter comparison.
struct CompareOptions {
  std::string a, b;  // --dump-params files
  double atol = 1e-5, rtol = 1e-4;
};

// Adds every training flag to app, bound to o's fields; a value outside a flag's range
// makes app.parse() throw CLI::ValidationError naming the flag, the value and the range.
void addTrainOptions(CLI::App& app, TrainOptions& o);
// Whether --stem `stem` gives images of `image_size` pixels the cifar stem; throws
// InvalidArgument for a value other than auto, cifar and imagenet.
bool cifarStem(const std::string& stem, int image_size);
// Adds the `compare` subcommand, bound to c; returns it so the caller can see if it ran.
CLI::App* addCompareCommand(CLI::App& app, CompareOptions& c);

}  // namespace accord::resnet

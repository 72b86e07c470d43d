// Setting up a run and the training loop; see trainer.h. Evaluation, reporting and
// checkpoint writing are in trainer_report.cc.
#include "trainer.h"

#include "elastic.h"

#include <accord/error.h>
#include <tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include <unistd.h>

namespace accord::resnet {
namespace {

// The cores this rank may run on: its CPU affinity (oneTBB's default concurrency),
// which a launcher that binds ranks has narrowed already, as mpirun's --bind-to core
// (its default at 2 ranks or fewer) does to one core.
int usableCores() { return std::max(1, tbb::info::default_concurrency()); }

// The cores divided among the ranks on this host, within those this rank may use.
int defaultThreads() {
  const int local = std::max(1, accord::local_size());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, std::min(usableCores(), cores / local));
}

// `asked` threads for `flag` (0: the default), at most this rank's usable cores: more
// would share them (oneDNN's OpenMP threads) or be refused (oneTBB's, with a warning
// per arena). A cut is said in `notes`, for rank 0 to print.
int threadsFor(const char* flag, int asked, std::vector<std::string>& notes) {
  if (asked <= 0) return defaultThreads();
  const int usable = usableCores();
  if (asked <= usable) return asked;
  notes.push_back(std::string("accord-resnet: ") + flag + " " + std::to_string(asked) +
                  ", but this rank may run on " + std::to_string(usable) + " core" +
                  (usable == 1 ? "" : "s") + " (its CPU affinity: mpirun binds each rank to one " +
                  "core at 2 ranks or fewer): using " + std::to_string(usable) +
                  ". mpirun --bind-to none, or --map-by slot:PE=" + std::to_string(asked) +
                  ", gives it more.");
  return usable;
}

}  // namespace

int parseDepth(const std::string& model) {
  for (int depth : {18, 34, 50, 101, 152})
    if (model == "resnet" + std::to_string(depth)) return depth;
  throw InvalidArgument("unknown --model '" + model +
                        "' (expected resnet18, resnet34, resnet50, resnet101 or resnet152)");
}

Trainer::Trainer(const TrainOptions& options)
    : opt_(options), rank_(accord::rank()), world_(accord::size()), grads_(world_) {
  setThreads(threadsFor("--threads", opt_.threads, thread_notes_));
  if (opt_.commit_every > 0) elastic_dir_ = elasticStoreDirectory();
  checkOutputPaths();
  metrics_ = std::make_unique<Metrics>(
      rank_ == 0, opt_.metrics, opt_.progress,
      !opt_.resume.empty() || (!elastic_dir_.empty() && elasticRestarts() > 0));
  buildData();
  buildModel();
  // Before the resume, which restores the fp16 loss scale into it.
  if (opt_.precision == "fp16") loss_scaler_ = std::make_unique<LossScaler>();
  startFromRankZero();
  // On a GPU the device's copy trains: gradients reach the runtime as CUDA tensors and
  // the optimizer runs there (model_device.h). Batches go up straight from the loaders'
  // page-locked buffers (DMA, no wait), the training ones ahead of their step.
  if (model_.device) {
    trainOnDevice(model_, *sgd_);
    grads_.onDevice(deviceIndex(model_), deviceStream(model_));
    std::vector<std::pair<float*, std::size_t>> ahead;
    for (Loader* loader : {train_loader_.get(), test_loader_.get()})
      loader->forEachBuffer([&](float* p, std::size_t n) {
        pinHostMemory(model_, p, n);
        if (loader == train_loader_.get()) ahead.emplace_back(p, n);
      });
    if (opt_.copy_stream && pool_indices_.empty()) {  // not when built on the GPU
      LoaderHooks hooks = uploadAhead(model_, ahead);
      train_loader_->watchBuffers(std::move(hooks.before_fill), std::move(hooks.filled));
    }
  }
}

void Trainer::buildData() {
  if (opt_.channels > 0 && opt_.dataset != "synthetic")
    throw InvalidArgument("--channels " + std::to_string(opt_.channels) +
                          " sets synthetic images' channels; --dataset " + opt_.dataset +
                          " has its own (leave --channels out)");
  if (opt_.dataset == "fashion-mnist") {
    const std::string dir = opt_.data_dir.empty() ? kFashionMnistDir : opt_.data_dir;
    const int size = opt_.image_size > 0 ? opt_.image_size : 28;
    train_src_ = makeFashionMnist(dir, true, size, opt_.train_limit);
    test_src_ = makeFashionMnist(dir, false, size);
  } else if (opt_.dataset == "synthetic") {
    const int size = opt_.image_size > 0 ? opt_.image_size : 224;
    const int channels = opt_.channels > 0 ? opt_.channels : 3;
    const int classes = opt_.classes > 0 ? opt_.classes : 1000;
    train_src_ = makeSynthetic(opt_.synthetic_size, channels, size, classes, opt_.seed);
    test_src_ = makeSynthetic(std::max<std::int64_t>(opt_.synthetic_size / 10, 1), channels, size,
                              classes, opt_.seed + 1);
  } else if (opt_.dataset == "folder" || opt_.dataset == "packed") {
    buildPhotoData();
  } else {
    throw InvalidArgument("unknown --dataset '" + opt_.dataset +
                          "' (expected fashion-mnist, synthetic, folder or packed)");
  }
  LoaderOptions lo;
  lo.batch = opt_.batch_size;
  lo.rank = rank_;
  lo.world = world_;
  lo.seed = opt_.seed;
  lo.augment = opt_.augment;
  lo.prefetch = opt_.prefetch;
  lo.workers = threadsFor("--data-workers", opt_.data_workers, thread_notes_);
  for (const std::string& note : thread_notes_) metrics_->message(note);
  lo.skip_bad = opt_.corrupt == "skip";
  lo.log_rank = rank_;
  lo.epochs = opt_.epochs;  // the next epoch's first batches made while this one ends
  try {
    checkLoaderMemory(*train_src_, lo, 2);  // training and test
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(e.what());
  }
  train_loader_ = std::make_unique<Loader>(*train_src_, lo);
  lo.train = false;
  test_loader_ = std::make_unique<Loader>(*test_src_, lo);
  labels_.resize(static_cast<std::size_t>(opt_.batch_size));
}

// ImageNet's layout: <data-dir>/train and <data-dir>/val, each a folder of class
// subfolders or a packed set. Evaluation needs val/ with the same classes.
void Trainer::buildPhotoData() {
  if (opt_.data_dir.empty())
    throw InvalidArgument("--dataset " + opt_.dataset +
                          " needs --data-dir (a folder holding train/ and val/)");
  const int size = opt_.image_size > 0 ? opt_.image_size : 224;
  const auto open = [&](const std::string& split) {
    const std::string dir = opt_.data_dir + "/" + split;
    return opt_.dataset == "folder" ? makeJpegFolder(dir, size) : makePacked(dir, size);
  };
  train_src_ = open("train");
  if (!opt_.eval) {
    test_src_ = makeSynthetic(1, 3, size, train_src_->classes(), opt_.seed);  // never read
    return;
  }
  if (!std::filesystem::exists(opt_.data_dir + "/val"))
    throw InvalidArgument(opt_.data_dir +
                          " has train/ but no val/ to evaluate on: add it, or "
                          "pass --no-eval");
  test_src_ = open("val");
  if (test_src_->classNames() != train_src_->classNames())
    throw InvalidArgument(opt_.data_dir + "/val has other classes than " + opt_.data_dir +
                          "/train (" + std::to_string(test_src_->classes()) + " vs " +
                          std::to_string(train_src_->classes()) + ")");
}

void Trainer::buildModel() {
  ModelConfig cfg;
  cfg.depth = parseDepth(opt_.model);
  cfg.classes = opt_.classes > 0 ? opt_.classes : train_src_->classes();
  if (cfg.classes < train_src_->classes())
    throw InvalidArgument("--classes " + std::to_string(cfg.classes) + " is fewer than the " +
                          std::to_string(train_src_->classes()) + " the dataset has");
  cfg.in_channels = train_src_->channels();
  cfg.width = opt_.width;
  cfg.zero_init_residual = opt_.zero_init_residual;
  cfg.seed = opt_.seed;
  cfg.max_batch = opt_.batch_size;
  cfg.image_size = train_src_->imageSize();
  cfg.cifar_stem = cifarStem(opt_.stem, cfg.image_size);
  cfg.host_of_device = opt_.device == "cuda";
  resnet::buildModel(model_, cfg);
  opt_.precision = useDevice(model_, opt_.device, accord::local_rank(), opt_.precision);
  if (opt_.gpu_profile) {
    if (!model_.device) throw InvalidArgument("--gpu-profile needs --device cuda");
    profileDevice(model_);
  }
  for (const auto& [on, flag] : {std::pair{opt_.cudnn_search, "--cudnn-search"},
                                 {opt_.cudnn_deterministic, "--cudnn-deterministic"},
                                 {!opt_.copy_stream, "--no-copy-stream"},
                                 {opt_.cuda_graphs == "on", "--cuda-graphs"},
                                 {opt_.cuda_graphs == "off", "--no-cuda-graphs"},
                                 {opt_.cudnn_fusion, "--cudnn-fusion"},
                                 {opt_.fuse_residual, "--fuse-residual"},
                                 {opt_.pad_input != 0, "--pad-input"},
                                 {opt_.cuda_graph_segment_given, "--cuda-graph-segment"}})
    if (on && !model_.device) throw InvalidArgument(std::string(flag) + " needs --device cuda");
  if (opt_.cuda_graphs == "on" && opt_.gpu_profile)
    throw InvalidArgument(
        "--cuda-graphs and --gpu-profile cannot go together: the profile times each layer as "
        "it is launched, and a graph launches the whole step at once");
  // By default one rank's steps are graphed: with more, a graph's gradients reach the
  // allreduce only after it, and layer by layer each layer's overlap the rest of
  // backward. Asked for there, a step is cut into graphs so that they overlap it still.
  if (opt_.cuda_graphs == "on")
    launch_ = StepLaunch::Graph;
  else if (opt_.cuda_graphs == "auto" && model_.device && world_ == 1 && !opt_.gpu_profile)
    launch_ = StepLaunch::GraphWhereItWorks;
  if (launch_ != StepLaunch::LayerByLayer && (world_ > 1 || opt_.cuda_graph_segment_given))
    graphSegments(model_, opt_.cuda_graph_segment);
  if (opt_.cudnn_search) searchConvolutionAlgorithms(model_, true);
  if (opt_.cudnn_deterministic && opt_.cudnn_fusion)
    throw InvalidArgument(
        "--cudnn-deterministic and --cudnn-fusion cannot go together: the fused engines sum "
        "the batch-norm statistics in no fixed order");
  if (opt_.cudnn_deterministic) deterministicLayers(model_, true);
  if (opt_.cudnn_fusion && opt_.precision != "bf16" && opt_.precision != "fp16")
    throw InvalidArgument(
        "--cudnn-fusion needs --precision bf16 or fp16 (cuDNN's fused "
        "engines take 16-bit channels-last data), not " +
        opt_.precision);
  if (opt_.cudnn_fusion) fuseConvBatchNorm(model_, true);
  if (opt_.fuse_residual && opt_.precision != "bf16" && opt_.precision != "fp16")
    throw InvalidArgument(
        "--fuse-residual needs --precision bf16 or fp16 (its kernels take "
        "16-bit channels-last data), not " +
        opt_.precision);
  if (opt_.fuse_residual) fuseResidual(model_, true);
  if (opt_.pad_input != 0) padInput(model_, opt_.pad_input);
  if (opt_.synthetic_on_host && !(model_.device && opt_.dataset == "synthetic"))
    throw InvalidArgument("--synthetic-on-host needs --dataset synthetic and --device cuda");
  if (const auto pool = syntheticPool(*train_src_);
      pool && model_.device && !opt_.synthetic_on_host) {
    useDevicePool(model_, pool->pixels, pool->images);
    pool_indices_.resize(static_cast<std::size_t>(opt_.batch_size));
  }
  if (opt_.train_bn_mode != "batch" && opt_.train_bn_mode != "running")
    throw InvalidArgument("unknown --train-bn-mode '" + opt_.train_bn_mode +
                          "' (expected batch or running)");
  model_.sink = [this](const std::string& name, float* g, std::size_t n) {
    grads_.submit(name, g, n);
  };
  SgdOptions so;
  so.momentum = opt_.momentum;
  so.nesterov = opt_.nesterov;
  so.weight_decay = opt_.weight_decay;
  so.bn_bias_decay = !opt_.no_bn_decay;
  sgd_ = std::make_unique<Sgd>(parameterList(model_), so);
  LrScheduleOptions lo;
  lo.kind = parseScheduleKind(opt_.schedule);
  lo.base_lr = opt_.lr;
  lo.global_batch = opt_.batch_size * world_;
  // The reference study warms up over 5 epochs; a short run (the no-flag default is a
  // few epochs) would never leave warm-up, so it warms up over its first fifth instead.
  lo.warmup_epochs =
      opt_.warmup_epochs >= 0 ? opt_.warmup_epochs : std::min(5.0, opt_.epochs / 5.0);
  lo.total_epochs = opt_.epochs;
  lo.milestones = opt_.milestones;
  lo.gamma = opt_.gamma;
  lo.min_lr = opt_.min_lr;
  schedule_ = std::make_unique<LrSchedule>(lo);
}

std::vector<TensorRef> Trainer::checkpointTensors() {
  std::vector<TensorRef> out;
  for (const ParamRef& p : parameterList(model_)) out.push_back({p.name, p.w, p.n});
  for (const ParamRef& p : bufferList(model_)) out.push_back({p.name, p.w, p.n});
  const auto& params = sgd_->params();
  for (std::size_t i = 0; i < params.size(); ++i)
    out.push_back({"momentum." + params[i].name, sgd_->momentum()[i].data(), params[i].n});
  return out;
}

StepGeometry Trainer::stepGeometry() const { return {opt_.batch_size, world_, train_src_->size()}; }

// A resumed run's --metrics file keeps the lines of the `epochs` epochs done and goes on
// after them; a failure to rewrite it on rank 0 stops every rank with its message.
// Returns "; <file> keeps its N earlier epochs" for the log ("" without a file).
std::string Trainer::keepMetricsOf(std::int64_t epochs) {
  std::string kept, error;
  try {
    const int lines = metrics_->resumed(epochs);
    if (!opt_.metrics.empty())
      kept = "; " + opt_.metrics + " keeps its " + std::to_string(lines) + " earlier epoch" +
             (lines == 1 ? "" : "s");
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = broadcastError(error);
  if (!error.empty()) throw Error(error);
  return kept;
}

// Rank 0's parameters (fresh, or from --resume) become everyone's. A failed resume on
// rank 0 fails every rank with rank 0's message instead of leaving them waiting.
void Trainer::startFromRankZero() {
  if (opt_.commit_every > 0 && elastic_dir_.empty())
    metrics_->message(
        "--commit-every: not started by accordrun's elastic driver "
        "(ACCORDRUN_ELASTIC_JOB unset), so no elastic commits");
  // After a restart the job's own newest commit wins over --resume, the checkpoint it
  // started from (which would throw away every step committed since).
  if (!elastic_dir_.empty() && (opt_.resume.empty() || elasticRestarts() > 0)) {
    const bool resumed = resumeFromCommit();
    // A restarted job's --metrics file keeps the epochs its commit covers.
    if (elasticRestarts() > 0 && (resumed || opt_.resume.empty()))
      keepMetricsOf(resumed ? state_.epoch : 0);
    if (resumed) return;
  }
  std::string error;
  if (!opt_.resume.empty() && rank_ == 0) {
    try {
      state_ =
          loadCheckpoint(opt_.resume, model_.cfg.describe(), checkpointTensors(), stepGeometry());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!opt_.resume.empty()) error = broadcastError(error);
  if (!error.empty()) throw Error("--resume failed on rank 0: " + error);
  broadcastArena(model_.params, "init.params");
  broadcastArena(model_.buffers, "init.bn_stats");
  if (!opt_.resume.empty()) {
    const auto& params = sgd_->params();
    for (std::size_t i = 0; i < params.size(); ++i)
      broadcastFloats(sgd_->momentum()[i].data(), params[i].n, "init.momentum." + params[i].name);
    // The loss scale is a power of two from 1 to 2^24: exact as an integer.
    std::vector<std::int64_t> s = {state_.epoch, state_.step_in_epoch, state_.global_step,
                                   static_cast<std::int64_t>(state_.loss_scale),
                                   state_.loss_scale_good_steps};
    broadcastInts(s, "init.state");
    state_ = {s[0], s[1], s[2]};
    if (loss_scaler_ && s[3] > 0) {
      loss_scaler_->restore(static_cast<double>(s[3]), s[4]);
      metrics_->message("loss scale " + std::to_string(s[3]) + " restored");
    }
    const std::string kept = keepMetricsOf(state_.epoch);
    metrics_->message("resumed from " + opt_.resume + " " + positionOf(state_) + kept);
  }
}

bool Trainer::trainEpoch(int epoch, StepTimes& times) {
  const std::int64_t steps = train_loader_->steps();
  // Bad samples count in the epoch whose batch dropped them (skipped() counts the
  // batches handed out, not those made ahead).
  const std::int64_t skipped_before = train_loader_->skipped();
  train_loader_->startEpoch(epoch, state_.step_in_epoch);
  const auto t0 = Clock::now();
  while (state_.step_in_epoch < steps) {
    if (capReached()) return false;
    // The profile leaves out the run's first step, which pays for what is done once
    // (algorithm searches, buffers, kernels loaded), unless it is the only one.
    if (opt_.gpu_profile && !first_step_left_out_ && state_.global_step > profiled_from_) {
      resetDeviceProfile(model_);
      profiled_from_ = state_.global_step;
      first_step_left_out_ = true;
    }
    trainStep(times);
    if (resumed_) {
      resumed_ = false;
      metrics_->message("first step after the restart: " + positionOf(state_));
    }
    if (!elastic_dir_.empty() && state_.global_step % opt_.commit_every == 0) commitElastic();
    const double rate = times.seen * world_ / std::max(since(t0), 1e-9);
    metrics_->step(epoch + 1, state_.step_in_epoch - 1, steps,
                   times.loss_sum / std::max(times.scored, 1.0), rate);
    times.bad_samples = static_cast<double>(train_loader_->skipped() - skipped_before);
  }
  return !capReached();
}

// Where the layers run, for the run's first line: empty on the CPU.
std::string Trainer::onDevice() const {
  if (!model_.device) return "";
  return ", on GPU " + std::to_string(deviceIndex(model_)) + " in " + opt_.precision +
         (launch_ == StepLaunch::LayerByLayer ? "" : ", steps as CUDA graphs");
}

EvalResult Trainer::run() {
  // In the compute arena, so that the layers' and the optimizer's oneTBB loops use
  // --threads threads while the loader decodes with its own workers.
  return computeArena().execute([this] { return trainAll(); });
}

EvalResult Trainer::trainAll() {
  EvalResult last;
  const std::int64_t first_step = state_.global_step;
  profiled_from_ = first_step;
  const std::int64_t steps = train_loader_->steps();
  metrics_->message("accord-resnet: " + model_.cfg.describe() + ", " +
                    std::to_string(parameterCount(model_)) + " parameters, " +
                    std::to_string(world_) + " rank(s) x batch " + std::to_string(opt_.batch_size) +
                    ", " + std::to_string(steps) + " steps/epoch, peak LR " +
                    std::to_string(schedule_->peakLr()) + onDevice());
  bool more = !capReached(), ran = false;
  while (more && state_.epoch < opt_.epochs) {
    ran = true;
    StepTimes times;
    const std::int64_t first = state_.step_in_epoch;
    const auto t0 = Clock::now();
    more = trainEpoch(static_cast<int>(state_.epoch), times);
    const double seconds = since(t0);
    const bool finished = state_.step_in_epoch >= steps;
    syncBatchNormStats();
    if (opt_.eval) last = evaluate();
    report(static_cast<int>(state_.epoch) + 1, state_.step_in_epoch - first, seconds, times,
           opt_.eval ? &last : nullptr);
    if (finished) state_ = {state_.epoch + 1, 0, state_.global_step};
    if (finished && !elastic_dir_.empty()) commitElastic();
    const bool at_end = !more || state_.epoch >= opt_.epochs;
    if (!opt_.checkpoint.empty() && (at_end || (finished && opt_.checkpoint_every > 0 &&
                                                state_.epoch % opt_.checkpoint_every == 0)))
      saveCheckpoint(state_);
  }
  // Nothing left to train (a resumed run that was already complete): still report the
  // model's accuracy rather than a zero.
  if (!ran && opt_.eval) {
    syncBatchNormStats();
    last = evaluate();
    char line[96];
    std::snprintf(line, sizeof(line), "nothing left to train; test top-1 %.2f%%", 100 * last.top1);
    metrics_->message(line);
  }
  if (!opt_.dump_params.empty()) dumpParams();
  // Done: this job's commits are no longer needed on this host.
  if (!elastic_dir_.empty() && accord::local_rank() == 0) {
    commit_writer_.join();  // the last commit's write, before its folder goes
    std::error_code ignored;
    std::filesystem::remove_all(elastic_dir_, ignored);
  }
  if (launch_ != StepLaunch::LayerByLayer) {
    const GraphStats g = deviceGraphStats(model_);
    metrics_->message("CUDA graphs: " + std::to_string(g.captured) + " captured, " +
                      std::to_string(g.replayed) + " steps replayed from them, " +
                      std::to_string(g.eager) + " run layer by layer before their capture" +
                      (g.segments > 1 ? "; a step is " + std::to_string(g.segments) +
                                            " graphs, each one's gradients sent on after its "
                                            "launch"
                                      : "") +
                      (g.failure.empty() ? ""
                                         : "; then a graph failed (" + g.failure +
                                               "), and the rest ran layer by layer"));
  }
  if (opt_.cudnn_fusion && rank_ == 0) metrics_->message(convBatchNormFusionReport(model_));
  if (opt_.gpu_profile) {
    const std::string table =
        deviceProfileReport(model_, static_cast<int>(state_.global_step - profiled_from_));
    if (rank_ == 0)
      metrics_->message((first_step_left_out_ ? "steps " + std::to_string(profiled_from_ + 1) +
                                                    " to " + std::to_string(state_.global_step) +
                                                    " profiled (the first step left out, "
                                                    "which pays one-time costs)\n"
                                              : "") +
                        table);
  }
  return last;
}

}  // namespace accord::resnet

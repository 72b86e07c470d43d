// The trainer's epoch-end work: average BN statistics, evaluate on the test set,
// reduce and report metrics, write checkpoints and parameter dumps.
#include "trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <utility>

namespace accord::resnet {
namespace {
// The same file once links and "." are resolved, whether or not it exists yet.
bool sameFile(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ea, eb;
  // Absolute first: a relative path none of which exists yet stays relative otherwise,
  // so that "out" and "./out" would differ.
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a), ea);
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b), eb);
  return ea || eb ? a == b : ca == cb;
}
}  // namespace

// Each rank's running statistics come from its own shard. Averaging them makes every
// rank evaluate (and rank 0 checkpoint) the same model; with BN in inference mode
// during training they are identical already and this changes nothing.
void Trainer::syncBatchNormStats() {
  averageFloats(model_.buffers.base, model_.buffers.capacity, "bn_stats.average");
}

// Every rank evaluates its contiguous part of the test set; one allreduce of the
// counts gives the global result, so no rank waits per batch.
EvalResult Trainer::evaluate() {
  model_.bn_training = opt_.eval_bn_mode == "batch";
  const std::int64_t skipped_before = test_loader_->skipped();  // before its producer starts
  test_loader_->startEpoch(0);
  std::vector<double> sums(5, 0.0);  // loss * n, top-1 hits, top-5 hits, n, skipped
  int n;
  while ((n = test_loader_->borrow(&model_.input, labels_.data())) > 0) {
    forward(model_, n);
    const float l = loss(model_, labels_.data(), n, 0.0f, false);
    const nn::TopK hits = accuracy(model_, labels_.data(), n);
    sums[0] += static_cast<double>(l) * n;
    sums[1] += hits.top1;
    sums[2] += hits.top5;
    sums[3] += n;
  }
  sums[4] = static_cast<double>(test_loader_->skipped() - skipped_before);
  sumDoubles(sums, "eval.sums");
  const double total = std::max(sums[3], 1.0);
  return {sums[0] / total, sums[1] / total, sums[2] / total, static_cast<std::int64_t>(sums[4])};
}

void Trainer::report(int epoch, std::int64_t steps, double seconds, StepTimes t,
                     const EvalResult* val) {
  std::vector<double> sums = {t.loss_sum, t.correct, t.scored, t.seen,       t.compute,
                              t.comm,     t.data,    seconds,  t.bad_samples};
  sumDoubles(sums, "metrics.sums");
  EpochReport r;
  r.epoch = epoch;
  r.steps = steps;
  r.skipped_steps = static_cast<std::int64_t>(t.skipped);  // the same on every rank
  r.global_step = state_.global_step;
  r.lr = last_lr_;
  // No applied step, no training loss: NaN, written as null, rather than a made-up 0.
  const double scored = sums[2] > 0 ? sums[2] : std::nan("");
  r.train_loss = sums[0] / scored;
  r.train_acc = sums[1] / scored;
  if (val) {
    r.has_val = true;
    r.val_loss = val->loss;
    r.val_top1 = val->top1;
    r.val_top5 = val->top5;
    r.has_top5 = model_.fc.out > 5;
  }
  r.skipped_samples = static_cast<std::int64_t>(sums[8]) + (val ? val->skipped_samples : 0);
  r.world = world_;
  r.seconds = sums[7] / world_;
  r.compute_s = sums[4] / world_;
  r.comm_wait_s = sums[5] / world_;
  r.data_wait_s = sums[6] / world_;
  r.images = sums[3];
  r.images_per_sec = r.seconds > 0 ? sums[3] / r.seconds : 0;
  r.images_per_sec_rank = r.images_per_sec / world_;
  r.run = {model_.cfg.describe(), opt_.dataset,  train_src_->imageSize(),
           opt_.device,           opt_.schedule, opt_.batch_size};
  std::string error;
  try {
    metrics_->epoch(r);
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = broadcastError(error);  // only rank 0 writes: stop every rank with its error
  if (!error.empty()) throw Error(error);
}

// The loaders' producers stop first: on a GPU they hand batches to the model's copy
// stream, and the model, which goes before the loaders, unpins their buffers.
Trainer::~Trainer() {
  train_loader_->stop();
  test_loader_->stop();
}

// "after step 6 (epoch 2, step 2 of 4)" or "after step 4 (epoch 1 done)": where a
// checkpoint was taken, counted as the epoch lines count, from 1.
std::string Trainer::positionOf(const TrainState& state) const {
  const std::string where = state.step_in_epoch == 0
                                ? "epoch " + std::to_string(state.epoch) + " done"
                                : "epoch " + std::to_string(state.epoch + 1) + ", step " +
                                      std::to_string(state.step_in_epoch) + " of " +
                                      std::to_string(train_loader_->steps());
  return "after step " + std::to_string(state.global_step) + " (" + where + ")";
}

// "step 3 (epoch 1, step 3 of 16)" for the step being taken, 1-based as --steps counts.
std::string Trainer::stepName() const {
  return "step " + std::to_string(state_.global_step + 1) + " (epoch " +
         std::to_string(state_.epoch + 1) + ", step " + std::to_string(state_.step_in_epoch + 1) +
         " of " + std::to_string(train_loader_->steps()) + ")";
}

// Rank 0 writes --checkpoint, --dump-params and --metrics during or after the run: a
// path it cannot write to, or two of them in one file, fails every rank now, before the
// data is loaded or a step taken.
void Trainer::checkOutputPaths() {
  const std::pair<const char*, const std::string*> outputs[] = {
      {"--checkpoint", &opt_.checkpoint},
      {"--dump-params", &opt_.dump_params},
      {"--metrics", &opt_.metrics}};
  if (std::all_of(std::begin(outputs), std::end(outputs),
                  [](const auto& o) { return o.second->empty(); }))
    return;  // alike on every rank
  std::string error;
  for (const auto& [flag, path] : outputs) {
    if (rank_ != 0 || path->empty() || !error.empty()) continue;
    try {
      checkWritable(*path);
    } catch (const std::exception& e) {
      error = std::string(flag) + " " + *path + " cannot be written: " + e.what();
    }
  }
  // Two outputs in one file: the later write would replace the earlier.
  for (std::size_t i = 0; i < std::size(outputs) && rank_ == 0 && error.empty(); ++i)
    for (std::size_t j = i + 1; j < std::size(outputs) && error.empty(); ++j)
      if (!outputs[i].second->empty() && sameFile(*outputs[i].second, *outputs[j].second))
        error = std::string(outputs[i].first) + " and " + outputs[j].first + " both name " +
                *outputs[j].second + "; give each its own file";
  if (rank_ == 0 && error.empty() && sameFile(opt_.metrics, opt_.resume))
    error = "--metrics and --resume both name " + opt_.metrics + "; give each its own file";
  error = broadcastError(error);
  if (!error.empty()) throw InvalidArgument(error);
}

void Trainer::saveCheckpoint(const TrainState& at) {
  // One checkpoint file written at a time: the guard that removes a half-written one on
  // SIGTERM is process-wide (checkpoint.cc), and the commit's writer may be writing.
  commit_writer_.join();
  if (model_.device) pullToHost(model_, *sgd_);  // trained on the GPU: bring them down
  TrainState state = at;
  if (loss_scaler_) {
    state.loss_scale = loss_scaler_->scale();
    state.loss_scale_good_steps = loss_scaler_->goodSteps();
  }
  std::string error;
  if (rank_ == 0) {
    try {
      resnet::saveCheckpoint(opt_.checkpoint, model_.cfg.describe(), state, checkpointTensors(),
                             stepGeometry());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Keep the ranks in step: a failed write stops every rank, not just rank 0.
  error = broadcastError(error);
  if (!error.empty()) throw Error("checkpoint failed on rank 0: " + error);
  metrics_->message("checkpoint written to " + opt_.checkpoint + " " + positionOf(state));
}

// The final parameters alone, in the checkpoint format (CRC and all), for the
// equivalence tests' `accord-resnet compare A B`.
void Trainer::dumpParams() {
  if (rank_ != 0) return;
  commit_writer_.join();  // one checkpoint file at a time, as saveCheckpoint()
  if (model_.device) pullToHost(model_, *sgd_);
  std::vector<TensorRef> tensors;
  for (const ParamRef& p : parameterList(model_)) tensors.push_back({p.name, p.w, p.n});
  resnet::saveCheckpoint(opt_.dump_params, model_.cfg.describe(), state_, tensors, stepGeometry());
}

}  // namespace accord::resnet

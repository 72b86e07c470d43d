// The training run: data, model, optimizer, schedule, checkpoints and metrics wired
// together, and the loop that reads top to bottom:
//
//   for each epoch:            for each step:
//     startEpoch                 next batch        (data wait)
//     steps...                   forward, loss     (compute)
//     average BN statistics      backward -> named allreduces, one per layer, in flight
//                                  (--cuda-graphs: forward to backward as one CUDA graph
//                                  launch; the allreduces follow it)
//     evaluate                   wait for them     (communication wait)
//     report, checkpoint         SGD step          (compute)
//                                  unless the loss averaged over the ranks is not
//                                  finite: then every rank stops, or skips the step
#pragma once

#include "checkpoint.h"
#include "commit_writer.h"
#include "data.h"
#include "distributed.h"
#include "jpeg_source.h"
#include "loader.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "model.h"
#include "model_device.h"
#include "optimizer.h"
#include "options.h"

#include <chrono>
#include <memory>
#include <vector>

namespace accord::resnet {

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  std::int64_t skipped_samples = 0;  // bad test samples left out (--corrupt skip), all ranks
};

class Trainer {
 public:
  // Call after accord::init(). Loads data, builds the model, resumes or broadcasts the
  // initial parameters from rank 0.
  explicit Trainer(const TrainOptions& options);
  ~Trainer();
  // Trains until --epochs or --steps; returns the last evaluation (zero without eval).
  EvalResult run();
  // For the elastic failure report (elastic.h): optimizer steps so far, and the global
  // step of the last elastic commit (-1: none).
  std::int64_t globalStep() const { return state_.global_step; }
  std::int64_t lastCommit() const { return last_commit_; }
  // Returns once this host's last elastic commit is on its disk (a rank about to leave
  // after a failure); a failed write is printed, not thrown.
  void finishCommits();

 private:
  using Clock = std::chrono::steady_clock;
  static double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  struct StepTimes {
    double compute = 0, comm = 0, data = 0;
    double loss_sum = 0, correct = 0, scored = 0;  // over the steps applied
    double seen = 0;                               // images, skipped steps included
    double skipped = 0;                            // steps with a non-finite loss
    double bad_samples = 0;                        // training samples skipped (--corrupt skip)
  };

  EvalResult trainAll();  // run(), in the compute arena
  void buildData();
  void buildPhotoData();  // --dataset folder | packed
  void buildModel();
  void checkOutputPaths();
  std::string positionOf(const TrainState& state) const;
  void startFromRankZero();
  std::vector<TensorRef> checkpointTensors();
  StepGeometry stepGeometry() const;
  bool trainEpoch(int epoch, StepTimes& times);  // false: --steps reached
  bool capReached() const { return opt_.max_steps > 0 && state_.global_step >= opt_.max_steps; }
  void trainStep(StepTimes& times);
  std::string nonFiniteReason();  // "" if this step may update the model
  void skipNonFiniteStep(const std::string& reason, StepTimes& times);
  bool lossScaleAllows(StepTimes& times);  // fp16: false (step skipped) on an overflow
  std::string stepName() const;
  EvalResult evaluate();
  void syncBatchNormStats();
  void report(int epoch, std::int64_t steps, double seconds, StepTimes times,
              const EvalResult* val);
  void saveCheckpoint(const TrainState& state);
  void commitElastic();     // trainer_elastic.cc
  bool resumeFromCommit();  // false: no host holds a commit of this job
  TrainState committedState() const;
  std::string keepMetricsOf(std::int64_t epochs);
  void dumpParams();
  std::string onDevice() const;

  TrainOptions opt_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<ImageSource> train_src_, test_src_;
  std::unique_ptr<Loader> train_loader_, test_loader_;
  Model model_;
  std::unique_ptr<Sgd> sgd_;
  std::unique_ptr<LrSchedule> schedule_;
  GradExchange grads_;
  std::unique_ptr<Metrics> metrics_;
  TrainState state_;
  // Under accordrun's elastic driver with --commit-every: this host's commit directory
  // (elastic.h); "" otherwise.
  std::string elastic_dir_;
  std::vector<std::string> thread_notes_;  // --threads or --data-workers cut to the cores
  std::int64_t last_commit_ = -1;
  CommitWriter commit_writer_;        // local rank 0's: the commits' writes to this host's disk
  bool resumed_ = false;              // from an elastic commit; the first step after it is logged
  std::vector<std::int32_t> labels_;  // (batch)
  // Synthetic data built on the GPU (useDevicePool): the batch's sample indices; empty
  // where batches are uploaded from the host.
  std::vector<std::int64_t> pool_indices_;
  double last_lr_ = 0;
  double step_loss_ = 0;          // this step's loss, averaged over the ranks
  std::vector<float> bn_before_;  // BN statistics before the step (skipping only)
  int nonfinite_in_a_row_ = 0;
  std::unique_ptr<LossScaler> loss_scaler_;       // --precision fp16
  StepLaunch launch_ = StepLaunch::LayerByLayer;  // on a GPU: --cuda-graphs resolved
  // --gpu-profile: the steps done before those its times cover, and whether the run's
  // first step was left out of them.
  std::int64_t profiled_from_ = 0;
  bool first_step_left_out_ = false;
};

// "resnet50" -> 50; throws InvalidArgument otherwise.
int parseDepth(const std::string& model);

}  // namespace accord::resnet

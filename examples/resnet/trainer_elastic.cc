// The trainer's elastic commits and its resume from the newest one; see elastic.h.
//
// A commit is collective: every rank averages the BN statistics (so every host's copy
// is the same), and each host's local rank 0 copies the state and writes the copy to
// its disk on the CommitWriter's thread. The ranks agree that every host's previous
// write succeeded before a commit starts the next, and a rank that leaves after a
// failure first finishes its write. A resume reads
// which step each host's commit holds (one allreduce), and the lowest rank holding the
// newest loads it and broadcasts it to the others, newcomers included.
#include "elastic.h"
#include "trainer.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace accord::resnet {
namespace {

void broadcastFrom(int root, void* data, DType dtype, std::size_t n, const std::string& name) {
  if (accord::size() == 1 || n == 0) return;
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = {static_cast<std::int64_t>(n)};
  BroadcastOptions o;
  o.name = name;
  o.root = root;
  broadcast(v, o);
}

// root's message (empty: success) on every rank.
std::string errorFrom(int root, const std::string& error) {
  std::vector<char> buf(1024, 0);
  std::memcpy(buf.data(), error.data(), std::min(error.size(), buf.size() - 1));
  broadcastFrom(root, buf.data(), DType::UInt8, buf.size(), "elastic.status");
  return buf.data();
}

}  // namespace

// The state a commit holds: the position and, with --precision fp16, the loss scale.
TrainState Trainer::committedState() const {
  TrainState state = state_;
  if (loss_scaler_) {
    state.loss_scale = loss_scaler_->scale();
    state.loss_scale_good_steps = loss_scaler_->goodSteps();
  }
  return state;
}

void Trainer::commitElastic() {
  syncBatchNormStats();
  if (model_.device) pullToHost(model_, *sgd_);
  // The previous commit's write is done on every host before this one starts: a failed
  // write stops every rank at the commit after it, as Python's commit() does.
  const std::string error = commit_writer_.wait();
  std::vector<double> failed = {error.empty() ? 0.0 : 1.0};
  sumDoubles(failed, "elastic.commit");
  if (failed[0] > 0)
    throw Error("elastic commit failed on " + std::to_string(static_cast<int>(failed[0])) +
                " host(s)" + (error.empty() ? "" : ": " + error));
  // One copy of the state in memory; the disk write goes on beside training.
  const auto t0 = Clock::now();
  if (accord::local_rank() == 0)
    commit_writer_.start(elasticCommitPath(elastic_dir_), model_.cfg.describe(), committedState(),
                         checkpointTensors(), stepGeometry());
  char took[48];
  std::snprintf(took, sizeof took, "%.1f ms", 1e3 * since(t0));
  last_commit_ = state_.global_step;
  metrics_->message("commit " + positionOf(state_) + ": state copied in " + took +
                    ", written to every host's disk in the background");
}

void Trainer::finishCommits() {
  const std::string error = commit_writer_.wait();
  if (!error.empty())
    std::fprintf(stderr, "accord-resnet (rank %d): elastic commit: %s\n", rank_, error.c_str());
}

bool Trainer::resumeFromCommit() {
  const std::string path = elasticCommitPath(elastic_dir_);
  std::vector<double> held(static_cast<std::size_t>(world_), 0.0);  // global step + 1, by rank
  if (accord::local_rank() == 0 && std::filesystem::exists(path)) {
    try {
      const CheckpointContents c = readCheckpoint(path);
      if (c.description == model_.cfg.describe())
        held[static_cast<std::size_t>(rank_)] = static_cast<double>(c.state.global_step + 1);
    } catch (const std::exception& e) {  // a damaged commit: another host's may do
      std::fprintf(stderr, "accord-resnet (rank %d): ignoring the commit %s: %s\n", rank_,
                   path.c_str(), e.what());
    }
  }
  sumDoubles(held, "elastic.commits");
  const int owner = static_cast<int>(std::max_element(held.begin(), held.end()) - held.begin());
  const double newest = held[static_cast<std::size_t>(owner)];
  if (newest == 0) return false;
  const bool host_lacks_it = held[static_cast<std::size_t>(rank_)] < newest;
  std::vector<std::int64_t> s(8, 0);
  std::string error;
  if (rank_ == owner) {
    try {
      const StepGeometry g = readCheckpoint(path).geometry;
      const TrainState t = loadCheckpoint(path, model_.cfg.describe(), checkpointTensors());
      s = {t.epoch,
           t.step_in_epoch,
           t.global_step,
           static_cast<std::int64_t>(t.loss_scale),
           t.loss_scale_good_steps,
           g.batch_size,
           g.ranks,
           g.train_size};
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = errorFrom(owner, error);
  if (!error.empty())
    throw Error("elastic resume failed on rank " + std::to_string(owner) + ": " + error);
  broadcastFrom(owner, model_.params.base, DType::Float32, model_.params.capacity,
                "elastic.params");
  broadcastFrom(owner, model_.buffers.base, DType::Float32, model_.buffers.capacity,
                "elastic.bn_stats");
  const auto& params = sgd_->params();
  for (std::size_t i = 0; i < params.size(); ++i)
    broadcastFrom(owner, sgd_->momentum()[i].data(), DType::Float32, params[i].n,
                  "elastic.momentum." + params[i].name);
  broadcastFrom(owner, s.data(), DType::Int64, s.size(), "elastic.state");
  const StepGeometry saved{s[5], s[6], s[7]};
  if (saved.train_size != train_src_->size())
    throw Error("the newest commit (rank " + std::to_string(owner) +
                "'s host) was made on a training set of " + std::to_string(saved.train_size) +
                " samples, this run has " + std::to_string(train_src_->size()));
  state_ = reshard({s[0], s[1], s[2]}, saved, stepGeometry(), train_loader_->steps());
  if (loss_scaler_ && s[3] > 0) loss_scaler_->restore(static_cast<double>(s[3]), s[4]);
  last_commit_ = state_.global_step;
  resumed_ = true;
  // A host that held no copy of this commit (a newcomer, or one whose copy was older)
  // writes one now: the commit must outlive the hosts it came from, not only until the
  // next commit.
  if (accord::local_rank() == 0 && host_lacks_it)
    commit_writer_.start(path, model_.cfg.describe(), committedState(), checkpointTensors(),
                         stepGeometry());
  metrics_->message("resumed from the commit on rank " + std::to_string(owner) + "'s host " +
                    "(step " + std::to_string(s[2]) + " of " + std::to_string(saved.ranks) +
                    " ranks x batch " + std::to_string(saved.batch_size) + "), now " +
                    positionOf(state_) + " on " + std::to_string(world_) + " ranks x batch " +
                    std::to_string(opt_.batch_size));
  return true;
}

}  // namespace accord::resnet

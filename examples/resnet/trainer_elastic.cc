// The trainer's elastic commits and its resume from the newest one; see elastic.h.
//
// A commit is collective: every rank averages the BN statistics (so every host's copy
// is the same), each host's local rank 0 writes the state to its disk, and the ranks
// agree that every write succeeded before any reports the commit made. A resume reads
// which step each host's commit holds (one allreduce), and the lowest rank holding the
// newest loads it and broadcasts it to the others, newcomers included.
#include "elastic.h"
#include "trainer.h"

#include <accord/error.h>

#include <algorithm>
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

void Trainer::commitElastic() {
  syncBatchNormStats();
  if (model_.device) pullToHost(model_, *sgd_);
  TrainState state = state_;
  if (loss_scaler_) {
    state.loss_scale = loss_scaler_->scale();
    state.loss_scale_good_steps = loss_scaler_->goodSteps();
  }
  std::string error;
  if (accord::local_rank() == 0) {
    try {
      std::filesystem::create_directories(elastic_dir_);
      resnet::saveCheckpoint(elasticCommitPath(elastic_dir_), model_.cfg.describe(), state,
                             checkpointTensors(), stepGeometry());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Every host's write is done before any rank counts the commit made.
  std::vector<double> failed = {error.empty() ? 0.0 : 1.0};
  sumDoubles(failed, "elastic.commit");
  if (failed[0] > 0)
    throw Error("elastic commit failed on " + std::to_string(static_cast<int>(failed[0])) +
                " host(s)" + (error.empty() ? "" : ": " + error));
  last_commit_ = state_.global_step;
  metrics_->message("commit " + positionOf(state_) + " on every host's disk");
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
  if (held[static_cast<std::size_t>(owner)] == 0) return false;
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
  metrics_->message("resumed from the commit on rank " + std::to_string(owner) + "'s host " +
                    "(step " + std::to_string(s[2]) + " of " + std::to_string(saved.ranks) +
                    " ranks x batch " + std::to_string(saved.batch_size) + "), now " +
                    positionOf(state_) + " on " + std::to_string(world_) + " ranks x batch " +
                    std::to_string(opt_.batch_size));
  return true;
}

}  // namespace accord::resnet

// What a run reports: a progress bar on a terminal, one line per epoch on stdout and
// one JSON object per epoch in the --metrics file (JSON lines), with the reference
// study's time split: compute, communication wait and data wait.
//
// Only rank 0 reports; the numbers it reports are already reduced over all ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace accord::resnet {

// What a run was, written into every line so that a report can tell which runs compare
// (same model, data and device) and what each one varied (ranks, batch, schedule).
struct RunInfo {
  std::string model;     // ModelConfig::describe(): depth, classes, stem, width
  std::string dataset;   // fashion-mnist or synthetic
  int image_size = 0;    // height = width
  std::string device;    // cpu or cuda
  std::string schedule;  // step, cosine, exponential or constant
  int batch_size = 0;    // per rank; the global batch is batch_size * world
};

struct EpochReport {
  int epoch = 0;                     // 1-based, as printed
  std::int64_t steps = 0;            // optimizer steps in this epoch
  std::int64_t skipped_steps = 0;    // of those, skipped for a non-finite loss
  std::int64_t skipped_samples = 0;  // bad images or records left out, training and test
  std::int64_t global_step = 0;      // after the epoch
  double lr = 0;                     // at the epoch's last step
  double train_loss = 0, train_acc = 0;
  bool has_val = false;
  double val_top1 = 0, val_top5 = 0;
  bool has_top5 = false;  // more than 5 classes
  double val_loss = 0;
  double seconds = 0;         // wall time of the epoch's training steps
  double images_per_sec = 0;  // global
  double images_per_sec_rank = 0;
  double compute_s = 0, comm_wait_s = 0, data_wait_s = 0;  // mean over ranks
  int world = 1;
  double images = 0;  // global, trained on in `seconds` (skipped steps included)
  RunInfo run;
};

// Returns {"epoch":1,...} (one line, no trailing newline); NaN and infinities as null.
// `s` as a JSON string, quotes and escapes included: values come from flags,
// descriptions and host names, and escaping keeps every line valid JSON.
std::string jsonQuoted(const std::string& s);

std::string toJson(const EpochReport& r);
// Returns "epoch 1  lr 0.1000  loss 0.512 acc 81.2%  val top-1 85.3% ...".
std::string toLine(const EpochReport& r);

// ACCORD_PROGRESS=1 or 0 decides; unset, a bar only when stdout is a terminal and the
// process was not started by a launcher (mpirun, srun). Throws on another value.
bool progressBarWanted();

class Metrics {
 public:
  // enabled: this rank reports; progress: draw a bar where progressBarWanted(). A run
  // that resumes opens its --metrics file in resumed(), once it knows where it resumes.
  Metrics(bool enabled, const std::string& jsonl_path, bool progress, bool resuming);
  ~Metrics();

  // Keeps the --metrics file's lines of epochs 1 to `epochs_done` (those the resumed
  // run does not train again) and returns how many there were; the rest are dropped.
  int resumed(std::int64_t epochs_done);
  void step(int epoch, std::int64_t step, std::int64_t steps, double loss, double img_per_s);
  // Throws where the --metrics file cannot be written (a full disk, say).
  void epoch(const EpochReport& r);
  void message(const std::string& line);  // a plain line on stdout (clears the bar)

 private:
  void clearBar();

  bool enabled_;
  bool bar_;
  bool bar_drawn_ = false;
  std::string path_;
  std::FILE* jsonl_ = nullptr;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace accord::resnet

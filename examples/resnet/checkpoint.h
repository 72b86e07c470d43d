// Checkpoints: model parameters, BN running statistics, optimizer momentum, epoch
// and step, in one self-checking file.
//
// Layout (little-endian, as written by this machine):
//   "ACCORDCK" | u32 version | u32 len, model description | i64 epoch | i64 step_in_epoch
//   | i64 global_step | i64 batch_size | i64 ranks | i64 train_size (version 2 on)
//   | f64 loss_scale | i64 loss_scale_good_steps (version 3 on)
//   | u32 count | count x (u32 len, name | u64 n | n x f32) | u32 crc32
// The CRC covers everything before it, so truncation and bit rot are caught before any
// value is used; the description ("resnet18 classes=10 in=1 stem=cifar width=0.25")
// and the tensor names and sizes must match the model being resumed, and so must the
// step geometry (see StepGeometry). Version 1 and 2 files, without the geometry or the
// loss scale, still load.
//
// Writing is atomic: a temporary file beside the target, fsync, rename, fsync of the
// directory. A crash leaves either the old checkpoint or the new one, never half. The
// temporary file is always a new one (O_EXCL): nothing already at its name, a symlink
// included, is opened or written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord::resnet {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorRef {
  std::string name;
  float* data = nullptr;  // (n)
  std::size_t n = 0;
};

struct TrainState {
  std::int64_t epoch = 0;          // epoch to continue in
  std::int64_t step_in_epoch = 0;  // steps of that epoch already done
  std::int64_t global_step = 0;    // optimizer steps so far (drives the LR schedule)
  // --precision fp16: the dynamic loss scale and its good steps since it last changed
  // (LossScaler), so that a resumed run goes on where it was; 0: none.
  double loss_scale = 0;
  std::int64_t loss_scale_good_steps = 0;
};

// How a run cuts its data into optimizer steps. A checkpoint counts its position in the
// epoch and in the LR schedule in steps, and step s of an epoch covers the samples
// [s * G, (s + 1) * G) of the epoch's order (data.h), so those counts mean the same
// samples only with the same global batch G and training set. The split of G over the
// ranks may change: 2 ranks x 16 and 1 rank x 32 train on the same samples.
struct StepGeometry {
  std::int64_t batch_size = 0;  // per rank; 0: not recorded (version 1)
  std::int64_t ranks = 0;
  std::int64_t train_size = 0;  // training samples per epoch
  std::int64_t globalBatch() const { return batch_size * ranks; }
};

inline constexpr std::uint32_t kCheckpointVersion = 3;

void saveCheckpoint(const std::string& path, const std::string& description,
                    const TrainState& state, const std::vector<TensorRef>& tensors,
                    const StepGeometry& geometry = {});

// Throws CheckpointError, naming the path and the system's reason, unless a checkpoint
// could be written to path now: it is no directory, and a temporary file can be made
// beside it (and is removed at once). For a run to refuse a path it would otherwise
// find unwritable only when it first saves, after an epoch or the whole training.
void checkWritable(const std::string& path);

// Reads path into the given tensors (same names, order and sizes as when saved);
// throws CheckpointError naming the file and what is wrong, before touching any tensor.
// A run geometry other than {} must match the saved one (checkResumable).
TrainState loadCheckpoint(const std::string& path, const std::string& description,
                          const std::vector<TensorRef>& tensors, const StepGeometry& run = {});

// Throws CheckpointError, naming both batch sizes or training-set sizes, unless a run
// with geometry `run` can continue where one with `saved` stopped. Passes when either
// is unknown (batch_size 0).
void checkResumable(const std::string& path, const StepGeometry& saved, const StepGeometry& run);

// Everything in a checkpoint file, checked for integrity only (no model to compare).
struct CheckpointContents {
  std::string description;
  TrainState state;
  StepGeometry geometry;  // zeros in a version 1 file
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
};
CheckpointContents readCheckpoint(const std::string& path);

// How far apart two files' tensors are (`accord-resnet compare`): every value must
// satisfy |a - b| <= atol + rtol * |b|. A NaN or infinity on either side never does: a
// run that diverged equals nothing, not even itself.
struct TensorDiff {
  bool same_tensors = true;  // same names and sizes; nothing else is meaningful if false
  std::string mismatch;      // where they first differ, when not the same tensors
  bool equal = true;         // every value within tolerance
  std::size_t tensors = 0;
  double max_abs = 0;    // largest |a - b| (infinite where a value is not finite)
  std::string tightest;  // the tensor closest to (or furthest past) its tolerance
};
TensorDiff compareTensors(const CheckpointContents& a, const CheckpointContents& b, double atol,
                          double rtol);

}  // namespace accord::resnet

// Checkpoints: model parameters, BN running statistics, optimizer momentum, epoch
// and step, in one self-checking file.
//
// Layout (little-endian, as written by this machine):
//   "ACCORDCK" | u32 version | u32 len, model description | i64 epoch | i64 step_in_epoch
//   | i64 global_step | u32 count | count x (u32 len, name | u64 n | n x f32) | u32 crc32
// The CRC covers everything before it, so truncation and bit rot are caught before any
// value is used; the description ("resnet18 classes=10 in=1 stem=cifar width=0.25")
// and the tensor names and sizes must match the model being resumed.
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
};

inline constexpr std::uint32_t kCheckpointVersion = 1;

void saveCheckpoint(const std::string& path, const std::string& description,
                    const TrainState& state, const std::vector<TensorRef>& tensors);

// Reads path into the given tensors (same names, order and sizes as when saved);
// throws CheckpointError naming the file and what is wrong, before touching any tensor.
TrainState loadCheckpoint(const std::string& path, const std::string& description,
                          const std::vector<TensorRef>& tensors);

// Everything in a checkpoint file, checked for integrity only (no model to compare).
struct CheckpointContents {
  std::string description;
  TrainState state;
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
};
CheckpointContents readCheckpoint(const std::string& path);

}  // namespace accord::resnet

// An elastic commit at the cost of one copy of the state. start() copies the tensors
// into a snapshot this writer owns and returns; a thread of the writer's own writes the
// snapshot to disk in the checkpoint format (checkpoint.h: temporary file, fsync,
// rename), while training goes on. The next start(), wait() and the destructor wait for
// that write, so a commit is on disk before the next one begins and before the process
// leaves. The snapshot is one buffer kept across commits: after the first commit, the
// state's copy goes into memory already allocated and touched.
//
// Threads: start() and wait() are called by one thread (the training thread); the
// writer thread reads only the snapshot, which start() fills before it starts and does
// not touch again until that write is done.
#pragma once

#include "checkpoint.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace accord::resnet {

class CommitWriter {
 public:
  CommitWriter() = default;
  ~CommitWriter();
  CommitWriter(const CommitWriter&) = delete;
  CommitWriter& operator=(const CommitWriter&) = delete;

  // Waits for the previous write (a failure of it is kept for the next wait(), not
  // lost), copies `tensors` and starts writing them to `path`.
  void start(const std::string& path, const std::string& description, const TrainState& state,
             const std::vector<TensorRef>& tensors, const StepGeometry& geometry);
  // Returns once the last write is done: "" where every write since the last wait()
  // succeeded (or there was none), else why they failed (each failure reported once).
  std::string wait();
  // Returns once the last write is done, keeping any failure for wait().
  void join();
  // Whether a write was started and not yet waited for.
  bool writing() const { return thread_.joinable(); }

 private:
  void write();  // the writer thread

  std::vector<float> snapshot_;  // every tensor, one after the other
  std::vector<TensorRef> refs_;  // into snapshot_, with the tensors' names
  std::string path_, description_;
  TrainState state_;
  StepGeometry geometry_;
  std::string error_;  // appended to by the writer thread, read after join()
  std::thread thread_;
};

}  // namespace accord::resnet

// The trainer's side of the Accord runtime: gradient exchange that overlaps backward,
// and the few collectives around it (initial broadcast, metric reduction, BN
// statistics averaging, passing rank 0's resume result to everyone).
//
// With one rank every call is a no-op, so a single-process run (the throughput
// benchmark) pays nothing for distribution.
#pragma once

#include "nn/layers.h"

#include <accord/accord.h>
#include <tbb/task_arena.h>

#include <cstddef>
#include <string>
#include <vector>

namespace accord::resnet {

// Collects one named allreduce (Average) per gradient tensor as backward produces it.
class GradExchange {
 public:
  explicit GradExchange(int world) : world_(world) {}
  // Gradients in GPU `device`'s memory from here on, ready in the order of `stream`
  // (a cudaStream_t): they are reduced there, as CUDA tensors (NCCL).
  void onDevice(int device, void* stream) {
    device_ = device;
    stream_ = stream;
  }
  // Called from the model's GradSink on the training thread; returns at once.
  void submit(const std::string& name, float* grad, std::size_t n);
  // Averages one value (the step's loss) along with the gradients, so every rank ends
  // the step with the same value at no extra wait; ready after waitAll().
  void submitValue(const std::string& name, double* value);
  // The same for one float in device memory (onDevice's GPU, ready in its stream's order).
  void submitDeviceValue(const std::string& name, float* value);
  // Blocks until every submitted gradient is averaged; returns the seconds waited.
  double waitAll();

 private:
  // One named allreduce (Average) of v, on onDevice's GPU and stream when on_device.
  void average(const std::string& name, TensorView v, bool on_device);

  int world_;
  int device_ = -1;  // host memory
  void* stream_ = nullptr;
  std::vector<Handle> handles_;
};

void broadcastFloats(float* data, std::size_t n, const std::string& name);
void broadcastArena(const nn::Arena& arena, const std::string& name);
void averageFloats(float* data, std::size_t n, const std::string& name);
void sumDoubles(std::vector<double>& values, const std::string& name);
void broadcastInts(std::vector<std::int64_t>& values, const std::string& name);
// Rank 0 passes its error message (empty: success); every rank returns it, so all can
// fail together instead of leaving the others waiting in a collective.
std::string broadcastError(const std::string& error_on_root);

// Sets this process's compute threads: oneDNN's OpenMP pool, and the oneTBB arena
// that computeArena() returns, in which the training loop runs (so the oneTBB loops
// of the layers and the optimizer use that many threads). The data loader decodes in
// an arena of its own, with its own --data-workers: a limit on the whole process would
// cap the loader at the compute threads too.
void setThreads(int threads);
// The arena of setThreads (one thread until it is called).
tbb::task_arena& computeArena();

}  // namespace accord::resnet

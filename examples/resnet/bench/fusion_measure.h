// The measurements of accord-fusion-probe (fusion_probe.cc): each fused pattern through
// cuDNN's graph API (the engines offered, the best of the first plans timed) beside
// what it replaces in the trainer, timed with the trainer's own layer calls and kernels.
#pragma once

#include "bench/fusion_graphs.h"

#include <memory>
#include <string>
#include <vector>

namespace accord::resnet::probe {

struct ProbeOptions {
  int engines = 1;               // plans built and timed per graph, at most (each may compile)
  int iters = 5;                 // timed runs per measurement
  bool block_ends_only = false;  // only the Residual units (--block-ends)
};

// What one call of Probe::run measures: a convolution shape's forward patterns, its
// backward patterns, or (Residual) a block's end at an activation shape (K, H).
struct Unit {
  enum Kind { Forward, Backward, Residual } kind;
  std::string dtype;
  int batch;
  ConvShape shape;
};

struct Row {
  std::string dtype;
  int batch = 0;
  std::string shape, pattern, engines, note;
  double fused = -1, unfused = -1;  // ms; negative: not measured
};

std::string msText(double ms);
std::string gainText(const Row& r);  // "1.23x" (today / fused), or "-"
const char* legend();                // what each pattern's "today" column holds

class Probe {
 public:
  // Allocates buffers for the largest of these shapes at the largest batch.
  Probe(const ProbeOptions& opt, const std::vector<int>& batches,
        const std::vector<ConvShape>& shapes);
  ~Probe();
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  std::string describe() const;  // the GPU, cuDNN's version, the options
  // Every unit for one precision and batch, in the order they should run: stage by
  // stage, each shape's forward and backward patterns, then the stage's block end.
  std::vector<Unit> units(const std::string& dtype, int batch) const;
  std::vector<Row> run(const Unit& u);

  struct Buffers;

 private:
  struct Measured;
  // The best time of `p` at shape s over the first plans cuDNN offers, trying the
  // per-channel types in order until one has engines.
  Measured bestOf(Pattern p, const ConvShape& s, int N, cudnnDataType_t io,
                  std::vector<cudnnDataType_t> channels);
  template <class Work>
  double timeMs(Work&& work);
  void fill(const std::string& dtype);

  ProbeOptions opt_;
  std::vector<ConvShape> shapes_;
  std::unique_ptr<Buffers> b_;
  size_t act_elements_ = 0, filter_elements_ = 0;
};

}  // namespace accord::resnet::probe

// A training step on the GPU that never waits for it (model_device.h, deviceTrainStep):
// forward, loss, accuracy and backward queued on the layers' stream, the loss and the
// hits left in device memory until deviceStepResult; with --cuda-graphs, the same work
// captured once per kind of step and replayed with one launch.
//
// Layer by layer, backward hands each gradient to the sink as soon as its layer's
// work is queued, so its allreduce can start while the rest of backward runs.
//
// As a graph: a kind of step (batch size, loss scale, BN mode, label smoothing) runs
// layer by layer the first time it is seen, so that everything the layers allocate or
// look up once (the cuDNN workspace, scratch buffers, 16-bit weight copies,
// convolution plans and searches) is in place; the second time it is captured, and
// from then on replayed. A graph holds the addresses it was captured with: when the
// layers' backend frees memory it had handed out (nn::cuda::memory_generation), every
// graph is dropped and made again. What varies from step to step stays outside the
// graph, on the same stream: the batch and the labels go up before its launch, the BN
// statistics come down after it, and the gradients go to the sink after the launch,
// in the order backward produced them (recorded during the capture), so their
// allreduces wait for the whole backward. Where graphs are the default rather than
// asked for (StepLaunch::GraphWhereItWorks), a capture that fails is told once and the
// run goes on layer by layer, starting with the step whose capture failed.
#include "device_model.h"
#include "model_device.h"

#include <accord/error.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace accord::resnet {

// What a step leaves in device memory for deviceStepResult.
struct StepOutputs {
  float loss;          // this rank's
  float loss_average;  // a copy, which the caller may average over the ranks in place
  int32_t hits[2];     // top-1, top-5
  int32_t bad_labels;  // counted by the loss
  int32_t bad_again;   // ... and by the accuracy (not read)
};

struct StepState {
  struct Kind {
    int N;
    float loss_scale;
    bool bn_training;
    float smoothing;
    bool operator==(const Kind& o) const {
      return N == o.N && loss_scale == o.loss_scale && bn_training == o.bn_training &&
             smoothing == o.smoothing;
    }
  };
  struct Graph {
    Kind kind;
    cudaGraphExec_t exec;
    std::vector<SentGradient> sent;  // what backward handed to the sink, in order
  };
  // Kinds of step fewer than this many are kept; past it all are dropped (a run has
  // one or two: the batch, and a loss scale that changes now and then).
  static constexpr std::size_t kMaxGraphs = 8;

  StepOutputs* out = nullptr;  // device
  std::vector<Graph> graphs;
  std::vector<Kind> warmed;  // run eagerly since the memory last changed
  uint64_t generation = 0;
  GraphStats stats;

  StepState() {
    checkCuda(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(StepOutputs)),
              "deviceTrainStep: allocating the step's outputs");
    // On the layers' stream, which does not wait for the legacy one cudaMemset uses.
    checkCuda(cudaMemsetAsync(out, 0, sizeof(StepOutputs), nn::cuda::stream()),
              "deviceTrainStep: clearing the step's outputs");
    generation = nn::cuda::memory_generation();
  }
  ~StepState() {  // from a destructor: no throw
    dropGraphs();
    cudaFree(out);
  }
  StepState(const StepState&) = delete;
  StepState& operator=(const StepState&) = delete;

  void dropGraphs() {
    for (Graph& g : graphs) cudaGraphExecDestroy(g.exec);
    graphs.clear();
  }
  Graph* find(const Kind& k) {
    for (Graph& g : graphs)
      if (g.kind == k) return &g;
    return nullptr;
  }
  bool wasWarmed(const Kind& k) const {
    return std::find(warmed.begin(), warmed.end(), k) != warmed.end();
  }
};

namespace {

// The step's work on the layers' stream, given the batch and labels already there.
void enqueueStep(Model& m, StepOutputs* out, const int32_t* labels, int N, float smoothing) {
  Model& d = m.device->mirror;
  cudaStream_t stream = nn::cuda::stream();
  d.bn_training = m.bn_training;
  forward(d, N);
  {
    // Under the profile (never in a graph), timed as the layer table's loss would be.
    std::optional<nn::cuda::ProfileScope> timed;
    if (m.device->profiled) timed.emplace("softmax cross-entropy");
    checkCuda(cudaMemsetAsync(&out->bad_labels, 0, 2 * sizeof(int32_t), stream), "deviceTrainStep");
    nn::cuda::softmax_xent_async(d.logits, labels, d.dlogits, N, d.fc.out, smoothing, &out->loss,
                                 &out->bad_labels);
    checkCuda(cudaMemcpyAsync(&out->loss_average, &out->loss, sizeof(float),
                              cudaMemcpyDeviceToDevice, stream),
              "deviceTrainStep");
    if (m.loss_scale != 1.0f) nn::cuda::scale(d.dlogits, std::size_t(N) * d.fc.out, m.loss_scale);
  }
  {
    std::optional<nn::cuda::ProfileScope> timed;
    if (m.device->profiled) timed.emplace("top-k");
    nn::cuda::topk_correct_async(d.logits, labels, N, d.fc.out, out->hits, &out->bad_again);
  }
  backward(d, N);
}

// Ends a capture that an exception interrupted, so the stream works again.
void abandonCapture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial) cudaGraphDestroy(partial);
  cudaGetLastError();
}

cudaGraphExec_t capture(Model& m, StepState& s, const int32_t* labels, int N, float smoothing,
                        std::vector<SentGradient>& sent) {
  DeviceModel& dm = *m.device;
  cudaStream_t stream = nn::cuda::stream();
  const std::string what =
      "--cuda-graphs: capturing the training step (batch " + std::to_string(N) + ")";
  // Thread-local: the runtime's and the loader's threads go on using the GPU meanwhile.
  checkCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), what);
  try {
    dm.recording = &sent;
    if (dm.break_next_capture) {
      dm.break_next_capture = false;
      checkCuda(cudaStreamSynchronize(stream), "waiting for the stream");
    }
    enqueueStep(m, s.out, labels, N, smoothing);
    dm.recording = nullptr;
  } catch (const std::exception& e) {
    dm.recording = nullptr;
    abandonCapture(stream);
    throw Error(what + " failed: " + e.what());
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
  if (graph) cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();  // so that no later launch check reports it as its own
    checkCuda(made, what + (ended == cudaSuccess ? ": instantiating the graph" : ""));
  }
  return exec;
}

}  // namespace

namespace {

// The running statistics the forward pass moved, down to the host model (read after
// deviceStepResult, which waits for them).
void downloadBnStatistics(Model& m) {
  std::optional<nn::cuda::ProfileScope> timed;
  if (m.device->profiled) timed.emplace("copies from the GPU");
  checkCuda(cudaMemcpyAsync(m.buffers.base, m.device->mirror.buffers.base,
                            m.buffers.capacity * sizeof(float), cudaMemcpyDeviceToHost,
                            nn::cuda::stream()),
            "deviceTrainStep: copying the BN statistics back");
}

// Launches a step's graph; a failure is cleared from the thread's last error (so that
// no later launch check reports it as its own) and returned.
cudaError_t launchGraph(cudaGraphExec_t exec, cudaStream_t stream) {
  const cudaError_t e = cudaGraphLaunch(exec, stream);
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

// The step layer by layer; the batch and labels are on their way.
void queuedStep(Model& m, StepState& s, const int32_t* labels, int N, float smoothing) {
  enqueueStep(m, s.out, labels, N, smoothing);  // gradients to the sink as queued
  downloadBnStatistics(m);
}

// The graphed step; the batch and labels are on their way.
void graphedStep(Model& m, StepState& s, const int32_t* labels, int N, float smoothing,
                 bool where_it_works) {
  DeviceModel& dm = *m.device;
  // Memory the graphs read was freed: capture them again, after an eager run (which
  // makes again what the layers make on first use: 16-bit weight copies, say).
  if (nn::cuda::memory_generation() != s.generation) {
    s.dropGraphs();
    s.warmed.clear();
    s.generation = nn::cuda::memory_generation();
  }
  const StepState::Kind kind{N, m.loss_scale, m.bn_training, smoothing};
  cudaStream_t stream = nn::cuda::stream();
  std::vector<SentGradient> recorded;
  const std::vector<SentGradient>* sent = &recorded;
  // Where graphs are the default, a capture or launch that fails leaves the step not
  // run (a capture only records): it runs now, and the rest, layer by layer. Asked
  // for, the failure stops the run.
  const auto fail = [&](const std::string& why) {
    s.dropGraphs();
    if (!where_it_works) throw Error(why);
    s.stats.failure = why;
    std::fprintf(stderr, "accord-resnet: %s; every step from here on runs layer by layer\n",
                 why.c_str());
    queuedStep(m, s, labels, N, smoothing);
  };
  const auto launchFailure = [](cudaError_t e) {
    return std::string("--cuda-graphs: launching the training step: CUDA failed: ") +
           cudaGetErrorString(e);
  };
  if (StepState::Graph* g = s.find(kind)) {
    if (const cudaError_t e = launchGraph(g->exec, stream); e != cudaSuccess)
      return fail(launchFailure(e));
    sent = &g->sent;
    ++s.stats.replayed;
  } else if (!s.wasWarmed(kind)) {
    dm.recording = &recorded;
    try {
      enqueueStep(m, s.out, labels, N, smoothing);
    } catch (...) {
      dm.recording = nullptr;
      throw;
    }
    dm.recording = nullptr;
    s.warmed.push_back(kind);
    ++s.stats.eager;
    // What this run allocated is what the capture needs; older graphs may read
    // buffers it replaced.
    if (nn::cuda::memory_generation() != s.generation) {
      s.dropGraphs();
      s.generation = nn::cuda::memory_generation();
    }
  } else {
    if (s.graphs.size() >= StepState::kMaxGraphs) s.dropGraphs();
    cudaGraphExec_t exec = nullptr;
    try {
      exec = capture(m, s, labels, N, smoothing, recorded);
    } catch (const std::exception& e) {
      if (!where_it_works) throw;
      return fail(e.what());
    }
    s.graphs.push_back({kind, exec, std::move(recorded)});
    if (const cudaError_t e = launchGraph(exec, stream); e != cudaSuccess)
      return fail(launchFailure(e));
    sent = &s.graphs.back().sent;
    ++s.stats.captured;
    ++s.stats.replayed;
  }
  downloadBnStatistics(m);
  if (m.sink)
    for (const SentGradient& g : *sent) m.sink(g.name, g.g, g.n);
}

}  // namespace

void deviceTrainStep(Model& m, const int32_t* labels, int N, float smoothing, StepLaunch launch) {
  if (!m.device || !m.device->resident)
    throw Error("deviceTrainStep: the model is not trained on a GPU (trainOnDevice)");
  DeviceModel& dm = *m.device;
  if (launch == StepLaunch::Graph && dm.profiled)
    throw InvalidArgument(
        "--cuda-graphs and --gpu-profile cannot go together: the profile times each layer "
        "as it is launched, and a graph launches them all at once");
  if (!dm.step) dm.step = std::make_shared<StepState>();
  StepState& s = *dm.step;
  stageInputs(m, N);
  const int32_t* device_labels = uploadLabels(m, labels, N);
  const bool where_it_works = launch == StepLaunch::GraphWhereItWorks;
  if (launch == StepLaunch::LayerByLayer || dm.profiled || !s.stats.failure.empty())
    return queuedStep(m, s, device_labels, N, smoothing);
  graphedStep(m, s, device_labels, N, smoothing, where_it_works);
}

float* deviceStepLoss(Model& m) {
  if (!m.device || !m.device->step) throw Error("deviceStepLoss: no deviceTrainStep yet");
  return &m.device->step->out->loss_average;
}

DeviceStepResult deviceStepResult(Model& m) {
  if (!m.device || !m.device->step) throw Error("deviceStepResult: no deviceTrainStep yet");
  StepOutputs host{};
  cudaStream_t stream = nn::cuda::stream();
  const std::string what = "deviceStepResult: reading the step's loss and accuracy";
  checkCuda(
      cudaMemcpyAsync(&host, m.device->step->out, sizeof(host), cudaMemcpyDeviceToHost, stream),
      what);
  checkCuda(cudaStreamSynchronize(stream), what);
  if (host.bad_labels > 0)
    throw InvalidArgument("the batch has " + std::to_string(host.bad_labels) +
                          " label(s) outside [0, " + std::to_string(m.fc.out) + ")");
  DeviceStepResult r;
  r.loss = host.loss;
  r.loss_average = host.loss_average;
  r.hits.top1 = host.hits[0];
  r.hits.top5 = host.hits[1];
  return r;
}

GraphStats deviceGraphStats(const Model& m) {
  if (!m.device || !m.device->step) return {};
  return m.device->step->stats;
}

}  // namespace accord::resnet

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
// in the order backward produced them (recorded during the capture). With segments
// (graphSegments, on more than one rank) the capture ends a graph after every so many
// bytes of gradients and begins the next: each graph's gradients go to the sink right
// after its launch, so their allreduces wait only for the graphs up to theirs, and
// overlap the rest of backward; in one graph they wait for all of it. Where graphs are
// the default rather than
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
  // One graph of a step, and what backward handed to the sink during its capture, in
  // order.
  struct Segment {
    cudaGraphExec_t exec;
    std::vector<SentGradient> sent;
  };
  struct Graph {
    Kind kind;
    std::vector<Segment> segments;  // launched in order: one unless graphSegments
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
    for (Graph& g : graphs) destroy(g.segments);
    graphs.clear();
  }
  static void destroy(std::vector<Segment>& segments) {
    for (Segment& s : segments) cudaGraphExecDestroy(s.exec);
    segments.clear();
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

// Ends the capture under way on `stream` as one more segment, with the gradients in
// `sent` (moved there). A capture of nothing, after the last gradient, is dropped.
void endSegment(cudaStream_t stream, std::vector<SentGradient>& sent,
                std::vector<StepState::Segment>& segments) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  std::size_t nodes = 0;
  if (ended == cudaSuccess && sent.empty() &&
      cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess && nodes == 0) {
    cudaGraphDestroy(graph);
    return;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
  if (graph) cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();  // so that no later launch check reports it as its own
    checkCuda(made, ended == cudaSuccess ? "instantiating the graph" : "ending the capture");
  }
  segments.push_back({exec, std::move(sent)});
  sent.clear();
}

// The step captured as graphs: one, or one per graph_segment_bytes of gradients.
std::vector<StepState::Segment> capture(Model& m, StepState& s, const int32_t* labels, int N,
                                        float smoothing) {
  DeviceModel& dm = *m.device;
  cudaStream_t stream = nn::cuda::stream();
  const std::string what =
      "--cuda-graphs: capturing the training step (batch " + std::to_string(N) + ")";
  std::vector<StepState::Segment> segments;
  std::vector<SentGradient> sent;
  std::size_t bytes = 0;  // of the gradients in the graph under capture
  bool capturing = false;
  // Thread-local: the runtime's and the loader's threads go on using the GPU meanwhile.
  const auto begin = [&] {
    checkCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              "beginning a capture");
    capturing = true;
  };
  try {
    begin();
    dm.recording = &sent;
    if (dm.graph_segment_bytes > 0)
      dm.recorded = [&](std::size_t n) {
        bytes += n * sizeof(float);
        if (bytes < dm.graph_segment_bytes) return;
        bytes = 0;
        capturing = false;
        endSegment(stream, sent, segments);
        begin();
      };
    if (dm.break_next_capture) {
      dm.break_next_capture = false;
      checkCuda(cudaStreamSynchronize(stream), "waiting for the stream");
    }
    enqueueStep(m, s.out, labels, N, smoothing);
    dm.recording = nullptr;
    dm.recorded = nullptr;
    capturing = false;
    endSegment(stream, sent, segments);
  } catch (const std::exception& e) {
    dm.recording = nullptr;
    dm.recorded = nullptr;
    if (capturing) abandonCapture(stream);
    StepState::destroy(segments);
    throw Error(what + " failed: " + e.what());
  }
  return segments;
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

// Launches a step's graphs in order, each one's gradients to the sink right after its
// launch, the BN statistics down after the last. A first launch that fails is returned
// with nothing launched or sent; a later one, after gradients went, is thrown.
cudaError_t replay(Model& m, const std::vector<StepState::Segment>& segments) {
  cudaStream_t stream = nn::cuda::stream();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (const cudaError_t e = launchGraph(segments[i].exec, stream); e != cudaSuccess) {
      if (i == 0) return e;
      throw Error("--cuda-graphs: launching graph " + std::to_string(i + 1) + " of " +
                  std::to_string(segments.size()) +
                  " of the training step: CUDA failed: " + cudaGetErrorString(e));
    }
    if (i + 1 == segments.size()) downloadBnStatistics(m);
    if (m.sink)
      for (const SentGradient& g : segments[i].sent) m.sink(g.name, g.g, g.n);
  }
  return cudaSuccess;
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
    if (const cudaError_t e = replay(m, g->segments); e != cudaSuccess)
      return fail(launchFailure(e));
    ++s.stats.replayed;
  } else if (!s.wasWarmed(kind)) {
    // Layer by layer, its gradients sent after it as a graph's would be.
    std::vector<SentGradient> recorded;
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
    downloadBnStatistics(m);
    if (m.sink)
      for (const SentGradient& g : recorded) m.sink(g.name, g.g, g.n);
  } else {
    if (s.graphs.size() >= StepState::kMaxGraphs) s.dropGraphs();
    std::vector<StepState::Segment> segments;
    try {
      segments = capture(m, s, labels, N, smoothing);
    } catch (const std::exception& e) {
      if (!where_it_works) throw;
      return fail(e.what());
    }
    s.stats.segments = int(segments.size());
    s.graphs.push_back({kind, std::move(segments)});
    if (const cudaError_t e = replay(m, s.graphs.back().segments); e != cudaSuccess)
      return fail(launchFailure(e));
    ++s.stats.captured;
    ++s.stats.replayed;
  }
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

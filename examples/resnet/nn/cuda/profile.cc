// GPU time by layer kind (see layers_cuda.h: profiledLayers, ProfileScope).
//
// Each timed call records a pair of timing events on the layers' stream; the pairs are
// read (cudaEventElapsedTime) once they are many or at report time, so timing adds no
// wait for the GPU to the pass it measures. Events are reused.
#include "nn/cuda/backend_cuda.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace accord::nn::cuda {

namespace {

constexpr std::size_t kPendingLimit = 4096;  // pairs held before they are read

struct Kind {
  std::string name;
  double ms = 0.0;       // on the GPU
  double host_ms = 0.0;  // in the calls, on the host
  std::int64_t calls = 0;
};

struct Profile {
  std::mutex mu;
  std::vector<Kind> kinds;
  std::vector<std::pair<int, std::pair<cudaEvent_t, cudaEvent_t>>> pending;
  std::vector<cudaEvent_t> spare;

  int kindOf(const char* name) {
    for (std::size_t i = 0; i < kinds.size(); ++i)
      if (kinds[i].name == name) return static_cast<int>(i);
    kinds.push_back({name});
    return static_cast<int>(kinds.size()) - 1;
  }
  cudaEvent_t event() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    ACCORD_NN_CUDA_CHECK("nn::cuda profile: creating an event", cudaEventCreate(&e));
    return e;
  }
  // Reads every pending pair (waits for the last one), folds it into its kind.
  void fold() {
    if (pending.empty()) return;
    ACCORD_NN_CUDA_CHECK("nn::cuda profile: waiting for the GPU",
                         cudaEventSynchronize(pending.back().second.second));
    for (auto& [kind, events] : pending) {
      float ms = 0.0f;
      ACCORD_NN_CUDA_CHECK("nn::cuda profile: reading an event",
                           cudaEventElapsedTime(&ms, events.first, events.second));
      kinds[kind].ms += ms;
      ++kinds[kind].calls;
      spare.push_back(events.first);
      spare.push_back(events.second);
    }
    pending.clear();
  }
};

Profile& profile() {
  static auto* p = new Profile;  // never destroyed: its events may outlive the runtime
  return *p;
}

// A call of F timed as kind Name.
template <const char* Name, auto F>
struct Timed;
template <const char* Name, class R, class... A, R (*F)(A...)>
struct Timed<Name, F> {
  static R call(A... a) {
    ProfileScope scope(Name);
    return F(a...);
  }
};

constexpr char kConvForward[] = "conv forward";
constexpr char kConvBackward[] = "conv backward (data + filter)";
constexpr char kBnForward[] = "batch norm forward";
constexpr char kBnBackward[] = "batch norm backward";
constexpr char kReluForward[] = "relu forward";
constexpr char kReluBackward[] = "relu backward";
constexpr char kMaxPoolForward[] = "max pool forward";
constexpr char kMaxPoolBackward[] = "max pool backward";
constexpr char kAvgPoolForward[] = "average pool forward";
constexpr char kAvgPoolBackward[] = "average pool backward";
constexpr char kLinearForward[] = "linear forward";
constexpr char kLinearBackward[] = "linear backward";
constexpr char kAdd[] = "residual add";
constexpr char kAccumulate[] = "gradient accumulate";
constexpr char kAddRelu[] = "residual add + relu";
constexpr char kAccumulateRelu[] = "gradient accumulate + relu backward";
constexpr char kLoss[] = "softmax cross-entropy";
constexpr char kTopK[] = "top-k";
constexpr char kConvBnForward[] = "conv + batch norm forward (--cudnn-fusion)";

// Without the fusion, the convolution and the batch norm timed apart as usual.
void convBnForward(Conv2d& c, BatchNorm2d& bn, const float* x, float* a, float* b, int N, int H,
                   int W) {
  if (detail::backend().conv_bn_fusion == Fusion::Off) {
    Timed<kConvForward, &conv2d_forward>::call(c, x, a, N, H, W);
    Timed<kBnForward, &batchnorm2d_forward>::call(bn, a, b, N, c.out_h(H), c.out_w(W), true);
    return;
  }
  ProfileScope scope(kConvBnForward);
  conv_bn_forward(c, bn, x, a, b, N, H, W);
}

}  // namespace

ProfileScope::ProfileScope(const char* kind) : kind_(-1) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  kind_ = p.kindOf(kind);
  start_ = p.event();
  ACCORD_NN_CUDA_CHECK("nn::cuda profile: recording", cudaEventRecord(start_, stream()));
  host_start_ = std::chrono::steady_clock::now();  // the call itself, not the above
}

ProfileScope::~ProfileScope() {
  const auto host_end = std::chrono::steady_clock::now();
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.kinds[static_cast<std::size_t>(kind_)].host_ms +=
      std::chrono::duration<double, std::milli>(host_end - host_start_).count();
  cudaEvent_t end = p.event();
  // From a destructor: a failure to record loses this sample, nothing more.
  if (cudaEventRecord(end, stream()) != cudaSuccess) {
    cudaGetLastError();
    p.spare.push_back(start_);
    p.spare.push_back(end);
    return;
  }
  p.pending.push_back({kind_, {start_, end}});
  if (p.pending.size() >= kPendingLimit) {
    try {
      p.fold();
    } catch (...) {  // reported by the next layer call that fails the same way
      p.pending.clear();
    }
  }
}

const LayerOps& profiledLayers() {
  using L = LayerOps;
  static const L ops{"cuda (profiled)",
                     &Timed<kConvForward, &conv2d_forward>::call,
                     &Timed<kConvBackward, &conv2d_backward>::call,
                     &Timed<kBnForward, &batchnorm2d_forward>::call,
                     &Timed<kBnBackward, &batchnorm2d_backward>::call,
                     &Timed<kReluForward, &relu_forward>::call,
                     &Timed<kReluBackward, &relu_backward>::call,
                     &Timed<kMaxPoolForward, &maxpool2d_forward>::call,
                     &Timed<kMaxPoolBackward, &maxpool2d_backward>::call,
                     &Timed<kAvgPoolForward, &avgpool_forward>::call,
                     &Timed<kAvgPoolBackward, &avgpool_backward>::call,
                     &Timed<kLinearForward, &linear_forward>::call,
                     &Timed<kLinearBackward, &linear_backward>::call,
                     &Timed<kAdd, &add_forward>::call,
                     &Timed<kAccumulate, &accumulate>::call,
                     &Timed<kAddRelu, &add_relu_forward>::call,
                     &Timed<kAccumulateRelu, &accumulate_relu_backward>::call,
                     &Timed<kLoss, &softmax_xent>::call,
                     &Timed<kTopK, &topk_correct>::call,
                     &convBnForward};
  return ops;
}

std::string profileReport(int steps) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.fold();
  double total = 0.0, host_total = 0.0;
  for (const Kind& k : p.kinds) {
    total += k.ms;
    host_total += k.host_ms;
  }
  std::vector<Kind> sorted = p.kinds;
  std::sort(sorted.begin(), sorted.end(), [](const Kind& a, const Kind& b) { return a.ms > b.ms; });
  const double per = steps > 0 ? 1.0 / steps : 1.0;
  char line[160];
  std::snprintf(line, sizeof line,
                "GPU time by kind (ms%s, share of the timed total; evaluation passes "
                "included), and the host's time in those calls, queueing the work\n",
                steps > 0 ? " per training step" : "");
  std::string out = line;
  std::snprintf(line, sizeof line, "  %-36s %10s  %6s  %10s  %8s\n", "kind", "GPU ms", "share",
                "host ms", "calls");
  out += line;
  for (const Kind& k : sorted) {
    std::snprintf(line, sizeof line, "  %-36s %10.3f  %5.1f%%  %10.3f  %8lld\n", k.name.c_str(),
                  k.ms * per, total > 0 ? 100.0 * k.ms / total : 0.0, k.host_ms * per,
                  static_cast<long long>(k.calls));
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-36s %10.3f  %6s  %10.3f\n", "timed total", total * per, "",
                host_total * per);
  out += line;
  return out;
}

}  // namespace accord::nn::cuda

// GPU time by layer kind (see layers_cuda.h: profiledLayers, ProfileScope).
//
// Each timed call records a pair of timing events on the layers' stream; the pairs are
// read (cudaEventElapsedTime) once they are many or at report time, so timing adds no
// wait for the GPU to the pass it measures. Events are reused. Convolutions are also
// timed by shape and direction, with the rate their floating-point work ran at: which
// shapes run far below the GPU's peak, where a step's time goes beyond memory traffic.
// The passes over activations (batch norm, ReLU, residual adds) are given the least
// traffic each call must move, each tensor it reads or writes once in the activations'
// type, and the report shows the bandwidth that achieved against the GPU's: how far
// such a pass is from the memory-bound best it could do on its own.
#include "nn/cuda/backend_cuda.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <type_traits>
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
  double flop = 0.0;   // per call (shapes only)
  double bytes = 0.0;  // least traffic of the calls timed (passes over activations)
};

struct Pending {
  int kind, shape;  // shape -1: none
  double bytes;
  cudaEvent_t start, end;
};

int indexOf(std::vector<Kind>& list, const std::string& name, double flop = 0.0) {
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].name == name) return static_cast<int>(i);
  list.push_back({name});
  list.back().flop = flop;
  return static_cast<int>(list.size()) - 1;
}

struct Profile {
  std::mutex mu;
  std::vector<Kind> kinds, shapes;
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> spare;
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
                         cudaEventSynchronize(pending.back().end));
    for (const Pending& e : pending) {
      float ms = 0.0f;
      ACCORD_NN_CUDA_CHECK("nn::cuda profile: reading an event",
                           cudaEventElapsedTime(&ms, e.start, e.end));
      kinds[e.kind].ms += ms;
      kinds[e.kind].bytes += e.bytes;
      ++kinds[e.kind].calls;
      if (e.shape >= 0) {
        shapes[e.shape].ms += ms;
        ++shapes[e.shape].calls;
      }
      spare.push_back(e.start);
      spare.push_back(e.end);
    }
    pending.clear();
  }
};

Profile& profile() {
  static auto* p = new Profile;  // never destroyed: its events may outlive the runtime
  return *p;
}

// A call of F timed as kind Name; Bytes(args), where given, is its least traffic.
template <const char* Name, auto F, auto Bytes = nullptr>
struct Timed;
template <const char* Name, class R, class... A, R (*F)(A...), auto Bytes>
struct Timed<Name, F, Bytes> {
  static R call(A... a) {
    ProfileScope scope(Name);
    if constexpr (!std::is_same_v<decltype(Bytes), std::nullptr_t>) scope.traffic(Bytes(a...));
    return F(a...);
  }
};

// Least traffic: `tensors` activations of n elements each, read or written once.
double activations(int tensors, size_t n) {
  return static_cast<double>(tensors) * static_cast<double>(detail::activationBytes(n));
}
size_t elements(const BatchNorm2d& bn, int N, int H, int W) {
  return static_cast<size_t>(N) * bn.C * H * W;
}
double bnForwardBytes(BatchNorm2d& bn, const float*, float*, int N, int H, int W, bool) {
  return activations(2, elements(bn, N, H, W));  // x in, y out
}
double bnBackwardBytes(BatchNorm2d& bn, const float*, const float*, float*, int N, int H, int W,
                       bool) {
  return activations(3, elements(bn, N, H, W));  // x and dy in, dx out
}
double bnAddReluBytes(BatchNorm2d& bn, const float*, BatchNorm2d*, const float*, float*, float*,
                      int N, int H, int W) {
  return activations(3, elements(bn, N, H, W));  // a and the shortcut in, y out
}
double twoTensors(const float*, float*, size_t n) { return activations(2, n); }
double threeTensors(const float*, const float*, float*, size_t n) { return activations(3, n); }
double accumulateBytes(float*, const float*, size_t n) { return activations(3, n); }
double accumulateReluBytes(float*, const float*, const float*, size_t n) {
  return activations(4, n);
}

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
constexpr char kBnAddRelu[] = "batch norm + residual add + relu (--fuse-residual)";

// "64x256x56x56 -> 128, 1x1/1": the input (N, C, H, W), the output channels, the filter
// and its stride.
std::string convShape(const Conv2d& c, int N, int H, int W) {
  char s[112];
  std::snprintf(s, sizeof s, "%dx%dx%dx%d -> %d, %dx%d/%d%s", N, c.C_in, H, W, c.C_out, c.K, c.K,
                c.stride, c.x_channels > c.C_in ? " (input padded)" : "");
  return s;
}

double convFlop(const Conv2d& c, int N, int H, int W) {
  return 2.0 * N * c.C_out * c.C_in * c.out_h(H) * c.out_w(W) * c.K * c.K;
}

void convForward(Conv2d& c, const float* x, float* y, int N, int H, int W) {
  ProfileScope scope(kConvForward, "forward  " + convShape(c, N, H, W), convFlop(c, N, H, W));
  cuda::conv2d_forward(c, x, y, N, H, W);
}

// Backward's filter gradient costs as much as forward, and so does its data gradient
// where there is one (not for the stem).
void convBackward(Conv2d& c, const float* x, const float* dy, float* dx, int N, int H, int W) {
  ProfileScope scope(kConvBackward,
                     (dx ? "backward " : "backward (filter) ") + convShape(c, N, H, W),
                     (dx ? 2.0 : 1.0) * convFlop(c, N, H, W));
  cuda::conv2d_backward(c, x, dy, dx, N, H, W);
}

// Without the fusion, the convolution and the batch norm timed apart as usual.
void convBnForward(Conv2d& c, BatchNorm2d& bn, const float* x, float* a, float* b, int N, int H,
                   int W) {
  if (detail::backend().conv_bn_fusion == Fusion::Off) {
    convForward(c, x, a, N, H, W);
    Timed<kBnForward, &batchnorm2d_forward, &bnForwardBytes>::call(bn, a, b, N, c.out_h(H),
                                                                    c.out_w(W), true);
    return;
  }
  ProfileScope scope(kConvBnForward);
  conv_bn_forward(c, bn, x, a, b, N, H, W);
}

// The current GPU's memory bandwidth (bytes/s) from its memory clock and bus width,
// both ways per clock; 0 where the runtime does not say.
double memoryBandwidth() {
  int device = 0, khz = 0, bits = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    cudaGetLastError();
    return 0.0;
  }
  return 2.0 * khz * 1e3 * bits / 8.0;
}

}  // namespace

ProfileScope::ProfileScope(const char* kind, const std::string& shape, double flop) : kind_(-1) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  kind_ = indexOf(p.kinds, kind);
  if (!shape.empty()) shape_ = indexOf(p.shapes, shape, flop);
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
  p.pending.push_back({kind_, shape_, bytes_, start_, end});
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
                     &convForward,
                     &convBackward,
                     &Timed<kBnForward, &batchnorm2d_forward, &bnForwardBytes>::call,
                     &Timed<kBnBackward, &batchnorm2d_backward, &bnBackwardBytes>::call,
                     &Timed<kReluForward, &relu_forward, &twoTensors>::call,
                     &Timed<kReluBackward, &relu_backward, &threeTensors>::call,
                     &Timed<kMaxPoolForward, &maxpool2d_forward>::call,
                     &Timed<kMaxPoolBackward, &maxpool2d_backward>::call,
                     &Timed<kAvgPoolForward, &avgpool_forward>::call,
                     &Timed<kAvgPoolBackward, &avgpool_backward>::call,
                     &Timed<kLinearForward, &linear_forward>::call,
                     &Timed<kLinearBackward, &linear_backward>::call,
                     &Timed<kAdd, &add_forward, &threeTensors>::call,
                     &Timed<kAccumulate, &accumulate, &accumulateBytes>::call,
                     &Timed<kAddRelu, &add_relu_forward, &threeTensors>::call,
                     &Timed<kAccumulateRelu, &accumulate_relu_backward, &accumulateReluBytes>::call,
                     &Timed<kLoss, &softmax_xent>::call,
                     &Timed<kTopK, &topk_correct>::call,
                     &convBnForward,
                     &Timed<kBnAddRelu, &bn_add_relu_forward, &bnAddReluBytes>::call};
  return ops;
}

void profileReset() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.fold();
  // Zeroed, not dropped: a scope under way holds its kind's and shape's places.
  for (auto* list : {&p.kinds, &p.shapes})
    for (Kind& k : *list) k.ms = k.host_ms = k.bytes = 0.0, k.calls = 0;
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
  char line[400];
  std::snprintf(line, sizeof line,
                "GPU time by kind (ms%s, share of the timed total; evaluation passes "
                "included), and the host's time in those calls, queueing the work;\n"
                "GB/s: for the passes over activations, their least traffic (each tensor "
                "read or written once) per GPU second, against the GPU's memory bandwidth\n",
                steps > 0 ? " per training step" : "");
  std::string out = line;
  const double peak = memoryBandwidth();  // bytes/s; 0 where unknown
  std::snprintf(line, sizeof line, "  %-36s %10s  %6s  %10s  %8s  %8s  %8s\n", "kind", "GPU ms",
                "share", "host ms", "calls", "GB/s", "of peak");
  out += line;
  for (const Kind& k : sorted) {
    // The achieved bandwidth of the passes over activations, at their least traffic.
    char rate[24] = "-", share[24] = "-";
    if (k.bytes > 0 && k.ms > 0) {
      const double bytes_per_s = k.bytes / (k.ms * 1e-3);
      std::snprintf(rate, sizeof rate, "%.0f", bytes_per_s / 1e9);
      if (peak > 0) std::snprintf(share, sizeof share, "%.0f%%", 100.0 * bytes_per_s / peak);
    }
    std::snprintf(line, sizeof line, "  %-36s %10.3f  %5.1f%%  %10.3f  %8lld  %8s  %8s\n",
                  k.name.c_str(), k.ms * per, total > 0 ? 100.0 * k.ms / total : 0.0,
                  k.host_ms * per, static_cast<long long>(k.calls), rate, share);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-36s %10.3f  %6s  %10.3f\n", "timed total", total * per, "",
                host_total * per);
  out += line;
  if (p.shapes.empty()) return out;
  // The convolutions by shape, slowest first: their GPU time and the rate of their
  // floating-point work (TFLOP/s), against the GPU's peak for its precision.
  sorted = p.shapes;
  std::sort(sorted.begin(), sorted.end(), [](const Kind& a, const Kind& b) { return a.ms > b.ms; });
  std::snprintf(line, sizeof line, "convolutions by shape (N x C x H x W -> K, filter/stride)\n");
  out += line;
  std::snprintf(line, sizeof line, "  %-46s %10s  %8s  %8s\n", "shape", "GPU ms", "TFLOP/s",
                "calls");
  out += line;
  for (const Kind& k : sorted) {
    std::snprintf(line, sizeof line, "  %-46s %10.3f  %8.1f  %8lld\n", k.name.c_str(), k.ms * per,
                  k.ms > 0 ? k.flop * static_cast<double>(k.calls) / (k.ms * 1e-3) / 1e12 : 0.0,
                  static_cast<long long>(k.calls));
    out += line;
  }
  return out;
}

}  // namespace accord::nn::cuda

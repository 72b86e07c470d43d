// accord-fusion-probe's measurements (see fusion_measure.h). Every time is the mean of
// --iters runs after one untimed, between events on the layers' stream; the values in
// the buffers are random, the same for every pattern of a precision.
#include "bench/fusion_measure.h"

#include "bench/fusion_bn_ex.h"

#include "nn/cuda/backend_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

namespace accord::resnet::probe {

namespace cuda = nn::cuda;
namespace detail = nn::cuda::detail;

namespace {

constexpr int kMaxChannels = 2048;
constexpr int64_t kMaxWorkspace = int64_t(4) << 30;  // plans asking for more are skipped

void cudaCheck(cudaError_t s, const char* what) {
  if (s != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(s));
}

bool isActivation(Slot s) {
  return s == Slot::X || s == Slot::Y || s == Slot::DY || s == Slot::DX || s == Slot::X2;
}
bool isFilter(Slot s) { return s == Slot::W || s == Slot::DW; }

std::string fmt(const char* f, double a) {
  char s[64];
  std::snprintf(s, sizeof s, f, a);
  return s;
}

}  // namespace

struct Probe::Buffers {
  void* slot[kSlots] = {};
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  float* bn = nullptr;  // gamma, beta, running mean, running var, save mean, save invstd,
                        // dgamma, dbeta: kMaxChannels floats each
  cudaEvent_t start = nullptr, stop = nullptr;
  std::string filled;  // the precision the activations were filled for

  ~Buffers() {
    for (void* p : slot) cudaFree(p);
    cudaFree(workspace);
    cudaFree(bn);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  float* at(Slot s) const { return static_cast<float*>(slot[int(s)]); }
  float* bnPart(int i) const { return bn + size_t(i) * kMaxChannels; }
  void* ensureWorkspace(int64_t bytes) {
    if (bytes <= workspace_bytes) return workspace;
    cudaCheck(cudaStreamSynchronize(cuda::stream()), "waiting before the workspace grows");
    cudaFree(workspace);
    workspace = nullptr;
    workspace_bytes = 0;
    cudaCheck(cudaMalloc(&workspace, size_t(bytes)), "allocating a cuDNN workspace");
    workspace_bytes = bytes;
    return workspace;
  }
};

Probe::Probe(const ProbeOptions& opt, const std::vector<int>& batches,
             const std::vector<ConvShape>& shapes)
    : opt_(opt), shapes_(shapes), b_(std::make_unique<Buffers>()) {
  const int N = *std::max_element(batches.begin(), batches.end());
  size_t act = size_t(N) * 256 * 56 * 56, filter = 0;  // the largest block end
  for (const ConvShape& s : shapes) {
    act = std::max({act, size_t(N) * s.C * s.H * s.H, size_t(N) * s.K * s.out() * s.out()});
    filter = std::max(filter, size_t(s.K) * s.C * s.R * s.R);
  }
  for (int i = 0; i < kSlots; ++i) {
    const Slot s = Slot(i);
    const size_t bytes = isActivation(s) ? 2 * act : isFilter(s) ? 4 * filter : 4 * kMaxChannels;
    cudaCheck(cudaMalloc(&b_->slot[i], bytes), "allocating the probe's buffers");
    cudaCheck(cudaMemset(b_->slot[i], 0, bytes), "zeroing the probe's buffers");
  }
  cudaCheck(cudaMalloc(reinterpret_cast<void**>(&b_->bn), 8 * kMaxChannels * sizeof(float)),
            "allocating batch-norm buffers");
  std::vector<float> bn(8 * kMaxChannels, 0.0f);
  for (int part : {0, 3, 5}) std::fill_n(bn.begin() + part * kMaxChannels, kMaxChannels, 1.0f);
  cudaCheck(cudaMemcpy(b_->bn, bn.data(), bn.size() * sizeof(float), cudaMemcpyHostToDevice),
            "filling batch-norm buffers");
  cudaCheck(cudaEventCreate(&b_->start), "creating events");
  cudaCheck(cudaEventCreate(&b_->stop), "creating events");
  act_elements_ = act;
  filter_elements_ = filter;
}

Probe::~Probe() = default;

std::string Probe::describe() const {
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, device);
  std::ostringstream os;
  os << "== accord-fusion-probe: " << p.name << " (sm_" << p.major << p.minor << ", "
     << p.multiProcessorCount << " SMs), cuDNN " << cudnnGetVersion() << "; up to "
     << opt_.engines << " plans per graph, " << opt_.iters << " timed runs each";
  return os.str();
}

std::vector<Unit> Probe::units(const std::string& dtype, int batch) const {
  // Stage by stage, the largest activations (where fusion saves the most) first.
  std::vector<Unit> out;
  for (int stage = 0; stage < 4; ++stage) {
    const int width = 64 << stage;
    for (const ConvShape& s : shapes_) {
      if (s.C != width || opt_.block_ends_only) continue;
      out.push_back({Unit::Forward, dtype, batch, s});
      out.push_back({Unit::Backward, dtype, batch, s});
    }
    out.push_back({Unit::Residual, dtype, batch, {0, 4 * width, 56 >> stage, 1, 1}});
  }
  return out;
}

// ---- filling -------------------------------------------------------------------------

namespace {

uint16_t to16(float v, bool bf16) {
  uint16_t bits;
  if (bf16) {
    const __nv_bfloat16 h = __float2bfloat16(v);
    std::memcpy(&bits, &h, 2);
  } else {
    const __half h = __float2half(v);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

// `bytes` at p: a random block of 16-bit values in [lo, hi], then doubled by copies.
void fillRandom(void* p, size_t bytes, bool bf16, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> block(std::min<size_t>(bytes / 2, size_t(1) << 20));
  for (uint16_t& v : block) v = to16(u(rng), bf16);
  cudaCheck(cudaMemcpy(p, block.data(), block.size() * 2, cudaMemcpyHostToDevice), "filling");
  for (size_t done = block.size() * 2; done < bytes;) {
    const size_t n = std::min(done, bytes - done);
    cudaCheck(cudaMemcpy(static_cast<char*>(p) + done, p, n, cudaMemcpyDeviceToDevice), "filling");
    done += n;
  }
}

// The per-channel inputs in `type`: scales and inverse deviations 1, biases and means 0.1.
void fillChannels(const Probe::Buffers& b, cudnnDataType_t type) {
  for (Slot s : {Slot::Scale, Slot::Bias, Slot::Mean, Slot::InvStd, Slot::Scale2, Slot::Bias2}) {
    const float v = s == Slot::Bias || s == Slot::Bias2 || s == Slot::Mean ? 0.1f : 1.0f;
    if (type == CUDNN_DATA_FLOAT) {
      const std::vector<float> host(kMaxChannels, v);
      cudaCheck(cudaMemcpy(b.at(s), host.data(), host.size() * 4, cudaMemcpyHostToDevice), "filling");
    } else {
      const std::vector<uint16_t> host(kMaxChannels, to16(v, type == CUDNN_DATA_BFLOAT16));
      cudaCheck(cudaMemcpy(b.at(s), host.data(), host.size() * 2, cudaMemcpyHostToDevice), "filling");
    }
  }
}

}  // namespace

void Probe::fill(const std::string& dtype) {
  if (b_->filled == dtype) return;
  const bool bf16 = dtype == "bf16";
  uint64_t seed = 1;
  for (Slot s : {Slot::X, Slot::Y, Slot::DY, Slot::DX, Slot::X2})
    fillRandom(b_->at(s), 2 * act_elements_, bf16, -1.0f, 1.0f, seed++);
  fillRandom(b_->at(Slot::W), 2 * filter_elements_, bf16, -0.05f, 0.05f, seed++);
  b_->filled = dtype;
}

template <class Work>
double Probe::timeMs(Work&& work) {
  cudaStream_t stream = cuda::stream();
  work();
  cudaCheck(cudaEventRecord(b_->start, stream), "timing");
  for (int i = 0; i < opt_.iters; ++i) work();
  cudaCheck(cudaEventRecord(b_->stop, stream), "timing");
  cudaCheck(cudaEventSynchronize(b_->stop), "timing");
  float ms = 0;
  cudaCheck(cudaEventElapsedTime(&ms, b_->start, b_->stop), "timing");
  return ms / opt_.iters;
}

struct Probe::Measured {
  double ms = -1;
  std::string engines = "-", note;
};

Probe::Measured Probe::bestOf(Pattern p, const ConvShape& s, int N, cudnnDataType_t io,
                              std::vector<cudnnDataType_t> channels) {
  Measured m;
  std::string why = "no per-channel type tried";
  cudnnHandle_t handle = detail::backend().cudnn;
  for (const cudnnDataType_t channel : channels) {
    const std::string per = channel == CUDNN_DATA_FLOAT ? "float" : "16-bit";
    Built built;
    try {
      built = build(p, s, N, io, channel, handle);
    } catch (const graph::Refused& e) {
      why = per + " parameters: graph refused: " + e.what();
      continue;
    }
    const graph::Graph& g = *built.graph;
    const auto offered = [&g](cudnnBackendHeurMode_t mode) {
      try {
        return graph::heuristics(g, mode);
      } catch (const graph::Refused&) {
        return std::vector<std::unique_ptr<graph::Desc>>{};
      }
    };
    auto configs = offered(CUDNN_HEUR_MODE_A);
    const size_t from_a = configs.size();
    for (auto& c : offered(CUDNN_HEUR_MODE_FALLBACK)) configs.push_back(std::move(c));
    std::string every = "-";  // the scan is for the fused patterns only
    if (p == Pattern::SbrConvStats || p == Pattern::ConvStats || p == Pattern::DgradDreluDbn ||
        p == Pattern::SbrWgrad || p == Pattern::DualBnAddRelu) {
      try {
        every = std::to_string(graph::supportingEngines(g).size());
      } catch (const graph::Refused&) {
      }
    }
    m.engines = std::to_string(from_a) + "/" + std::to_string(configs.size() - from_a) + "/" + every;
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    for (const auto& [uid, slot] : built.bindings) {
      uids.push_back(uid);
      ptrs.push_back(b_->at(slot));
    }
    fillChannels(*b_, channel);
    std::set<int64_t> seen;
    int timed = 0;
    why = per + " parameters: " + (configs.empty() ? "no engine config offered" : "");
    for (auto& config : configs) {
      if (timed >= opt_.engines) break;
      const graph::EngineInfo info = graph::engineOf(*config);
      if (!seen.insert(info.index).second) continue;
      try {
        const auto built_at = std::chrono::steady_clock::now();
        const graph::Plan plan = graph::makePlan(g, std::move(config));
        const double build_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - built_at).count();
        if (plan.workspace > kMaxWorkspace) {
          why += " engine " + std::to_string(info.index) + " wants too much workspace;";
          continue;
        }
        void* ws = b_->ensureWorkspace(plan.workspace);
        const double ms = timeMs([&] { graph::execute(g, plan, uids, ptrs, ws); });
        ++timed;
        if (m.ms < 0 || ms < m.ms) {
          m.ms = ms;
          m.note = "engine " + std::to_string(info.index) + (info.runtime_compiled ? " (rt)" : "") +
                   ", " + per + " parameters" +
                   (build_s >= 0.1 ? ", plan built in " + fmt("%.1f s", build_s) : "");
        }
      } catch (const std::exception& e) {
        why += std::string(" engine ") + std::to_string(info.index) + ": " + e.what() + ";";
        cudaGetLastError();
      }
    }
    if (m.ms >= 0) return m;
  }
  m.note = "none: " + why;
  return m;
}

// ---- the units -----------------------------------------------------------------------

namespace {

// A training batch norm of C channels on the probe's batch-norm buffers.
nn::BatchNorm2d bnOf(const Probe::Buffers& b, int C, bool relu) {
  nn::BatchNorm2d bn;
  bn.C = C, bn.relu = relu, bn.momentum = 0.1f, bn.eps = 1e-5f;
  bn.gamma = b.bnPart(0), bn.beta = b.bnPart(1), bn.running_mean = b.bnPart(2);
  bn.running_var = b.bnPart(3), bn.save_mean = b.bnPart(4), bn.save_var = b.bnPart(5);
  bn.dgamma = b.bnPart(6), bn.dbeta = b.bnPart(7);
  return bn;
}

detail::BnAffine affineOf(const Probe::Buffers& b) {
  return {b.bnPart(0), b.bnPart(1), b.bnPart(4), nullptr, b.bnPart(5), 1e-5f};
}

double sum(double a, double b) { return a < 0 || b < 0 ? -1 : a + b; }

}  // namespace

std::vector<Row> Probe::run(const Unit& u) {
  cuda::set_math(u.dtype == "bf16" ? cuda::Math::Bf16 : cuda::Math::Fp16);
  fill(u.dtype);
  const cudnnDataType_t io = u.dtype == "bf16" ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  const ConvShape& s = u.shape;
  const int N = u.batch;
  Buffers& b = *b_;
  std::vector<Row> rows;
  const auto add = [&](const std::string& shape, const std::string& pattern, const Measured& m,
                       double today, const std::string& extra = "") {
    Row r;
    r.dtype = u.dtype, r.batch = N, r.shape = shape, r.pattern = pattern, r.engines = m.engines;
    r.fused = m.ms, r.unfused = today;
    r.note = m.note + (extra.empty() ? "" : (m.note.empty() ? "" : "; ") + extra);
    rows.push_back(r);
  };
  const auto ours = [](double ms, const std::string& note) {
    Measured m;
    m.ms = ms, m.note = note;
    return m;
  };
  try {
    if (u.kind == Unit::Residual) {
      const int C = s.K;
      const size_t HW = size_t(s.H) * s.H, n = size_t(N) * C * HW;
      const std::string shape = std::to_string(C) + " @" + std::to_string(s.H);
      const detail::BnAffine f = affineOf(b);
      float *x = b.at(Slot::X), *x2 = b.at(Slot::X2), *y = b.at(Slot::Y), *t = b.at(Slot::DX);
      const double three = timeMs([&] {
        detail::launchBnApply(x, y, f, false, N, C, HW);
        detail::launchBnApply(x2, t, f, false, N, C, HW);
        detail::launchAddRelu(y, t, y, n);
      });
      const double two = timeMs([&] {
        detail::launchBnApply(x, y, f, false, N, C, HW);
        detail::launchAddRelu(y, x2, y, n);
      });
      const double dual = timeMs([&] { detail::launchBnAddRelu(x, f, x2, &f, y, N, C, HW); });
      const double single = timeMs([&] { detail::launchBnAddRelu(x, f, x2, nullptr, y, N, C, HW); });
      const double stats = timeMs([&] {
        detail::launchBnStatistics(x, N, C, HW, 0.1f, 1e-5f, b.bnPart(4), b.bnPart(5), b.bnPart(2),
                                   b.bnPart(3));
      });
      add(shape, "dual-bn-add-relu (cuDNN)", bestOf(Pattern::DualBnAddRelu, s, N, io, {fp32, io}),
          three);
      add(shape, "dual-bn-add-relu (ours)", ours(dual, "--fuse-residual, shortcut with BN"), three);
      add(shape, "bn-add-relu (ours)", ours(single, "--fuse-residual, identity shortcut"), two);
      add(shape, "bn statistics (ours)", ours(stats, "one read; each fused BN pays it"), -1);
      // With --fuse-residual these two batch norms' backward runs our kernels, not the
      // cuDNN Ex call their forward made possible.
      nn::BatchNorm2d bn = bnOf(b, C, false);
      cuda::batchnorm2d_forward(bn, x, x2, N, s.H, s.H, true);
      const double ex = timeMs([&] { cuda::batchnorm2d_backward(bn, x, t, y, N, s.H, s.H, true); });
      const std::string path = cuda::batchnorm2d_backward_path(bn);
      const double own = timeMs([&] {
        detail::launchBnBackwardTraining(x, t, y, bn.dgamma, bn.dbeta, affineOf(b), false, N, C, HW);
      });
      add(shape, "bn backward (ours)", ours(own, "--fuse-residual's; today: cuDNN's " + path), ex);
      // cuDNN's Ex backward from the statistics our pass summed (as --fuse-residual's
      // forward leaves them), against ours from the same: usable where it agrees.
      detail::launchBnStatistics(x, N, C, HW, 0.1f, 1e-5f, bn.save_mean, bn.save_var,
                                 bn.running_mean, bn.running_var);
      detail::launchBnBackwardTraining(x, t, y, bn.dgamma, bn.dbeta, affineOf(b), false, N, C, HW);
      Measured on_ours;
      on_ours.note = exBackwardOnOurStatistics(
          bn, x, t, x2, y, N, s.H, [&](const std::function<void()>& f) { return timeMs(f); },
          &on_ours.ms);
      add(shape, "bn backward (Ex, our stats)", on_ours, own, "today: ours");
      return rows;
    }
    const int Ho = s.out();
    const size_t HWo = size_t(Ho) * Ho, HW = size_t(s.H) * s.H;
    if (u.kind == Unit::Forward) {
      const Measured conv = bestOf(Pattern::ConvFwd, s, N, io, {fp32});
      nn::BatchNorm2d bn = bnOf(b, s.K, s.K == s.C);  // the 3x3's batch norm has a ReLU
      const double bn_fwd =
          timeMs([&] { cuda::batchnorm2d_forward(bn, b.at(Slot::Y), b.at(Slot::DX), N, Ho, Ho, true); });
      const double stats = timeMs([&] {
        detail::launchBnStatistics(b.at(Slot::Y), N, s.K, HWo, 0.1f, 1e-5f, b.bnPart(4),
                                   b.bnPart(5), b.bnPart(2), b.bnPart(3));
      });
      add(s.name(), "conv fwd", conv, -1);
      add(s.name(), nameOf(Pattern::SbrConvStats),
          bestOf(Pattern::SbrConvStats, s, N, io, {io, fp32}), sum(conv.ms, bn_fwd),
          "today: conv + BN fwd " + fmt("%.3f", bn_fwd) + " (" +
              cuda::batchnorm2d_forward_path(bn) + ")");
      add(s.name(), nameOf(Pattern::ConvStats), bestOf(Pattern::ConvStats, s, N, io, {fp32}),
          sum(conv.ms, stats), "today: conv + our stats " + fmt("%.3f", stats));
      return rows;
    }
    const Measured dgrad = bestOf(Pattern::ConvDgrad, s, N, io, {fp32});
    const Measured wgrad = bestOf(Pattern::ConvWgrad, s, N, io, {fp32});
    // The batch norm (with its ReLU) that made this convolution's input: forward once,
    // for the Ex call's reserve its backward reads.
    nn::BatchNorm2d bn = bnOf(b, s.C, true);
    cuda::batchnorm2d_forward(bn, b.at(Slot::X), b.at(Slot::X2), N, s.H, s.H, true);
    const double bn_bwd = timeMs([&] {
      cuda::batchnorm2d_backward(bn, b.at(Slot::X), b.at(Slot::DX), b.at(Slot::Y), N, s.H, s.H,
                                 true);
    });
    const double dx_pass = timeMs([&] {
      detail::launchBnReluMask(b.at(Slot::X), b.at(Slot::DX), b.at(Slot::Y), affineOf(b), N, s.C,
                               HW);
    });
    add(s.name(), "conv dgrad", dgrad, -1);
    add(s.name(), "conv wgrad", wgrad, -1);
    Measured ddd = bestOf(Pattern::DgradDreluDbn, s, N, io, {fp32, io});
    if (ddd.ms >= 0) ddd.ms += dx_pass;
    add(s.name(), nameOf(Pattern::DgradDreluDbn), ddd, sum(dgrad.ms, bn_bwd),
        "fused includes a dx pass " + fmt("%.3f", dx_pass) + "; today: dgrad + BN bwd " +
            fmt("%.3f", bn_bwd) + " (" + cuda::batchnorm2d_backward_path(bn) + ")");
    add(s.name(), nameOf(Pattern::SbrWgrad), bestOf(Pattern::SbrWgrad, s, N, io, {io, fp32}),
        wgrad.ms, "today: wgrad of the stored BN output");
  } catch (const std::exception& e) {
    cudaGetLastError();
    Row r;
    r.dtype = u.dtype, r.batch = N, r.shape = s.name(), r.pattern = "(unit failed)";
    r.engines = "-", r.note = e.what();
    rows.push_back(r);
  }
  return rows;
}

std::string msText(double ms) { return ms < 0 ? "-" : fmt("%.3f", ms); }

std::string gainText(const Row& r) {
  return r.fused > 0 && r.unfused > 0 ? fmt("%.2fx", r.unfused / r.fused) : "-";
}

const char* legend() {
  return "-- engines: configs offered by cuDNN's heuristics mode A / fallback / every engine that\n"
         "   accepts the graph; fused ms: the best of the first plans timed ((rt): compiled at\n"
         "   run time); gain: today / fused, > 1 pays. 'today' is what the pattern replaces:\n"
         "   scale-bias-relu-conv-stats: conv fwd + the trainer's BN forward of its output\n"
         "     (the previous BN's apply and ReLU move into this conv's input);\n"
         "   conv-stats: conv fwd + our statistics pass (--cudnn-fusion's half);\n"
         "   dgrad-drelu-dbn: conv dgrad + the trainer's BN backward with its ReLU (the fused\n"
         "     time adds one 2-read 1-write pass for dx from cuDNN's coefficients);\n"
         "   scale-bias-relu-wgrad: conv wgrad reading the stored BN output;\n"
         "   dual-bn-add-relu, bn-add-relu: the BN applies and add_relu as separate passes;\n"
         "   bn backward (ours): the trainer's batch-norm backward after its forward;\n"
         "   bn backward (Ex, our stats): cuDNN's Ex backward from our statistics pass and a\n"
         "     zeroed reserve space (no Ex forward), against ours (today) from the same.\n"
         "   Convolutions alone run through the same graph API (single-operation engines).\n";
}

}  // namespace accord::resnet::probe

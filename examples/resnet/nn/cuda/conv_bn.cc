// Convolution and the training batch norm after it, with the batch norm's statistics
// summed in the convolution's own pass (set_conv_bn_fusion): cuDNN's graph API runs
// CONVOLUTION_FORWARD -> y and GEN_STATS(y) -> per-channel sum and sum of squares as one
// operation graph, so batch norm no longer reads y once for its statistics;
// launchBnFinalize turns the sums into the mean and inverse standard deviation cuDNN's
// batch norm would have saved (its backward takes them unchanged), and launchBnApply
// normalises (with the fused ReLU) in one more pass.
//
// Where it pays: the first time a shape is seen, the fused plan is built (cuDNN may have
// no engine for it), checked against the plain convolution and sums computed apart
// (the output within 2e-2 of its scale, the mean within 1e-2 of a standard deviation,
// the variance within 2e-2), and timed against the plain convolution: under
// Fusion::WherePays it is kept only if it is at most 5% slower, since it saves batch
// norm's whole statistics pass. Every other shape runs conv2d_forward then
// batchnorm2d_forward. 16-bit NHWC activations only (Math::Bf16 / Fp16), no bias.
#include "nn/cuda/backend_cuda.h"
#include "nn/cuda/cudnn_graph.h"

#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

namespace accord::nn::cuda {

using namespace detail;

namespace {

enum Uid : int64_t { kX = 1, kW, kY, kSum, kSqSum };

struct FusedPlan {
  std::unique_ptr<graph::Graph> graph;  // what the plan was made from, alive as long as it
  graph::Plan plan;                     // plan.plan null: this shape runs unfused
  std::string why;                      // why not, or what it measured

  void drop() {  // this shape runs unfused from now on
    plan = {};
    graph.reset();
  }
  bool fused() const { return plan.plan != nullptr; }
};

// The operation graph (the convolution, then the statistics of its output) and the
// first execution plan cuDNN's heuristics offer for it.
void build(FusedPlan& f, const Conv2d& c, int N, int H, int W) {
  const cudnnDataType_t io = activationType(), fp32 = CUDNN_DATA_FLOAT;
  const int64_t K = c.C_out, Ho = c.out_h(H), Wo = c.out_w(W);
  f.graph = std::make_unique<graph::Graph>(backend().cudnn);
  graph::Graph& g = *f.graph;
  const graph::Desc& x = g.tensor(kX, {N, c.C_in, H, W}, io);
  const graph::Desc& w = g.tensor(kW, {K, c.C_in, c.K, c.K}, io);
  const graph::Desc& y = g.tensor(kY, {N, K, Ho, Wo}, io);
  const graph::Desc& sum = g.tensor(kSum, {1, K, 1, 1}, fp32);
  const graph::Desc& sqsum = g.tensor(kSqSum, {1, K, 1, 1}, fp32);
  g.convForward(x, w, y, {c.stride, c.pad});
  g.genStats(y, sum, sqsum);
  g.finalize();
  f.plan = graph::firstPlan(g);
}

// The sums of squares follow the K sums at `sums` from here: a 16-byte boundary, as the
// tensors' alignment says.
size_t sqsumAt(int K) { return (size_t(K) + 3) / 4 * 4; }

// Queues the fused convolution: y, and the sums and sums of squares at `sums`, which
// start from zero (nothing says GEN_STATS overwrites rather than adds to them).
void run(const FusedPlan& f, const void* x, const void* w, void* y, float* sums, int K,
         const std::string& what) {
  void* ws = workspace(size_t(f.plan.workspace));
  ACCORD_NN_CUDA_CHECK(what,
                       cudaMemsetAsync(sums, 0, 2 * sqsumAt(K) * sizeof(float), backend().stream));
  try {
    graph::execute(*f.graph, f.plan, {kX, kW, kY, kSum, kSqSum},
                   {const_cast<void*>(x), const_cast<void*>(w), y, sums, sums + sqsumAt(K)}, ws);
  } catch (const graph::Refused& e) {
    throw Error(what + ": the fused convolution: " + e.what());
  }
}

// Milliseconds per call of `work`, over 3 calls after one untimed.
template <class Work>
float timed(Work&& work, const std::string& what) {
  cudaStream_t stream = backend().stream;
  cudaEvent_t start, stop;
  ACCORD_NN_CUDA_CHECK(what, cudaEventCreate(&start));
  ACCORD_NN_CUDA_CHECK(what, cudaEventCreate(&stop));
  work();
  ACCORD_NN_CUDA_CHECK(what, cudaEventRecord(start, stream));
  for (int i = 0; i < 3; ++i) work();
  ACCORD_NN_CUDA_CHECK(what, cudaEventRecord(stop, stream));
  ACCORD_NN_CUDA_CHECK(what, cudaEventSynchronize(stop));
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 3;
}

// After `f` ran into y and sums: y against the plain convolution, the sums against
// sums of that computed apart, and the two timed. Keeps f.plan only where it agrees
// and (WherePays) pays; says why in f.why. Waits for the GPU.
void checkAndTime(FusedPlan& f, Conv2d& c, const float* x, const void* w, void* y, float* sums,
                  int N, int H, int W, const std::string& what) {
  const int K = c.C_out;
  const size_t rows = size_t(N) * c.out_h(H) * c.out_w(W), n = rows * K;
  auto* ref = static_cast<float*>(scratch(kSlotFusionCheck, activationBytes(n)));
  cuda::conv2d_forward(c, x, ref, N, H, W);
  auto* check = static_cast<float*>(scratch(kSlotFusionSums, (2 * size_t(K) + 2) * sizeof(float)));
  auto* worst = reinterpret_cast<unsigned*>(check + 2 * K);
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(worst, 0, 2 * sizeof(unsigned), backend().stream));
  launchChannelSums(ref, rows, K, check, check + K);
  launchMaxDifference(y, ref, n, worst);
  checkLaunch(what);
  std::vector<float> got(2 * sqsumAt(K)), want(2 * size_t(K) + 2);
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(got.data(), sums, got.size() * sizeof(float),
                                             cudaMemcpyDeviceToHost, backend().stream));
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(want.data(), check, want.size() * sizeof(float),
                                             cudaMemcpyDeviceToHost, backend().stream));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(backend().stream));
  const float diff = want[2 * K], scale = want[2 * K + 1];  // the bits of floats
  std::ostringstream why;
  if (!(diff <= 2e-2f * scale)) why << "output off by " << diff << " at scale " << scale;
  for (int k = 0; k < K && why.str().empty(); ++k) {
    const double mean = want[k] / double(rows), var = want[K + k] / double(rows) - mean * mean;
    const double m = got[k] / double(rows), v = got[sqsumAt(K) + k] / double(rows) - m * m;
    if (!(std::fabs(m - mean) <= 1e-2 * std::sqrt(std::fmax(var, 0.0)) + 1e-6 &&
          std::fabs(v - var) <= 2e-2 * std::fabs(var) + 1e-6))
      why << "channel " << k << " statistics off: mean " << m << " vs " << mean << ", variance "
          << v << " vs " << var;
  }
  if (!why.str().empty()) {
    f.drop();
    f.why = why.str();
    return;
  }
  // Both with the 16-bit copy of the weights each step makes, which the plain
  // convolution makes inside.
  const FilterShape shape{c.C_out, c.C_in, size_t(c.K) * c.K};
  const size_t weights = size_t(c.C_out) * c.C_in * c.K * c.K;
  const float fused = timed(
      [&] {
        w = halfWeights(c.w, weights, what, &shape);
        run(f, x, w, y, sums, K, what);
      },
      what);
  const float plain = timed([&] { cuda::conv2d_forward(c, x, ref, N, H, W); }, what);
  why << "fused " << fused << " ms, convolution alone " << plain << " ms";
  f.why = why.str();
  if (backend().conv_bn_fusion == Fusion::WherePays && fused > 1.05f * plain) f.drop();
}

}  // namespace

Fusion set_conv_bn_fusion(Fusion fusion) {
  const Fusion old = backend().conv_bn_fusion;
  backend().conv_bn_fusion = fusion;
  return old;
}

void conv_bn_forward(Conv2d& c, BatchNorm2d& bn, const float* x, float* a, float* b, int N, int H,
                     int W) {
  const int Ho = c.out_h(H), Wo = c.out_w(W);
  // A padded input (the stem's x_channels) goes the unfused way, which plans for it.
  if (backend().conv_bn_fusion == Fusion::Off || backend().deterministic || !halfActivations() ||
      c.bias || c.x_channels > c.C_in || bn.C != c.C_out || !bn.gamma || !bn.beta || !bn.running_mean || !bn.running_var ||
      !bn.save_mean || !bn.save_var || N <= 0 || Ho <= 0 || Wo <= 0 || size_t(N) * Ho * Wo < 2) {
    cuda::conv2d_forward(c, x, a, N, H, W);
    cuda::batchnorm2d_forward(bn, a, b, N, Ho, Wo, true);
    return;
  }
  const std::string what = key("conv_bn_forward (N C_in H W)", N, c.C_in, H, W, "C_out", c.C_out,
                               "K", c.K, "stride", c.stride, "pad", c.pad);
  auto& slot = backend().plans[key("conv_bn fused", N, c.C_in, H, W, c.C_out, c.K, c.stride, c.pad,
                                   int(backend().math), int(backend().conv_bn_fusion))];
  const int K = c.C_out;
  auto* sums = static_cast<float*>(scratch(kSlotFusionStats, 2 * sqsumAt(K) * sizeof(float)));
  const FilterShape shape{c.C_out, c.C_in, size_t(c.K) * c.K};
  const bool first = !slot;
  if (first) {
    auto f = std::make_shared<FusedPlan>();
    try {
      build(*f, c, N, H, W);
    } catch (const graph::Refused& e) {
      f->drop();
      f->why = e.what();
      cudaGetLastError();
    }
    slot = f;
  }
  auto& f = *static_cast<FusedPlan*>(slot.get());
  if (f.fused()) {
    const void* w = halfWeights(c.w, size_t(c.C_out) * c.C_in * c.K * c.K, what, &shape);
    if (!first) {
      run(f, x, w, a, sums, K, what);
    } else {
      try {  // an engine may still refuse when it runs
        run(f, x, w, a, sums, K, what);
        checkAndTime(f, c, x, w, a, sums, N, H, W, what);
      } catch (const Error& e) {
        f.drop();
        f.why = e.what();
        cudaGetLastError();
      }
    }
  }
  if (!f.fused()) {  // unfused (from the first call on: the check ran the fused one already)
    cuda::conv2d_forward(c, x, a, N, H, W);
    cuda::batchnorm2d_forward(bn, a, b, N, Ho, Wo, true);
    return;
  }
  bnForwardWithoutEx(bn);
  launchBnFinalize(sums, sums + sqsumAt(K), double(N) * Ho * Wo, K, bn.momentum, bn.eps,
                   bn.save_mean, bn.save_var, bn.running_mean, bn.running_var);
  launchBnApply(a, b, BnAffine{bn.gamma, bn.beta, bn.save_mean, nullptr, bn.save_var, bn.eps},
                bn.relu, N, K, size_t(Ho) * Wo);
  checkLaunch(what);
}

std::string conv_bn_fusion_report() {
  int fused = 0, shapes = 0;
  std::ostringstream lines;
  for (const auto& [k, plan] : backend().plans) {
    if (k.rfind("conv_bn fused", 0) != 0) continue;
    const auto& f = *static_cast<const FusedPlan*>(plan.get());
    ++shapes;
    fused += f.fused();
    lines << "  " << (f.fused() ? "fused:   " : "unfused: ") << k.substr(14) << ": " << f.why << "\n";
  }
  return "convolution + batch-norm statistics fused for " + std::to_string(fused) + " of " +
         std::to_string(shapes) + " shapes\n" + lines.str();
}

}  // namespace accord::nn::cuda

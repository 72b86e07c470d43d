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

#include <array>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace accord::nn::cuda {

using namespace detail;

namespace {

// cuDNN has no fused engine here, or this code asked for something it refuses: the
// shape runs unfused.
struct NotFused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A backend descriptor, destroyed with this.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    step(cudnnBackendCreateDescriptor(type, &d_), "creating a descriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  template <class T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
            int64_t count = 1) {
    step(cudnnBackendSetAttribute(d_, name, type, count, values),
         "setting attribute " + std::to_string(int(name)));
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t name, const Desc& other) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &other.d_);
  }
  Desc& finalize() {
    step(cudnnBackendFinalize(d_), "finalizing");
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  static void step(cudnnStatus_t s, const std::string& what) {
    if (s != CUDNN_STATUS_SUCCESS) throw NotFused(what + ": " + cudnnGetErrorString(s));
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

enum Uid : int64_t { kX = 1, kW, kY, kSum, kSqSum };

// dims (N, C, H, W), stored channels last: the activations, the filter (K, R, S, C) and,
// with dims (1, C, 1, 1), the sums.
std::unique_ptr<Desc> tensor(Uid uid, std::array<int64_t, 4> d, cudnnDataType_t type) {
  const std::array<int64_t, 4> strides = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  const int64_t alignment = 16;
  auto t = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t id = uid;
  t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &id)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment)
      .finalize();
  return t;
}

struct FusedPlan {
  // Every descriptor the plan was made from, alive as long as it is (declared first, so
  // destroyed after it).
  std::vector<std::unique_ptr<Desc>> keep;
  std::unique_ptr<Desc> plan;  // null: this shape runs unfused
  int64_t workspace = 0;
  std::string why;  // why not, or what it measured

  void drop() {  // this shape runs unfused from now on
    plan.reset();
    keep.clear();
  }
};

// The operation graph and the first execution plan cuDNN's heuristics offer for it.
void build(FusedPlan& f, const Conv2d& c, int N, int H, int W) {
  const cudnnDataType_t io = activationType(), fp32 = CUDNN_DATA_FLOAT;
  const int64_t K = c.C_out, Ho = c.out_h(H), Wo = c.out_w(W);
  const auto make = [&f](cudnnBackendDescriptorType_t type) -> Desc& {
    return *f.keep.emplace_back(std::make_unique<Desc>(type));
  };
  const Desc& x = *f.keep.emplace_back(tensor(kX, {N, c.C_in, H, W}, io));
  const Desc& w = *f.keep.emplace_back(tensor(kW, {K, c.C_in, c.K, c.K}, io));
  const Desc& y = *f.keep.emplace_back(tensor(kY, {N, K, Ho, Wo}, io));
  const Desc& sum = *f.keep.emplace_back(tensor(kSum, {1, K, 1, 1}, fp32));
  const Desc& sqsum = *f.keep.emplace_back(tensor(kSqSum, {1, K, 1, 1}, fp32));
  const int64_t dims = 2, ones[2] = {1, 1}, stride[2] = {c.stride, c.stride},
                pad[2] = {c.pad, c.pad};
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  Desc& conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &fp32)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, ones, 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride, 2)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .finalize();
  const float one = 1.0f, zero = 0.0f;
  Desc& fprop = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  fprop.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &one)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &zero)
      .finalize();
  const cudnnGenStatsMode_t sums = CUDNN_GENSTATS_SUM_SQSUM;
  Desc& stats = make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &sums)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &fp32)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum)
      .finalize();
  cudnnHandle_t handle = backend().cudnn;
  const cudnnBackendDescriptor_t ops[2] = {fprop.get(), stats.get()};
  Desc& graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops, 2)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle)
      .finalize();
  const cudnnBackendHeurMode_t heuristics = CUDNN_HEUR_MODE_A;
  Desc& heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &heuristics)
      .finalize();
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    throw NotFused("cuDNN's heuristics offer no engine");
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) raw.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS)
    throw NotFused("reading cuDNN's heuristics failed");
  std::string last = "no engine config finalized";
  for (int64_t i = 0; i < got; ++i) {
    try {
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw[i])
          .finalize();
      int64_t bytes = 0, n = 0;
      if (cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &bytes) != CUDNN_STATUS_SUCCESS)
        continue;
      f.plan = std::move(plan);
      f.workspace = bytes;
      return;
    } catch (const NotFused& e) {
      last = e.what();
      cudaGetLastError();  // nothing sticky from a refused engine
    }
  }
  throw NotFused(last);
}

// The sums of squares follow the K sums at `sums` from here: a 16-byte boundary, as the
// tensors' alignment says.
size_t sqsumAt(int K) { return (size_t(K) + 3) / 4 * 4; }

// Queues the fused convolution: y, and the sums and sums of squares at `sums`, which
// start from zero (nothing says GEN_STATS overwrites rather than adds to them).
void run(const FusedPlan& f, const void* x, const void* w, void* y, float* sums, int K,
         const std::string& what) {
  void* ptrs[5] = {const_cast<void*>(x), const_cast<void*>(w), y, sums, sums + sqsumAt(K)};
  const int64_t uids[5] = {kX, kW, kY, kSum, kSqSum};
  void* ws = workspace(size_t(f.workspace));
  ACCORD_NN_CUDA_CHECK(what,
                       cudaMemsetAsync(sums, 0, 2 * sqsumAt(K) * sizeof(float), backend().stream));
  try {
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 5)
        .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 5)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws)
        .finalize();
    ACCORD_NN_CUDA_CHECK(what, cudnnBackendExecute(backend().cudnn, f.plan->get(), pack.get()));
  } catch (const NotFused& e) {
    throw Error(what + ": the fused convolution's variant pack: " + e.what());
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
  if (backend().conv_bn_fusion == Fusion::Off || backend().deterministic || !halfActivations() ||
      c.bias || bn.C != c.C_out || !bn.gamma || !bn.beta || !bn.running_mean || !bn.running_var ||
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
    } catch (const NotFused& e) {
      f->drop();
      f->why = e.what();
      cudaGetLastError();
    }
    slot = f;
  }
  auto& f = *static_cast<FusedPlan*>(slot.get());
  if (f.plan) {
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
  if (!f.plan) {  // unfused (from the first call on: the check ran the fused one already)
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
    fused += f.plan != nullptr;
    lines << "  " << (f.plan ? "fused:   " : "unfused: ") << k.substr(14) << ": " << f.why << "\n";
  }
  return "convolution + batch-norm statistics fused for " + std::to_string(fused) + " of " +
         std::to_string(shapes) + " shapes\n" + lines.str();
}

}  // namespace accord::nn::cuda

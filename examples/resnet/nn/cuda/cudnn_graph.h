// cuDNN's graph (backend) API in the few pieces this backend uses: descriptors that free
// themselves, 16-bit channels-last tensors, the operations of ResNet's fused patterns
// (convolutions, pointwise maps, statistics, batch norm's weight gradient), and the
// execution plans cuDNN offers for a graph. conv_bn.cc fuses with it;
// bench/fusion_probe.cc asks it which fused patterns this GPU has engines for.
//
// Every refusal of cuDNN's (no engine, an attribute it does not take, a plan it cannot
// finalize) throws Refused with cuDNN's own message: callers fall back or report it.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord::nn::cuda::graph {

struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "what: CUDNN_STATUS_...: cuDNN's last error message", thrown where s is not success.
void check(cudnnStatus_t s, const std::string& what);

// A backend descriptor, destroyed with this.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  template <class T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
            int64_t count = 1) {
    check(cudnnBackendSetAttribute(d_, name, type, count, values),
          "setting attribute " + std::to_string(int(name)));
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t name, const Desc& other) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &other.d_);
  }
  Desc& finalize();
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;  // (N, C, H, W)

// A convolution's geometry: square filter, stride and padding, cross-correlation.
struct ConvGeometry {
  int64_t stride = 1, pad = 0;
};

// An operation graph under construction, holding every descriptor it was made from.
class Graph {
 public:
  explicit Graph(cudnnHandle_t handle) : handle_(handle) {}

  // dims (N, C, H, W) stored channels last (a filter (K, C, R, S) as (K, R, S, C));
  // a per-channel tensor has dims (1, C, 1, 1). Virtual: an intermediate that never
  // reaches memory.
  const Desc& tensor(int64_t uid, Dims dims, cudnnDataType_t type, bool is_virtual = false);
  // y = mode(x, b) (b nullable for unary modes), computed in float.
  void pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y);
  // dx = dy where x > 0, else 0.
  void reluBackward(const Desc& dy, const Desc& x, const Desc& dx);
  void convForward(const Desc& x, const Desc& w, const Desc& y, ConvGeometry g);
  void convData(const Desc& dy, const Desc& w, const Desc& dx, ConvGeometry g);
  void convFilter(const Desc& x, const Desc& dy, const Desc& dw, ConvGeometry g);
  // Per-channel sums and sums of squares of y.
  void genStats(const Desc& y, const Desc& sum, const Desc& sqsum);
  // Batch norm's weight gradient and the coefficients of its dx = eq_dy dy + eq_x x + eq_bias.
  struct BnWeights {
    const Desc *x, *mean, *invstd, *scale, *dy, *dscale, *dbias, *eq_dy, *eq_x, *eq_bias;
  };
  void bnWeights(const BnWeights& t);
  // Finalizes the graph of every operation added so far; once.
  const Desc& finalize();
  cudnnHandle_t handle() const { return handle_; }
  const Desc& operations() const;  // after finalize

 private:
  struct ConvAttrs;
  Desc& keep(cudnnBackendDescriptorType_t type);
  const Desc& convolution(ConvGeometry g);
  void convOp(const ConvAttrs& k, const Desc& in0, const Desc& in1, const Desc& out,
              ConvGeometry g);
  cudnnHandle_t handle_;
  std::vector<std::unique_ptr<Desc>> kept_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  const Desc* graph_ = nullptr;
};

// An execution plan for a finalized graph, and what it was made from.
struct Plan {
  std::unique_ptr<Desc> config;  // the engine config (kept alive with the plan)
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  int64_t engine = -1;         // cuDNN's global engine index
  bool runtime_compiled = false;  // the engine compiles its kernel when the plan is made
};

// Which engine a config is of: its global index (-1: unknown), and whether it compiles
// its kernel when a plan is made.
struct EngineInfo {
  int64_t index = -1;
  bool runtime_compiled = false;
};
EngineInfo engineOf(const Desc& config);
// The engine configs cuDNN's heuristics offer for the graph in `mode`, best first
// (none: an empty list).
std::vector<std::unique_ptr<Desc>> heuristics(const Graph& g, cudnnBackendHeurMode_t mode);
// The global indices of the engines that accept the graph at all (each tried with its
// default knobs; nothing compiled).
std::vector<int64_t> supportingEngines(const Graph& g);
// A plan from one engine config; throws Refused.
Plan makePlan(const Graph& g, std::unique_ptr<Desc> config);
// The first plan `mode`'s heuristics offer that finalizes; throws Refused saying why not.
Plan firstPlan(const Graph& g, cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A);
// Queues the plan on the handle's stream: ptrs[i] for the tensor with uid uids[i].
void execute(const Graph& g, const Plan& p, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* workspace);

}  // namespace accord::nn::cuda::graph

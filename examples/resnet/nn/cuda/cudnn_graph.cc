// cuDNN's graph API in this backend's few pieces (see cudnn_graph.h).
#include "nn/cuda/cudnn_graph.h"

#include <cuda_runtime_api.h>

#include <algorithm>

namespace accord::nn::cuda::graph {

void check(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  cudaGetLastError();  // nothing sticky from a refused engine
  std::string message = what + ": " + cudnnGetErrorString(s);
  if (detail[0]) message += std::string(" (") + detail + ")";
  throw Refused(message);
}

Desc::Desc(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_), "creating a descriptor");
}

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Desc& Desc::finalize() {
  check(cudnnBackendFinalize(d_), "finalizing");
  return *this;
}

Desc& Graph::keep(cudnnBackendDescriptorType_t type) {
  return *kept_.emplace_back(std::make_unique<Desc>(type));
}

const Desc& Graph::tensor(int64_t uid, Dims d, cudnnDataType_t type, bool is_virtual) {
  const Dims strides = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  const int64_t alignment = 16;
  const bool virt = is_virtual;
  return keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR)
      .set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &virt)
      .finalize();
}

void Graph::pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y) {
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  Desc& pw = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &fp32)
      .finalize();
  Desc& op = keep(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  ops_.push_back(op.finalize().get());
}

void Graph::reluBackward(const Desc& dy, const Desc& x, const Desc& dx) {
  const cudnnPointwiseMode_t mode = CUDNN_POINTWISE_RELU_BWD;
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  Desc& pw = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &fp32)
      .finalize();
  Desc& op = keep(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  ops_.push_back(op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
                     .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
                     .set(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy)
                     .set(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx)
                     .finalize()
                     .get());
}

const Desc& Graph::convolution(ConvGeometry g) {
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, ones[2] = {1, 1}, stride[2] = {g.stride, g.stride},
                pad[2] = {g.pad, g.pad};
  return keep(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)
      .set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &fp32)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, ones, 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride, 2)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .finalize();
}

// A convolution operation's descriptor type and attribute names: its two inputs, its
// output, the convolution, alpha and beta.
struct Graph::ConvAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t in0, in1, out, conv, alpha, beta;
};

void Graph::convOp(const ConvAttrs& k, const Desc& in0, const Desc& in1, const Desc& out,
                   ConvGeometry g) {
  const float one = 1.0f, zero = 0.0f;
  const Desc& conv = convolution(g);
  ops_.push_back(keep(k.type)
                     .set(k.in0, in0)
                     .set(k.in1, in1)
                     .set(k.out, out)
                     .set(k.conv, conv)
                     .set(k.alpha, CUDNN_TYPE_FLOAT, &one)
                     .set(k.beta, CUDNN_TYPE_FLOAT, &zero)
                     .finalize()
                     .get());
}

void Graph::convForward(const Desc& x, const Desc& w, const Desc& y, ConvGeometry g) {
  convOp({CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
         x, w, y, g);
}

void Graph::convData(const Desc& dy, const Desc& w, const Desc& dx, ConvGeometry g) {
  convOp({CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
         dy, w, dx, g);
}

void Graph::convFilter(const Desc& x, const Desc& dy, const Desc& dw, ConvGeometry g) {
  convOp({CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
         x, dy, dw, g);
}

void Graph::genStats(const Desc& y, const Desc& sum, const Desc& sqsum) {
  const cudnnGenStatsMode_t sums = CUDNN_GENSTATS_SUM_SQSUM;
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  ops_.push_back(keep(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR)
                     .set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &sums)
                     .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &fp32)
                     .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y)
                     .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
                     .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum)
                     .finalize()
                     .get());
}

void Graph::bnWeights(const BnWeights& t) {
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  ops_.push_back(keep(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &fp32)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, *t.x)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, *t.mean)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, *t.invstd)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, *t.scale)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, *t.dy)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, *t.dscale)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, *t.dbias)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, *t.eq_dy)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, *t.eq_x)
                     .set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, *t.eq_bias)
                     .finalize()
                     .get());
}

const Desc& Graph::finalize() {
  if (graph_) throw Refused("the operation graph is already finalized");
  graph_ = &keep(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
                .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops_.data(),
                     int64_t(ops_.size()))
                .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle_)
                .finalize();
  return *graph_;
}

const Desc& Graph::operations() const {
  if (!graph_) throw Refused("the operation graph is not finalized");
  return *graph_;
}

std::vector<std::unique_ptr<Desc>> heuristics(const Graph& g, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g.operations())
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode)
      .finalize();
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "counting the heuristics' engine configs");
  std::vector<std::unique_ptr<Desc>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t got = 0;
  if (count > 0)
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
          "reading the heuristics' engine configs");
  configs.resize(size_t(std::max<int64_t>(0, std::min(got, count))));
  return configs;
}

std::vector<int64_t> supportingEngines(const Graph& g) {
  int64_t count = 0, n = 0;
  check(cudnnBackendGetAttribute(g.operations().get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                 CUDNN_TYPE_INT64, 1, &n, &count),
        "counting the engines");
  std::vector<int64_t> found;
  for (int64_t i = 0; i < count; ++i) {
    try {
      Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g.operations())
          .set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &i)
          .finalize();
      found.push_back(i);
    } catch (const Refused&) {
    }
  }
  return found;
}

EngineInfo engineOf(const Desc& config) {
  EngineInfo info;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) != CUDNN_STATUS_SUCCESS)
    return info;
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index);
  cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t count = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count, notes) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < count; ++i)
      info.runtime_compiled |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  return info;
}

Plan makePlan(const Graph& g, std::unique_ptr<Desc> config) {
  Plan p;
  const EngineInfo info = engineOf(*config);
  p.engine = info.index;
  p.runtime_compiled = info.runtime_compiled;
  cudnnHandle_t handle = g.handle();
  cudnnBackendDescriptor_t cfg = config->get();
  p.plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  p.plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
      .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfg)
      .finalize();
  int64_t n = 0;
  check(cudnnBackendGetAttribute(p.plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &n, &p.workspace),
        "reading the plan's workspace size");
  p.config = std::move(config);
  return p;
}

Plan firstPlan(const Graph& g, cudnnBackendHeurMode_t mode) {
  auto configs = heuristics(g, mode);
  if (configs.empty()) throw Refused("cuDNN's heuristics offer no engine");
  std::string last;
  for (auto& c : configs) {
    try {
      return makePlan(g, std::move(c));
    } catch (const Refused& e) {
      last = e.what();
    }
  }
  throw Refused(last);
}

void execute(const Graph& g, const Plan& p, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* workspace) {
  if (uids.size() != ptrs.size()) throw Refused("execute: as many pointers as uids expected");
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(),
           int64_t(ptrs.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), int64_t(uids.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
      .finalize();
  check(cudnnBackendExecute(g.handle(), p.plan->get(), pack.get()), "executing the plan");
}

}  // namespace accord::nn::cuda::graph

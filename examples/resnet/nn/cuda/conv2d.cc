// conv2d on cuDNN's legacy convolution API (still in cuDNN 9, marked deprecated in
// favour of the graph API; it is the shortest path to the three convolutions).
//
// One plan per shape and math mode holds the descriptors and the algorithm of each
// direction, chosen once by cuDNN's heuristics (cudnnGet*Algorithm_v7, which do not run
// anything, so planning costs no GPU time and needs no buffers), or, with
// set_conv_search(true), by running cuDNN's candidates on scratch buffers and timing
// them (cudnnFind*Algorithm, PyTorch's cudnn.benchmark), the heuristics remaining the
// fallback where the search fails. The first usable candidate is taken; in Fp32 mode
// candidates that would use tensor cores are skipped, so results stay plain fp32.
// Workspaces come from one buffer shared by every conv (calls are sequential on one
// stream), grown to the largest request.
//
// Math::Bf16 / Fp16: x, y and their gradients are 16-bit NHWC tensors, the filter a
// 16-bit (K, R, S, C) copy of the float32 (K, C, R, S) weights made by forward
// (halfWeights), the arithmetic float32 on tensor cores; the filter gradient comes out
// in 16 bits (K, R, S, C) and is widened and reordered into the float32 dw. A layer whose
// x_channels exceed C_in (the stem's 3 channels padded with zeros to 4) is planned with
// that many channels, its filter copy padded with zeros to match, and only the real
// channels of the filter gradient are kept; it has no data gradient (the stem needs none).
#include "nn/cuda/backend_cuda.h"

#include <vector>

namespace accord::nn::cuda {

using namespace detail;

namespace {

// No algorithm may ask for more than this much workspace (ResNet-50's largest need a
// few hundred MB at batch 256; this leaves the rest of an 80 GB GPU for activations).
constexpr size_t kMaxWorkspace = size_t(4) << 30;

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (b) cudnnDestroyTensorDescriptor(b);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// Perf: one of the *AlgoPerf_t.
template <class Perf>
bool usable(const Perf& p) {
  if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) return false;
  if (backend().deterministic && p.determinism != CUDNN_DETERMINISTIC) return false;
  return backend().math != Math::Fp32 || p.mathType == CUDNN_FMA_MATH ||
         p.mathType == CUDNN_DEFAULT_MATH;
}

// The first usable of cuDNN's ranked candidates.
template <class Perf>
const Perf& pick(const std::vector<Perf>& perf, int count, const std::string& what,
                 const char* direction) {
  for (int i = 0; i < count; ++i)
    if (usable(perf[i])) return perf[i];
  throw Error(what + ": cuDNN offers no " + direction + " algorithm for this shape (" +
              std::to_string(count) + " candidates, none supported within the workspace limit" +
              (backend().deterministic ? ", deterministic" : "") +
              (backend().math == Math::Fp32 ? ", without tensor ops" : "") + ")");
}

// Whether a search (cudnnFind*Algorithm) answered with a usable candidate; its results
// come fastest first. A failed search leaves nothing behind that a later call sees.
template <class Perf>
bool measured(cudnnStatus_t status, const std::vector<Perf>& perf, int count) {
  // An allocation the search could not make (for one candidate, or for all) is not
  // sticky: it must not be reported later against an unrelated launch.
  cudaGetLastError();
  if (status != CUDNN_STATUS_SUCCESS) return false;
  for (int i = 0; i < count; ++i)
    if (usable(perf[i])) return true;
  return false;
}

// The channels x holds: C_in, or the padded count (x_channels).
int xChannels(const Conv2d& c) { return c.x_channels > c.C_in ? c.x_channels : c.C_in; }

void makePlan(ConvPlan& p, const Conv2d& c, int N, int H, int W, const std::string& what) {
  cudnnHandle_t h = backend().cudnn;
  int Ho = c.out_h(H), Wo = c.out_w(W);
  const int C = xChannels(c);
  const cudnnDataType_t data = activationType();
  const cudnnTensorFormat_t layout = halfActivations() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&p.x));
  ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&p.y));
  ACCORD_NN_CUDA_CHECK(what, cudnnCreateFilterDescriptor(&p.w));
  ACCORD_NN_CUDA_CHECK(what, cudnnCreateConvolutionDescriptor(&p.conv));
  ACCORD_NN_CUDA_CHECK(what, cudnnSetTensor4dDescriptor(p.x, layout, data, N, C, H, W));
  ACCORD_NN_CUDA_CHECK(what, cudnnSetTensor4dDescriptor(p.y, layout, data, N, c.C_out, Ho, Wo));
  ACCORD_NN_CUDA_CHECK(what,
                       cudnnSetFilter4dDescriptor(p.w, data, layout, c.C_out, C, c.K, c.K));
  // Cross-correlation, like every framework's "convolution" (and oneDNN's).
  ACCORD_NN_CUDA_CHECK(
      what, cudnnSetConvolution2dDescriptor(p.conv, c.pad, c.pad, c.stride, c.stride, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // Tensor cores: cuDNN's default math allows them for TF32 only; 16-bit data needs
  // them asked for; plain float32 keeps to FMA, with no tensor cores at all.
  const cudnnMathType_t math = halfActivations()              ? CUDNN_TENSOR_OP_MATH
                               : backend().math == Math::Fp32 ? CUDNN_FMA_MATH
                                                              : CUDNN_DEFAULT_MATH;
  ACCORD_NN_CUDA_CHECK(what, cudnnSetConvolutionMathType(p.conv, math));
  if (c.bias) {
    ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&p.b));
    ACCORD_NN_CUDA_CHECK(what, cudnnSetTensor4dDescriptor(p.b, layout, data, 1, c.C_out, 1, 1));
  }
  // cuDNN must agree on the output shape, or the descriptors above are wrong.
  int dims[4] = {};
  ACCORD_NN_CUDA_CHECK(what, cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &dims[0],
                                                                   &dims[1], &dims[2], &dims[3]));
  if (dims[0] != N || dims[1] != c.C_out || dims[2] != Ho || dims[3] != Wo)
    throw Error(key(what.c_str(), ": cuDNN's output shape", dims[0], dims[1], dims[2], dims[3],
                    "differs from the layer's", N, c.C_out, Ho, Wo));

  int count = 0;
  const bool search = backend().conv_search;
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  if (!search || !measured(cudnnFindConvolutionForwardAlgorithm(
                               h, p.x, p.w, p.conv, p.y, int(fwd.size()), &count, fwd.data()),
                           fwd, count))
    ACCORD_NN_CUDA_CHECK(what, cudnnGetConvolutionForwardAlgorithm_v7(
                                   h, p.x, p.w, p.conv, p.y, int(fwd.size()), &count, fwd.data()));
  p.fwd = pick(fwd, count, what, "forward").algo;
  ACCORD_NN_CUDA_CHECK(
      what, cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, p.fwd, &p.fwd_bytes));

  // A padded input has no data gradient (conv2d_backward refuses it): nothing to choose.
  if (c.x_channels <= c.C_in) {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bd(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    if (!search || !measured(cudnnFindConvolutionBackwardDataAlgorithm(
                                 h, p.w, p.y, p.conv, p.x, int(bd.size()), &count, bd.data()),
                             bd, count))
      ACCORD_NN_CUDA_CHECK(what, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                     h, p.w, p.y, p.conv, p.x, int(bd.size()), &count, bd.data()));
    p.bwd_data = pick(bd, count, what, "backward-data").algo;
    ACCORD_NN_CUDA_CHECK(what, cudnnGetConvolutionBackwardDataWorkspaceSize(
                                   h, p.w, p.y, p.conv, p.x, p.bwd_data, &p.bwd_data_bytes));
  }

  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  if (!search || !measured(cudnnFindConvolutionBackwardFilterAlgorithm(
                               h, p.x, p.y, p.conv, p.w, int(bf.size()), &count, bf.data()),
                           bf, count))
    ACCORD_NN_CUDA_CHECK(what, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                   h, p.x, p.y, p.conv, p.w, int(bf.size()), &count, bf.data()));
  p.bwd_filter = pick(bf, count, what, "backward-filter").algo;
  ACCORD_NN_CUDA_CHECK(what, cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                 h, p.x, p.y, p.conv, p.w, p.bwd_filter, &p.bwd_filter_bytes));
}

std::string describe(const char* fn, const Conv2d& c, int N, int H, int W) {
  std::string s = key(fn, "(N C_in H W)", N, c.C_in, H, W, "C_out", c.C_out, "K", c.K, "stride",
                      c.stride, "pad", c.pad, "bias", c.bias);
  return c.x_channels > c.C_in ? s + key("", "x_channels", c.x_channels) : s;
}

ConvPlan& planFor(const Conv2d& c, int N, int H, int W, const std::string& what) {
  if (N <= 0 || c.C_in <= 0 || c.C_out <= 0 || c.K <= 0 || c.stride <= 0 || c.pad < 0 ||
      c.out_h(H) <= 0 || c.out_w(W) <= 0)
    throw InvalidArgument(what + ": invalid shape");
  if (!c.w || (c.bias && !c.b)) throw InvalidArgument(what + ": parameters not bound");
  // cuDNN would add a 16-bit bias to a 16-bit output; ResNet's convolutions have none.
  if (c.bias && halfActivations())
    throw InvalidArgument(what + ": a bias is not supported with 16-bit activations");
  if (c.x_channels > c.C_in && !halfActivations())
    throw InvalidArgument(what + ": x_channels (a padded input) needs 16-bit activations");
  if (c.x_channels != 0 && c.x_channels < c.C_in)
    throw InvalidArgument(what + ": x_channels below C_in");
  auto& slot =
      backend().plans[key("conv2d", N, c.C_in, xChannels(c), H, W, c.C_out, c.K, c.stride, c.pad,
                          c.bias, int(backend().math), backend().conv_search,
                          backend().deterministic)];
  if (!slot) {
    auto plan = std::make_shared<ConvPlan>();
    makePlan(*plan, c, N, H, W, what);  // a failure leaves no half-made plan behind
    slot = plan;
  }
  return *static_cast<ConvPlan*>(slot.get());
}

// The filter's values as cuDNN reads it: with a padded input, its padded channels too.
size_t filterCount(const Conv2d& c) { return size_t(c.C_out) * xChannels(c) * c.K * c.K; }

// The filter cuDNN reads: the weights, or with 16-bit activations their copy (made by forward
// when `refresh`, reused by backward).
const void* filter(const Conv2d& c, bool refresh, const std::string& what) {
  if (!halfActivations()) return c.w;
  if (refresh) {
    const FilterShape shape{c.C_out, c.C_in, size_t(c.K) * c.K, xChannels(c)};
    return halfWeights(c.w, filterCount(c), what, &shape);
  }
  return lastHalfWeights(c.w, filterCount(c), what);
}

}  // namespace

void conv2d_forward(Conv2d& c, const float* x, float* y, int N, int H, int W) {
  const std::string what = describe("conv2d_forward", c, N, H, W);
  ConvPlan& p = planFor(c, N, H, W, what);
  Backend& b = backend();
  const void* w = filter(c, true, what);
  void* ws = workspace(p.fwd_bytes);
  const float one = 1.0f, zero = 0.0f;
  ACCORD_NN_CUDA_CHECK(what, cudnnConvolutionForward(b.cudnn, &one, p.x, x, p.w, w, p.conv, p.fwd,
                                                     ws, p.fwd_bytes, &zero, p.y, y));
  if (c.bias) ACCORD_NN_CUDA_CHECK(what, cudnnAddTensor(b.cudnn, &one, p.b, c.b, &one, p.y, y));
}

void conv2d_backward(Conv2d& c, const float* x, const float* dy, float* dx, int N, int H, int W) {
  const std::string what = describe("conv2d_backward", c, N, H, W);
  if (!c.dw || (c.bias && !c.db)) throw InvalidArgument(what + ": gradients not bound");
  if (dx && c.x_channels > c.C_in)
    throw InvalidArgument(what + ": no data gradient for a padded input (x_channels)");
  ConvPlan& p = planFor(c, N, H, W, what);
  Backend& b = backend();
  const void* w = filter(c, false, what);
  const float one = 1.0f, zero = 0.0f;
  // beta = 0: backward overwrites dw and dx (layers.h), never accumulates.
  void* dw = halfActivations() ? scratch(kSlotWeightGrad, filterCount(c) * 2) : c.dw;
  void* ws = workspace(p.bwd_filter_bytes);
  ACCORD_NN_CUDA_CHECK(
      what, cudnnConvolutionBackwardFilter(b.cudnn, &one, p.x, x, p.y, dy, p.conv, p.bwd_filter, ws,
                                           p.bwd_filter_bytes, &zero, p.w, dw));
  if (halfActivations()) {
    launchFromHalfNchw(dw, c.dw, c.C_out, c.C_in, size_t(c.K) * c.K, xChannels(c));
    checkLaunch(what);
  }
  if (c.bias)
    ACCORD_NN_CUDA_CHECK(what,
                         cudnnConvolutionBackwardBias(b.cudnn, &one, p.y, dy, &zero, p.b, c.db));
  if (dx) {
    ws = workspace(p.bwd_data_bytes);
    ACCORD_NN_CUDA_CHECK(
        what, cudnnConvolutionBackwardData(b.cudnn, &one, p.w, w, p.y, dy, p.conv, p.bwd_data, ws,
                                           p.bwd_data_bytes, &zero, p.x, dx));
  }
}

}  // namespace accord::nn::cuda

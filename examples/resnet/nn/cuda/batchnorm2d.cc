// batchnorm2d on cuDNN's legacy batch norm (SPATIAL: statistics per channel over N, H, W).
//
// Training: cudnnBatchNormalizationForwardTraining normalises with the batch mean and
// biased variance and folds the batch statistics into the running ones with
// exponentialAverageFactor = momentum, i.e. r = (1 - momentum) r + momentum batch, the
// variance unbiased (N H W / (N H W - 1)) like PyTorch, which runs on the same call.
// It saves the mean and the INVERSE standard deviation 1 / sqrt(var + eps) for backward:
// BatchNorm2d::save_var holds that here, not the variance (see layers_cuda.h).
// Backward in training mode is cudnnBatchNormalizationBackward on those saved values,
// or, for 16-bit activations whose forward took no Ex call (below), our own kernels
// (launchBnBackwardTraining, bn_backward.cu), cuDNN's plain call being its slow path on
// channels-last data.
//
// Inference: cudnnBatchNormalizationForwardInference on the running statistics; its
// backward (the gradient of a fixed affine map) is not a cuDNN call, so it is our kernel.
//
// Fused ReLU: where cuDNN does not fuse it (below), the ReLU is our kernel. Forward then
// writes y = max(x * scale + shift, 0) itself from the statistics (in training after
// cuDNN computed them), and backward masks dy with the same expression, evaluated by
// the same device code: the mask equals forward's exactly.
//
// Math::Bf16 / Fp16: x, y and the gradients are 16-bit NHWC tensors; gamma, beta and the
// statistics stay float32 (cuDNN's derived descriptor for them is float32 for 16-bit
// data). Training then asks for CUDNN_BATCHNORM_SPATIAL_PERSISTENT through the Ex calls
// (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, with a workspace and a reserve
// space per layer that lives from forward to backward), which is what reaches cuDNN's
// fast NHWC kernels, as PyTorch's channels_last training does; with the ReLU fused,
// as CUDNN_BATCHNORM_OPS_BN_ACTIVATION, whose forward writes max(bn(x), 0) in its one
// pass and whose backward masks the gradient from forward's output, so neither our
// apply nor our mask pass runs. Where cuDNN refuses the fused ReLU, the Ex calls
// without it; where it refuses those, the plain calls; where it refuses the persistent
// mode, SPATIAL. Backward takes an Ex call only where the layer's last forward took the
// same one (Backend::bn_forward), since it reads what that forward left in the reserve.
#include "nn/cuda/backend_cuda.h"

#include <algorithm>
#include <cstdio>

namespace accord::nn::cuda {

using namespace detail;

namespace {

// The Ex calls, by what they fuse (None: the plain calls).
enum class Ex { None = 0, Bn = 1, BnRelu = 2 };

cudnnBatchNormOps_t opsOf(Ex e) {
  return e == Ex::BnRelu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

// What one kind of Ex call needs; `ok` goes false for good once cuDNN refuses it.
struct ExCall {
  bool ok = false;
  size_t forward_workspace = 0, backward_workspace = 0, reserve = 0;
};

struct BnPlan {
  cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;  // Ex::BnRelu's
  // Training's mode: SPATIAL_PERSISTENT for 16-bit NHWC data, cuDNN's fast path there
  // (as in PyTorch's channels_last training); SPATIAL where cuDNN does not support that.
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  ExCall ex[3];  // by Ex; persistent mode only
  BnPlan() = default;
  BnPlan(const BnPlan&) = delete;
  BnPlan& operator=(const BnPlan&) = delete;
  ~BnPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (stats) cudnnDestroyTensorDescriptor(stats);
    if (relu) cudnnDestroyActivationDescriptor(relu);
  }
};

// Sizes the buffers of Ex call `e`; not ok where cuDNN has none for these tensors. An
// answer other than NOT_SUPPORTED (an argument of ours cuDNN calls bad, say) also
// leaves it off, and is said on stderr.
void sizeEx(BnPlan& p, Ex e, const std::string& what) {
  cudnnHandle_t h = backend().cudnn;
  ExCall& c = p.ex[int(e)];
  const cudnnActivationDescriptor_t act = e == Ex::BnRelu ? p.relu : nullptr;
  cudnnStatus_t s = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, p.mode, opsOf(e), p.x, nullptr, p.x, p.stats, act, &c.forward_workspace);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, p.mode, opsOf(e), p.x,
                                                          act ? p.x : nullptr, p.x, nullptr, p.x,
                                                          p.stats, act, &c.backward_workspace);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, p.mode, opsOf(e), act, p.x,
                                                             &c.reserve);
  c.ok = s == CUDNN_STATUS_SUCCESS;
  if (!c.ok && CUDNN_STATUS_CATEGORY(s) != CUDNN_STATUS_NOT_SUPPORTED)
    std::fprintf(stderr, "nn::cuda: %s: sizing cuDNN's Ex call%s failed (%s); not taken\n",
                 what.c_str(), e == Ex::BnRelu ? " with the ReLU" : "", cudnnGetErrorString(s));
}

BnPlan& planFor(const BatchNorm2d& bn, int N, int H, int W, const std::string& what) {
  auto& slot =
      backend()
          .plans[key("batchnorm2d", N, bn.C, H, W, int(activationType()), backend().deterministic)];
  if (!slot) {
    auto p = std::make_shared<BnPlan>();
    const cudnnDataType_t data = activationType();
    ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&p->x));
    ACCORD_NN_CUDA_CHECK(what, cudnnCreateTensorDescriptor(&p->stats));
    ACCORD_NN_CUDA_CHECK(what, cudnnSetTensor4dDescriptor(
                                   p->x, halfActivations() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                   data, N, bn.C, H, W));
    ACCORD_NN_CUDA_CHECK(what,
                         cudnnDeriveBNTensorDescriptor(p->stats, p->x, CUDNN_BATCHNORM_SPATIAL));
    if (halfActivations() && !backend().deterministic) {
      p->mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
      ACCORD_NN_CUDA_CHECK(what, cudnnCreateActivationDescriptor(&p->relu));
      ACCORD_NN_CUDA_CHECK(what, cudnnSetActivationDescriptor(p->relu, CUDNN_ACTIVATION_RELU,
                                                              CUDNN_NOT_PROPAGATE_NAN, 0.0));
      sizeEx(*p, Ex::Bn, what);
      sizeEx(*p, Ex::BnRelu, what);
    }
    slot = p;
  }
  return *static_cast<BnPlan*>(slot.get());
}

std::string checkBound(const BatchNorm2d& bn, int N, int H, int W, bool training, bool backward,
                       const char* fn) {
  std::string what = key(fn, "(N C H W)", N, bn.C, H, W, training ? "training" : "inference",
                         bn.relu ? "relu" : "");
  if (N <= 0 || bn.C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  if (training && size_t(N) * H * W < 2)
    throw InvalidArgument(what + ": training needs more than one value per channel");
  if (!(bn.eps >= CUDNN_BN_MIN_EPSILON))
    throw InvalidArgument(key(what.c_str(), ": eps", bn.eps, "is below cuDNN's minimum"));
  if (!bn.gamma || !bn.beta || !bn.running_mean || !bn.running_var ||
      (training && (!bn.save_mean || !bn.save_var)))
    throw InvalidArgument(what + ": buffers not bound");
  if (backward && (!bn.dgamma || !bn.dbeta)) throw InvalidArgument(what + ": gradients not bound");
  return what;
}

// Whether cuDNN's answer `s` refuses the call for these tensors (a sub-code of
// NOT_SUPPORTED: shape, data type, layout...; or the bare BAD_PARAM older paths give for
// a combination they lack) rather than failing it: then a simpler call may do. Not
// BAD_PARAM's sub-codes (a null or misaligned pointer: our error, reported), and never
// while the stream is being captured, where a call can fail for the capture's reasons.
// A refusal is said once on stderr, with `what` and what runs instead.
bool refused(cudnnStatus_t s, const std::string& what, const char* instead) {
  if (CUDNN_STATUS_CATEGORY(s) != CUDNN_STATUS_NOT_SUPPORTED && s != CUDNN_STATUS_BAD_PARAM)
    return false;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(backend().stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone)
    return false;
  std::fprintf(stderr, "nn::cuda: %s: cuDNN refused it (%s); %s from here on\n", what.c_str(),
               cudnnGetErrorString(s), instead);
  return true;
}

// Runs a training call with the plan's mode; where cuDNN refuses the persistent mode
// for these tensors, falls back to SPATIAL for good (same statistics); a refusal of
// SPATIAL too is reported.
template <class Call>
cudnnStatus_t withMode(BnPlan& p, const std::string& what, Call&& call) {
  cudnnStatus_t s = call(p.mode);
  if (p.mode == CUDNN_BATCHNORM_SPATIAL_PERSISTENT &&
      refused(s, what, "the spatial mode for this shape")) {
    p.mode = CUDNN_BATCHNORM_SPATIAL;
    s = call(p.mode);
  }
  return s;
}

// This layer's reserve space for Ex call `e`, kept from forward to backward.
std::string reserveKey(const BatchNorm2d& bn, const BnPlan& p, int N, int H, int W, Ex e) {
  return key("batchnorm2d reserve", static_cast<const void*>(bn.save_mean), N, H, W, int(e),
             p.ex[int(e)].reserve);
}

const char* nameOf(Ex e) { return e == Ex::BnRelu ? " (Ex call, ReLU fused)" : " (Ex call)"; }

// Whether the plan offers Ex call `e` now.
bool offers(const BnPlan& p, Ex e) {
  return p.mode == CUDNN_BATCHNORM_SPATIAL_PERSISTENT && p.ex[int(e)].ok;
}

// Makes what this layer's Ex call `e` needs (its reserve space, the workspace grown to
// its size) now, outside any capture: a backward that found cuDNN refusing the fused
// ReLU does so for the Ex call the next forward takes instead, which a captured step
// could not allocate.
void* prepare(const BatchNorm2d& bn, BnPlan& p, int N, int H, int W, Ex e,
              const std::string& what) {
  const ExCall& c = p.ex[int(e)];
  workspace(std::max(c.forward_workspace, c.backward_workspace));
  return cachedBuffer(reserveKey(bn, p, N, H, W, e), c.reserve, what);
}

// The affine map forward applied: batch statistics in training, running ones otherwise.
BnAffine affineOf(const BatchNorm2d& bn, bool training) {
  if (training) return {bn.gamma, bn.beta, bn.save_mean, nullptr, bn.save_var, bn.eps};
  return {bn.gamma, bn.beta, bn.running_mean, bn.running_var, nullptr, bn.eps};
}

}  // namespace

void batchnorm2d_forward(BatchNorm2d& bn, const float* x, float* y, int N, int H, int W,
                         bool training) {
  const std::string what = checkBound(bn, N, H, W, training, false, "batchnorm2d_forward");
  if (training && x == y) throw InvalidArgument(what + ": y may alias x only in inference");
  BnPlan& p = planFor(bn, N, H, W, what);
  Backend& b = backend();
  const float one = 1.0f, zero = 0.0f;
  Ex took = Ex::None;
  if (training) {
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    bool ran = false;
    for (const Ex e : {Ex::BnRelu, Ex::Bn}) {
      if ((e == Ex::BnRelu && !bn.relu) || !offers(p, e)) continue;
      ExCall& c = p.ex[int(e)];
      void* reserve = prepare(bn, p, N, H, W, e, what);
      void* ws = workspace(c.forward_workspace);
      s = cudnnBatchNormalizationForwardTrainingEx(
          b.cudnn, p.mode, opsOf(e), &one, &zero, p.x, x, nullptr, nullptr, p.x, y, p.stats,
          bn.gamma, bn.beta, double(bn.momentum), bn.running_mean, bn.running_var, double(bn.eps),
          bn.save_mean, bn.save_var, e == Ex::BnRelu ? p.relu : nullptr, ws, c.forward_workspace,
          reserve, c.reserve);
      if (refused(s, what + nameOf(e), "a simpler call for this shape")) {
        c.ok = false;
        continue;
      }
      ran = true;
      took = e;
      break;
    }
    if (!ran) {
      s = withMode(p, what, [&](cudnnBatchNormMode_t mode) {
        return cudnnBatchNormalizationForwardTraining(
            b.cudnn, mode, &one, &zero, p.x, x, p.x, y, p.stats, bn.gamma, bn.beta,
            double(bn.momentum), bn.running_mean, bn.running_var, double(bn.eps), bn.save_mean,
            bn.save_var);
      });
    }
    b.bn_forward[bn.save_mean] = {s == CUDNN_STATUS_SUCCESS ? int(took) : 0, y, "none"};
    ACCORD_NN_CUDA_CHECK(what, s);
  } else if (!bn.relu && x != y) {
    ACCORD_NN_CUDA_CHECK(
        what, cudnnBatchNormalizationForwardInference(
                  b.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, p.x, x, p.x, y, p.stats, bn.gamma,
                  bn.beta, bn.running_mean, bn.running_var, double(bn.eps)));
    return;
  }
  // With the fused ReLU this overwrites cuDNN's y (training, unless cuDNN fused it) or
  // is the whole forward (inference); without it, it is the in-place inference, which
  // cuDNN does not promise.
  if ((bn.relu && took != Ex::BnRelu) || !training) {
    launchBnApply(x, y, affineOf(bn, training), bn.relu, N, bn.C, size_t(H) * W);
    checkLaunch(what);
  }
}

std::string batchnorm2d_forward_path(const BatchNorm2d& bn) {
  const auto found = backend().bn_forward.find(bn.save_mean);
  const Ex e = found == backend().bn_forward.end() ? Ex::None : Ex(found->second.ex);
  return e == Ex::BnRelu ? "Ex with the ReLU" : e == Ex::Bn ? "Ex" : "plain";
}

std::string batchnorm2d_backward_path(const BatchNorm2d& bn) {
  const auto found = backend().bn_forward.find(bn.save_mean);
  return found == backend().bn_forward.end() ? "none" : found->second.backward;
}

void detail::bnForwardWithoutEx(const BatchNorm2d& bn) { backend().bn_forward[bn.save_mean] = {}; }

void batchnorm2d_backward(BatchNorm2d& bn, const float* x, const float* dy, float* dx, int N, int H,
                          int W, bool training) {
  const std::string what = checkBound(bn, N, H, W, training, true, "batchnorm2d_backward");
  const size_t HW = size_t(H) * W;
  const size_t n = size_t(N) * bn.C * HW;
  if (!training) {
    launchBnBackwardInference(x, dy, dx, bn.dgamma, bn.dbeta, affineOf(bn, false), bn.relu, N, bn.C,
                              HW);
    checkLaunch(what);
    return;
  }
  BnPlan& p = planFor(bn, N, H, W, what);
  Backend& b = backend();
  const float one = 1.0f, zero = 0.0f;
  const auto found = b.bn_forward.find(bn.save_mean);
  const BnForward forward = found == b.bn_forward.end() ? BnForward{} : found->second;
  // Forward's Ex call, if the plan still offers it, with what forward left for it.
  const Ex e = bn.relu || Ex(forward.ex) != Ex::BnRelu ? Ex(forward.ex) : Ex::None;
  void* reserve =
      e != Ex::None && offers(p, e) ? existingBuffer(reserveKey(bn, p, N, H, W, e)) : nullptr;
  // cuDNN reads the gradient from a buffer apart from dx: dx may alias dy, and cuDNN
  // does not promise to work in place. Without cuDNN's fused ReLU, ours masks it there:
  // from forward's output where cuDNN's fused ReLU made it, else from the statistics as
  // our apply did.
  const auto apart = [&](bool mask) {
    if (!mask && dx != dy) return dy;
    float* g = static_cast<float*>(scratch(kSlotBatchNormDy, activationBytes(n)));
    if (mask && Ex(forward.ex) == Ex::BnRelu) {
      launchReluBackward(static_cast<const float*>(forward.y), dy, g, n);
      checkLaunch(what);
    } else if (mask) {
      launchBnReluMask(x, dy, g, affineOf(bn, true), N, bn.C, HW);
      checkLaunch(what);
    } else {
      ACCORD_NN_CUDA_CHECK(
          what, cudaMemcpyAsync(g, dy, activationBytes(n), cudaMemcpyDeviceToDevice, b.stream));
    }
    return static_cast<const float*>(g);
  };
  if (reserve) {
    const float* g = apart(bn.relu && e != Ex::BnRelu);
    ExCall& c = p.ex[int(e)];
    void* ws = workspace(c.backward_workspace);
    const bool relu = e == Ex::BnRelu;
    const cudnnStatus_t s = cudnnBatchNormalizationBackwardEx(
        b.cudnn, p.mode, opsOf(e), &one, &zero, &one, &zero, p.x, x, relu ? p.x : nullptr,
        relu ? forward.y : nullptr, p.x, g, nullptr, nullptr, p.x, dx, p.stats, bn.gamma, bn.beta,
        bn.dgamma, bn.dbeta, double(bn.eps), bn.save_mean, bn.save_var, relu ? p.relu : nullptr, ws,
        c.backward_workspace, reserve, c.reserve);
    if (!refused(s, what + nameOf(e), "a simpler call for this shape")) {
      ACCORD_NN_CUDA_CHECK(what, s);
      b.bn_forward[bn.save_mean].backward = "Ex";
      return;
    }
    c.ok = false;
  }
  // Forward took no Ex call (a fused convolution summed its statistics, or the
  // deterministic mode, or cuDNN refused it): cuDNN's plain backward is its slow path on
  // 16-bit channels-last data, so ours where it takes the tensors.
  if (Ex(forward.ex) == Ex::None &&
      launchBnBackwardTraining(x, dy, dx, bn.dgamma, bn.dbeta, affineOf(bn, true), bn.relu, N, bn.C,
                               HW)) {
    checkLaunch(what);
    b.bn_forward[bn.save_mean].backward = "ours";
    return;
  }
  // Forward fused the ReLU, which cuDNN has since refused for this shape (here, or in
  // the backward of another layer of it): the next forward takes the Ex call without.
  if (Ex(forward.ex) == Ex::BnRelu && !offers(p, Ex::BnRelu) && offers(p, Ex::Bn))
    prepare(bn, p, N, H, W, Ex::Bn, what);
  const float* g = apart(bn.relu);
  ACCORD_NN_CUDA_CHECK(what, withMode(p, what, [&](cudnnBatchNormMode_t mode) {
                         return cudnnBatchNormalizationBackward(
                             b.cudnn, mode, &one, &zero, &one, &zero, p.x, x, p.x, g, p.x, dx,
                             p.stats, bn.gamma, bn.dgamma, bn.dbeta, double(bn.eps), bn.save_mean,
                             bn.save_var);
                       }));
  b.bn_forward[bn.save_mean].backward = "plain";
}

}  // namespace accord::nn::cuda

// batchnorm2d on cuDNN's legacy batch norm (SPATIAL: statistics per channel over N, H, W).
//
// Training: cudnnBatchNormalizationForwardTraining normalises with the batch mean and
// biased variance and folds the batch statistics into the running ones with
// exponentialAverageFactor = momentum, i.e. r = (1 - momentum) r + momentum batch, the
// variance unbiased (N H W / (N H W - 1)) like PyTorch, which runs on the same call.
// It saves the mean and the INVERSE standard deviation 1 / sqrt(var + eps) for backward:
// BatchNorm2d::save_var holds that here, not the variance (see layers_cuda.h).
// Backward in training mode is cudnnBatchNormalizationBackward on those saved values.
//
// Inference: cudnnBatchNormalizationForwardInference on the running statistics; its
// backward (the gradient of a fixed affine map) is not a cuDNN call, so it is our kernel.
//
// Fused ReLU: cuDNN's fused variants want NHWC half-precision tensors, so the ReLU is our
// kernel. Forward then writes y = max(x * scale + shift, 0) itself from the statistics
// (in training after cuDNN computed them), and backward masks dy with the same
// expression, evaluated by the same device code: the mask equals forward's exactly.
//
// Math::Bf16 / Fp16: x, y and the gradients are 16-bit NHWC tensors; gamma, beta and the
// statistics stay float32 (cuDNN's derived descriptor for them is float32 for 16-bit
// data). Training then asks for CUDNN_BATCHNORM_SPATIAL_PERSISTENT through the Ex calls
// (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, with a workspace and a reserve
// space per layer that lives from forward to backward), which is what reaches cuDNN's
// fast NHWC kernels, as PyTorch's channels_last training does; where cuDNN refuses
// those, the plain calls, and where it refuses the persistent mode, SPATIAL.
#include "nn/cuda/backend_cuda.h"

#include <cstdio>

namespace accord::nn::cuda {

using namespace detail;

namespace {

struct BnPlan {
  cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
  // Training's mode: SPATIAL_PERSISTENT for 16-bit NHWC data, cuDNN's fast path there
  // (as in PyTorch's channels_last training); SPATIAL where cuDNN does not support that.
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  // The Ex calls (persistent mode only) and their buffers' sizes; off for good once
  // cuDNN refuses one.
  bool ex = false;
  size_t forward_workspace = 0, backward_workspace = 0, reserve = 0;
  BnPlan() = default;
  BnPlan(const BnPlan&) = delete;
  BnPlan& operator=(const BnPlan&) = delete;
  ~BnPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (stats) cudnnDestroyTensorDescriptor(stats);
  }
};

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
      cudnnHandle_t h = backend().cudnn;
      const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
      p->ex = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                  h, p->mode, ops, p->x, nullptr, p->x, p->stats, nullptr, &p->forward_workspace) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                  h, p->mode, ops, p->x, nullptr, p->x, nullptr, p->x, p->stats, nullptr,
                  &p->backward_workspace) == CUDNN_STATUS_SUCCESS &&
              cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                  h, p->mode, ops, nullptr, p->x, &p->reserve) == CUDNN_STATUS_SUCCESS;
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

// This layer's reserve space for the Ex calls, kept from forward to backward. Backward
// takes the Ex call only where the layer's last forward did (Backend::bn_forward_ex):
// not after the plain forward, nor after conv_bn_forward's fused statistics.
std::string reserveKey(const BatchNorm2d& bn, const BnPlan& p, int N, int H, int W) {
  return key("batchnorm2d reserve", static_cast<const void*>(bn.save_mean), N, H, W, p.reserve);
}

// Runs `ex` where the plan takes the Ex calls and `ex_here` (backward: its forward took
// them); where cuDNN refuses it, the plan stops taking them and `plain` runs instead
// (with withMode's fall-back). `took_ex`: whether the Ex call ran.
template <class Ex, class Plain>
cudnnStatus_t exOrPlain(BnPlan& p, const std::string& what, bool ex_here, Ex&& ex, Plain&& plain,
                        bool* took_ex = nullptr) {
  if (took_ex) *took_ex = false;
  if (ex_here && p.ex && p.mode == CUDNN_BATCHNORM_SPATIAL_PERSISTENT) {
    const cudnnStatus_t s = ex();
    if (!refused(s, what + " (Ex call)", "the plain calls for this shape")) {
      if (took_ex) *took_ex = s == CUDNN_STATUS_SUCCESS;
      return s;
    }
    p.ex = false;
  }
  return withMode(p, what, plain);
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
  if (training) {
    const auto ex = [&] {
      void* ws = workspace(p.forward_workspace);
      void* reserve = cachedBuffer(reserveKey(bn, p, N, H, W), p.reserve, what);
      return cudnnBatchNormalizationForwardTrainingEx(
          b.cudnn, p.mode, CUDNN_BATCHNORM_OPS_BN, &one, &zero, p.x, x, nullptr, nullptr, p.x, y,
          p.stats, bn.gamma, bn.beta, double(bn.momentum), bn.running_mean, bn.running_var,
          double(bn.eps), bn.save_mean, bn.save_var, nullptr, ws, p.forward_workspace, reserve,
          p.reserve);
    };
    bool took_ex = false;
    const cudnnStatus_t s = exOrPlain(
        p, what, true, ex,
        [&](cudnnBatchNormMode_t mode) {
          return cudnnBatchNormalizationForwardTraining(
              b.cudnn, mode, &one, &zero, p.x, x, p.x, y, p.stats, bn.gamma, bn.beta,
              double(bn.momentum), bn.running_mean, bn.running_var, double(bn.eps), bn.save_mean,
              bn.save_var);
        },
        &took_ex);
    b.bn_forward_ex[bn.save_mean] = took_ex;
    ACCORD_NN_CUDA_CHECK(what, s);
  } else if (!bn.relu && x != y) {
    ACCORD_NN_CUDA_CHECK(
        what, cudnnBatchNormalizationForwardInference(
                  b.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, p.x, x, p.x, y, p.stats, bn.gamma,
                  bn.beta, bn.running_mean, bn.running_var, double(bn.eps)));
    return;
  }
  // With the fused ReLU this overwrites cuDNN's y (training) or is the whole forward
  // (inference); without it, it is the in-place inference, which cuDNN does not promise.
  if (bn.relu || !training) {
    launchBnApply(x, y, affineOf(bn, training), bn.relu, N, bn.C, size_t(H) * W);
    checkLaunch(what);
  }
}

void detail::bnForwardWithoutEx(const BatchNorm2d& bn) {
  backend().bn_forward_ex[bn.save_mean] = false;
}

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
  // cuDNN reads the (masked) gradient from a buffer apart from dx: dx may alias dy, and
  // cuDNN does not promise to work in place.
  const float* g = dy;
  if (bn.relu || dx == dy) {
    float* masked = static_cast<float*>(scratch(kSlotBatchNormDy, activationBytes(n)));
    if (bn.relu) {
      launchBnReluMask(x, dy, masked, affineOf(bn, true), N, bn.C, HW);
      checkLaunch(what);
    } else {
      ACCORD_NN_CUDA_CHECK(what, cudaMemcpyAsync(masked, dy, activationBytes(n),
                                                 cudaMemcpyDeviceToDevice, b.stream));
    }
    g = masked;
  }
  const float one = 1.0f, zero = 0.0f;
  const auto took = b.bn_forward_ex.find(bn.save_mean);
  void* reserve = p.ex && took != b.bn_forward_ex.end() && took->second
                      ? existingBuffer(reserveKey(bn, p, N, H, W))
                      : nullptr;
  const auto ex = [&] {
    void* ws = workspace(p.backward_workspace);
    return cudnnBatchNormalizationBackwardEx(
        b.cudnn, p.mode, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, p.x, x, nullptr, nullptr,
        p.x, g, nullptr, nullptr, p.x, dx, p.stats, bn.gamma, bn.beta, bn.dgamma, bn.dbeta,
        double(bn.eps), bn.save_mean, bn.save_var, nullptr, ws, p.backward_workspace, reserve,
        p.reserve);
  };
  ACCORD_NN_CUDA_CHECK(what,
                       exOrPlain(p, what, reserve != nullptr, ex, [&](cudnnBatchNormMode_t mode) {
                         return cudnnBatchNormalizationBackward(
                             b.cudnn, mode, &one, &zero, &one, &zero, p.x, x, p.x, g, p.x, dx,
                             p.stats, bn.gamma, bn.dgamma, bn.dbeta, double(bn.eps), bn.save_mean,
                             bn.save_var);
                       }));
}

}  // namespace accord::nn::cuda

// batchnorm2d on oneDNN, on the caller's NCHW buffers (batch norm is memory-bound, so a
// blocked layout would not pay for its reorders). Training normalises with the batch
// statistics, which oneDNN writes to save_mean / save_var for the backward pass, and
// then folds them into the running statistics here (PyTorch's rule, unbiased
// variance). Inference, and backward in inference mode, use the running statistics as
// oneDNN's "global stats". gamma and beta stay separate buffers (use_scale / use_shift),
// so they are separate named parameters for the optimizer and the allreduce.
#include "nn/backend.h"
#include "nn/layers.h"

#include <optional>

namespace accord::nn {

using namespace detail;

namespace {

using Flags = dnnl::normalization_flags;

struct BnPlan {
  memory::desc data;  // (N, C, H, W) nchw
  memory::desc stat;  // (C)
  Flags flags;
  dnnl::batch_normalization_forward::primitive_desc fwd_pd;
  dnnl::batch_normalization_forward fwd;
  std::optional<dnnl::batch_normalization_backward> bwd;
};

BnPlan makePlan(const BatchNorm2d& bn, int N, int H, int W, bool training) {
  BnPlan p;
  p.data = plain({N, bn.C, H, W}, Tag::nchw);
  p.stat = plain({bn.C}, Tag::x);
  p.flags = Flags::use_scale | Flags::use_shift;
  if (!training) p.flags = p.flags | Flags::use_global_stats;
  // forward_training in both modes: it is also the hint the backward pass needs, and
  // with global stats it computes exactly what forward_inference would.
  dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_training, p.data, bn.eps,
                                            p.flags);
  p.fwd_pd = dnnl::batch_normalization_forward::primitive_desc(d, backend().engine);
  p.fwd = dnnl::batch_normalization_forward(p.fwd_pd);
  return p;
}

std::string describe(const char* fn, const BatchNorm2d& bn, int N, int H, int W, bool training) {
  return key(fn, "(N C H W)", N, bn.C, H, W, training ? "training" : "inference");
}

BnPlan& planFor(const BatchNorm2d& bn, int N, int H, int W, bool training,
                const std::string& what) {
  if (N <= 0 || bn.C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  if (!bn.gamma || !bn.beta || !bn.running_mean || !bn.running_var ||
      (training && (!bn.save_mean || !bn.save_var)))
    throw InvalidArgument(what + ": buffers not bound");
  return cached<BnPlan>(key("batchnorm2d", N, bn.C, H, W, bn.eps, training),
                        [&] { return makePlan(bn, N, H, W, training); });
}

// PyTorch: running = (1 - m) * running + m * batch, with the unbiased batch variance.
void updateRunningStats(BatchNorm2d& bn, size_t count) {
  float unbias = count > 1 ? static_cast<float>(count) / static_cast<float>(count - 1) : 1.0f;
  for (int c = 0; c < bn.C; ++c) {
    bn.running_mean[c] = (1 - bn.momentum) * bn.running_mean[c] + bn.momentum * bn.save_mean[c];
    bn.running_var[c] =
        (1 - bn.momentum) * bn.running_var[c] + bn.momentum * bn.save_var[c] * unbias;
  }
}

}  // namespace

void batchnorm2d_bind(BatchNorm2d& bn, Arena& params, Arena& grads, Arena& buffers, Arena& acts) {
  bn.gamma = params.take(bn.C);
  bn.beta = params.take(bn.C);
  bn.dgamma = grads.take(bn.C);
  bn.dbeta = grads.take(bn.C);
  bn.running_mean = buffers.take(bn.C);
  bn.running_var = buffers.take(bn.C);
  bn.save_mean = acts.take(bn.C);
  bn.save_var = acts.take(bn.C);
}

void batchnorm2d_init(BatchNorm2d& bn, bool zero_gamma) {
  for (int c = 0; c < bn.C; ++c) {
    bn.gamma[c] = zero_gamma ? 0.0f : 1.0f;
    bn.beta[c] = 0.0f;
    bn.running_mean[c] = 0.0f;
    bn.running_var[c] = 1.0f;
  }
}

void batchnorm2d_forward(BatchNorm2d& bn, const float* x, float* y, int N, int H, int W,
                         bool training) {
  std::string what = describe("batchnorm2d_forward", bn, N, H, W, training);
  guarded(what, [&] {
    BnPlan& p = planFor(bn, N, H, W, training, what);
    float* mean = training ? bn.save_mean : bn.running_mean;
    float* var = training ? bn.save_var : bn.running_var;
    execute(p.fwd, {{DNNL_ARG_SRC, wrap(p.data, x)},
                    {DNNL_ARG_DST, wrap(p.data, y)},
                    {DNNL_ARG_SCALE, wrap(p.stat, bn.gamma)},
                    {DNNL_ARG_SHIFT, wrap(p.stat, bn.beta)},
                    {DNNL_ARG_MEAN, wrap(p.stat, mean)},
                    {DNNL_ARG_VARIANCE, wrap(p.stat, var)}});
    backend().stream.wait();
  });
  if (training) updateRunningStats(bn, static_cast<size_t>(N) * H * W);
}

void batchnorm2d_backward(BatchNorm2d& bn, const float* x, const float* dy, float* dx, int N, int H,
                          int W, bool training) {
  std::string what = describe("batchnorm2d_backward", bn, N, H, W, training);
  if (!bn.dgamma || !bn.dbeta) throw InvalidArgument(what + ": gradients not bound");
  guarded(what, [&] {
    BnPlan& p = planFor(bn, N, H, W, training, what);
    if (!p.bwd) {
      dnnl::batch_normalization_backward::desc d(dnnl::prop_kind::backward, p.data, p.data, bn.eps,
                                                 p.flags);
      p.bwd = dnnl::batch_normalization_backward(
          dnnl::batch_normalization_backward::primitive_desc(d, backend().engine, p.fwd_pd));
    }
    float* mean = training ? bn.save_mean : bn.running_mean;
    float* var = training ? bn.save_var : bn.running_var;
    execute(*p.bwd, {{DNNL_ARG_SRC, wrap(p.data, x)},
                     {DNNL_ARG_DIFF_DST, wrap(p.data, dy)},
                     {DNNL_ARG_DIFF_SRC, wrap(p.data, dx)},
                     {DNNL_ARG_SCALE, wrap(p.stat, bn.gamma)},
                     {DNNL_ARG_SHIFT, wrap(p.stat, bn.beta)},  // unused; 2.6 requires it
                     {DNNL_ARG_MEAN, wrap(p.stat, mean)},
                     {DNNL_ARG_VARIANCE, wrap(p.stat, var)},
                     {DNNL_ARG_DIFF_SCALE, wrap(p.stat, bn.dgamma)},
                     {DNNL_ARG_DIFF_SHIFT, wrap(p.stat, bn.dbeta)}});
    backend().stream.wait();
  });
}

}  // namespace accord::nn

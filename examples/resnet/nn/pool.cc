// Max pool (the stem's 3x3/2) and global average pool on oneDNN's pooling primitives,
// on plain NCHW. Max pool keeps oneDNN's arg-max workspace (one byte or int per
// output element, so the caller's ws of output size always holds it) instead of
// recomputing the max in backward. Global average pool is a pooling with an H x W
// kernel: the (N, C, 1, 1) output is the (N, C) the fc layer reads.
#include "nn/backend.h"
#include "nn/layers.h"

namespace accord::nn {

using namespace detail;

namespace {

struct PoolPlan {
  memory::desc x, y, ws;
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward bwd;
};

PoolPlan makePool(dnnl::algorithm alg, const memory::desc& x, const memory::desc& y,
                  const memory::dims& kernel, const memory::dims& stride, const memory::dims& pad) {
  auto& eng = backend().engine;
  dnnl::pooling_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, alg, x, y, stride, kernel, pad, pad}, eng);
  dnnl::pooling_backward::primitive_desc bpd({alg, x, y, stride, kernel, pad, pad}, eng, fpd);
  return PoolPlan{x, y, fpd.workspace_desc(), dnnl::pooling_forward(fpd),
                  dnnl::pooling_backward(bpd)};
}

PoolPlan& maxPlan(const MaxPool2d& p, int N, int C, int H, int W, const std::string& what) {
  int Ho = p.out_h(H), Wo = p.out_w(W);
  if (N <= 0 || C <= 0 || Ho <= 0 || Wo <= 0 || p.K <= 0 || p.stride <= 0 || p.pad < 0 ||
      p.pad >= p.K)
    throw InvalidArgument(what + ": invalid shape");
  PoolPlan& plan = cached<PoolPlan>(key("maxpool2d", N, C, H, W, p.K, p.stride, p.pad), [&] {
    return makePool(dnnl::algorithm::pooling_max, plain({N, C, H, W}, Tag::nchw),
                    plain({N, C, Ho, Wo}, Tag::nchw), {p.K, p.K}, {p.stride, p.stride},
                    {p.pad, p.pad});
  });
  if (plan.ws.get_size() > plan.y.get_size())
    throw Error(what + ": oneDNN's workspace is larger than the output");
  return plan;
}

PoolPlan& avgPlan(int N, int C, int H, int W, const std::string& what) {
  if (N <= 0 || C <= 0 || H <= 0 || W <= 0) throw InvalidArgument(what + ": invalid shape");
  return cached<PoolPlan>(key("avgpool", N, C, H, W), [&] {
    return makePool(dnnl::algorithm::pooling_avg_exclude_padding, plain({N, C, H, W}, Tag::nchw),
                    plain({N, C, 1, 1}, Tag::nchw), {H, W}, {H, W}, {0, 0});
  });
}

}  // namespace

void maxpool2d_forward(MaxPool2d& p, const float* x, float* y, float* ws, int N, int C, int H,
                       int W) {
  std::string what =
      key("maxpool2d_forward (N C H W)", N, C, H, W, "K", p.K, "stride", p.stride, "pad", p.pad);
  guarded(what, [&] {
    PoolPlan& plan = maxPlan(p, N, C, H, W, what);
    memory wsm(plan.ws, backend().engine, ws);
    execute(plan.fwd, {{DNNL_ARG_SRC, wrap(plan.x, x)},
                       {DNNL_ARG_DST, wrap(plan.y, y)},
                       {DNNL_ARG_WORKSPACE, wsm}});
    backend().stream.wait();
  });
}

void maxpool2d_backward(MaxPool2d& p, const float* dy, const float* ws, float* dx, int N, int C,
                        int H, int W) {
  std::string what =
      key("maxpool2d_backward (N C H W)", N, C, H, W, "K", p.K, "stride", p.stride, "pad", p.pad);
  guarded(what, [&] {
    PoolPlan& plan = maxPlan(p, N, C, H, W, what);
    memory wsm(plan.ws, backend().engine, const_cast<float*>(ws));
    execute(plan.bwd, {{DNNL_ARG_DIFF_DST, wrap(plan.y, dy)},
                       {DNNL_ARG_DIFF_SRC, wrap(plan.x, dx)},
                       {DNNL_ARG_WORKSPACE, wsm}});
    backend().stream.wait();
  });
}

void avgpool_forward(const float* x, float* y, int N, int C, int H, int W) {
  std::string what = key("avgpool_forward (N C H W)", N, C, H, W);
  guarded(what, [&] {
    PoolPlan& plan = avgPlan(N, C, H, W, what);
    execute(plan.fwd, {{DNNL_ARG_SRC, wrap(plan.x, x)}, {DNNL_ARG_DST, wrap(plan.y, y)}});
    backend().stream.wait();
  });
}

void avgpool_backward(const float* dy, float* dx, int N, int C, int H, int W) {
  std::string what = key("avgpool_backward (N C H W)", N, C, H, W);
  guarded(what, [&] {
    PoolPlan& plan = avgPlan(N, C, H, W, what);
    execute(plan.bwd,
            {{DNNL_ARG_DIFF_DST, wrap(plan.y, dy)}, {DNNL_ARG_DIFF_SRC, wrap(plan.x, dx)}});
    backend().stream.wait();
  });
}

}  // namespace accord::nn

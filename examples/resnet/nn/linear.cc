// The fully connected layer on oneDNN's inner product, on plain layouts: x (N, in) is
// "nc", W (out, in) is "oi", exactly torch.nn.Linear's y = x W^T + b. The fc layer is a
// small part of a ResNet step, so no blocked layouts here.
#include "nn/backend.h"
#include "nn/layers.h"

#include <cmath>

namespace accord::nn {

using namespace detail;

namespace {

struct LinearPlan {
  memory::desc x, w, b, y;
  dnnl::inner_product_forward fwd;
  dnnl::inner_product_backward_data bwd_data;
  dnnl::inner_product_backward_weights bwd_weights;
};

LinearPlan makePlan(const Linear& l, int N) {
  LinearPlan p;
  p.x = plain({N, l.in}, Tag::nc);
  p.w = plain({l.out, l.in}, Tag::oi);
  p.b = plain({l.out}, Tag::x);
  p.y = plain({N, l.out}, Tag::nc);
  auto& eng = backend().engine;
  dnnl::inner_product_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, p.x, p.w, p.b, p.y}, eng);
  dnnl::inner_product_backward_data::primitive_desc dpd({p.x, p.w, p.y}, eng, fpd);
  dnnl::inner_product_backward_weights::primitive_desc wpd({p.x, p.w, p.b, p.y}, eng, fpd);
  p.fwd = dnnl::inner_product_forward(fpd);
  p.bwd_data = dnnl::inner_product_backward_data(dpd);
  p.bwd_weights = dnnl::inner_product_backward_weights(wpd);
  return p;
}

LinearPlan& planFor(const Linear& l, int N, const std::string& what) {
  if (N <= 0 || l.in <= 0 || l.out <= 0) throw InvalidArgument(what + ": invalid shape");
  if (!l.w || !l.b) throw InvalidArgument(what + ": parameters not bound");
  return cached<LinearPlan>(key("linear", N, l.in, l.out), [&] { return makePlan(l, N); });
}

}  // namespace

void linear_bind(Linear& l, Arena& params, Arena& grads) {
  l.w = params.take(static_cast<size_t>(l.out) * l.in);
  l.b = params.take(l.out);
  l.dw = grads.take(static_cast<size_t>(l.out) * l.in);
  l.db = grads.take(l.out);
}

void linear_init(Linear& l, std::mt19937_64& rng) {
  float bound = 1.0f / std::sqrt(static_cast<float>(l.in));
  std::uniform_real_distribution<float> uniform(-bound, bound);
  for (size_t i = 0; i < static_cast<size_t>(l.out) * l.in; ++i) l.w[i] = uniform(rng);
  for (int i = 0; i < l.out; ++i) l.b[i] = uniform(rng);
}

void linear_forward(Linear& l, const float* x, float* y, int N) {
  std::string what = key("linear_forward (N in out)", N, l.in, l.out);
  guarded(what, [&] {
    LinearPlan& p = planFor(l, N, what);
    execute(p.fwd, {{DNNL_ARG_SRC, wrap(p.x, x)},
                    {DNNL_ARG_WEIGHTS, wrap(p.w, l.w)},
                    {DNNL_ARG_BIAS, wrap(p.b, l.b)},
                    {DNNL_ARG_DST, wrap(p.y, y)}});
    backend().stream.wait();
  });
}

void linear_backward(Linear& l, const float* x, const float* dy, float* dx, int N) {
  std::string what = key("linear_backward (N in out)", N, l.in, l.out);
  if (!l.dw || !l.db) throw InvalidArgument(what + ": gradients not bound");
  guarded(what, [&] {
    LinearPlan& p = planFor(l, N, what);
    execute(p.bwd_weights, {{DNNL_ARG_SRC, wrap(p.x, x)},
                            {DNNL_ARG_DIFF_DST, wrap(p.y, dy)},
                            {DNNL_ARG_DIFF_WEIGHTS, wrap(p.w, l.dw)},
                            {DNNL_ARG_DIFF_BIAS, wrap(p.b, l.db)}});
    if (dx)
      execute(p.bwd_data, {{DNNL_ARG_DIFF_DST, wrap(p.y, dy)},
                           {DNNL_ARG_WEIGHTS, wrap(p.w, l.w)},
                           {DNNL_ARG_DIFF_SRC, wrap(p.x, dx)}});
    backend().stream.wait();
  });
}

}  // namespace accord::nn

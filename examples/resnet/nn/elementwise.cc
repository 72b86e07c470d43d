// ReLU, residual add (with the ReLU after it or not) and gradient accumulation. Trivial
// loops, but they run on oneDNN's eltwise and binary primitives rather than hand loops
// so that every large parallel loop of a training step uses the same (OpenMP) thread
// pool: a second pool (oneTBB) spinning beside it would fight it for the cores. Buffers
// are viewed as flat 1-D tensors; plans are cached per length.
#include "nn/backend.h"
#include "nn/layers.h"

#include <utility>

namespace accord::nn {

using namespace detail;

namespace {

struct ReluPlan {
  memory::desc md;
  dnnl::eltwise_forward fwd;
  dnnl::eltwise_backward bwd;
};

struct BinaryPlan {
  memory::desc md;
  dnnl::binary add;
};

memory::desc flat(size_t n) { return plain({static_cast<memory::dim>(n)}, Tag::x); }

// The backward pass reads the relu's output (relu_use_dst_for_bwd), so the forward may
// run in place and the input need not be kept.
ReluPlan& reluPlan(size_t n) {
  return cached<ReluPlan>(key("relu", n), [&] {
    auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    auto& eng = backend().engine;
    memory::desc md = flat(n);
    dnnl::eltwise_forward::primitive_desc fpd(
        {dnnl::prop_kind::forward_training, alg, md, 0.0f, 0.0f}, eng);
    dnnl::eltwise_backward::primitive_desc bpd({alg, md, md, 0.0f, 0.0f}, eng, fpd);
    return ReluPlan{md, dnnl::eltwise_forward(fpd), dnnl::eltwise_backward(bpd)};
  });
}

// a + b, or max(a + b, 0) with the ReLU as the add's post-op (one pass).
BinaryPlan& addPlan(size_t n, bool relu) {
  return cached<BinaryPlan>(key(relu ? "add_relu" : "add", n), [&] {
    memory::desc md = flat(n);
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    dnnl::binary::primitive_desc pd({dnnl::algorithm::binary_add, md, md, md}, attr,
                                    backend().engine);
    return BinaryPlan{md, dnnl::binary(pd)};
  });
}

// y = a + b (then the ReLU), in place on a allowed (oneDNN's in-place mode is
// dst == src0).
void add(const float* a, const float* b, float* y, size_t n, const char* fn, bool relu = false) {
  if (n == 0) return;
  if (y == b) std::swap(a, b);
  guarded(key(fn, "n", n), [&] {
    BinaryPlan& p = addPlan(n, relu);
    execute(p.add, {{DNNL_ARG_SRC_0, wrap(p.md, a)},
                    {DNNL_ARG_SRC_1, wrap(p.md, b)},
                    {DNNL_ARG_DST, wrap(p.md, y)}});
    backend().stream.wait();
  });
}

}  // namespace

void relu_forward(const float* x, float* y, size_t n) {
  if (n == 0) return;
  guarded(key("relu_forward n", n), [&] {
    ReluPlan& p = reluPlan(n);
    execute(p.fwd, {{DNNL_ARG_SRC, wrap(p.md, x)}, {DNNL_ARG_DST, wrap(p.md, y)}});
    backend().stream.wait();
  });
}

void relu_backward(const float* y, const float* dy, float* dx, size_t n) {
  if (n == 0) return;
  guarded(key("relu_backward n", n), [&] {
    ReluPlan& p = reluPlan(n);
    execute(p.bwd, {{DNNL_ARG_DST, wrap(p.md, y)},
                    {DNNL_ARG_DIFF_DST, wrap(p.md, dy)},
                    {DNNL_ARG_DIFF_SRC, wrap(p.md, dx)}});
    backend().stream.wait();
  });
}

void add_forward(const float* a, const float* b, float* y, size_t n) {
  add(a, b, y, n, "add_forward");
}

void accumulate(float* y, const float* x, size_t n) { add(y, x, y, n, "accumulate"); }

void add_relu_forward(const float* a, const float* b, float* y, size_t n) {
  add(a, b, y, n, "add_relu_forward", true);
}

// Two passes here (oneDNN has no masked add); the GPU's is one.
void accumulate_relu_backward(float* y, const float* x, const float* relu_y, size_t n) {
  accumulate(y, x, n);
  relu_backward(relu_y, y, y, n);
}

}  // namespace accord::nn

// The element-wise kernels: ReLU each way, the residual add, the add and ReLU that end
// a residual block in one pass, and, going back, the sum of a block's two input
// gradients masked by the ReLU before it in one pass. They move bytes and do nearly no arithmetic,
// so they read and write 16 bytes per access (eight 16-bit values or four floats) wherever every
// pointer allows it; the rest of an array, and arrays that do not start on 16 bytes, go
// one value at a time. Each element's result is the same either way.
#include "nn/cuda/kernel_util.cuh"

#include <initializer_list>

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

struct Relu {
  __device__ float operator()(float x) const { return fmaxf(x, 0.0f); }
};
// (y, dy) -> dx: the gradient where the ReLU's output y is positive.
struct ReluBackward {
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct AddRelu {
  __device__ float operator()(float a, float b) const { return fmaxf(a + b, 0.0f); }
};
// (y, x, relu_y) -> y + x where the ReLU's output relu_y is positive.
struct AccumulateReluBackward {
  __device__ float operator()(float y, float x, float relu_y) const {
    return relu_y > 0.0f ? y + x : 0.0f;
  }
};

// y[i] = f(x[i]) for i < n; the first `packs` Packs of each array in vector accesses.
template <class A, class F>
__global__ void map1Kernel(const A* x, A* y, size_t n, size_t packs, F f) {
  const auto* xv = reinterpret_cast<const Pack<A>*>(x);
  auto* yv = reinterpret_cast<Pack<A>*>(y);
  for (size_t i = firstIndex(); i < packs; i += gridStride()) {
    const Pack<A> a = xv[i];
    Pack<A> out;
#pragma unroll
    for (int k = 0; k < Pack<A>::kCount; ++k) out.v[k] = fromFloat<A>(f(toFloat(a.v[k])));
    yv[i] = out;
  }
  for (size_t i = packs * Pack<A>::kCount + firstIndex(); i < n; i += gridStride())
    store(y, i, f(load(x, i)));
}

// y[i] = f(a[i], b[i]) for i < n, likewise.
template <class A, class F>
__global__ void map2Kernel(const A* a, const A* b, A* y, size_t n, size_t packs, F f) {
  const auto* av = reinterpret_cast<const Pack<A>*>(a);
  const auto* bv = reinterpret_cast<const Pack<A>*>(b);
  auto* yv = reinterpret_cast<Pack<A>*>(y);
  for (size_t i = firstIndex(); i < packs; i += gridStride()) {
    const Pack<A> p = av[i], q = bv[i];
    Pack<A> out;
#pragma unroll
    for (int k = 0; k < Pack<A>::kCount; ++k)
      out.v[k] = fromFloat<A>(f(toFloat(p.v[k]), toFloat(q.v[k])));
    yv[i] = out;
  }
  for (size_t i = packs * Pack<A>::kCount + firstIndex(); i < n; i += gridStride())
    store(y, i, f(load(a, i), load(b, i)));
}

// y[i] = f(a[i], b[i], c[i]) for i < n, likewise.
template <class A, class F>
__global__ void map3Kernel(const A* a, const A* b, const A* c, A* y, size_t n, size_t packs, F f) {
  const auto* av = reinterpret_cast<const Pack<A>*>(a);
  const auto* bv = reinterpret_cast<const Pack<A>*>(b);
  const auto* cv = reinterpret_cast<const Pack<A>*>(c);
  auto* yv = reinterpret_cast<Pack<A>*>(y);
  for (size_t i = firstIndex(); i < packs; i += gridStride()) {
    const Pack<A> p = av[i], q = bv[i], r = cv[i];
    Pack<A> out;
#pragma unroll
    for (int k = 0; k < Pack<A>::kCount; ++k)
      out.v[k] = fromFloat<A>(f(toFloat(p.v[k]), toFloat(q.v[k]), toFloat(r.v[k])));
    yv[i] = out;
  }
  for (size_t i = packs * Pack<A>::kCount + firstIndex(); i < n; i += gridStride())
    store(y, i, f(load(a, i), load(b, i), load(c, i)));
}

// How many whole Packs the vector loop takes: none unless every pointer is 16-byte
// aligned (an array in place on another counts once).
template <class A>
size_t packsOf(size_t n, std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (!aligned16(p)) return 0;
  return n / Pack<A>::kCount;
}

// One thread per Pack, or per value where there is no vector part.
unsigned blocksForPacks(size_t n, size_t packs) { return blocksFor(packs ? packs : n); }

template <class F>
void map1(const float* x, float* y, size_t n, F f) {
  if (!n) return;
  dispatch([&](auto t) {
    using A = decltype(t);
    const size_t packs = packsOf<A>(n, {x, y});
    map1Kernel<<<blocksForPacks(n, packs), kThreads, 0, backend().stream>>>(as<A>(x), as<A>(y), n,
                                                                            packs, f);
  });
}

template <class F>
void map2(const float* a, const float* b, float* y, size_t n, F f) {
  if (!n) return;
  dispatch([&](auto t) {
    using A = decltype(t);
    const size_t packs = packsOf<A>(n, {a, b, y});
    map2Kernel<<<blocksForPacks(n, packs), kThreads, 0, backend().stream>>>(as<A>(a), as<A>(b),
                                                                            as<A>(y), n, packs, f);
  });
}

template <class F>
void map3(const float* a, const float* b, const float* c, float* y, size_t n, F f) {
  if (!n) return;
  dispatch([&](auto t) {
    using A = decltype(t);
    const size_t packs = packsOf<A>(n, {a, b, c, y});
    map3Kernel<<<blocksForPacks(n, packs), kThreads, 0, backend().stream>>>(
        as<A>(a), as<A>(b), as<A>(c), as<A>(y), n, packs, f);
  });
}

}  // namespace

void launchRelu(const float* x, float* y, size_t n) { map1(x, y, n, Relu{}); }

void launchReluBackward(const float* y, const float* dy, float* dx, size_t n) {
  map2(y, dy, dx, n, ReluBackward{});
}

void launchAdd(const float* a, const float* b, float* y, size_t n) { map2(a, b, y, n, Add{}); }

void launchAddRelu(const float* a, const float* b, float* y, size_t n) {
  map2(a, b, y, n, AddRelu{});
}

void launchAccumulateReluBackward(float* y, const float* x, const float* relu_y, size_t n) {
  map3(y, x, relu_y, y, n, AccumulateReluBackward{});
}

}  // namespace accord::nn::cuda::detail

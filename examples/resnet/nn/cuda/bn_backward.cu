// Batch norm's training backward on 16-bit NHWC activations (launchBnBackwardTraining),
// for the layers whose forward did not take cuDNN's Ex call: after a convolution that
// summed their statistics (conv_bn.cc), in the deterministic mode, or where cuDNN
// refuses the Ex call for a shape. There cuDNN's plain backward is all it offers, and on
// channels-last data that is its slow path; this is two passes over x and dy:
//
//   1. Partial sums, per channel, of g and g (x - mean), g = dy masked by the ReLU: a
//      block takes a tile of channels (eight per thread, 16 bytes per access) and a slice
//      of the rows, its threads sum their rows, and the block sums its threads in shared
//      memory into one row of partials.
//   2. Per channel, one small launch: the partials in order give dbeta and dgamma and the
//      coefficients of dx = a g - b (x - mean) - e.
//   3. dx from x and dy, element by element (dx may be dy: each value is read before the
//      same thread writes it), from the last rows to the first: pass 1 read the last
//      rows last, so where x and dy together are not much larger than the L2 cache (the
//      last stages' 7x7 and 14x14 maps), pass 3 finds part of them still there.
//
// Every sum runs in a fixed order (no atomics), so a run repeats bit for bit. The ReLU
// mask evaluates x * scale + shift as the forward's apply does (bn_channel.cuh).
#include "nn/cuda/bn_channel.cuh"
#include "nn/cuda/kernel_util.cuh"

#include <algorithm>
#include <cstdint>

namespace accord::nn::cuda::detail {

using namespace kernel;

namespace {

// Pass 1. Thread t of a block takes channel Pack q = blockIdx.x Qt + t % Qt and the rows
// r = blockIdx.y R + t / Qt, stepping by gridDim.y R (threads past R Qt, or past the
// last Pack, only take part in the block's sum). `rows` rows of Q Packs.
template <class A, class I>
__global__ void bnBackwardSumsKernel(const A* x, const A* dy, BnAffine f, bool relu, I rows, int Q,
                                     int Qt, int R, float* part_g, float* part_gx) {
  constexpr int P = Pack<A>::kCount;
  const int tx = int(threadIdx.x) % Qt, ty = int(threadIdx.x) / Qt;
  const int q = int(blockIdx.x) * Qt + tx;
  float sum_g[P], sum_gx[P];
#pragma unroll
  for (int j = 0; j < P; ++j) sum_g[j] = 0.0f, sum_gx[j] = 0.0f;
  if (ty < R && q < Q) {
    float mean[P];
    float2 k[P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const Channel ch = channelOf(f, q * P + j);
      mean[j] = ch.mean;
      k[j] = make_float2(ch.scale, ch.shift);
    }
    const auto* xv = reinterpret_cast<const Pack<A>*>(x);
    const auto* dyv = reinterpret_cast<const Pack<A>*>(dy);
    struct Row {
      Pack<A> a, d;
    };
    forRows(
        I(blockIdx.y) * R + ty, I(gridDim.y) * R, rows,
        [&](I r) {
          return Row{xv[r * Q + q], dyv[r * Q + q]};
        },
        [&](const Row& row) {
#pragma unroll
          for (int j = 0; j < P; ++j) {
            const float v = toFloat(row.a.v[j]);
            const float g = relu && !(normalised(v, k[j]) > 0.0f) ? 0.0f : toFloat(row.d.v[j]);
            sum_g[j] += g;
            sum_gx[j] += g * (v - mean[j]);
          }
        });
  }
  blockPartials<P>(sum_g, sum_gx, Q, Qt, R, part_g, part_gx);
}

// What pass 3 needs of a channel: dx = a g - b (x - mean) - e, and the ReLU's
// (scale, shift). Two float4 per channel.
struct Coefficients {
  float4 dx;    // (a, b, e, mean)
  float4 mask;  // (scale, shift, 0, 0)
};

// Pass 2: each channel's totals (bn_channel.cuh's second reduction).
__global__ void bnBackwardCoefficientsKernel(const float* part_g, const float* part_gx, int parts,
                                             int C, double count, BnAffine f, float* dgamma,
                                             float* dbeta, Coefficients* coef) {
  int c;
  double g, gx;
  if (!channelTotals(part_g, part_gx, parts, C, &c, &g, &gx)) return;
  const Channel ch = channelOf(f, c);
  dbeta[c] = float(g);
  dgamma[c] = float(gx * ch.invstd);
  const double a = double(f.gamma[c]) * ch.invstd;
  const double b = a * ch.invstd * ch.invstd * gx / count;
  coef[c].dx = make_float4(float(a), float(b), float(a * g / count), ch.mean);
  coef[c].mask = make_float4(ch.scale, ch.shift, 0.0f, 0.0f);
}

// Pass 3, a Pack at a time, from the last Pack to the first; a thread keeps its Pack's
// coefficients while its grid-stride steps land on the same channels (always where a
// stride's values are a multiple of C).
template <class A, class I>
__global__ void bnBackwardDxKernel(const A* x, const A* dy, A* dx, const Coefficients* coef,
                                   bool relu, I packs, int Q) {
  constexpr int P = Pack<A>::kCount;
  const auto* xv = reinterpret_cast<const Pack<A>*>(x);
  const auto* dyv = reinterpret_cast<const Pack<A>*>(dy);
  auto* dxv = reinterpret_cast<Pack<A>*>(dx);
  float4 k[P];
  float2 m[P];
  int held = -1;  // the Pack of channels whose coefficients k and m hold
  for (I from_end = I(firstIndex()); from_end < packs; from_end += I(gridStride())) {
    const I i = packs - 1 - from_end;
    const int q = int(i % I(Q));
    if (q != held) {
      held = q;
#pragma unroll
      for (int j = 0; j < P; ++j) {
        k[j] = coef[q * P + j].dx;
        const float4 mask = coef[q * P + j].mask;
        m[j] = make_float2(mask.x, mask.y);
      }
    }
    const Pack<A> a = xv[i], d = dyv[i];
    Pack<A> out;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float v = toFloat(a.v[j]);
      const float g = relu && !(normalised(v, m[j]) > 0.0f) ? 0.0f : toFloat(d.v[j]);
      out.v[j] = fromFloat<A>(k[j].x * g - k[j].y * (v - k[j].w) - k[j].z);
    }
    dxv[i] = out;
  }
}

}  // namespace

bool launchBnBackwardTraining(const float* x, const float* dy, float* dx, float* dgamma,
                              float* dbeta, BnAffine f, bool relu, int N, int C, size_t HW) {
  if (!halfActivations() || N <= 0 || C <= 0 || HW == 0) return false;
  bool launched = false;
  dispatchHalf([&](auto h) {
    using A = decltype(h);
    constexpr int P = Pack<A>::kCount;
    if (!wholePacks(C, P, {x, dy, dx})) return;
    const size_t rows = size_t(N) * HW, total = rows * C;
    const RowGrid grid(rows, C, P, multiprocessors());
    const int Q = grid.Q, parts = grid.parts;
    // The coefficients first (16-byte aligned in the buffer), then the partials.
    auto* coef = static_cast<Coefficients*>(
        scratch(kSlotBnBackward, C * sizeof(Coefficients) + 2 * size_t(parts) * C * sizeof(float)));
    auto* part_g = reinterpret_cast<float*>(coef + C);
    float* part_gx = part_g + size_t(parts) * C;
    cudaStream_t stream = backend().stream;
    withIndex(total, [&](auto index) {
      using I = decltype(index);
      bnBackwardSumsKernel<<<dim3(unsigned(grid.tiles), unsigned(parts)), kThreads, 0, stream>>>(
          as<A>(x), as<A>(dy), f, relu, I(rows), Q, grid.Qt, grid.R, part_g, part_gx);
      bnBackwardCoefficientsKernel<<<unsigned((C + 31) / 32), kThreads, 0, stream>>>(
          part_g, part_gx, parts, C, double(rows), f, dgamma, dbeta, coef);
      const size_t packs = total / P;
      bnBackwardDxKernel<<<blocksFor(packs), kThreads, 0, stream>>>(as<A>(x), as<A>(dy), as<A>(dx),
                                                                    coef, relu, I(packs), Q);
    });
    launched = true;
  });
  return launched;
}

}  // namespace accord::nn::cuda::detail

// resnet::Sgd's update (optimizer.h) as one kernel over the whole flat parameter array:
// a ResNet-50 has ~160 parameter tensors, and one launch for all of them costs one
// launch, not 160. The tensors become fixed-size chunks (each inside
// one tensor, with that tensor's weight decay), one block per chunk, listed once at
// construction in a device table.
//
// The arithmetic is the CPU's, operation for operation in float, with explicit rounding
// (no fused multiply-add the CPU does not do), so both backends step to the same bits.
#include "nn/cuda/backend_cuda.h"

#include <vector>

namespace accord::nn::cuda {

using namespace detail;

struct FusedSgd::Chunk {
  size_t offset;
  unsigned n;
  float weight_decay;
};

namespace {

constexpr int kThreads = 256;
// Elements per chunk: 16 per thread keeps a block busy long enough to hide its launch,
// while a 64-channel BN's 64 floats still make one (short) chunk.
constexpr size_t kChunk = 16 * kThreads;

__global__ void sgdKernel(const FusedSgd::Chunk* chunks, float* w, const float* g, float* buf,
                          float lr, float mu, bool nesterov, float grad_scale) {
  const FusedSgd::Chunk c = chunks[blockIdx.x];
  for (unsigned i = threadIdx.x; i < c.n; i += kThreads) {
    const size_t k = c.offset + i;
    const float wk = w[k];
    // A scale of 1 multiplies exactly, so unscaled steps keep the CPU's bits.
    const float gk = __fadd_rn(__fmul_rn(g[k], grad_scale), __fmul_rn(c.weight_decay, wk));
    float d = gk;
    if (mu != 0.0f) {
      const float b = __fadd_rn(__fmul_rn(mu, buf[k]), gk);
      buf[k] = b;
      d = nesterov ? __fadd_rn(gk, __fmul_rn(mu, b)) : b;
    }
    w[k] = __fsub_rn(wk, __fmul_rn(lr, d));
  }
}

}  // namespace

FusedSgd::FusedSgd(const std::vector<SgdSegment>& segments, float momentum, bool nesterov)
    : momentum_(momentum), nesterov_(nesterov) {
  if (momentum < 0) throw InvalidArgument("nn::cuda::FusedSgd: momentum must be >= 0");
  if (nesterov && momentum <= 0)
    throw InvalidArgument("nn::cuda::FusedSgd: Nesterov needs a momentum > 0");
  std::vector<Chunk> table;
  for (const SgdSegment& s : segments)
    for (size_t at = 0; at < s.n; at += kChunk)
      table.push_back({s.offset + at, unsigned(std::min(kChunk, s.n - at)), s.weight_decay});
  num_chunks_ = table.size();
  if (table.empty()) return;
  const std::string what = key("nn::cuda::FusedSgd chunks", table.size());
  // A grid's x dimension holds 2^31 - 1 blocks: 8 T parameters at 4096 per chunk.
  if (table.size() > 0x7fffffffu) throw InvalidArgument(what + ": too many parameters");
  ACCORD_NN_CUDA_CHECK(
      what, cudaMalloc(reinterpret_cast<void**>(&chunks_), table.size() * sizeof(Chunk)));
  ACCORD_NN_CUDA_CHECK(what, cudaMemcpy(chunks_, table.data(), table.size() * sizeof(Chunk),
                                        cudaMemcpyHostToDevice));
}

FusedSgd::~FusedSgd() {
  if (chunks_) cudaFree(chunks_);  // no throw from a destructor
}

void FusedSgd::step(float* w, const float* g, float* buf, float lr, float grad_scale) {
  if (num_chunks_ == 0) return;
  sgdKernel<<<unsigned(num_chunks_), kThreads, 0, backend().stream>>>(
      chunks_, w, g, buf, lr, momentum_, nesterov_, grad_scale);
  checkLaunch(key("nn::cuda::FusedSgd::step chunks", num_chunks_));
}

}  // namespace accord::nn::cuda

// Device arenas, and the binds and inits that carve and fill layers from them. The inits
// run nn's own init on host copies and upload them: one seed, one model, either backend.
#include "nn/cuda/backend_cuda.h"

#include <vector>

namespace accord::nn::cuda {

using namespace detail;

namespace {
// nn::Arena's rounding (16 floats), so the two kinds of arena give the same offsets.
constexpr size_t kAlignFloats = 16;
size_t roundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
}  // namespace

DeviceArena::~DeviceArena() {
  if (base) cudaFree(base);  // no throw from a destructor
}

float* DeviceArena::take(size_t n) {
  size_t size = roundUp(n);
  if (planning) {
    used += size;
    return nullptr;
  }
  if (used + size > capacity)
    throw Error("nn::cuda::DeviceArena: out of space: taking " + std::to_string(n) +
                " floats with " + std::to_string(capacity - used) + " of " +
                std::to_string(capacity) +
                " left (the take() sequence differs from the planning pass)");
  float* p = base + used;
  used += size;
  return p;
}

void DeviceArena::allocate() {
  if (!planning) throw Error("nn::cuda::DeviceArena: allocate() called twice");
  size_t bytes = (used ? used : kAlignFloats) * sizeof(float);
  const std::string what = key("nn::cuda::DeviceArena::allocate bytes", bytes);
  ACCORD_NN_CUDA_CHECK(what, cudaMalloc(reinterpret_cast<void**>(&base), bytes));
  // On the layers' stream, which does not wait for the legacy one cudaMemset uses: the
  // zeros must land before the uploads that follow there.
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(base, 0, bytes, stream()));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(stream()));
  capacity = used;
  used = 0;
  planning = false;
}

void conv2d_bind(Conv2d& c, DeviceArena& params, DeviceArena& grads) {
  size_t nw = static_cast<size_t>(c.C_out) * c.C_in * c.K * c.K;
  c.w = params.take(nw);
  c.b = c.bias ? params.take(c.C_out) : nullptr;
  c.dw = grads.take(nw);
  c.db = c.bias ? grads.take(c.C_out) : nullptr;
}

void conv2d_init(Conv2d& c, std::mt19937_64& rng) {
  size_t nw = static_cast<size_t>(c.C_out) * c.C_in * c.K * c.K;
  std::vector<float> w(nw), b(c.bias ? c.C_out : 0);
  Conv2d host = c;
  host.w = w.data();
  host.b = c.bias ? b.data() : nullptr;
  nn::conv2d_init(host, rng);
  copy_to_device(c.w, w.data(), nw);
  if (c.bias) copy_to_device(c.b, b.data(), c.C_out);
}

void batchnorm2d_bind(BatchNorm2d& bn, DeviceArena& params, DeviceArena& grads,
                      DeviceArena& buffers, DeviceArena& acts) {
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
  std::vector<float> gamma(bn.C), beta(bn.C), mean(bn.C), var(bn.C);
  BatchNorm2d host = bn;
  host.gamma = gamma.data();
  host.beta = beta.data();
  host.running_mean = mean.data();
  host.running_var = var.data();
  nn::batchnorm2d_init(host, zero_gamma);
  copy_to_device(bn.gamma, gamma.data(), bn.C);
  copy_to_device(bn.beta, beta.data(), bn.C);
  copy_to_device(bn.running_mean, mean.data(), bn.C);
  copy_to_device(bn.running_var, var.data(), bn.C);
}

void linear_bind(Linear& l, DeviceArena& params, DeviceArena& grads) {
  l.w = params.take(static_cast<size_t>(l.out) * l.in);
  l.b = params.take(l.out);
  l.dw = grads.take(static_cast<size_t>(l.out) * l.in);
  l.db = grads.take(l.out);
}

void linear_init(Linear& l, std::mt19937_64& rng) {
  size_t nw = static_cast<size_t>(l.out) * l.in;
  std::vector<float> w(nw), b(l.out);
  Linear host = l;
  host.w = w.data();
  host.b = b.data();
  nn::linear_init(host, rng);
  copy_to_device(l.w, w.data(), nw);
  copy_to_device(l.b, b.data(), l.out);
}

}  // namespace accord::nn::cuda

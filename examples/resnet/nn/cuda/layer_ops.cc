// The GPU backend's table (see nn/layer_ops.h), and device memory for nn::Arena.
#include "nn/layer_ops.h"
#include "nn/cuda/backend_cuda.h"

namespace accord::nn::cuda {

const LayerOps& layers() {
  static const LayerOps ops{"cuda",
                            &conv2d_forward,
                            &conv2d_backward,
                            &batchnorm2d_forward,
                            &batchnorm2d_backward,
                            &relu_forward,
                            &relu_backward,
                            &maxpool2d_forward,
                            &maxpool2d_backward,
                            &avgpool_forward,
                            &avgpool_backward,
                            &linear_forward,
                            &linear_backward,
                            &add_forward,
                            &accumulate,
                            &add_relu_forward,
                            &accumulate_relu_backward,
                            &softmax_xent,
                            &topk_correct,
                            &conv_bn_forward,
                            &bn_add_relu_forward};
  return ops;
}

namespace {
float* deviceAlloc(size_t bytes) {
  const std::string what = detail::key("nn::Arena on the GPU: allocating bytes", bytes);
  float* p = nullptr;
  ACCORD_NN_CUDA_CHECK(what, cudaMalloc(reinterpret_cast<void**>(&p), bytes));
  // On the layers' stream, which does not wait for the legacy one cudaMemset uses.
  ACCORD_NN_CUDA_CHECK(what, cudaMemsetAsync(p, 0, bytes, stream()));
  ACCORD_NN_CUDA_CHECK(what, cudaStreamSynchronize(stream()));
  return p;
}
void deviceRelease(float* p) { cudaFree(p); }  // from a destructor: no throw
}  // namespace

void useDeviceMemory(nn::Arena& arena) {
  if (!arena.planning) throw Error("nn::cuda::useDeviceMemory: the arena is already allocated");
  arena.alloc = &deviceAlloc;
  arena.release = &deviceRelease;
}

}  // namespace accord::nn::cuda

// The fully connected layer on cuBLAS. Our buffers are row-major; cuBLAS is
// column-major, and a row-major (r, c) matrix is the column-major (c, r) matrix of its
// transpose. So each row-major product is computed as its transpose:
//   forward   y (N, out) = x W^T      <=>  y^T (out, N) = W (out, in) * x^T (in, N)
//             A = W read as col-major (in, out), transposed; B = x as (in, N)
//   dW (out, in) = dy^T x            <=>  dW^T (in, out) = x^T (in, N) * dy (N, out)
//   dx (N, in) = dy W                <=>  dx^T (in, N) = W^T (in, out) * dy^T (out, N)
// The bias and its gradient (column sums of dy) are our kernels.
//
// Math::Bf16 / Fp16: x and dx are 16-bit activations, y and dy (the logits and their
// gradient) float32. The products run as cublasGemmEx on 16-bit operands with float32
// accumulation: W's 16-bit copy (made by forward), and dy narrowed to 16 bits for
// backward; dW and y come out in float32, dx in 16 bits.
#include "nn/cuda/backend_cuda.h"

namespace accord::nn::cuda {

using namespace detail;

namespace {
std::string checkLinear(const Linear& l, int N, const char* fn) {
  std::string what = key(fn, "(N in out)", N, l.in, l.out);
  if (N <= 0 || l.in <= 0 || l.out <= 0) throw InvalidArgument(what + ": invalid shape");
  if (!l.w || !l.b) throw InvalidArgument(what + ": parameters not bound");
  return what;
}
// C (m, n) = op(A) op(B), col-major, on 16-bit A and B, C in `c_type`, float32
// accumulation.
void gemmHalf(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A,
              int lda, const void* B, int ldb, void* C, cudaDataType_t c_type, int ldc,
              const std::string& what) {
  const float one = 1.0f, zero = 0.0f;
  ACCORD_NN_CUDA_CHECK(
      what, cublasGemmEx(backend().cublas, ta, tb, m, n, k, &one, A, halfType(), lda, B, halfType(),
                         ldb, &zero, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

size_t weightCount(const Linear& l) { return size_t(l.out) * l.in; }

}  // namespace

void linear_forward(Linear& l, const float* x, float* y, int N) {
  const std::string what = checkLinear(l, N, "linear_forward");
  if (halfActivations()) {
    const void* w = halfWeights(l.w, weightCount(l), what);
    gemmHalf(CUBLAS_OP_T, CUBLAS_OP_N, l.out, N, l.in, w, l.in, x, l.in, y, CUDA_R_32F, l.out,
             what);
    launchAddBias(y, l.b, N, l.out);
    checkLaunch(what);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  ACCORD_NN_CUDA_CHECK(what, cublasSgemm(backend().cublas, CUBLAS_OP_T, CUBLAS_OP_N, l.out, N, l.in,
                                         &one, l.w, l.in, x, l.in, &zero, y, l.out));
  launchAddBias(y, l.b, N, l.out);
  checkLaunch(what);
}

void linear_backward(Linear& l, const float* x, const float* dy, float* dx, int N) {
  const std::string what = checkLinear(l, N, "linear_backward");
  if (!l.dw || !l.db) throw InvalidArgument(what + ": gradients not bound");
  if (halfActivations()) {
    const size_t n_dy = size_t(N) * l.out;
    void* dy16 = scratch(kSlotLinearDy, n_dy * 2);
    launchToHalf(dy, dy16, n_dy);
    checkLaunch(what);
    gemmHalf(CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, N, x, l.in, dy16, l.out, l.dw, CUDA_R_32F, l.in,
             what);
    launchBiasGrad(dy, l.db, N, l.out);
    checkLaunch(what);
    if (dx) {
      gemmHalf(CUBLAS_OP_N, CUBLAS_OP_N, l.in, N, l.out, lastHalfWeights(l.w, weightCount(l), what),
               l.in, dy16, l.out, dx, halfType(), l.in, what);
    }
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t h = backend().cublas;
  ACCORD_NN_CUDA_CHECK(what, cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, N, &one, x, l.in,
                                         dy, l.out, &zero, l.dw, l.in));
  launchBiasGrad(dy, l.db, N, l.out);
  checkLaunch(what);
  if (dx)
    ACCORD_NN_CUDA_CHECK(what, cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, l.in, N, l.out, &one, l.w,
                                           l.in, dy, l.out, &zero, dx, l.in));
}

}  // namespace accord::nn::cuda

// The fully connected layer on cuBLAS. Our buffers are row-major; cuBLAS is
// column-major, and a row-major (r, c) matrix is the column-major (c, r) matrix of its
// transpose. So each row-major product is computed as its transpose:
//   forward   y (N, out) = x W^T      <=>  y^T (out, N) = W (out, in) * x^T (in, N)
//             A = W read as col-major (in, out), transposed; B = x as (in, N)
//   dW (out, in) = dy^T x            <=>  dW^T (in, out) = x^T (in, N) * dy (N, out)
//   dx (N, in) = dy W                <=>  dx^T (in, N) = W^T (in, out) * dy^T (out, N)
// The bias and its gradient (column sums of dy) are our kernels.
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
}  // namespace

void linear_forward(Linear& l, const float* x, float* y, int N) {
  const std::string what = checkLinear(l, N, "linear_forward");
  const float one = 1.0f, zero = 0.0f;
  ACCORD_NN_CUDA_CHECK(what, cublasSgemm(backend().cublas, CUBLAS_OP_T, CUBLAS_OP_N, l.out, N, l.in,
                                         &one, l.w, l.in, x, l.in, &zero, y, l.out));
  launchAddBias(y, l.b, N, l.out);
  checkLaunch(what);
}

void linear_backward(Linear& l, const float* x, const float* dy, float* dx, int N) {
  const std::string what = checkLinear(l, N, "linear_backward");
  if (!l.dw || !l.db) throw InvalidArgument(what + ": gradients not bound");
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

// Averages a vector across all ranks with Accord:  mpirun -np 2 ./accord-embed
#include <accord/accord.h>

#include <cstdio>
#include <vector>

int main() {
  accord::init();
  const int rank = accord::rank(), size = accord::size();

  std::vector<float> grad(4, static_cast<float>(rank + 1));
  accord::TensorView view{grad.data(), accord::DType::Float32, {4}};
  accord::AllreduceOptions options;
  options.name = "grad";
  options.op = accord::ReduceOp::Average;
  accord::allreduce_async(view, options).wait();

  const float expected = (size + 1) / 2.0f;  // mean of 1..size
  const bool ok = grad[0] == expected && grad[3] == expected;
  std::printf("rank %d of %d: average %.2f (%s)\n", rank, size, grad[0], ok ? "ok" : "WRONG");
  accord::shutdown();
  return ok ? 0 : 1;
}

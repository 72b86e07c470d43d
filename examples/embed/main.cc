// Averages a vector across all ranks with Accord:  mpirun -np 2 ./accord-embed
#include <accord/accord.h>

#include <cstdio>
#include <vector>

int main() {
  // Headers and library of different major versions do not fit together.
  if (accord::version().major != ACCORD_VERSION_MAJOR) {
    std::fprintf(stderr, "libaccord %d.x does not match the headers' %d.x\n",
                 accord::version().major, ACCORD_VERSION_MAJOR);
    return 1;
  }
  accord::init();
  const int rank = accord::rank(), size = accord::size();

  std::vector<float> grad(4, static_cast<float>(rank + 1));
  accord::TensorView view{grad.data(), accord::DType::Float32, {4}};
  accord::AllreduceOptions options;
  options.name = "grad";
  options.op = accord::ReduceOp::Average;
  accord::allreduce(view, options);  // blocking; allreduce_async returns a Handle instead

  const float expected = (size + 1) / 2.0f;  // mean of 1..size
  const bool ok = grad[0] == expected && grad[3] == expected;
  std::printf("rank %d of %d: average %.2f (%s)\n", rank, size, grad[0], ok ? "ok" : "WRONG");
  accord::shutdown();
  return ok ? 0 : 1;
}

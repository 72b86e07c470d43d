// An application that owns MPI and calls MPI_Finalize without accord::shutdown(): the
// finalize shuts Accord down first (a hook on MPI_COMM_SELF), so the background thread
// never uses a finalized MPI. Exits 0 with Accord shut down; a crash or a hang fails.
#include <accord/accord.h>

#include <mpi.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  accord::init();
  const int n = accord::size();
  std::vector<float> x(1000, 1.0f);
  accord::AllreduceOptions o;
  o.name = "before.finalize";
  o.op = accord::ReduceOp::Sum;
  accord::allreduce_async({x.data(), accord::DType::Float32, {1000}, {}}, o).wait();
  if (x[999] != static_cast<float>(n)) {
    std::fprintf(stderr, "FAILED: the allreduce gave %g, not %d\n", x[999], n);
    return 1;
  }
  MPI_Finalize();  // no accord::shutdown() before it
  if (accord::is_initialized()) {
    std::fprintf(stderr, "FAILED: Accord still runs after MPI_Finalize\n");
    return 1;
  }
  std::printf("finalized with Accord shut down first\n");
  return 0;
}

// A peer that stops answering and wakes up after the others gave up on it must not make
// MPI write into memory they freed. Rank 1 stops itself (SIGSTOP) between collectives;
// rank 0's negotiation times out (CommError) with a receive from rank 1 still posted.
// Rank 0 then wakes rank 1 (SIGCONT), whose pending negotiation message arrives while
// rank 0 drives MPI's progress engine with traffic of its own. The receive's buffer
// must still be Accord's: under AddressSanitizer (ci/sanitize.sh) a write into freed
// memory is a heap-use-after-free report, which fails the test. Without a sanitizer the
// test still checks that both ranks fail cleanly and can exit.
//
// Two ranks; sets ACCORD_SHARED_MEMORY=0 (the MPI channel) and
// ACCORD_STALL_SHUTDOWN_TIME=1 itself.
#include <accord/accord.h>

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

std::string failure(const std::function<void()>& call) {
  try {
    call();
    return "ok";
  } catch (const accord::CommError& e) {
    return "CommError";
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

void allreduce(const std::string& name) {
  std::vector<float> x(4, 1.0f);
  accord::AllreduceOptions o;
  o.name = name;
  accord::allreduce({x.data(), accord::DType::Float32, {4}, {}}, o);
}

}  // namespace

int main(int argc, char** argv) {
  setenv("ACCORD_SHARED_MEMORY", "0", 1);
  setenv("ACCORD_STALL_SHUTDOWN_TIME", "1", 1);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  accord::init();
  const int me = accord::rank();
  if (accord::size() != 2) {
    std::fprintf(stderr, "run with 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int pids[2], pid = static_cast<int>(getpid());
  MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
  allreduce("late.warm_up");
  MPI_Barrier(MPI_COMM_WORLD);
  int failures = 0;
  if (me == 1) {
    raise(SIGSTOP);  // rank 0 wakes us once it has given up
    // Awake again: our negotiation partner is gone, so this fails at the deadline too.
    const std::string kind = failure([] { allreduce("late.after_waking"); });
    if (kind != "CommError") {
      std::fprintf(stderr, "[rank 1] FAILED: after waking: %s\n", kind.c_str());
      ++failures;
    }
  } else {
    const std::string kind = failure([] { allreduce("late.while_frozen"); });
    if (kind != "CommError") {
      std::fprintf(stderr, "[rank 0] FAILED: with rank 1 frozen: %s\n", kind.c_str());
      ++failures;
    }
    kill(pids[1], SIGCONT);
    // Drive MPI's progress engine while rank 1's late messages arrive.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < end) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  accord::shutdown();  // returns at once after the failure
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) std::printf("late peer: %d failure(s)\n", total);
  std::fflush(stdout);
  // No MPI_Finalize after a CommError (it would wait on Accord's communicators).
  std::_Exit(total ? 1 : 0);
}

// A timeline cut short by SIGKILL holds the events that led to the kill. Rank 0 writes
// ACCORD_TIMELINE; both ranks run a burst of fast allreduces, then rank 1 freezes
// (SIGSTOP), so that rank 0's background thread sits in one negotiation waiting for it
// (until ACCORD_STALL_SHUTDOWN_TIME, 30 s here) and finishes no further cycle. Half a
// second later rank 0 kills itself with SIGKILL: nothing is written at exit.
//
//   mpi_test_timeline_killed --run PATH     the job (2 ranks), ended by the kill
//   mpi_test_timeline_killed --check PATH   afterwards: the file must be complete JSON
//                                           with a track for every allreduce of the burst
#include <accord/accord.h>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

constexpr int kBurst = 150;

void allreduce(const std::string& name) {
  std::vector<float> x(4, 1.0f);
  accord::AllreduceOptions o;
  o.name = name;
  accord::allreduce({x.data(), accord::DType::Float32, {4}, {}}, o);
}

int run(const std::string& path) {
  setenv("ACCORD_TIMELINE", path.c_str(), 1);
  setenv("ACCORD_STALL_SHUTDOWN_TIME", "30", 1);
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  accord::init();
  if (accord::size() != 2) {
    std::fprintf(stderr, "run with 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  allreduce("killed.warm_up");
  // Long past the last write: the burst's first cycle writes, the rest stay buffered.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < kBurst; ++i) allreduce("killed.burst." + std::to_string(i));
  if (accord::rank() == 1) {
    raise(SIGSTOP);
    std::_Exit(3);  // woken by mpirun's teardown once rank 0 is gone
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::printf("[rank 0] killing itself after %d allreduces\n", kBurst);
  std::fflush(stdout);
  raise(SIGKILL);
  return 1;
}

int check(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json events;
  try {
    events = nlohmann::json::parse(text.str());
  } catch (const std::exception& e) {
    std::printf("FAILED: '%s' is not complete JSON: %s\n", path.c_str(), e.what());
    return 1;
  }
  std::set<std::string> burst;
  for (const auto& e : events) {
    if (e.value("name", "") != "thread_name") continue;
    const std::string track = e["args"].value("name", "");
    if (track.rfind("killed.burst.", 0) == 0) burst.insert(track);
  }
  std::printf("%zu of %d burst allreduces recorded\n", burst.size(), kBurst);
  return static_cast<int>(burst.size()) == kBurst ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--run") == 0) return run(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "--check") == 0) return check(argv[2]);
  std::fprintf(stderr, "usage: %s --run PATH | --check PATH\n", argv[0]);
  return 2;
}

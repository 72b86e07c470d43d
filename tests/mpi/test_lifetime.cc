// The runtime's lifetime at the edges, one mode per run (plain main: the modes are about
// what happens around init, shutdown and exit, which a test framework's main would
// hide):
//   --mode restart-owned   Accord initialized (and finalized) MPI: init() after
//                          shutdown() raises NotInitialized instead of aborting in MPI.
//   --mode restart-app     the application owns MPI: init() after shutdown() starts
//                          Accord again, and it works.
//   --mode exit-without-shutdown
//                          main returns with the runtime running; rank 0 leaves first
//                          while the others wait on a collective it never submits: they
//                          get ShutDown, and every process exits 0 (no std::terminate).
// Exit status 0 means the mode's checks held; each failure prints a line.
#include <accord/accord.h>

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "[lifetime] FAILED: %s\n", what.c_str());
}

// An allreduce of ones on every rank; true when each element became the rank count.
bool allreduceWorks(const std::string& name) {
  std::vector<float> x(8, 1.0f);
  accord::AllreduceOptions o;
  o.name = name;
  accord::allreduce({x.data(), accord::DType::Float32, {8}, {}}, o);
  for (float v : x)
    if (v != static_cast<float>(accord::size())) return false;
  return true;
}

int restartOwned() {
  accord::init();
  check(allreduceWorks("owned.first"), "allreduce before the restart");
  accord::shutdown();
  std::string kind = "none", message;
  try {
    accord::init();
  } catch (const accord::NotInitialized& e) {
    kind = "NotInitialized";
    message = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    message = e.what();
  }
  check(kind == "NotInitialized", "init after shutdown raised " + kind + ": " + message);
  check(message.find("finalized MPI") != std::string::npos, "message: " + message);
  check(!accord::is_initialized(), "is_initialized after the failed init");
  return g_failures ? 1 : 0;
}

int restartApp(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  for (int round = 0; round < 2; ++round) {
    accord::init();
    check(allreduceWorks("app.round" + std::to_string(round)),
          "allreduce in round " + std::to_string(round));
    accord::shutdown();
  }
  MPI_Finalize();
  return g_failures ? 1 : 0;
}

int exitWithoutShutdown() {
  accord::init();
  check(allreduceWorks("exit.together"), "allreduce before leaving");
  if (accord::rank() == 0) return g_failures ? 1 : 0;  // leaves with Accord running
  std::vector<float> x(4, 1.0f);
  accord::AllreduceOptions o;
  o.name = "exit.never_on_rank0";
  std::string kind = "ok";
  try {
    accord::allreduce_async({x.data(), accord::DType::Float32, {4}, {}}, o).wait();
  } catch (const accord::ShutDown&) {
    kind = "ShutDown";
  } catch (const std::exception& e) {
    kind = std::string("other: ") + e.what();
  }
  check(kind == "ShutDown", "a collective rank 0 never submitted ended with " + kind);
  return g_failures ? 1 : 0;  // also without shutdown()
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--mode") == 0) mode = argv[i + 1];
  if (mode == "restart-owned") return restartOwned();
  if (mode == "restart-app") return restartApp(argc, argv);
  if (mode == "exit-without-shutdown") return exitWithoutShutdown();
  std::fprintf(stderr, "usage: %s --mode restart-owned|restart-app|exit-without-shutdown\n",
               argv[0]);
  return 2;
}

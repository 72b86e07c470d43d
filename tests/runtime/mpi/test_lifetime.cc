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
//   --mode settings-differ ACCORD_* settings set on the last rank only (a bad value, an
//                          autotuning that the others do not do), or an autotune log that
//                          cannot be written: init() fails on every rank at once, naming
//                          the setting; the first failed init initialized MPI, and the
//                          init that then works finalizes it.
// Exit status 0 means the mode's checks held; each failure prints a line.
#include <accord/accord.h>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
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
  } catch (const accord::ShutDown& e) {
    // Named: the rank that left, shutting Accord down at its exit.
    const std::string message = e.what();
    kind =
        message.find("Accord shut down (rank 0 called shutdown() or exited)") != std::string::npos
            ? "ShutDown"
            : "ShutDown not naming rank 0: " + message;
  } catch (const std::exception& e) {
    kind = std::string("other: ") + e.what();
  }
  check(kind == "ShutDown", "a collective rank 0 never submitted ended with " + kind);
  return g_failures ? 1 : 0;  // also without shutdown()
}

}  // namespace

// Sets `name` to `value` on the last rank only, then expects init() to fail on every
// rank with InvalidArgument: the last rank's message holding `mine`, the others' `theirs`.
void initFailsWith(const char* name, const char* value, const std::string& mine,
                   const std::string& theirs, int rank, int size) {
  const bool last = rank == size - 1;
  if (last) setenv(name, value, 1);
  std::string kind = "none", message;
  try {
    accord::init();
  } catch (const accord::InvalidArgument& e) {
    kind = "InvalidArgument";
    message = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    message = e.what();
  }
  if (last) unsetenv(name);
  const std::string what = std::string(name) + "=" + value + " on rank " +
                           std::to_string(size - 1) + ": " + kind + ": " + message;
  check(kind == "InvalidArgument", what);
  check(message.find(last || size == 1 ? mine : theirs) != std::string::npos, what);
  check(!accord::is_initialized(), "is_initialized after " + what);
}

int settingsDiffer() {
  // Neither Accord nor the application has initialized MPI yet: the failed init does.
  int rank = 0, size = 1;
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) rank = std::atoi(r);
  if (const char* s = std::getenv("OMPI_COMM_WORLD_SIZE")) size = std::atoi(s);
  initFailsWith("ACCORD_CYCLE_TIME", "abc", "ACCORD_CYCLE_TIME='abc'",
                "rank " + std::to_string(size - 1) + " has an invalid ACCORD_* setting", rank,
                size);
  if (size > 1) {
    const std::string autotune = "ACCORD_AUTOTUNE differs between ranks";
    initFailsWith("ACCORD_AUTOTUNE", "1", autotune, autotune, rank, size);
    setenv("ACCORD_AUTOTUNE", "1", 1);
    const std::string steps = "ACCORD_AUTOTUNE_STEPS differs between ranks";
    initFailsWith("ACCORD_AUTOTUNE_STEPS", "3", steps, steps, rank, size);
    // The cycle time may differ between ranks, but not whether the tuner tunes it.
    const std::string given = "ACCORD_CYCLE_TIME (set, or left to ACCORD_AUTOTUNE) differs";
    initFailsWith("ACCORD_CYCLE_TIME", "1", given, given, rank, size);
    unsetenv("ACCORD_AUTOTUNE");
  }
  // A log that rank 0 cannot write: every rank's init() fails naming it (rank 0 writes
  // it from Accord's thread, where the error could only end the process).
  setenv("ACCORD_AUTOTUNE", "1", 1);
  setenv("ACCORD_AUTOTUNE_LOG", "/nonexistent/folder/autotune.csv", 1);
  std::string message;
  try {
    accord::init();
  } catch (const accord::InvalidArgument& e) {
    message = e.what();
  }
  unsetenv("ACCORD_AUTOTUNE");
  unsetenv("ACCORD_AUTOTUNE_LOG");
  check(message.find("ACCORD_AUTOTUNE_LOG='/nonexistent/folder/autotune.csv': rank 0 cannot open "
                     "it for writing") != std::string::npos,
        "an unwritable ACCORD_AUTOTUNE_LOG: " + message);
  accord::init();
  check(allreduceWorks("settings.fixed"), "allreduce once the settings agree");
  accord::shutdown();  // finalizes MPI, which the first init initialized
  int finalized = 0;
  MPI_Finalized(&finalized);
  check(finalized == 1, "MPI finalized by the shutdown");
  return g_failures ? 1 : 0;
}

int main(int argc, char** argv) {
  std::string mode;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--mode") == 0) mode = argv[i + 1];
  if (mode == "restart-owned") return restartOwned();
  if (mode == "restart-app") return restartApp(argc, argv);
  if (mode == "exit-without-shutdown") return exitWithoutShutdown();
  if (mode == "settings-differ") return settingsDiffer();
  std::fprintf(stderr,
               "usage: %s --mode restart-owned|restart-app|exit-without-shutdown|settings-differ\n",
               argv[0]);
  return 2;
}

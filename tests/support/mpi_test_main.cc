// The Catch2 runner shared by every multi-rank test binary (compiled once).
//
// Order of events on every rank: MPI_Init_thread (unless Accord should own MPI),
// accord::init, the Catch session (same test cases, same order on every rank),
// accord::shutdown, the failure count reduced over MPI_COMM_WORLD, MPI_Finalize.
// Exit status is non-zero on every rank when any rank failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Catch's own output does not say which rank failed; this line does.
struct RankListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override { test_case_ = info.name; }
  bool assertionEnded(Catch::AssertionStats const& stats) override {
    const auto& result = stats.assertionResult;
    if (!result.isOk()) {
      std::fprintf(stderr, "[rank %d] FAILED in '%s' at %s:%zu\n", accord_test::worldRank(),
                   test_case_.c_str(), result.getSourceInfo().file, result.getSourceInfo().line);
    }
    return true;
  }
  std::string test_case_;
};

[[noreturn]] void die(const char* what, const std::string& why) {
  std::fprintf(stderr, "[rank %d] %s: %s\n", accord_test::worldRank(), what, why.c_str());
  std::fflush(stderr);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

// Removes "--env NAME=VALUE" / "--env=NAME=VALUE" from argv and applies them.
std::vector<char*> applyEnvArgs(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string assignment;
    if (std::strcmp(argv[i], "--env") == 0 && i + 1 < argc) {
      assignment = argv[++i];
    } else if (std::strncmp(argv[i], "--env=", 6) == 0) {
      assignment = argv[i] + 6;
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    const auto eq = assignment.find('=');
    if (eq == std::string::npos) die("bad --env argument", assignment);
    setenv(assignment.substr(0, eq).c_str(), assignment.substr(eq + 1).c_str(), 1);
  }
  return rest;
}

}  // namespace

CATCH_REGISTER_LISTENER(RankListener)

namespace accord_test {

int runMain(int argc, char** argv, const MainOptions& options) {
  for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> args = applyEnvArgs(argc, argv);

  if (options.app_inits_mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) die("MPI_Init_thread", "MPI_THREAD_MULTIPLE unavailable");
  }
  int failures = 0;
  if (options.before_init) failures += options.before_init();
  try {
    if (options.init)
      options.init();
    else
      accord::init();
  } catch (const std::exception& e) {
    die("accord::init failed", e.what());
  }
  worldRank();  // cache it while MPI is up

  Catch::Session session;
  if (int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data()); rc != 0) {
    die("bad command line", std::to_string(rc));
  }
  failures += session.run();

  try {
    accord::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] accord::shutdown threw: %s\n", worldRank(), e.what());
    ++failures;
  }
  if (options.after_shutdown) failures += options.after_shutdown();
  if (!options.app_inits_mpi) {
    // Accord owned MPI and may have finalized it: each rank reports for itself, and
    // mpirun exits non-zero if any rank does.
    if (failures) std::fprintf(stderr, "[rank %d] %d failure(s)\n", worldRank(), failures);
    return failures ? 1 : 0;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (worldRank() == 0) {
    std::printf("== %s: %d rank(s), %d failure(s) in all ==\n", argv[0], size, total);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return total ? 1 : 0;
}

}  // namespace accord_test

// A process forked after accord::init() holds a copy of the runtime without its
// background thread. Every call there must fail at once with NotInitialized, naming the
// process that owns the runtime, instead of waiting forever: a new collective, a
// handle submitted before the fork and not finished, shutdown(), init(). A handle that
// had finished before the fork still answers. The parent's runtime goes on unharmed.
//
// Each child reports what it saw through a pipe and ends with _exit (no atexit); the
// parent waits for it with a deadline, so a child that hangs fails the test rather
// than the job.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <chrono>
#include <csignal>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace accord_test;

namespace {

// Runs `child` in a forked process; returns what it wrote, or "hung" / "died" when it
// did not end by itself within the deadline.
std::string inForkedChild(const std::function<std::string()>& child) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    const std::string report = child();
    (void)!::write(fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::string report;
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    report = "hung";
  } else if (!WIFEXITED(status)) {
    report = "died";
  } else {
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) report.append(buffer, n);
  }
  ::close(fds[0]);
  return report;
}

std::string outcomeOf(const std::function<void()>& call) {
  const Outcome o = attempt(call);
  return o.kind + ": " + o.message;
}

// The child's report, one line per call.
void expectRefused(const std::string& report, const std::vector<std::string>& calls, int parent) {
  INFO("child's report:\n" << report);
  for (const auto& call : calls) {
    const auto at = report.find(call + " -> ");
    CHECK(at != std::string::npos);  // CHECK: rank 0 must go on to the collectives below
    if (at == std::string::npos) continue;
    const std::string line = report.substr(at, report.find('\n', at) - at);
    INFO(line);
    CHECK(contains(line, "-> NotInitialized: "));
    CHECK(contains(line, "is a fork of process " + std::to_string(parent)));
    CHECK(contains(line, "spawn"));
  }
}

void sumInto(std::vector<float>& x, const std::string& name) {
  accord::AllreduceOptions o;
  o.name = name;
  accord::allreduce({x.data(), DType::Float32, {static_cast<std::int64_t>(x.size())}, {}}, o);
}

}  // namespace

TEST_CASE("fork: every call in the child fails at once, naming the parent") {
  const int parent = static_cast<int>(::getpid());
  const int n = accord::size();
  std::vector<float> finished(3, 1.0f);
  accord::AllreduceOptions o;
  o.name = "fork.finished";
  auto done = accord::allreduce_async({finished.data(), DType::Float32, {3}, {}}, o);
  REQUIRE(finish(done, o.name).ok());  // finished before the fork

  const std::string report = inForkedChild([&] {
    std::string r;
    std::vector<float> x(2, 1.0f);
    r += "allreduce -> " + outcomeOf([&] { sumInto(x, "fork.child"); }) + "\n";
    r += "rank -> " + outcomeOf([] { (void)accord::rank(); }) + "\n";
    r += "barrier -> " + outcomeOf([] { accord::barrier(); }) + "\n";
    r += "shutdown -> " + outcomeOf([] { accord::shutdown(); }) + "\n";
    r += "init -> " + outcomeOf([] { accord::init(); }) + "\n";
    r += std::string("is_initialized -> ") + (accord::is_initialized() ? "true" : "false") + "\n";
    r += "finished handle -> " + outcomeOf([&] { done.wait(); }) + "\n";
    return r;
  });
  expectRefused(report, {"allreduce", "rank", "barrier", "shutdown", "init"}, parent);
  CHECK(contains(report, "is_initialized -> false"));
  CHECK(contains(report, "finished handle -> ok"));

  // The parent's runtime is untouched.
  std::vector<float> x(4, 1.0f);
  sumInto(x, "fork.parent.after");
  CHECK(x[3] == static_cast<float>(n));
}

// Rank 0 forks while its allreduce waits for the others, who submit it only after rank
// 0's child has reported: waiting on that handle in the child would never end.
TEST_CASE("fork: a handle pending at the fork fails in the child") {
  const int parent = static_cast<int>(::getpid());
  const int me = accord::rank(), n = accord::size();
  std::vector<float> pending(2, 1.0f), sync(1, 1.0f);
  accord::AllreduceOptions o;
  o.name = "fork.pending";
  accord::Handle handle;
  if (me == 0) {
    handle = accord::allreduce_async({pending.data(), DType::Float32, {2}, {}}, o);
    const std::string report = inForkedChild([&] {
      std::string r = "pending handle -> " + outcomeOf([&] { handle.wait(); }) + "\n";
      return r + "poll -> " + outcomeOf([&] { (void)handle.poll(); }) + "\n";
    });
    if (n > 1) expectRefused(report, {"pending handle", "poll"}, parent);
  }
  sumInto(sync, "fork.pending.sync");  // rank 0's child is done
  if (me != 0) handle = accord::allreduce_async({pending.data(), DType::Float32, {2}, {}}, o);
  REQUIRE(finish(handle, o.name).ok());
  CHECK(pending[1] == static_cast<float>(n));
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// A rank that cannot do its part locally must not leave the others waiting: when its
// output allocator throws (out of memory) or returns too small a buffer, it still takes
// part in the collective with scratch space, its own handle fails with that error, and
// every other rank's collective completes with the right values. The runtime goes on.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <cerrno>
#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

#include <pthread.h>
#include <unistd.h>

using namespace accord_test;

namespace {

enum class Fault { Throws, TooSmall };

// Wraps a test Output: on rank `victim` the allocator throws or returns one element too
// few instead.
accord::Allocator faulty(Output& out, int victim, Fault fault) {
  auto good = out.allocator();
  return [good, victim, fault](const Shape& shape) -> accord::TensorView {
    if (accord::rank() != victim) return good(shape);
    if (fault == Fault::Throws) throw std::runtime_error("test allocator: out of memory");
    accord::TensorView v = good(shape);
    if (!v.shape.empty() && v.shape[0] > 0) v.shape[0] -= 1;
    else v.shape = {0};
    return v;
  };
}

// The victim's handle fails with InvalidArgument, keeping the allocator's own message;
// everyone else's completes.
void expectOnlyVictimFails(const Outcome& outcome, int victim, Fault fault) {
  INFO("rank " << accord::rank() << ": " << outcome.kind << ": " << outcome.message);
  if (accord::rank() != victim) {
    CHECK(outcome.ok());
    return;
  }
  if (fault == Fault::Throws) {
    CHECK(outcome.kind == "InvalidArgument");
    CHECK(contains(outcome.message, "test allocator: out of memory"));
  } else {
    CHECK(outcome.kind == "InvalidArgument");
    CHECK(contains(outcome.message, "the output allocator returned"));
  }
}

// The runtime still works on every rank afterwards.
void allreduceStillWorks(const std::string& name) {
  Buffer b(DType::Int32, {5});
  b.fill([](std::int64_t i) { return static_cast<double>(i); });
  accord::AllreduceOptions o;
  o.name = name;
  CHECK(finish(accord::allreduce_async(b.view(), o), name).ok());
  for (std::int64_t i = 0; i < 5; ++i) CHECK(b.get(i) == i * accord::size());
}

}  // namespace

TEST_CASE("allgather: a rank whose output allocator fails still takes part") {
  const int n = accord::size(), me = accord::rank();
  for (Fault fault : {Fault::Throws, Fault::TooSmall}) {
    const int victim = fault == Fault::Throws ? n - 1 : 0;
    Buffer in(DType::Float32, {3, 2});
    in.fill([&](std::int64_t i) { return tagValue(DType::Float32, me, 0, i); });
    Output out(DType::Float32);
    accord::AllgatherOptions o;
    o.name = std::string("local.allgather.") + (fault == Fault::Throws ? "throws" : "small");
    const Outcome outcome =
        finish(accord::allgather_async(in.view(), faulty(out, victim, fault), o), o.name);
    expectOnlyVictimFails(outcome, victim, fault);
    if (me != victim) {
      REQUIRE(out.numel() == 6 * n);
      INFO(compareElements(DType::Float32, out.data(), 6 * n, [](std::int64_t i) {
        return tagValue(DType::Float32, static_cast<int>(i / 6), 0, i % 6);
      }));
      CHECK(compareElements(DType::Float32, out.data(), 6 * n, [](std::int64_t i) {
              return tagValue(DType::Float32, static_cast<int>(i / 6), 0, i % 6);
            }).empty());
    }
    allreduceStillWorks(o.name + ".after");
  }
}

// An Allocator runs on Accord's thread: a collective or shutdown() from it would wait on
// that thread itself. Refused there, it fails that rank's handle like any allocator
// error, and an unnamed collective refused so leaves the next unnamed names in step.
TEST_CASE("allgather: an allocator that calls back into Accord fails, never hangs") {
  const int n = accord::size(), me = accord::rank();
  const int victim = n - 1;
  for (const std::string call : {"allreduce", "shutdown"}) {
    Buffer in(DType::Int32, {2});
    in.fill([&](std::int64_t i) { return static_cast<double>(me * 2 + i); });
    Output out(DType::Int32);
    auto good = out.allocator();
    accord::Allocator reentrant = [&](const Shape& shape) {
      if (me == victim) {
        if (call == "shutdown") accord::shutdown();
        std::vector<float> x(2, 1.0f);
        accord::allreduce({x.data(), DType::Float32, {2}, {}});  // unnamed
      }
      return good(shape);
    };
    accord::AllgatherOptions o;
    o.name = "local.reentrant." + call;
    const Outcome outcome = finish(accord::allgather_async(in.view(), reentrant, o), o.name);
    INFO("rank " << me << ": " << outcome.kind << ": " << outcome.message);
    if (me == victim) {
      CHECK(outcome.kind == "InvalidArgument");
      CHECK(contains(outcome.message, "accord::" + call));
      CHECK(contains(outcome.message, "called from an Allocator, inside Accord's background cycle"));
    } else {
      CHECK(outcome.ok());
      REQUIRE(out.numel() == 2 * n);
      for (std::int64_t i = 0; i < 2 * n; ++i) CHECK(out.get(i) == i);
    }
    allreduceStillWorks(o.name + ".after");
    std::vector<float> x(3, 1.0f);
    CHECK_NOTHROW(accord::allreduce({x.data(), DType::Float32, {3}, {}}));  // unnamed: in step
    CHECK(x[2] == static_cast<float>(n));
  }
}

TEST_CASE("allgather: a failing rank in a fused group fails only its own tensor") {
  const int n = accord::size(), me = accord::rank();
  const int victim = n - 1;
  Buffer a(DType::Int32, {2}), b(DType::Int32, {3});
  a.fill([&](std::int64_t i) { return 10 * me + i; });
  b.fill([&](std::int64_t i) { return 100 * me + i; });
  Output out_a(DType::Int32), out_b(DType::Int32);
  accord::AllgatherOptions oa, ob;
  oa.name = "local.fused.a";
  ob.name = "local.fused.b";
  auto ha = accord::allgather_async(a.view(), faulty(out_a, victim, Fault::Throws), oa);
  auto hb = accord::allgather_async(b.view(), out_b.allocator(), ob);
  expectOnlyVictimFails(finish(ha, oa.name), victim, Fault::Throws);
  CHECK(finish(hb, ob.name).ok());
  REQUIRE(out_b.numel() == 3 * n);
  for (std::int64_t i = 0; i < 3 * n; ++i) CHECK(out_b.get(i) == 100 * (i / 3) + i % 3);
  allreduceStillWorks("local.fused.after");
}

TEST_CASE("alltoall: a rank whose output allocator fails still takes part") {
  const int n = accord::size(), me = accord::rank();
  for (Fault fault : {Fault::Throws, Fault::TooSmall}) {
    const int victim = fault == Fault::Throws ? 0 : n - 1;
    Buffer in(DType::Int64, {2 * n});  // two rows for every rank
    in.fill([&](std::int64_t i) { return 1000 * me + i; });
    Output out(DType::Int64);
    accord::AlltoallOptions o;
    o.name = std::string("local.alltoall.") + (fault == Fault::Throws ? "throws" : "small");
    expectOnlyVictimFails(
        finish(accord::alltoall_async(in.view(), faulty(out, victim, fault), o), o.name), victim,
        fault);
    if (me != victim) {
      REQUIRE(out.numel() == 2 * n);
      for (std::int64_t i = 0; i < 2 * n; ++i) CHECK(out.get(i) == 1000 * (i / 2) + 2 * me + i % 2);
    }
    allreduceStillWorks(o.name + ".after");
  }
}

TEST_CASE("reducescatter: a rank whose output allocator fails still takes part") {
  const int n = accord::size(), me = accord::rank();
  for (Fault fault : {Fault::Throws, Fault::TooSmall}) {
    const int victim = fault == Fault::Throws ? n - 1 : 0;
    const std::int64_t rows = 3 * n + 1;
    Buffer in(DType::Float64, {rows, 2});
    in.fill([&](std::int64_t i) { return static_cast<double>(i + me); });
    Output out(DType::Float64);
    accord::ReducescatterOptions o;
    o.name = std::string("local.reducescatter.") + (fault == Fault::Throws ? "throws" : "small");
    expectOnlyVictimFails(
        finish(accord::reducescatter_async(in.view(), faulty(out, victim, fault), o), o.name),
        victim, fault);
    if (me != victim) {
      std::int64_t first = 0;
      for (int r = 0; r < me; ++r) first += accord::reducescatter_rows(rows, r, n);
      const std::int64_t mine = accord::reducescatter_rows(rows, me, n);
      REQUIRE(out.numel() == 2 * mine);
      const double rank_sum = n * (n - 1) / 2.0;
      for (std::int64_t i = 0; i < 2 * mine; ++i) CHECK(out.get(i) == n * (2 * first + i) + rank_sum);
    }
    allreduceStillWorks(o.name + ".after");
  }
}

// MPI's TCP transport writes to a dead peer's socket on Accord's thread. That write must
// fail (EPIPE) rather than end the process by SIGPIPE, or a survivor dies silently
// instead of reporting the dead peer. The output allocator runs on that thread: there
// it writes to a pipe nobody reads, as the transport would to a closed connection.
TEST_CASE("a write to a closed connection on Accord's thread fails instead of ending the process") {
  const int n = accord::size();
  int wrote = 0, error = 0;
  auto writeToClosedPipe = [&](const Shape& shape) {
    int ends[2];
    if (pipe(ends) != 0) throw std::runtime_error("test: no pipe");
    close(ends[0]);
    const char byte = 1;
    wrote = static_cast<int>(write(ends[1], &byte, 1));
    error = errno;
    close(ends[1]);
    return shape;
  };
  Output out(DType::Int32);
  auto store = out.allocator();
  Buffer in(DType::Int32, {2});
  in.fill([&](std::int64_t i) { return i; });
  accord::AllgatherOptions o;
  o.name = "local.closed_pipe";
  const Outcome outcome =
      finish(accord::allgather_async(
                 in.view(), [&](const Shape& shape) { return store(writeToClosedPipe(shape)); }, o),
             o.name);
  INFO(outcome.kind << ": " << outcome.message);
  REQUIRE(outcome.ok());
  CHECK(wrote == -1);
  CHECK(error == EPIPE);
  CHECK(out.numel() == 2 * n);
  // The application's threads keep the mask they had: SIGPIPE is not blocked here.
  sigset_t mask;
  REQUIRE(pthread_sigmask(SIG_BLOCK, nullptr, &mask) == 0);
  CHECK(sigismember(&mask, SIGPIPE) == 0);
}

int main(int argc, char** argv) { return runMain(argc, argv); }

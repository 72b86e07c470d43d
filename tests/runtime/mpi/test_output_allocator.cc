// What an output allocator returns is checked before the background thread writes into
// it: a view on another device than the input's (host memory labelled cuda:0 for a
// host collective; with a real device pointer the host copy would crash that thread)
// fails that rank's handle with InvalidArgument naming the collective and the device
// expected, and so does an allocator that throws something that is not a
// std::exception. The rank still takes part (with scratch space), every other rank
// gets the right result, and the runtime goes on.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <string>
#include <vector>

using namespace accord_test;

namespace {

enum class Fault { OtherDevice, ThrowsInt };

// On rank `victim`, `out`'s allocator returns its memory labelled cuda:0, or throws 7.
accord::Allocator faulty(Output& out, int victim, Fault fault) {
  auto good = out.allocator();
  return [good, victim, fault](const Shape& shape) -> accord::TensorView {
    if (accord::rank() != victim) return good(shape);
    if (fault == Fault::ThrowsInt) throw 7;
    accord::TensorView v = good(shape);
    v.device = accord::Device::cuda(0);
    return v;
  };
}

void expectOnlyVictimFails(const Outcome& outcome, int victim, Fault fault,
                           const std::string& collective) {
  INFO("rank " << accord::rank() << ": " << outcome.kind << ": " << outcome.message);
  if (accord::rank() != victim) {
    CHECK(outcome.ok());
    return;
  }
  CHECK(outcome.kind == "InvalidArgument");
  CHECK(contains(outcome.message, collective));  // e.g. "allgather 'alloc.allgather.device'"
  if (fault == Fault::OtherDevice) {
    CHECK(contains(outcome.message, "returned a tensor on cuda:0, expected cpu"));
  } else {
    CHECK(contains(outcome.message, "threw a non-std::exception"));
  }
}

void allreduceStillWorks(const std::string& name) {
  std::vector<float> x(3, 1.0f);
  accord::AllreduceOptions o;
  o.name = name;
  CHECK(finish(accord::allreduce_async({x.data(), DType::Float32, {3}, {}}, o), name).ok());
  CHECK(x[2] == static_cast<float>(accord::size()));
}

const char* tag(Fault fault) { return fault == Fault::OtherDevice ? "device" : "int"; }

}  // namespace

TEST_CASE("allgather: an output on another device, or a non-std exception, fails that rank") {
  const int n = accord::size(), me = accord::rank();
  for (Fault fault : {Fault::OtherDevice, Fault::ThrowsInt}) {
    const int victim = fault == Fault::OtherDevice ? n - 1 : 0;
    Buffer in(DType::Float32, {2, 3});
    in.fill([&](std::int64_t i) { return tagValue(DType::Float32, me, 0, i); });
    Output out(DType::Float32);
    accord::AllgatherOptions o;
    o.name = std::string("alloc.allgather.") + tag(fault);
    expectOnlyVictimFails(
        finish(accord::allgather_async(in.view(), faulty(out, victim, fault), o), o.name), victim,
        fault, "allgather '" + o.name + "'");
    if (me != victim) {
      REQUIRE(out.numel() == 6 * n);
      CHECK(compareElements(DType::Float32, out.data(), 6 * n, [](std::int64_t i) {
              return tagValue(DType::Float32, static_cast<int>(i / 6), 0, i % 6);
            }).empty());
    }
    allreduceStillWorks(o.name + ".after");
  }
}

TEST_CASE("alltoall: an output on another device, or a non-std exception, fails that rank") {
  const int n = accord::size(), me = accord::rank();
  for (Fault fault : {Fault::OtherDevice, Fault::ThrowsInt}) {
    const int victim = fault == Fault::OtherDevice ? 0 : n - 1;
    Buffer in(DType::Int32, {2 * n});  // two rows for every rank
    in.fill([&](std::int64_t i) { return 1000 * me + i; });
    Output out(DType::Int32);
    accord::AlltoallOptions o;
    o.name = std::string("alloc.alltoall.") + tag(fault);
    expectOnlyVictimFails(
        finish(accord::alltoall_async(in.view(), faulty(out, victim, fault), o), o.name), victim,
        fault, "alltoall '" + o.name + "'");
    if (me != victim) {
      REQUIRE(out.numel() == 2 * n);
      for (std::int64_t i = 0; i < 2 * n; ++i) CHECK(out.get(i) == 1000 * (i / 2) + 2 * me + i % 2);
    }
    allreduceStillWorks(o.name + ".after");
  }
}

TEST_CASE("reducescatter: an output on another device, or a non-std exception, fails that rank") {
  const int n = accord::size(), me = accord::rank();
  for (Fault fault : {Fault::OtherDevice, Fault::ThrowsInt}) {
    const int victim = n - 1;
    const std::int64_t rows = 2 * n + 1;
    Buffer in(DType::Float64, {rows});
    in.fill([&](std::int64_t i) { return static_cast<double>(i + me); });
    Output out(DType::Float64);
    accord::ReducescatterOptions o;
    o.name = std::string("alloc.reducescatter.") + tag(fault);
    expectOnlyVictimFails(
        finish(accord::reducescatter_async(in.view(), faulty(out, victim, fault), o), o.name),
        victim, fault, "reducescatter '" + o.name + "'");
    if (me != victim) {
      std::int64_t first = 0;
      for (int r = 0; r < me; ++r) first += accord::reducescatter_rows(rows, r, n);
      const std::int64_t mine = accord::reducescatter_rows(rows, me, n);
      REQUIRE(out.numel() == mine);
      const double rank_sum = n * (n - 1) / 2.0;
      for (std::int64_t i = 0; i < mine; ++i) CHECK(out.get(i) == n * (first + i) + rank_sum);
    }
    allreduceStillWorks(o.name + ".after");
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

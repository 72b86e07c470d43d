// Negotiation: the runtime agrees on one order whatever order the ranks submit in.
// 200 tensors shuffled differently on each rank; several application threads, with a
// tensor submitted by a different thread on each rank; mixed collective types in
// flight together; a duplicate name while the first is in flight is InvalidArgument at
// once.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

// Tensor t of a test: its dtype, op and length, the same on every rank.
struct Spec {
  std::string name;
  DType dtype;
  ReduceOp op;
  std::int64_t n;
};

Spec specFor(const std::string& prefix, int t) {
  return {prefix + "." + std::to_string(t), kAllDTypes[t % 8], kAllOps[(t / 8) % 5],
          static_cast<std::int64_t>((t * 389) % 3001)};
}

struct Live {
  Spec spec;
  std::unique_ptr<Buffer> buffer;
  accord::Handle handle;
};

Live submit(const Spec& spec) {
  const int me = accord::rank();
  Live l{spec, std::make_unique<Buffer>(spec.dtype, Shape{spec.n}), {}};
  l.buffer->fill([&](std::int64_t i) { return fillValue(spec.dtype, spec.op, me, i); });
  accord::AllreduceOptions options;
  options.name = spec.name;
  options.op = spec.op;
  l.handle = accord::allreduce_async(l.buffer->view(), options);
  return l;
}

// "" when the collective succeeded with the right values. Safe from any thread.
std::string verify(Live& l) {
  const auto error = describe(finish(l.handle, l.spec.name), l.spec.name);
  if (!error.empty()) return error;
  const auto ranks = allRanks(accord::size());
  const auto diff = compareElements(
      l.spec.dtype, l.buffer->data(), l.spec.n,
      [&](std::int64_t i) { return reducedValue(l.spec.dtype, l.spec.op, ranks, i); },
      toleranceFor(l.spec.dtype, l.spec.op));
  return diff.empty() ? "" : l.spec.name + ": " + diff;
}

std::vector<int> shuffled(int count, unsigned seed) {
  std::vector<int> order(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) order[static_cast<std::size_t>(t)] = t;
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

}  // namespace

TEST_CASE("negotiation: 200 tensors submitted in a different order on each rank") {
  std::vector<Live> live;
  for (int t : shuffled(200, 1000u + static_cast<unsigned>(accord::rank())))
    live.push_back(submit(specFor("neg.shuffled", t)));
  for (auto& l : live) {
    const auto problem = verify(l);
    INFO(problem);
    CHECK(problem.empty());
  }
}

TEST_CASE("negotiation: four application threads; each tensor on a different thread per rank") {
  constexpr int kThreads = 4;
  constexpr int kTensors = 200;
  const int me = accord::rank();
  std::vector<std::vector<std::string>> problems(kThreads);  // Catch is not thread-safe
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      std::vector<Live> mine;
      for (int t : shuffled(kTensors, 77u * static_cast<unsigned>(k + 1) + static_cast<unsigned>(me)))
        if ((t + me) % kThreads == k) mine.push_back(submit(specFor("neg.threads", t)));
      for (auto& l : mine)
        if (auto p = verify(l); !p.empty()) problems[static_cast<std::size_t>(k)].push_back(p);
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < kThreads; ++k) {
    for (const auto& p : problems[static_cast<std::size_t>(k)]) {
      INFO("thread " << k << ": " << p);
      CHECK(p.empty());
    }
  }
}

TEST_CASE("negotiation: mixed collective types in a different order on each rank") {
  const int me = accord::rank();
  const int n = accord::size();
  std::vector<std::unique_ptr<Buffer>> inputs;
  std::vector<std::unique_ptr<Output>> outputs;
  std::vector<std::pair<std::string, accord::Handle>> handles;
  std::vector<std::function<void()>> checks;
  for (int t : shuffled(40, 5u + static_cast<unsigned>(me))) {
    const std::string name = "neg.mixed." + std::to_string(t);
    inputs.push_back(std::make_unique<Buffer>(DType::Int32, Shape{n * 2, 3}));
    Buffer* in = inputs.back().get();
    in->fill([&](std::int64_t i) { return fillValue(DType::Int32, ReduceOp::Sum, me, i + t); });
    outputs.push_back(std::make_unique<Output>(DType::Int32));
    Output* out = outputs.back().get();
    accord::Handle h;
    switch (t % 4) {
      case 0: {
        accord::AllreduceOptions o;
        o.name = name;
        h = accord::allreduce_async(in->view(), o);
        checks.push_back([=] {
          const auto diff = compareElements(DType::Int32, in->data(), in->numel(), [&](std::int64_t i) {
            return reducedValue(DType::Int32, ReduceOp::Sum, allRanks(n), i + t);
          });
          INFO(name << ": " << diff);
          CHECK(diff.empty());
        });
        break;
      }
      case 1: {
        accord::AllgatherOptions o;
        o.name = name;
        h = accord::allgather_async(in->view(), out->allocator(), o);
        checks.push_back([=] { CHECK(out->shape() == Shape{2 * n * n, 3}); });
        break;
      }
      case 2: {
        accord::BroadcastOptions o;
        o.name = name;
        o.root = t % n;
        h = accord::broadcast_async(in->view(), o);
        checks.push_back([=] {
          const auto diff = compareElements(DType::Int32, in->data(), in->numel(), [&](std::int64_t i) {
            return fillValue(DType::Int32, ReduceOp::Sum, t % n, i + t);
          });
          INFO(name << ": " << diff);
          CHECK(diff.empty());
        });
        break;
      }
      default: {
        accord::AlltoallOptions o;
        o.name = name;
        h = accord::alltoall_async(in->view(), out->allocator(), o);
        checks.push_back([=] {
          CHECK(out->shape() == Shape{2 * n, 3});
          CHECK(h.received_splits() == std::vector<std::int64_t>(static_cast<std::size_t>(n), 2));
        });
        break;
      }
    }
    handles.emplace_back(name, h);
  }
  for (auto& [name, h] : handles) {
    const auto error = describe(finish(h, name), name);
    INFO(error);
    CHECK(error.empty());
  }
  for (auto& check : checks) check();
}

TEST_CASE("negotiation: a duplicate name in flight is InvalidArgument at once") {
  const int me = accord::rank();
  const int n = accord::size();
  for (int k = 0; k < n; ++k) {
    // Only rank k has submitted before the barrier, so its tensor cannot complete yet.
    const std::string name = "neg.dup." + std::to_string(k);
    Buffer first(DType::Float32, {8});
    // Heap, and leaked should the runtime wrongly accept the duplicate: it must outlive it.
    auto* second = new Buffer(DType::Float32, {8});
    first.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
    accord::AllreduceOptions options;
    options.name = name;
    accord::Handle h, dup;
    if (me == k) {
      h = accord::allreduce_async(first.view(), options);
      const bool pending = !h.poll();
      const auto outcome = attempt([&] { dup = accord::allreduce_async(second->view(), options); });
      INFO("rank " << me << ", second '" << name << "' while the first is in flight: "
                   << describe(outcome, name));
      if (pending || n > 1) CHECK(outcome.kind == "InvalidArgument");
    }
    if (!dup.valid()) delete second;
    MPI_Barrier(MPI_COMM_WORLD);  // the application's own traffic
    if (me != k) h = accord::allreduce_async(first.view(), options);
    const auto error = describe(finish(h, name), name);
    INFO(error);
    CHECK(error.empty());
    const auto diff = compareElements(DType::Float32, first.data(), 8, [&](std::int64_t i) {
      return reducedValue(DType::Float32, ReduceOp::Sum, allRanks(n), i);
    });
    INFO(name << ": " << diff);
    CHECK(diff.empty());
  }
}

TEST_CASE("negotiation: a group member's name colliding with a tensor in flight") {
  // Grouped "neg.coll.<k>" names its member "neg.coll.<k>.0", which only rank k has
  // submitted before the barrier, so it is certainly still in flight there: submitted
  // by every rank, it could complete on some before they submit the group, which would
  // then be accepted on those ranks alone.
  const int me = accord::rank();
  const int n = accord::size();
  for (int k = 0; k < n; ++k) {
    // attemptSubmit waits for a group it was wrongly let submit, so b may live here.
    Buffer a(DType::Float32, {4}), b(DType::Float32, {4});
    a.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
    accord::AllreduceOptions single, group;
    single.name = "neg.coll." + std::to_string(k) + ".0";
    group.name = "neg.coll." + std::to_string(k);
    accord::Handle h;
    if (me == k) {
      h = accord::allreduce_async(a.view(), single);
      const auto outcome = attemptSubmit(
          [&] { return accord::grouped_allreduce_async({b.view()}, group); }, group.name);
      INFO(describe(outcome, "group '" + group.name + "' beside '" + single.name + "'"));
      // A rank alone may finish the single before the group comes: then the group's
      // member name is free again and the group rightly accepted.
      if (n > 1)
        CHECK(outcome.kind == "InvalidArgument");
      else if (outcome.kind != "InvalidArgument")
        CHECK(h.poll());
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the application's own traffic
    if (me != k) h = accord::allreduce_async(a.view(), single);
    const auto error = describe(finish(h, single.name), single.name);
    INFO(error);
    CHECK(error.empty());
    const auto diff = compareElements(DType::Float32, a.data(), 4, [&](std::int64_t i) {
      return reducedValue(DType::Float32, ReduceOp::Sum, allRanks(n), i);
    });
    INFO(single.name << ": " << diff);
    CHECK(diff.empty());
  }
}

TEST_CASE("negotiation: 5000 one-element tensors in flight at once") {
  constexpr int kCount = 5000;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<accord::Handle> handles;
  for (int t = 0; t < kCount; ++t) {
    buffers.push_back(std::make_unique<Buffer>(DType::Int32, Shape{1}));
    buffers.back()->set(0, t % 7 + accord::rank());
    accord::AllreduceOptions options;
    options.name = "neg.tiny." + std::to_string(t);
    handles.push_back(accord::allreduce_async(buffers.back()->view(), options));
  }
  const int n = accord::size();
  int failed = 0, wrong = 0;
  std::string first;
  for (int t = 0; t < kCount; ++t) {
    const auto error = describe(finish(handles[static_cast<std::size_t>(t)], "neg.tiny"), "neg.tiny");
    if (!error.empty() && failed++ == 0) first = error;
    if (buffers[static_cast<std::size_t>(t)]->get(0) != n * (t % 7) + n * (n - 1) / 2) ++wrong;
  }
  INFO(failed << " failed (first: " << first << "), " << wrong << " wrong");
  CHECK(failed == 0);
  CHECK(wrong == 0);
}

int main(int argc, char** argv) { return runMain(argc, argv); }

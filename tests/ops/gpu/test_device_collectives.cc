// Collectives on CUDA tensors against the host path: every collective, dtype and op,
// sizes 0, 1, odd and above the fusion threshold, fused groups, scaling, uneven rows.
// The stream contract (the collective waits for the application's stream; the handle's
// event lets another stream wait for the result) is in test_device_streams.cc, built
// into the same binary.
//
// CTest runs this binary with NCCL on 1 to 4 ranks (ranks sharing a GPU where a host has
// fewer, through ci/nccl-one-gpu.sh), fused and unfused, flat and hierarchical across
// simulated hosts, and with ACCORD_NCCL=0 on 1 and 2 ranks sharing GPU 0 (MPI through
// pinned memory).
#include <catch2/catch.hpp>

#include "device_test.h"

#include <memory>

using namespace accord_test;
using namespace accord_gpu;

namespace {

// One collective run on the host and on the device with the same inputs.
struct Twin {
  std::string name;
  ReduceOp op = ReduceOp::Sum;
  std::unique_ptr<Buffer> host;
  std::unique_ptr<DeviceTensor> device;
  accord::Handle on_host, on_device;
};

Twin makeTwin(DType dtype, Shape shape, ReduceOp op, const std::string& name) {
  Twin t{name, op, std::make_unique<Buffer>(dtype, shape), nullptr, {}, {}};
  const int me = accord::rank();
  t.host->fill([&](std::int64_t i) { return fillValue(dtype, op, me, i); }, kFillPeriod);
  t.device = std::make_unique<DeviceTensor>(*t.host);
  return t;
}

void submitAllreduce(Twin& t, double pre = 1.0, double post = 1.0,
                     accord::ProcessSetId set = accord::kGlobalProcessSet) {
  accord::AllreduceOptions o;
  o.process_set = set;
  o.op = t.op;
  o.prescale = pre;
  o.postscale = post;
  o.name = "host." + t.name;
  t.on_host = accord::allreduce_async(t.host->view(), o);
  o.name = "cuda." + t.name;
  t.on_device = accord::allreduce_async(t.device->view(), o);
}

// Both handles succeeded and the device holds the host's result.
void checkTwin(Twin& t) {
  const auto h = describe(finish(t.on_host, "host." + t.name), t.name + " on the host");
  const auto d = describe(finish(t.on_device, "cuda." + t.name), t.name + " on the GPU");
  INFO(h << d);
  CHECK(h.empty());
  CHECK(d.empty());
  const DType dtype = t.host->dtype();
  const auto diff = compareWithHost(dtype, t.device->download(), t.host->data(), t.host->numel());
  INFO(t.name << ": " << diff);
  CHECK(diff.empty());
}

std::string suffix(DType dtype, ReduceOp op, std::int64_t n) {
  return str(dtype) + "." + str(op) + "." + std::to_string(n);
}

}  // namespace

TEST_CASE("device allreduce: every dtype x op x size equals the host path") {
  for (DType dtype : kAllDTypes) {
    std::vector<Twin> twins;
    for (ReduceOp op : kAllOps)
      for (std::int64_t n : testSizes(dtype)) {
        twins.push_back(makeTwin(dtype, {n}, op, "ar." + suffix(dtype, op, n)));
        submitAllreduce(twins.back());
      }
    for (auto& t : twins) checkTwin(t);
  }
}

TEST_CASE("device allreduce: prescale and postscale, floating point and integer") {
  std::vector<Twin> twins;
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64, DType::Int32,
                      DType::Int64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
      for (std::int64_t n : {std::int64_t{1023}, std::int64_t{300000}}) {
        twins.push_back(makeTwin(dtype, {n}, op, "ar.scaled." + suffix(dtype, op, n)));
        submitAllreduce(twins.back(), 0.5, 3.0);
      }
    }
  }
  for (auto& t : twins) checkTwin(t);
}

TEST_CASE("device allreduce: many small tensors fuse, and a grouped allreduce") {
  std::vector<Twin> twins;
  for (int k = 0; k < 200; ++k) {
    const DType dtype = k % 3 == 0 ? DType::Float64 : DType::Float32;
    const ReduceOp op = k % 5 == 0 ? ReduceOp::Max : ReduceOp::Sum;
    twins.push_back(makeTwin(dtype, {1000 + k % 7}, op, "ar.small." + std::to_string(k)));
    submitAllreduce(twins.back());
  }
  for (auto& t : twins) checkTwin(t);

  // Ten tensors, one handle; its event covers them all.
  std::vector<Twin> group;
  std::vector<accord::TensorView> host_views, device_views;
  for (int k = 0; k < 10; ++k) {
    group.push_back(makeTwin(DType::Float32, {37 * k + 1}, ReduceOp::Sum, "g"));
    host_views.push_back(group.back().host->view());
    device_views.push_back(group.back().device->view());
  }
  accord::AllreduceOptions o;
  o.name = "grouped.host";
  auto on_host = accord::grouped_allreduce_async(host_views, o);
  o.name = "grouped.cuda";
  auto on_device = accord::grouped_allreduce_async(device_views, o);
  CHECK(on_device.cuda_event() != nullptr);
  const auto h = describe(finish(on_host, o.name), "grouped on the host");
  const auto d = describe(finish(on_device, o.name), "grouped on the GPU");
  INFO(h << d);
  CHECK(h.empty());
  CHECK(d.empty());
  CHECK_FALSE(on_host.wait_on_stream(nullptr));  // a host collective: nothing on a GPU
  for (auto& t : group) {
    const auto diff = compareWithHost(DType::Float32, t.device->download(), t.host->data(),
                                      t.host->numel());
    INFO(diff);
    CHECK(diff.empty());
  }
}

TEST_CASE("device allreduce: one name 30 times (response cache steady state)") {
  for (int step = 0; step < 30; ++step) {
    Twin t = makeTwin(DType::Float32, {4096 + step / 10}, ReduceOp::Sum, "ar.cached");
    submitAllreduce(t);
    INFO("step " << step);
    checkTwin(t);
  }
}

TEST_CASE("device allgather: every dtype, a different first dimension on each rank") {
  const int me = accord::rank();
  for (DType dtype : kAllDTypes) {
    // Alone (gathered straight into the output) and three at once (fused).
    for (int fused : {1, 3}) {
      std::vector<Buffer> inputs;
      inputs.reserve(fused);  // the views submitted point into them
      std::vector<std::unique_ptr<Output>> host_out;
      std::vector<std::unique_ptr<DeviceOutput>> device_out;
      std::vector<std::unique_ptr<DeviceTensor>> device_in;
      std::vector<accord::Handle> hh, dh;
      for (int k = 0; k < fused; ++k) {
        const std::string name =
            "ag." + str(dtype) + "." + std::to_string(fused) + "." + std::to_string(k);
        inputs.emplace_back(dtype, Shape{me + 1 + k, 5});
        inputs.back().fill([&](std::int64_t i) { return tagValue(dtype, me, k, i); });
        device_in.push_back(std::make_unique<DeviceTensor>(inputs.back()));
        host_out.push_back(std::make_unique<Output>(dtype));
        device_out.push_back(std::make_unique<DeviceOutput>(dtype));
        accord::AllgatherOptions o;
        o.name = "host." + name;
        hh.push_back(
            accord::allgather_async(inputs.back().view(), host_out.back()->allocator(), o));
        o.name = "cuda." + name;
        dh.push_back(
            accord::allgather_async(device_in.back()->view(), device_out.back()->allocator(), o));
      }
      for (int k = 0; k < fused; ++k) {
        const auto h = describe(finish(hh[k], "allgather host"), "allgather on the host");
        const auto d = describe(finish(dh[k], "allgather cuda"), "allgather on the GPU");
        INFO(str(dtype) << " " << k << ": " << h << d);
        CHECK(h.empty());
        CHECK(d.empty());
        CHECK(device_out[k]->shape() == host_out[k]->shape());
        const auto diff = compareWithHost(dtype, device_out[k]->download(), host_out[k]->data(),
                                          host_out[k]->numel());
        INFO(diff);
        CHECK(diff.empty());
      }
    }
  }
}

// One broadcast from `root` on the host and on the device.
void checkBroadcast(DType dtype, std::int64_t n, int root, const std::string& name) {
  Twin t = makeTwin(dtype, {n}, ReduceOp::Sum, name);
  accord::BroadcastOptions o;
  o.root = root;
  o.name = "host." + t.name;
  t.on_host = accord::broadcast_async(t.host->view(), o);
  o.name = "cuda." + t.name;
  t.on_device = accord::broadcast_async(t.device->view(), o);
  checkTwin(t);
}

TEST_CASE("device broadcast: every dtype and size, from the last rank") {
  const int root = accord::size() - 1;
  for (DType dtype : kAllDTypes)
    for (std::int64_t n : testSizes(dtype))
      checkBroadcast(dtype, n, root, "bc." + suffix(dtype, ReduceOp::Sum, n));
}

TEST_CASE("device broadcast: from each root in turn") {
  for (int root = 0; root < accord::size(); ++root)
    for (DType dtype : {DType::UInt8, DType::BFloat16, DType::Float32, DType::Int64})
      checkBroadcast(dtype, 1001, root, "bc.root" + std::to_string(root) + "." + str(dtype));
}

// Rank r runs r + 1 steps of device allreduces, then joins: a joined rank contributes
// the op's neutral element from device memory (Average divides by every rank, the
// joined ones too), and every rank's join names the last rank to join. A barrier after.
TEST_CASE("device join: ranks run different numbers of steps, then a barrier") {
  const int me = accord::rank(), n = accord::size();
  const std::pair<DType, ReduceOp> kinds[] = {{DType::Float32, ReduceOp::Sum},
                                              {DType::BFloat16, ReduceOp::Average},
                                              {DType::Int64, ReduceOp::Max},
                                              {DType::Float64, ReduceOp::Min}};
  for (int step = 0; step <= me; ++step) {
    std::vector<int> active;  // the ranks that have not joined before this step
    for (int r = step; r < n; ++r) active.push_back(r);
    for (const auto& [dtype, op] : kinds) {
      Buffer b(dtype, {4099});
      b.fill([&](std::int64_t i) { return fillValue(dtype, op, me, i + step); });
      DeviceTensor d(b);
      accord::AllreduceOptions o;
      o.op = op;
      o.name = "join." + str(dtype) + "." + str(op);
      const auto error = describe(finish(accord::allreduce_async(d.view(), o), o.name), o.name);
      INFO("step " << step << ": " << error);
      CHECK(error.empty());
      const auto got = d.download();
      const auto diff = compareElements(
          dtype, got.data(), 4099,
          [&](std::int64_t i) {
            const double value = reducedValue(dtype, op, active, i + step);
            return op == ReduceOp::Average ? value * double(active.size()) / n : value;
          },
          toleranceFor(dtype, op));
      INFO(o.name << " at step " << step << " with " << active.size() << " rank(s): " << diff);
      CHECK(diff.empty());
    }
  }
  accord::Handle joined = accord::join_async();
  const auto error = describe(finish(joined, "join"), "join");
  INFO(error);
  CHECK(error.empty());
  if (error.empty()) CHECK(joined.last_joined_rank() == n - 1);
  const auto barrier = describe(finish(accord::barrier_async(), "barrier"), "barrier");
  INFO(barrier);
  CHECK(barrier.empty());
}

TEST_CASE("device reducescatter: every dtype x op, even and uneven rows, scaled, fused") {
  const int n = accord::size();
  struct Case {
    Twin twin;
    double prescale;
    std::unique_ptr<Output> host_out;
    std::unique_ptr<DeviceOutput> device_out;
  };
  for (DType dtype : kAllDTypes) {
    // Submitted together, so that neighbours fuse: the packed path. Alone, with rows
    // that divide evenly and no prescale, a tensor goes straight from input to output.
    std::vector<Case> cases;
    for (ReduceOp op : kAllOps) {
      for (std::int64_t rows : {std::int64_t{2} * n, std::int64_t{2} * n + 1}) {
        for (double prescale : {1.0, 2.0}) {
          if (prescale != 1.0 && !accord::is_floating_point(dtype) && op == ReduceOp::Product)
            continue;  // products of doubled inputs overflow 8-bit integers over 4 ranks
          const std::string name =
              "rs." + suffix(dtype, op, rows) + ".x" + std::to_string(static_cast<int>(prescale));
          cases.push_back({makeTwin(dtype, {rows, 3}, op, name), prescale,
                           std::make_unique<Output>(dtype), std::make_unique<DeviceOutput>(dtype)});
          Case& c = cases.back();
          accord::ReducescatterOptions o;
          o.op = op;
          o.prescale = prescale;
          o.name = "host." + name;
          c.twin.on_host =
              accord::reducescatter_async(c.twin.host->view(), c.host_out->allocator(), o);
          o.name = "cuda." + name;
          c.twin.on_device =
              accord::reducescatter_async(c.twin.device->view(), c.device_out->allocator(), o);
        }
      }
    }
    for (Case& c : cases) {
      const auto h = describe(finish(c.twin.on_host, c.twin.name), "on the host");
      const auto d = describe(finish(c.twin.on_device, c.twin.name), "on the GPU");
      INFO(c.twin.name << ": " << h << d);
      CHECK(h.empty());
      CHECK(d.empty());
      CHECK(c.device_out->shape() == c.host_out->shape());
      const auto diff = compareWithHost(dtype, c.device_out->download(), c.host_out->data(),
                                        c.host_out->numel());
      INFO(diff);
      CHECK(diff.empty());
    }
  }
}

TEST_CASE("device alltoall: uneven splits, received splits reported") {
  const int n = accord::size(), me = accord::rank();
  for (DType dtype : {DType::UInt8, DType::BFloat16, DType::Float32, DType::Int64}) {
    std::vector<std::int64_t> splits;
    std::int64_t rows = 0;
    for (int r = 0; r < n; ++r) {
      splits.push_back((r + me) % 3);
      rows += splits.back();
    }
    Buffer input(dtype, {rows, 2});
    input.fill([&](std::int64_t i) { return tagValue(dtype, me, 7, i); });
    DeviceTensor device_in(input);
    Output host_out(dtype);
    DeviceOutput device_out(dtype);
    accord::AlltoallOptions o;
    o.splits = splits;
    o.name = "a2a.host." + str(dtype);
    auto hh = accord::alltoall_async(input.view(), host_out.allocator(), o);
    o.name = "a2a.cuda." + str(dtype);
    auto dh = accord::alltoall_async(device_in.view(), device_out.allocator(), o);
    const auto h = describe(finish(hh, o.name), "on the host");
    const auto d = describe(finish(dh, o.name), "on the GPU");
    INFO(str(dtype) << ": " << h << d);
    CHECK(h.empty());
    CHECK(d.empty());
    CHECK(dh.received_splits() == hh.received_splits());
    const auto diff =
        compareWithHost(dtype, device_out.download(), host_out.data(), host_out.numel());
    INFO(diff);
    CHECK(diff.empty());
  }
}

// A process set without rank 0 (so the set's rank 0, which creates its NCCL
// communicator, is not the global one), with its own communicator beside the global
// set's: every collective on it equals the host path on the same set.
TEST_CASE("device collectives on a process set that leaves rank 0 out") {
  const int n = accord::size(), me = accord::rank();
  if (n < 2) return;  // no set leaves a rank out
  std::vector<int> ranks;
  for (int r = 1; r < n; ++r) ranks.push_back(r);
  const accord::ProcessSetId set = accord::add_process_set(ranks);
  if (me != 0) {
    std::vector<Twin> twins;
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int32, DType::Int64})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max})
        for (std::int64_t size : {std::int64_t{1}, std::int64_t{1001}, std::int64_t{70000}}) {
          twins.push_back(makeTwin(dtype, {size}, op, "set.ar." + suffix(dtype, op, size)));
          submitAllreduce(twins.back(), 1.0, 1.0, set);
        }
    for (auto& t : twins) checkTwin(t);

    // Broadcast from the set's last rank, allgather with a different first dimension on
    // each member.
    Twin b = makeTwin(DType::Float32, {4099}, ReduceOp::Sum, "set.bc");
    accord::BroadcastOptions bo;
    bo.process_set = set;
    bo.root = static_cast<int>(ranks.size()) - 1;
    bo.name = "host." + b.name;
    b.on_host = accord::broadcast_async(b.host->view(), bo);
    bo.name = "cuda." + b.name;
    b.on_device = accord::broadcast_async(b.device->view(), bo);
    checkTwin(b);

    Buffer in(DType::Int64, {me, 3});
    in.fill([&](std::int64_t i) { return tagValue(DType::Int64, me, 1, i); });
    DeviceTensor device_in(in);
    Output host_out(DType::Int64);
    DeviceOutput device_out(DType::Int64);
    accord::AllgatherOptions go;
    go.process_set = set;
    go.name = "set.ag.host";
    auto hh = accord::allgather_async(in.view(), host_out.allocator(), go);
    go.name = "set.ag.cuda";
    auto dh = accord::allgather_async(device_in.view(), device_out.allocator(), go);
    const auto h = describe(finish(hh, go.name), "allgather on the host");
    const auto d = describe(finish(dh, go.name), "allgather on the GPU");
    INFO(h << d);
    CHECK(h.empty());
    CHECK(d.empty());
    CHECK(device_out.shape() == host_out.shape());
    const auto diff = compareWithHost(DType::Int64, device_out.download(), host_out.data(),
                                      host_out.numel());
    INFO(diff);
    CHECK(diff.empty());
  }
  // The global set's communicator still works beside the set's.
  Twin t = makeTwin(DType::Float32, {333}, ReduceOp::Sum, "after.set");
  submitAllreduce(t);
  checkTwin(t);
  accord::remove_process_set(set);
}

int main(int argc, char** argv) { return gpuTestMain(argc, argv); }

// Failure cases: every kind of mismatch between ranks raises MismatchError on EVERY
// rank (never a hang) with a message naming the tensor, the ranks and both values; bad
// arguments raise InvalidArgument at once; calls before init and after shutdown raise
// NotInitialized; the runtime keeps working after each error. Device mismatches (a CPU
// tensor on one rank, a CUDA tensor on another) need a GPU: tests/ops/gpu has them.
//
// The odd rank out is the last one; with one rank nothing can disagree, so each
// collective must simply succeed.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

bool isOdd() { return accord::rank() == accord::size() - 1 && accord::size() > 1; }

// Checks what `handle` raised: MismatchError on every rank when n > 1, success when
// n == 1; the message names `name`, the odd rank and another rank, and each of `values`.
void expectMismatch(const accord::Handle& handle, const std::string& name,
                    const std::vector<std::string>& values) {
  const int n = accord::size();
  const Outcome outcome = finish(handle, name);
  INFO("rank " << accord::rank() << ", '" << name << "': " << outcome.kind << ": " << outcome.message);
  if (n == 1) {
    CHECK(outcome.ok());
    return;
  }
  CHECK(outcome.kind == "MismatchError");
  CHECK(contains(outcome.message, name));
  CHECK(contains(outcome.message, "rank " + std::to_string(n - 1)));
  int others = 0;
  for (int r = 0; r < n - 1; ++r) others += contains(outcome.message, "rank " + std::to_string(r));
  CHECK(others >= 1);
  for (const auto& v : values) {
    INFO("expected the message to contain '" << v << "'");
    CHECK(contains(outcome.message, v));
  }
}

accord::Handle allreduceWith(Buffer& b, const std::string& name, ReduceOp op, double pre = 1.0,
                             double post = 1.0) {
  accord::AllreduceOptions options;
  options.name = name;
  options.op = op;
  options.prescale = pre;
  options.postscale = post;
  return accord::allreduce_async(b.view(), options);
}

// Failures outside Catch (before init / after shutdown) print themselves.
int expectKind(const char* what, const std::function<void()>& call, const std::string& kind) {
  const Outcome outcome = attempt(call);
  if (outcome.kind == kind) return 0;
  std::fprintf(stderr, "[rank %d] FAILED: %s: expected %s, got %s: %s\n", worldRank(), what,
               kind.c_str(), outcome.kind.c_str(), outcome.message.c_str());
  return 1;
}

int expectNotInitialized(const char* when) {
  int failures = 0;
  if (accord::is_initialized()) {
    std::fprintf(stderr, "[rank %d] FAILED: is_initialized() is true %s\n", worldRank(), when);
    ++failures;
  }
  static float data[4];
  accord::TensorView v{data, DType::Float32, {4}, {}};
  const std::string w = when;
  failures += expectKind((w + ": allreduce_async").c_str(), [&] { accord::allreduce_async(v); },
                         "NotInitialized");
  failures += expectKind((w + ": broadcast_async").c_str(), [&] { accord::broadcast_async(v); },
                         "NotInitialized");
  failures += expectKind((w + ": barrier_async").c_str(), [] { accord::barrier_async(); },
                         "NotInitialized");
  failures += expectKind((w + ": join_async").c_str(), [] { accord::join_async(); },
                         "NotInitialized");
  failures += expectKind((w + ": add_process_set").c_str(), [] { accord::add_process_set({0}); },
                         "NotInitialized");
  failures += expectKind((w + ": rank").c_str(), [] { accord::rank(); }, "NotInitialized");
  failures += expectKind((w + ": size").c_str(), [] { accord::size(); }, "NotInitialized");
  return failures;
}

}  // namespace

TEST_CASE("mismatch: dtype") {
  const std::string name = "err.dtype";
  Buffer b(isOdd() ? DType::Float64 : DType::Float32, {4, 3});
  expectMismatch(allreduceWith(b, name, ReduceOp::Sum), name,
                 {str(DType::Float32), str(DType::Float64)});
}

TEST_CASE("mismatch: shape") {
  const std::string name = "err.shape";
  Buffer b(DType::Float32, isOdd() ? Shape{4, 5} : Shape{4, 3});
  expectMismatch(allreduceWith(b, name, ReduceOp::Sum), name, {"[4,3]", "[4,5]"});
}

TEST_CASE("mismatch: same element count, different shape") {
  const std::string name = "err.shape.samecount";
  Buffer b(DType::Float32, isOdd() ? Shape{3, 4} : Shape{4, 3});
  expectMismatch(allreduceWith(b, name, ReduceOp::Sum), name, {"[4,3]", "[3,4]"});
}

TEST_CASE("mismatch: reduce op") {
  const std::string name = "err.op";
  Buffer b(DType::Float32, {8});
  expectMismatch(allreduceWith(b, name, isOdd() ? ReduceOp::Max : ReduceOp::Sum), name,
                 {str(ReduceOp::Sum), str(ReduceOp::Max)});
}

TEST_CASE("mismatch: prescale and postscale") {
  Buffer a(DType::Float32, {8}), b(DType::Float32, {8});
  auto ha = allreduceWith(a, "err.prescale", ReduceOp::Sum, isOdd() ? 0.5 : 1.0, 1.0);
  auto hb = allreduceWith(b, "err.postscale", ReduceOp::Sum, 1.0, isOdd() ? 0.25 : 1.0);
  expectMismatch(ha, "err.prescale", {"prescale", "0.5"});
  expectMismatch(hb, "err.postscale", {"postscale", "0.25"});
}

TEST_CASE("mismatch: broadcast root") {
  const std::string name = "err.root";
  Buffer b(DType::Int32, {8});
  accord::BroadcastOptions options;
  options.name = name;
  options.root = isOdd() ? 1 : 0;
  expectMismatch(accord::broadcast_async(b.view(), options), name, {"root"});
}

TEST_CASE("mismatch: collective type (allreduce vs broadcast)") {
  const std::string name = "err.type";
  Buffer b(DType::Float32, {8});
  accord::Handle h;
  if (isOdd()) {
    accord::BroadcastOptions options;
    options.name = name;
    h = accord::broadcast_async(b.view(), options);
  } else {
    h = allreduceWith(b, name, ReduceOp::Sum);
  }
  expectMismatch(h, name, {"allreduce", "broadcast"});
}

TEST_CASE("mismatch: allgather, alltoall and reducescatter with different trailing shapes") {
  const std::int64_t cols = isOdd() ? 4 : 3;
  const int n = accord::size();
  Buffer g(DType::Float32, {2, cols}), x(DType::Float32, {2 * n, cols}), r(DType::Float32, {5, cols});
  Output go(DType::Float32), xo(DType::Float32), ro(DType::Float32);
  accord::AllgatherOptions gopt;
  gopt.name = "err.allgather";
  accord::AlltoallOptions xopt;
  xopt.name = "err.alltoall";
  accord::ReducescatterOptions ropt;
  ropt.name = "err.reducescatter";
  auto hg = accord::allgather_async(g.view(), go.allocator(), gopt);
  auto hx = accord::alltoall_async(x.view(), xo.allocator(), xopt);
  auto hr = accord::reducescatter_async(r.view(), ro.allocator(), ropt);
  expectMismatch(hg, gopt.name, {});
  expectMismatch(hx, xopt.name, {});
  expectMismatch(hr, ropt.name, {"[5,3]", "[5,4]"});
}

TEST_CASE("mismatch: several at once, beside a good tensor") {
  Buffer bad1(isOdd() ? DType::Int32 : DType::Int64, {16});
  Buffer bad2(DType::Float32, {isOdd() ? 17 : 16});
  Buffer good(DType::Float32, {16});
  const int me = accord::rank();
  good.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  auto h1 = allreduceWith(bad1, "err.many.1", ReduceOp::Sum);
  auto hg = allreduceWith(good, "err.many.good", ReduceOp::Sum);
  auto h2 = allreduceWith(bad2, "err.many.2", ReduceOp::Sum);
  expectMismatch(h1, "err.many.1", {str(DType::Int32), str(DType::Int64)});
  expectMismatch(h2, "err.many.2", {"[16]", "[17]"});
  const auto error = describe(finish(hg, "err.many.good"), "err.many.good");
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(DType::Float32, good.data(), 16, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, allRanks(accord::size()), i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("mismatch: the same name works again once the ranks agree") {
  const int me = accord::rank();
  Buffer b(DType::Float32, {4, 3});  // "err.shape" failed above; now every rank agrees
  b.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  const auto error = describe(finish(allreduceWith(b, "err.shape", ReduceOp::Sum), "err.shape"),
                              "err.shape");
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(DType::Float32, b.data(), 12, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, allRanks(accord::size()), i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("invalid arguments are rejected at once, before any communication") {
  Buffer b(DType::Float32, {4});
  accord::TensorView null_data = b.view();
  null_data.data = nullptr;
  auto o1 = attemptSubmit([&] { return accord::allreduce_async(null_data); }, "null data");
  INFO(describe(o1, "null data with 4 elements"));
  CHECK(o1.kind == "InvalidArgument");

  accord::TensorView negative = b.view();
  negative.shape = {-1, 4};
  auto o2 = attemptSubmit([&] { return accord::allreduce_async(negative); }, "negative dim");
  INFO(describe(o2, "shape [-1,4]"));
  CHECK(o2.kind == "InvalidArgument");

  accord::AllreduceOptions unknown_set;
  unknown_set.name = "err.unknown.set";
  unknown_set.process_set = 12345;
  auto o3 = attemptSubmit([&] { return accord::allreduce_async(b.view(), unknown_set); },
                          "unknown process set");
  INFO(describe(o3, "process set 12345"));
  CHECK(o3.kind == "InvalidArgument");

  auto o4 = attemptSubmit([&] { return accord::allgather_async(b.view(), nullptr); },
                          "allgather without an allocator");
  INFO(describe(o4, "allgather with an empty Allocator"));
  CHECK(o4.kind == "InvalidArgument");

  // No machine has GPU 4096: refused at once, whether or not this build has GPU
  // support, naming the tensor and the device.
  accord::TensorView no_such_gpu = b.view();
  no_such_gpu.device = accord::Device::cuda(4096);
  accord::AllreduceOptions on_gpu;
  on_gpu.name = "err.no.such.gpu";
  auto o5 = attemptSubmit([&] { return accord::allreduce_async(no_such_gpu, on_gpu); },
                          "a tensor on cuda:4096");
  INFO(describe(o5, "a tensor on cuda:4096"));
  CHECK(o5.kind == "InvalidArgument");
  CHECK(contains(o5.message, "err.no.such.gpu"));
  CHECK(contains(o5.message, "cuda:4096"));
}

// Where this process has no GPU (no driver, none visible, or a build without GPU
// support), cuda_device_count says why in plain words: CUDA's own words for a missing
// driver blame the driver's version.
TEST_CASE("cuda_device_count says why there is no GPU in plain words") {
  std::string why;
  const int count = accord::cuda_device_count(&why);
  REQUIRE(count >= 0);
  CHECK(accord::cuda_device_count() == count);  // without asking why
  if (count > 0) {
    CHECK(accord::build_features().cuda);
    return;
  }
  INFO("why: " << why);
  CHECK_FALSE(why.empty());
  CHECK(why.find("insufficient") == std::string::npos);
  if (!accord::build_features().cuda) CHECK(why == "this build of Accord has no GPU support");
}

// A value outside its enum (a bad cast in the caller, a binding bug) or a shape whose
// size overflows, on one rank only, is refused in that rank's call: nothing reaches the
// other ranks, whose next collectives work as usual.
TEST_CASE("bad enum values and overflowing shapes on one rank are refused in its call") {
  const int n = accord::size(), me = accord::rank();
  const auto p31 = std::int64_t{1} << 31, p32 = std::int64_t{1} << 32, p62 = std::int64_t{1} << 62;
  Buffer b(DType::Float32, {4, 2});
  Output out(DType::Float32);
  auto expectRefused = [](const Outcome& o, const std::string& what, const std::string& message) {
    INFO(describe(o, what));
    CHECK(o.kind == "InvalidArgument");
    CHECK(o.message == message);
  };
  if (me == n - 1) {  // these never become collectives, so the other ranks need not call them
    accord::AllreduceOptions unnamed;
    unnamed.op = static_cast<ReduceOp>(6);
    const Outcome o =
        attemptSubmit([&] { return accord::allreduce_async(b.view(), unnamed); }, "unnamed op");
    INFO(describe(o, "unnamed op 6"));
    CHECK(o.kind == "InvalidArgument");
    CHECK(contains(o.message, "op 6 is not a ReduceOp"));
    accord::AllreduceOptions bad_op;
    bad_op.name = "err.bad.op";
    bad_op.op = static_cast<ReduceOp>(17);
    expectRefused(attemptSubmit([&] { return accord::allreduce_async(b.view(), bad_op); }, "op"),
                  "op 17",
                  "allreduce 'err.bad.op': op 17 is not a ReduceOp (expected 0..5: sum, "
                  "average, min, max, product, adasum)");
    bad_op.name = "err.bad.group";
    expectRefused(attemptSubmit([&] { return accord::grouped_allreduce_async({b.view()}, bad_op); },
                                "grouped op"),
                  "grouped op 17",
                  "allreduce 'err.bad.group.0': op 17 is not a ReduceOp "
                  "(expected 0..5: sum, average, min, max, product, adasum)");
    accord::ReducescatterOptions rs;
    rs.name = "err.bad.rs.op";
    rs.op = static_cast<ReduceOp>(255);
    expectRefused(
        attemptSubmit([&] { return accord::reducescatter_async(b.view(), out.allocator(), rs); },
                      "reducescatter op"),
        "reducescatter op 255",
        "reducescatter 'err.bad.rs.op': op 255 is not a ReduceOp "
        "(expected 0..5: sum, average, min, max, product, adasum)");
    accord::TensorView bad_dtype = b.view();
    bad_dtype.dtype = static_cast<DType>(12);
    accord::AllgatherOptions g;
    g.name = "err.bad.dtype";
    expectRefused(
        attemptSubmit([&] { return accord::allgather_async(bad_dtype, out.allocator(), g); },
                      "dtype"),
        "dtype 12",
        "allgather 'err.bad.dtype': dtype 12 is not a DType (expected 0..10: "
        "uint8, int8, int32, int64, float16, bfloat16, float32, float64, int16, uint16, bool)");
    accord::TensorView bad_device = b.view();
    bad_device.device.type = static_cast<accord::DeviceType>(5);
    accord::BroadcastOptions bc;
    bc.name = "err.bad.device";
    expectRefused(attemptSubmit([&] { return accord::broadcast_async(bad_device, bc); }, "device"),
                  "device type 5",
                  "broadcast 'err.bad.device': device type 5 is not a "
                  "DeviceType (expected 0..1: cpu, cuda)");
    accord::AllreduceOptions named;
    named.name = "err.bad.shape";
    accord::TensorView wraps_to_empty = b.view();
    wraps_to_empty.shape = {p62, 4};
    expectRefused(attemptSubmit([&] { return accord::allreduce_async(wraps_to_empty, named); },
                                "2^64 elements"),
                  "shape [2^62,4]",
                  "allreduce 'err.bad.shape': shape [4611686018427387904,4] "
                  "has more elements than an int64 can count");
    accord::TensorView wraps_negative = b.view();
    wraps_negative.shape = {p32, p31 + 1};
    expectRefused(attemptSubmit([&] { return accord::allreduce_async(wraps_negative, named); },
                                "2^63+2^32 elements"),
                  "shape [2^32,2^31+1]",
                  "allreduce 'err.bad.shape': shape [4294967296,2147483649] "
                  "has more elements than an int64 can count");
  }
  // Every rank, the refusing one included, carries on as if nothing happened; unnamed,
  // so that the refused unnamed call must not have used up a generated name.
  b.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  const auto error = describe(finish(accord::allreduce_async(b.view()), "unnamed after refusals"),
                              "unnamed after refusals");
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(DType::Float32, b.data(), 8, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, allRanks(n), i);
  });
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("mismatch: grouped allreduce member count") {
  // The odd rank groups 2 tensors, the others 3. Should this be (wrongly) left to the
  // stall inspector, ACCORD_STALL_SHUTDOWN_TIME=10 below turns it into a Timeout that
  // fails this check rather than a 5-minute hang.
  const std::string name = "err.group.count";
  std::vector<std::unique_ptr<Buffer>> members;
  std::vector<accord::TensorView> views;
  for (int m = 0; m < (isOdd() ? 2 : 3); ++m) {
    members.push_back(std::make_unique<Buffer>(DType::Float32, Shape{4}));
    views.push_back(members.back()->view());
  }
  accord::AllreduceOptions options;
  options.name = name;
  expectMismatch(accord::grouped_allreduce_async(views, options), name, {"2", "3"});
}

int main(int argc, char** argv) {
  MainOptions options;
  options.env = {{"ACCORD_STALL_CHECK_TIME", "5"}, {"ACCORD_STALL_SHUTDOWN_TIME", "10"}};
  options.before_init = [] { return expectNotInitialized("before init"); };
  options.after_shutdown = [] { return expectNotInitialized("after shutdown"); };
  return runMain(argc, argv, options);
}

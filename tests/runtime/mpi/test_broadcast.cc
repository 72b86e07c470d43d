// broadcast: every root, every dtype, sizes 0, 1, odd and above the fusion threshold.
// The root fills tagValue(dtype, root, 0, i); every other rank starts from its own,
// different values, which must all be overwritten.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

struct Bcast {
  std::string name;
  int root;
  std::unique_ptr<Buffer> buffer;
  accord::Handle handle;
};

Bcast submit(DType dtype, std::int64_t n, int root, const std::string& prefix) {
  const int me = accord::rank();
  Bcast b{prefix + "." + str(dtype) + "." + std::to_string(n) + ".root" + std::to_string(root),
          root, std::make_unique<Buffer>(dtype, Shape{n}), {}};
  b.buffer->fill([&](std::int64_t i) { return tagValue(dtype, me, me == root ? 0 : 1, i); });
  accord::BroadcastOptions options;
  options.name = b.name;
  options.root = root;
  b.handle = accord::broadcast_async(b.buffer->view(), options);
  return b;
}

void check(Bcast& b) {
  const DType dtype = b.buffer->dtype();
  const auto error = describe(finish(b.handle, b.name), b.name);
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(dtype, b.buffer->data(), b.buffer->numel(),
                                    [&](std::int64_t i) { return tagValue(dtype, b.root, 0, i); });
  INFO(b.name << ": " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("broadcast: every root x dtype x size") {
  for (int root = 0; root < accord::size(); ++root) {
    std::vector<Bcast> all;
    for (DType dtype : kAllDTypes)
      for (std::int64_t n : testSizes(dtype)) all.push_back(submit(dtype, n, root, "bc"));
    for (auto& b : all) check(b);
  }
}

TEST_CASE("broadcast: different roots in flight at once, and the blocking call") {
  std::vector<Bcast> all;
  for (int t = 0; t < 40; ++t)
    all.push_back(submit(kAllDTypes[t % 8], 100 + t, t % accord::size(), "bc.mixed" + std::to_string(t)));
  for (auto& b : all) check(b);

  const int me = accord::rank();
  const int root = accord::size() - 1;
  Buffer b(DType::Float64, {4, 4});
  b.fill([&](std::int64_t i) { return me == root ? 0.25 * static_cast<double>(i) : -1.0; });
  accord::BroadcastOptions options;
  options.name = "bc.blocking";
  options.root = root;
  const auto outcome = attempt([&] { accord::broadcast(b.view(), options); });
  INFO(describe(outcome, options.name));
  CHECK(outcome.ok());
  const auto diff = compareElements(DType::Float64, b.data(), 16,
                                    [](std::int64_t i) { return 0.25 * static_cast<double>(i); });
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("broadcast: a root outside the process set is rejected at once") {
  Buffer b(DType::Float32, {4});
  accord::BroadcastOptions options;
  options.name = "bc.badroot";
  options.root = accord::size();  // one past the last rank
  const auto outcome = attemptSubmit([&] { return accord::broadcast_async(b.view(), options); },
                                     "bc.badroot");
  INFO(describe(outcome, options.name));
  CHECK(outcome.kind == "InvalidArgument");
  options.root = -1;
  const auto negative = attemptSubmit([&] { return accord::broadcast_async(b.view(), options); },
                                     "bc.badroot");
  INFO(describe(negative, options.name));
  CHECK(negative.kind == "InvalidArgument");
}

int main(int argc, char** argv) { return runMain(argc, argv); }

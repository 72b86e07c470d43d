// Every collective's blocking form: the same result its async form gives, returned
// once the call returns, and failures thrown in the caller's thread. Also the
// library's version, which must be the headers' one.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <string>
#include <vector>

using namespace accord_test;

namespace {

accord::TensorView floats(std::vector<float>& v) {
  accord::TensorView t;
  t.data = v.data();
  t.dtype = DType::Float32;
  t.shape = {static_cast<std::int64_t>(v.size())};
  return t;
}

}  // namespace

TEST_CASE("the library's version is the one its headers name") {
  const accord::Version v = accord::version();
  CHECK(v.major == ACCORD_VERSION_MAJOR);
  CHECK(v.minor == ACCORD_VERSION_MINOR);
  CHECK(v.patch == ACCORD_VERSION_PATCH);
  CHECK(v.major >= 1);
}

TEST_CASE("blocking allreduce and grouped allreduce: done when they return") {
  const int me = accord::rank(), n = accord::size();
  std::vector<float> a(5, float(me + 1)), b(3, float(2 * me));
  accord::AllreduceOptions options;
  options.name = "blocking.grouped";
  options.op = accord::ReduceOp::Sum;
  accord::grouped_allreduce({floats(a), floats(b)}, options);
  CHECK(a[4] == float(n * (n + 1) / 2));
  CHECK(b[0] == float(n * (n - 1)));
  options.name = "blocking.allreduce";
  options.op = accord::ReduceOp::Max;
  accord::allreduce(floats(a), options);
  CHECK(a[0] == float(n * (n + 1) / 2));
}

TEST_CASE("blocking allgather, reducescatter and alltoall") {
  const int me = accord::rank(), n = accord::size();
  // allgather: rank r sends r + 1 rows of value r.
  Buffer mine(DType::Int32, {me + 1, 2});
  mine.fill([&](std::int64_t) { return me; });
  Output gathered(DType::Int32);
  accord::AllgatherOptions gather;
  gather.name = "blocking.allgather";
  accord::allgather(mine.view(), gathered.allocator(), gather);
  REQUIRE(gathered.shape() == Shape{n * (n + 1) / 2, 2});
  std::int64_t row = 0;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k <= r; ++k, ++row) CHECK(gathered.get(row * 2 + 1) == r);

  // reducescatter: every rank sends rows 0..n-1 of value (row + 1) * (rank + 1).
  Buffer full(DType::Float64, {n, 3});
  full.fill([&](std::int64_t i) { return double(i / 3 + 1) * (me + 1); });
  Output part(DType::Float64);
  accord::ReducescatterOptions scatter;
  scatter.name = "blocking.reducescatter";
  accord::reducescatter(full.view(), part.allocator(), scatter);
  REQUIRE(part.shape() == Shape{1, 3});
  CHECK(part.get(2) == double(me + 1) * n * (n + 1) / 2);

  // alltoall: rank r sends dst + 1 rows to rank dst; the blocking form returns the
  // rows received from each rank, all me + 1.
  std::vector<std::int64_t> splits;
  for (int dst = 0; dst < n; ++dst) splits.push_back(dst + 1);
  Buffer out(DType::Int64, {n * (n + 1) / 2});
  out.fill([&](std::int64_t) { return me; });
  Output in(DType::Int64);
  accord::AlltoallOptions exchange;
  exchange.name = "blocking.alltoall";
  exchange.splits = splits;
  const std::vector<std::int64_t> received = accord::alltoall(out.view(), in.allocator(), exchange);
  CHECK(received == std::vector<std::int64_t>(n, me + 1));
  REQUIRE(in.numel() == n * (me + 1));
  for (std::int64_t i = 0; i < in.numel(); ++i) CHECK(in.get(i) == i / (me + 1));
}

TEST_CASE("a blocking collective throws its failure in the caller's thread") {
  Buffer mine(DType::Float32, {4});
  Output gathered(DType::Float32);
  accord::AllgatherOptions gather;
  gather.name = "blocking.no-allocator";
  CHECK_THROWS_AS(accord::allgather(mine.view(), nullptr, gather), accord::InvalidArgument);
  accord::AlltoallOptions exchange;
  exchange.name = "blocking.bad-splits";
  exchange.splits = std::vector<std::int64_t>(accord::size(), 5);  // more rows than there are
  CHECK_THROWS_AS(accord::alltoall(mine.view(), gathered.allocator(), exchange),
                  accord::InvalidArgument);
}

int main(int argc, char** argv) { return runMain(argc, argv); }

// Adasum allreduce (ReduceOp::Adasum) on 1, 2 and 4 ranks, against a reference written
// here: the binary tree of Adasum's definition (rank 0 with 1, 2 with 3, then the pairs'
// results), each pair combined as (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b in double. On
// 3 ranks every Adasum is refused at submission, as are integer tensors and
// reduce-scatters on any count.
//
// Orthogonal inputs add up exactly; parallel ones average; general inputs match the
// reference within the dtype's rounding per tree level; tensors fused into one buffer
// are each combined with their own weights (an orthogonal and a parallel tensor side by
// side keep their own results); values near float's smallest normal keep their
// direction (the dot products are in double); every rank holds the same bits.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

using namespace accord_test;

namespace {

bool powerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

std::vector<double> combine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double wa = aa > 0 ? 1 - ab / (2 * aa) : 1, wb = bb > 0 ? 1 - ab / (2 * bb) : 1;
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = wa * a[i] + wb * b[i];
  return out;
}

std::vector<double> reference(std::vector<std::vector<double>> level) {
  while (level.size() > 1) {
    std::vector<std::vector<double>> next;
    for (std::size_t k = 0; k + 1 < level.size(); k += 2) next.push_back(combine(level[k], level[k + 1]));
    level = std::move(next);
  }
  return level.front();
}

// A tensor per rank, from value(rank, i) stored in the dtype (so the reference starts
// from the values the runtime sees).
struct Case {
  std::string name;
  std::unique_ptr<Buffer> mine;
  std::vector<double> expected;
  double tolerance;  // on |result - expected|, relative to the largest |expected|
};

Case makeCase(const std::string& name, DType dtype, std::int64_t n,
              const std::function<double(int, std::int64_t)>& value, double tolerance) {
  const int size = accord::size();
  std::vector<std::vector<double>> inputs(size, std::vector<double>(n));
  Buffer scratch(dtype, Shape{n});
  for (int r = 0; r < size; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      scratch.set(i, value(r, i));
      inputs[r][i] = scratch.get(i);
    }
  }
  Case c{name + "." + str(dtype), std::make_unique<Buffer>(dtype, Shape{n}), reference(inputs),
         tolerance};
  const int me = accord::rank();
  c.mine->fill([&](std::int64_t i) { return inputs[me][i]; });
  return c;
}

// The dtype's rounding, once per tree level and once for the weights.
double roundingOf(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 1e-3;
    case DType::BFloat16: return 8e-3;
    case DType::Float32: return 1e-6;
    default: return 1e-13;
  }
}

// The same bits on every rank: the Min and Max over the ranks of each element agree.
std::string sameOnEveryRank(Buffer& result, const std::string& what) {
  const std::int64_t n = result.numel();
  Buffer lo(DType::Float64, Shape{n}), hi(DType::Float64, Shape{n});
  lo.fill([&](std::int64_t i) { return result.get(i); });
  hi.fill([&](std::int64_t i) { return result.get(i); });
  accord::AllreduceOptions o;
  o.op = ReduceOp::Min;
  o.name = what + ".min";
  accord::allreduce(lo.view(), o);
  o.op = ReduceOp::Max;
  o.name = what + ".max";
  accord::allreduce(hi.view(), o);
  for (std::int64_t i = 0; i < n; ++i)
    if (std::memcmp(static_cast<const double*>(lo.data()) + i,
                    static_cast<const double*>(hi.data()) + i, sizeof(double)) != 0)
      return what + ": element " + std::to_string(i) + " differs between ranks (" +
             std::to_string(lo.get(i)) + " .. " + std::to_string(hi.get(i)) + ")";
  return "";
}

void check(Case& c) {
  double largest = 0;
  for (double e : c.expected) largest = std::max(largest, std::abs(e));
  INFO(c.name);
  const std::string error = compareElements(
      c.mine->dtype(), c.mine->data(), c.mine->numel(),
      [&](std::int64_t i) { return c.expected[i]; }, Tolerance{c.tolerance * largest, 0});
  INFO(error);
  CHECK(error.empty());
  const std::string same = sameOnEveryRank(*c.mine, c.name);
  INFO(same);
  CHECK(same.empty());
}

accord::AllreduceOptions adasum(const std::string& name) {
  accord::AllreduceOptions o;
  o.op = ReduceOp::Adasum;
  o.name = name;
  return o;
}

// Deterministic noise in [-1, 1) per (rank, i).
double noise(int rank, std::int64_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(i);
  x = (x ^ (x >> 31)) * 0x7fb5d329728ea185ULL;
  x = (x ^ (x >> 27)) * 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return static_cast<double>(x >> 11) / static_cast<double>(1ULL << 52) - 1.0;
}

}  // namespace

TEST_CASE("adasum: orthogonal tensors add up, parallel ones average, others as the tree") {
  if (!powerOfTwo(accord::size())) return;  // refused: the last test case
  const int size = accord::size();
  for (DType dtype : kFloatDTypes) {
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1000},
                           std::int64_t{300001}}) {
      const std::string at = "." + std::to_string(n);
      // Rank r's entries where i % size == r: mutually orthogonal (each tensor alone
      // where n < size).
      Case orthogonal = makeCase("orthogonal" + at, dtype, n, [&](int r, std::int64_t i) {
        return i % size == r ? 1.0 + static_cast<double>(i % 5) : 0.0;
      }, 0);
      // (r + 1) times one vector: the average of the multiples.
      Case parallel = makeCase("parallel" + at, dtype, n, [&](int r, std::int64_t i) {
        return (r + 1) * (1.0 + static_cast<double>(i % 3));
      }, 2 * roundingOf(dtype));
      Case general = makeCase("general" + at, dtype, n, noise, 4 * roundingOf(dtype));
      for (Case* c : {&orthogonal, &parallel, &general})
        accord::allreduce(c->mine->view(), adasum(c->name));
      check(orthogonal);
      check(parallel);
      check(general);
    }
  }
}

TEST_CASE("adasum: fused tensors are combined each with its own weights") {
  if (!powerOfTwo(accord::size())) return;
  const int size = accord::size();
  // Each dtype three times over under the same names: from the second time on the
  // response cache knows them (and small cached allreduces may ride on the
  // negotiation, which Adasum must not).
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float32, DType::Float32}) {
    // Submitted together, small enough to share a fusion buffer: if the buffer were
    // combined as one vector, the orthogonal part would be averaged with the parallel.
    std::vector<Case> cases;
    for (int k = 0; k < 6; ++k) {
      const std::string name = "fused" + std::to_string(k);
      if (k % 3 == 0)
        cases.push_back(makeCase(name, dtype, 33 + k, [&](int r, std::int64_t i) {
          return i % size == r ? 2.0 : 0.0;
        }, 0));
      else if (k % 3 == 1)
        cases.push_back(makeCase(name, dtype, 17 + k, [&](int r, std::int64_t i) {
          return (r + 1) * (0.5 + static_cast<double>(i % 4));
        }, 2 * roundingOf(dtype)));
      else
        cases.push_back(makeCase(name, dtype, 0, noise, 0));  // empty, in the middle
    }
    std::vector<accord::Handle> handles;
    for (Case& c : cases) handles.push_back(accord::allreduce_async(c.mine->view(), adasum(c.name)));
    for (std::size_t k = 0; k < cases.size(); ++k) {
      const auto error = describe(finish(handles[k], cases[k].name), cases[k].name);
      INFO(error);
      CHECK(error.empty());
      check(cases[k]);
    }
    // The same as one grouped allreduce.
    std::vector<Case> group;
    group.push_back(makeCase("group.orthogonal", dtype, 40, [&](int r, std::int64_t i) {
      return i % size == r ? 3.0 : 0.0;
    }, 0));
    group.push_back(makeCase("group.parallel", dtype, 40, [&](int r, std::int64_t) {
      return (r + 1) * 1.5;
    }, 2 * roundingOf(dtype)));
    std::vector<accord::TensorView> views;
    for (Case& c : group) views.push_back(c.mine->view());
    accord::grouped_allreduce(views, adasum("group." + str(dtype)));
    for (Case& c : group) check(c);
  }
}

TEST_CASE("adasum: values near float's smallest normal, scaling, a rank of zeros") {
  if (!powerOfTwo(accord::size())) return;
  const int size = accord::size();
  const double tiny = std::numeric_limits<float>::min();
  // Parallel vectors of size ~1e-38: their squares underflow float, not double.
  Case small = makeCase("tiny", DType::Float32, 1024, [&](int r, std::int64_t i) {
    return tiny * (r + 1) * (1 + static_cast<double>(i % 7));
  }, 1e-6);
  accord::allreduce(small.mine->view(), adasum(small.name));
  check(small);
  // Spread over float's range: one rank's tensor ~1e18 times another's.
  Case spread = makeCase("spread", DType::Float32, 512, [&](int r, std::int64_t i) {
    return std::pow(1e6, r) * (1 + static_cast<double>(i % 5));
  }, 1e-6);
  accord::allreduce(spread.mine->view(), adasum(spread.name));
  check(spread);
  // Prescale 2 and postscale 0.25 on orthogonal tensors: half the sum.
  Case scaled = makeCase("scaled", DType::Float32, 64, [&](int r, std::int64_t i) {
    return i % size == r ? 4.0 : 0.0;
  }, 0);
  for (double& e : scaled.expected) e *= 0.5;
  auto o = adasum(scaled.name);
  o.prescale = 2.0;
  o.postscale = 0.25;
  accord::allreduce(scaled.mine->view(), o);
  check(scaled);
  // The last rank contributes zeros: adasum(a, 0) = a, so the others' result stands.
  Case zeros = makeCase("zeros", DType::Float64, 100, [&](int r, std::int64_t i) {
    return r == size - 1 && size > 1 ? 0.0 : noise(r, i);
  }, 1e-13);
  accord::allreduce(zeros.mine->view(), adasum(zeros.name));
  check(zeros);
}

TEST_CASE("adasum: refused for integers, for reduce-scatter, and on 3 ranks") {
  Buffer ints(DType::Int32, Shape{4});
  auto o = adasum("ints");
  Outcome out = attemptSubmit([&] { return accord::allreduce_async(ints.view(), o); }, "ints");
  INFO(out.message);
  CHECK(out.kind == "InvalidArgument");
  CHECK(contains(out.message, "Adasum needs a floating-point tensor"));
  CHECK(contains(out.message, "int32"));

  Buffer rows(DType::Float32, Shape{4, 2});
  Output output(DType::Float32);
  accord::ReducescatterOptions r;
  r.op = ReduceOp::Adasum;
  r.name = "scatter";
  out = attemptSubmit(
      [&] { return accord::reducescatter_async(rows.view(), output.allocator(), r); }, "scatter");
  INFO(out.message);
  CHECK(out.kind == "InvalidArgument");
  CHECK(contains(out.message, "Adasum applies to allreduce only"));

  Buffer floats(DType::Float32, Shape{4});
  out = attemptSubmit([&] { return accord::allreduce_async(floats.view(), adasum("floats")); },
                      "floats");
  if (powerOfTwo(accord::size())) {
    CHECK(out.kind == "handle:ok");
  } else {
    INFO(out.message);
    CHECK(out.kind == "InvalidArgument");
    CHECK(contains(out.message, "power-of-two number of ranks, and the process set has " +
                                    std::to_string(accord::size())));
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

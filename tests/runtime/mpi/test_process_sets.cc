// Process sets: two overlapping sets A (the first ranks) and B (the last ranks) share
// one rank. Collectives on A, on B and on the global set are in flight at the
// same time, submitted in a different order on each rank; roots and ranks are within
// the set. Adding and removing is collective over all ranks.
//
// Every test case adds the sets it uses and removes them before it ends, and takes their
// ids from add_process_set: any case runs alone or in any order (CTest also runs them
// shuffled with --order rand).
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

// A = the first ceil((n+1)/2) ranks, B = the last n - |A| + 1: they share rank |A| - 1
// for every n, and differ from each other for n >= 2.
int sizeA(int n) { return std::min(n, (n + 2) / 2); }
std::vector<int> setA(int n) {
  std::vector<int> ranks;
  for (int r = 0; r < sizeA(n); ++r) ranks.push_back(r);
  return ranks;
}
std::vector<int> setB(int n) {
  std::vector<int> ranks;
  for (int r = sizeA(n) - 1; r < n; ++r) ranks.push_back(r);
  return ranks;
}
int indexIn(const std::vector<int>& ranks, int r) {
  const auto it = std::find(ranks.begin(), ranks.end(), r);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

// A and B for the length of one test case: added by the constructor, removed by the
// destructor unless remove() did it before. Both are collective over all ranks, so every
// rank constructs and destroys it at the same point, members of A and B or not.
class TwoSets {
 public:
  TwoSets()
      : a(accord::add_process_set(setA(accord::size()))),
        b(accord::add_process_set(setB(accord::size()))) {}
  TwoSets(const TwoSets&) = delete;
  TwoSets& operator=(const TwoSets&) = delete;
  ~TwoSets() {
    if (!removed_) remove();
  }
  // Removes both sets; returns "" or what went wrong, for INFO().
  std::string remove() {
    removed_ = true;
    return describe(attempt([&] { accord::remove_process_set(a); }), "remove A") +
           describe(attempt([&] { accord::remove_process_set(b); }), "remove B");
  }
  const accord::ProcessSetId a;
  const accord::ProcessSetId b;

 private:
  bool removed_ = false;
};

struct Pending {
  std::string name;
  std::function<std::string()> check;  // returns "" when the result is right
  accord::Handle handle;
};

// An allreduce (Sum) on `id` whose members are `members`, tagged `tag`.
Pending allreduceOn(accord::ProcessSetId id, const std::vector<int>& members, const std::string& tag,
                    std::vector<std::unique_ptr<Buffer>>& keep) {
  const int me = accord::rank();
  keep.push_back(std::make_unique<Buffer>(DType::Float32, Shape{257}));
  Buffer* b = keep.back().get();
  b->fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  accord::AllreduceOptions options;
  options.name = tag;
  options.process_set = id;
  Pending p{tag, nullptr, accord::allreduce_async(b->view(), options)};
  p.check = [b, members] {
    return compareElements(DType::Float32, b->data(), b->numel(), [&](std::int64_t i) {
      return reducedValue(DType::Float32, ReduceOp::Sum, members, i);
    });
  };
  return p;
}

// Waits for every pending allreduce; each must succeed with the right result.
void checkAll(std::vector<Pending>& pending) {
  for (auto& p : pending) {
    const auto error = describe(finish(p.handle, p.name), p.name);
    INFO(error);
    CHECK(error.empty());
    const auto diff = p.check();
    INFO(p.name << ": " << diff);
    CHECK(diff.empty());
  }
}

}  // namespace

TEST_CASE("process sets: add two overlapping sets; topology queries") {
  const int n = accord::size();
  const int me = accord::rank();
  TwoSets sets;
  CHECK(sets.a != accord::kGlobalProcessSet);
  CHECK(sets.b != accord::kGlobalProcessSet);
  CHECK(sets.a != sets.b);
  CHECK(accord::process_set_ranks(accord::kGlobalProcessSet) == allRanks(n));
  CHECK(accord::process_set_size(accord::kGlobalProcessSet) == n);
  CHECK(accord::process_set_rank(accord::kGlobalProcessSet) == me);
  for (const auto& [id, members] : {std::pair{sets.a, setA(n)}, std::pair{sets.b, setB(n)}}) {
    INFO("set " << id);
    CHECK(accord::process_set_ranks(id) == members);
    CHECK(accord::process_set_size(id) == static_cast<int>(members.size()));
    CHECK(accord::process_set_included(id) == (indexIn(members, me) >= 0));
    if (indexIn(members, me) >= 0) CHECK(accord::process_set_rank(id) == indexIn(members, me));
  }
}

TEST_CASE("process sets: collectives on A, B and the global set in flight at once") {
  const int n = accord::size();
  const int me = accord::rank();
  const auto a = setA(n), b = setB(n);
  TwoSets sets;
  std::vector<std::unique_ptr<Buffer>> keep;
  // Build the submissions, then submit them in a rank-dependent order.
  std::vector<std::function<Pending()>> submissions;
  for (int t = 0; t < 10; ++t) {
    const std::string k = std::to_string(t);
    if (indexIn(a, me) >= 0)
      submissions.push_back([&, k] { return allreduceOn(sets.a, a, "ps.A." + k, keep); });
    if (indexIn(b, me) >= 0)
      submissions.push_back([&, k] { return allreduceOn(sets.b, b, "ps.B." + k, keep); });
    submissions.push_back(
        [&, k] { return allreduceOn(accord::kGlobalProcessSet, allRanks(n), "ps.G." + k, keep); });
  }
  std::rotate(submissions.begin(), submissions.begin() + (5 * me) % submissions.size(),
              submissions.end());
  if (me % 2) std::reverse(submissions.begin(), submissions.end());
  std::vector<Pending> pending;
  for (auto& submit : submissions) pending.push_back(submit());
  checkAll(pending);
}

TEST_CASE("process sets: the same name in A, B and the global set at once") {
  // Names are negotiated per process set: one name may be in flight in each.
  const int n = accord::size();
  const int me = accord::rank();
  TwoSets sets;
  std::vector<std::unique_ptr<Buffer>> keep;
  std::vector<Pending> pending;
  if (indexIn(setA(n), me) >= 0) pending.push_back(allreduceOn(sets.a, setA(n), "ps.same", keep));
  if (indexIn(setB(n), me) >= 0) pending.push_back(allreduceOn(sets.b, setB(n), "ps.same", keep));
  pending.push_back(allreduceOn(accord::kGlobalProcessSet, allRanks(n), "ps.same", keep));
  for (std::size_t k = 0; k < pending.size(); ++k) {
    auto& p = pending[k];
    const auto error = describe(finish(p.handle, p.name), p.name);
    INFO("submission " << k << ": " << error);
    CHECK(error.empty());
    const auto diff = p.check();
    INFO("submission " << k << ": " << diff);
    CHECK(diff.empty());
  }
}

TEST_CASE("process sets: broadcast and allgather with set-relative ranks") {
  const int n = accord::size();
  const int me = accord::rank();
  const auto b = setB(n);
  TwoSets sets;  // every rank adds and removes them
  const int set_rank = indexIn(b, me);
  if (set_rank < 0) return;  // not a member of B: nothing to submit (collective over B only)
  // Broadcast from B's last member, given as B-relative root.
  const int root = static_cast<int>(b.size()) - 1;
  Buffer x(DType::Int32, {50});
  x.fill([&](std::int64_t i) { return tagValue(DType::Int32, me, 0, i); });
  accord::BroadcastOptions bo;
  bo.name = "ps.B.bcast";
  bo.root = root;
  bo.process_set = sets.b;
  auto hb = accord::broadcast_async(x.view(), bo);
  // Allgather in B: member k sends k + 1 rows.
  Buffer rows(DType::Float64, {set_rank + 1, 2});
  rows.fill([&](std::int64_t i) { return tagValue(DType::Float64, set_rank, 1, i); });
  Output out(DType::Float64);
  accord::AllgatherOptions go;
  go.name = "ps.B.gather";
  go.process_set = sets.b;
  auto hg = accord::allgather_async(rows.view(), out.allocator(), go);

  const auto eb = describe(finish(hb, bo.name), bo.name);
  const auto eg = describe(finish(hg, go.name), go.name);
  INFO(eb << eg);
  CHECK(eb.empty());
  CHECK(eg.empty());
  const auto db = compareElements(DType::Int32, x.data(), 50, [&](std::int64_t i) {
    return tagValue(DType::Int32, b.back(), 0, i);  // b.back() is the root's global rank
  });
  INFO("broadcast from B-relative root " << root << ": " << db);
  CHECK(db.empty());
  std::vector<double> want;
  for (int k = 0; k < static_cast<int>(b.size()); ++k)
    for (std::int64_t i = 0; i < 2 * (k + 1); ++i) want.push_back(tagValue(DType::Float64, k, 1, i));
  const auto total_rows = static_cast<std::int64_t>(want.size() / 2);
  CHECK(out.shape() == Shape{total_rows, 2});
  if (out.shape() == Shape{total_rows, 2}) {
    const auto dg = compareElements(DType::Float64, out.data(), out.numel(),
                                    [&](std::int64_t i) { return want[static_cast<std::size_t>(i)]; });
    INFO(dg);
    CHECK(dg.empty());
  }
}

TEST_CASE("process sets: a collective on a set this rank is not in is rejected") {
  const int n = accord::size();
  const int me = accord::rank();
  TwoSets sets;                           // every rank adds and removes them
  if (indexIn(setA(n), me) >= 0) return;  // only non-members of A (n >= 3)
  auto b = std::make_unique<Buffer>(DType::Float32, Shape{4});
  accord::AllreduceOptions options;
  options.name = "ps.A.nonmember";
  options.process_set = sets.a;
  accord::Handle h;
  const auto outcome = attempt([&] { h = accord::allreduce_async(b->view(), options); });
  std::string kind = outcome.kind;
  if (outcome.ok()) {
    // Accepted: it must at least fail soon rather than sit pending forever.
    for (int k = 0; k < 100 && !h.poll(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kind = h.poll() ? "handle:" + attempt([&] { h.wait(); }).kind : "accepted and still pending";
    // Still pending, the runtime may write into the buffer later: never free it.
    if (!h.poll()) static_cast<void>(b.release());
  }
  INFO("rank " << me << " submitting to a set it is not in: " << kind << " " << outcome.message);
  CHECK(kind == "InvalidArgument");
}

TEST_CASE("process sets: adding a set with a bad rank fails on every rank") {
  const int n = accord::size();
  const auto bad = attempt([&] { accord::add_process_set({0, n}); });  // rank n does not exist
  INFO(describe(bad, "add_process_set({0, " + std::to_string(n) + "})"));
  CHECK(bad.kind == "InvalidArgument");
}

TEST_CASE("process sets: remove both; the global set still works") {
  const int n = accord::size();
  TwoSets sets;
  const auto removed = sets.remove();
  INFO(removed);
  CHECK(removed.empty());
  for (const accord::ProcessSetId id : {sets.a, sets.b}) {
    const auto gone = attempt([id] { accord::process_set_ranks(id); });
    INFO("process_set_ranks of removed set " << id << ": " << describe(gone, "query"));
    CHECK(gone.kind == "InvalidArgument");
  }
  std::vector<std::unique_ptr<Buffer>> keep;
  auto p = allreduceOn(accord::kGlobalProcessSet, allRanks(n), "ps.after.remove", keep);
  const auto error = describe(finish(p.handle, p.name), p.name);
  INFO(error);
  CHECK(error.empty());
  const auto diff = p.check();
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("process sets: sets added after others were removed work the same") {
  // Sets added after others were removed work like the first ones did.
  const int n = accord::size();
  const int me = accord::rank();
  for (int round = 0; round < 3; ++round) {
    TwoSets sets;
    INFO("round " << round << ": sets " << sets.a << " and " << sets.b);
    CHECK(accord::process_set_ranks(sets.a) == setA(n));
    CHECK(accord::process_set_ranks(sets.b) == setB(n));
    std::vector<std::unique_ptr<Buffer>> keep;
    std::vector<Pending> pending;
    const std::string tag = ".round" + std::to_string(round);
    if (indexIn(setA(n), me) >= 0)
      pending.push_back(allreduceOn(sets.a, setA(n), "ps.A" + tag, keep));
    if (indexIn(setB(n), me) >= 0)
      pending.push_back(allreduceOn(sets.b, setB(n), "ps.B" + tag, keep));
    checkAll(pending);
  }
}

int main(int argc, char** argv) { return runMain(argc, argv); }

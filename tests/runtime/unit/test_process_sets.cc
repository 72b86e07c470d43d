// ProcessSet and ProcessSetTable: membership, ids, and the lookups application threads
// make, in one process (a set's transport is only ever asked for its kind here).
#include "runtime/process_sets.h"

#include <accord/error.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace accord;

namespace {

class KindOnly final : public SetTransport {
 public:
  explicit KindOnly(Transport kind) : kind_(kind) {}
  NegotiationChannel& channel() override {
    throw std::logic_error("this test's transport has no channel");
  }
  Transport kind() const override { return kind_; }

 private:
  Transport kind_;
};

// The set as `my_rank` builds it: members get a transport, others none.
std::unique_ptr<ProcessSet> makeSet(ProcessSetId id, std::vector<int> ranks, int my_rank,
                                    Transport kind = Transport::Mpi) {
  const bool in = std::find(ranks.begin(), ranks.end(), my_rank) != ranks.end();
  return ProcessSet::create(id, std::move(ranks), in ? std::make_unique<KindOnly>(kind) : nullptr,
                            my_rank, 16);
}

std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace

TEST_CASE("a set knows this rank's place in it; its coordinator lives on its rank 0",
          "[process_sets]") {
  auto set = makeSet(3, {1, 4, 6}, 4, Transport::SharedMemory);
  CHECK(set->member());
  CHECK(set->rank == 1);
  CHECK(set->size == 3);
  CHECK(set->kind == Transport::SharedMemory);
  CHECK(set->coordinator == nullptr);
  CHECK(set->cache != nullptr);
  CHECK(set->pending.empty());
  CHECK_FALSE(set->pending.joined());

  auto first = makeSet(3, {1, 4, 6}, 1);
  CHECK(first->rank == 0);
  CHECK(first->coordinator != nullptr);

  auto outside = makeSet(3, {1, 4, 6}, 5);
  CHECK_FALSE(outside->member());
  CHECK(outside->rank == -1);
  CHECK(outside->size == 3);
  CHECK(outside->coordinator == nullptr);
}

TEST_CASE("the table answers membership and names the set it does not know", "[process_sets]") {
  ProcessSetTable table;
  table.add(makeSet(0, {0, 1, 2, 3}, 2));
  table.add(makeSet(1, {0, 2}, 2, Transport::SharedMemory));
  table.add(makeSet(2, {1, 3}, 2));
  CHECK(table.ranks(1) == std::vector<int>{0, 2});
  CHECK(table.included(1));
  CHECK_FALSE(table.included(2));
  CHECK(table.rankIn(1) == 1);
  CHECK(table.rankIn(2) == -1);
  CHECK(table.member(0, "allreduce") == std::pair<int, int>{2, 4});
  CHECK(table.kind(1) == Transport::SharedMemory);
  CHECK(message([&] { table.member(2, "broadcast"); }) ==
        "broadcast: this rank is not a member of process set 2");
  CHECK(message([&] { table.kind(2); }) ==
        "process_set_transport: this rank is not a member of process set 2");
  CHECK(message([&] { table.ranks(7); }) ==
        "process set 7 does not exist (never added, or removed)");
  CHECK(table.find(7) == nullptr);
  CHECK(table.find(2) != nullptr);

  // The background thread walks only the sets this rank is in, in id order.
  auto sets = table.memberSets();
  REQUIRE(sets.size() == 2);
  CHECK(sets[0]->id == 0);
  CHECK(sets[1]->id == 1);
}

TEST_CASE("ids are never reused: a removed set's id stays unknown", "[process_sets]") {
  ProcessSetTable table;
  table.add(makeSet(0, {0, 1}, 0));
  CHECK(table.nextId() == 1);
  table.add(makeSet(1, {0}, 0));
  CHECK(table.nextId() == 2);
  auto removed = table.remove(1);
  REQUIRE(removed);
  CHECK(removed->id == 1);
  CHECK(table.remove(1) == nullptr);
  CHECK(table.nextId() == 2);  // a handle to the removed set cannot reach a new one
  CHECK_THROWS_AS(table.included(1), InvalidArgument);

  auto all = table.takeAll();
  REQUIRE(all.size() == 1);
  CHECK(all[0]->id == 0);
  CHECK(table.memberSets().empty());
  CHECK(table.find(0) == nullptr);
}

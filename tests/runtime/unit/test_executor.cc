// Executor: what it does with each kind of negotiated response on one rank, in one
// process. The backend here is a plain C++ object that reduces nothing: it records what
// it was handed and, where a test asks, fails the way a real backend does.
#include "runtime/executor.h"

#include "handle_outcome.h"

#include <accord/error.h>
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace accord;

namespace {

class NoChannel final : public SetTransport {
 public:
  NegotiationChannel& channel() override { throw std::logic_error("no channel here"); }
  Transport kind() const override { return Transport::Mpi; }
};

// Records each execute() call: the response's names and which entries this rank held.
class RecordingBackend final : public Backend {
 public:
  std::unique_ptr<SetTransport> connect(MPI_Comm, std::vector<int>) override { return nullptr; }
  void execute(SetTransport&, const Response& response,
               std::vector<TensorEntry*>& entries) override {
    calls.push_back(response.names);
    std::vector<bool> held;
    for (auto* e : entries) held.push_back(e != nullptr);
    holding.push_back(held);
    if (fail) fail(entries);
  }
  std::shared_ptr<void> deviceReady(const TensorView&, void*, const std::string&) override {
    return nullptr;
  }

  std::vector<std::vector<std::string>> calls;
  std::vector<std::vector<bool>> holding;
  std::function<void(std::vector<TensorEntry*>&)> fail;
};

struct Fixture {
  Config config;
  TensorQueue queue;
  RecordingBackend backend;
  std::vector<ProcessSetId> joined;
  std::vector<std::string> timed_out;
  Executor executor{config,
                    queue,
                    backend,
                    {[this](ProcessSetId id) { joined.push_back(id); },
                     [this](const std::string& e) { timed_out.push_back(e); }}};
  std::unique_ptr<ProcessSet> set =
      ProcessSet::create(0, {0, 1}, std::make_unique<NoChannel>(), 0, 16);

  Fixture() { config.fusion_threshold = 1 << 20; }

  // Submits `name` as the application would (queue) and as the loop does (pending).
  std::shared_ptr<detail::HandleState> submit(const std::string& name,
                                              RequestType type = RequestType::Allreduce) {
    auto handle = std::make_shared<detail::HandleState>();
    QueuedOp op;
    op.request.type = type;
    op.request.name = name;
    op.request.shape = {4};
    op.entry.name = name;
    op.entry.handle = handle;
    std::vector<QueuedOp> ops;
    ops.push_back(op);
    queue.push(std::move(ops));
    queue.drain();
    set->pending.admit(op.request, op.entry, Clock::now());
    return handle;
  }

  void run(std::vector<Response> responses) {
    std::vector<SetChange> changes;
    executor.run(*set, std::move(responses), changes);
    this->changes = std::move(changes);
  }
  std::vector<SetChange> changes;
};

Response allreduce(std::vector<std::string> names) {
  Response r;
  r.type = ResponseType::Allreduce;
  r.shapes.assign(names.size(), Shape{4});
  r.names = std::move(names);
  return r;
}

std::string failure(const detail::HandleState& handle) { return accord_test::outcomeOf(handle); }

// The name is free again: the queue takes it once more.
bool released(Fixture& f, const std::string& name) {
  try {
    f.submit(name);
  } catch (const InvalidArgument&) {
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("small allreduces are fused into one backend call and completed", "[executor]") {
  Fixture f;
  auto a = f.submit("a"), b = f.submit("b");
  f.run({allreduce({"a"}), allreduce({"b"})});
  REQUIRE(f.backend.calls.size() == 1);
  CHECK(f.backend.calls[0] == std::vector<std::string>{"a", "b"});
  CHECK(f.backend.holding[0] == std::vector<bool>{true, true});
  CHECK(failure(*a) == "(completed)");
  CHECK(failure(*b) == "(completed)");
  CHECK(f.set->pending.empty());
  CHECK(released(f, "a"));
}

TEST_CASE("a joined rank takes part with no entries and completes nothing", "[executor]") {
  Fixture f;
  auto join = f.submit("join", RequestType::Join);
  f.run({allreduce({"x"})});  // another rank's tensor: this one has joined
  REQUIRE(f.backend.calls.size() == 1);
  CHECK(f.backend.holding[0] == std::vector<bool>{false});
  CHECK_FALSE(join->done());

  Response done;
  done.type = ResponseType::Join;
  done.names = {"join"};
  done.root = 1;  // the last rank to join
  f.run({done});
  CHECK(f.joined == std::vector<ProcessSetId>{0});
  CHECK(failure(*join) == "(completed)");
  CHECK(join->last_joined_rank == 1);
  CHECK_FALSE(f.set->pending.joined());
  CHECK(released(f, "join"));
}

TEST_CASE("an error response fails its handles with the kind it names", "[executor]") {
  Fixture f;
  auto a = f.submit("a"), b = f.submit("b"), c = f.submit("c");
  Response mismatch;
  mismatch.type = ResponseType::Error;
  mismatch.names = {"a"};
  mismatch.error = "allreduce 'a': rank 0 sent shape [4], rank 1 sent [5]";
  Response stall = mismatch;
  stall.names = {"b"};
  stall.error = "allreduce 'b': ranks 1 did not submit it";
  stall.error_kind = Response::ErrorKind::Stall;
  Response invalid = mismatch;
  invalid.names = {"c"};
  invalid.error = "allreduce 'c': no such thing";
  invalid.error_kind = Response::ErrorKind::Invalid;
  f.run({mismatch, stall, invalid});
  CHECK_THROWS_AS(a->wait(), MismatchError);
  CHECK_THROWS_AS(b->wait(), Timeout);
  CHECK_THROWS_AS(c->wait(), InvalidArgument);
  CHECK(failure(*b) == stall.error);
  // Only the stall is told to the runtime (shutdown then leaves MPI alone).
  CHECK(f.timed_out == std::vector<std::string>{stall.error});
  CHECK(f.backend.calls.empty());
  CHECK(released(f, "a"));
}

TEST_CASE("a backend failure fails only its response, a CommError is passed on", "[executor]") {
  Fixture f;
  auto a = f.submit("a");
  f.backend.fail = [](std::vector<TensorEntry*>&) { throw InvalidArgument("bad dtype here"); };
  f.run({allreduce({"a"})});
  CHECK(failure(*a) == "bad dtype here");

  auto b = f.submit("b"), c = f.submit("c");
  f.backend.fail = [](std::vector<TensorEntry*>& entries) {
    entries[0]->error = std::make_exception_ptr(InvalidArgument("rank-local: no memory"));
  };
  f.run({allreduce({"b", "c"})});
  CHECK(failure(*b) == "rank-local: no memory");  // its own part failed
  CHECK(failure(*c) == "(completed)");            // the rest of the group did not

  auto d = f.submit("d");
  f.backend.fail = [](std::vector<TensorEntry*>&) { throw CommError("rank 1 stopped"); };
  CHECK_THROWS_AS(f.run({allreduce({"d"})}), CommError);
  CHECK(failure(*d) == "rank 1 stopped");
}

TEST_CASE("an entry the backend took over is left to it", "[executor]") {
  Fixture f;
  auto a = f.submit("a");
  f.backend.fail = [](std::vector<TensorEntry*>& entries) {
    entries[0]->backend_completes = true;  // a device collective: its finalizer completes it
    throw InvalidArgument("launch failed after the handle was handed on");
  };
  f.run({allreduce({"a"})});
  CHECK_FALSE(a->done());
}

TEST_CASE("process-set changes and barriers are recorded, carried tensors completed",
          "[executor]") {
  Fixture f;
  auto add = f.submit("add", RequestType::AddProcessSet);
  Response r;
  r.type = ResponseType::AddProcessSet;
  r.names = {"add"};
  r.rank_rows = {0, 1};
  auto barrier = f.submit("barrier", RequestType::Barrier);
  Response b;
  b.type = ResponseType::Barrier;
  b.names = {"barrier"};
  f.run({r, b});
  REQUIRE(f.changes.size() == 1);
  CHECK(f.changes[0].type == ResponseType::AddProcessSet);
  CHECK(f.changes[0].ranks == std::vector<int>{0, 1});
  CHECK(f.changes[0].handle == add);
  CHECK_FALSE(add->done());  // the loop completes it once the set exists
  CHECK(failure(*barrier) == "(completed)");

  auto small = f.submit("small");
  f.executor.completeCarried(*f.set, {allreduce({"small"})});
  CHECK(failure(*small) == "(completed)");
  CHECK(f.backend.calls.empty());
  CHECK(released(f, "small"));
}

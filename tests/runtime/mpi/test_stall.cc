// Stall inspector: a rank that never submits a tensor must not hang the others. With
// ACCORD_STALL_CHECK_TIME=1 and ACCORD_STALL_SHUTDOWN_TIME=2 (seconds), every rank that
// did submit gets accord::Timeout naming the tensor and the missing rank(s) within a
// few seconds, and the runtime keeps working afterwards. Run with 1 to 4 ranks.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace accord_test;

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "rank 2" or "ranks 1,2": how the runtime's messages list ranks.
std::string ranksPhrase(const std::vector<int>& ranks) {
  std::string phrase = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    if (k > 0) phrase += ',';
    phrase += std::to_string(ranks[k]);
  }
  return phrase;
}

// The ranks a stall report says it waited for: the list ("2" or "1,2") after " s for rank "
// or " s for ranks "; empty when the message has none.
std::vector<int> ranksWaitedFor(const std::string& message) {
  for (const std::string key : {" s for ranks ", " s for rank "}) {
    const auto at = message.find(key);
    if (at == std::string::npos) continue;
    std::vector<int> ranks;
    std::istringstream list(message.substr(at + key.size()));
    int r = 0;
    while (list >> r) {
      ranks.push_back(r);
      if (list.get() != ',') break;
    }
    return ranks;
  }
  return {};
}

// Ranks in `submitters` submit `name`; the others do not. Checks the Timeout.
void stallOn(const std::string& name, const std::vector<int>& submitters) {
  const int me = accord::rank();
  const int n = accord::size();
  const bool submits = std::find(submitters.begin(), submitters.end(), me) != submitters.end();
  // The missing ranks wait (on the application's own communicator) until the others
  // have their Timeout: a collective they submitted meanwhile would stall just as long.
  struct Rejoin {
    ~Rejoin() { MPI_Barrier(MPI_COMM_WORLD); }
  } rejoin;
  if (!submits) return;
  Buffer b(DType::Float32, {16});
  accord::AllreduceOptions options;
  options.name = name;
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome outcome = finish(accord::allreduce_async(b.view(), options), name);
  const double waited = secondsSince(t0);
  INFO("rank " << me << ", '" << name << "' after " << waited << " s: " << outcome.kind << ": "
               << outcome.message);
  if (n == 1) {  // nobody can be missing
    CHECK(outcome.ok());
    return;
  }
  CHECK(outcome.kind == "Timeout");
  CHECK(contains(outcome.message, "'" + name + "'"));
  // The report reads "... waited 2.0 s for rank 2 (submitted by ranks 0,1); gave up".
  std::vector<int> missing;
  for (int r = 0; r < n; ++r)
    if (std::find(submitters.begin(), submitters.end(), r) == submitters.end())
      missing.push_back(r);
  const std::string phrase =
      " s for " + ranksPhrase(missing) + " (submitted by " + ranksPhrase(submitters) + ")";
  INFO("expected the phrase '" << phrase << "'");
  CHECK(contains(outcome.message, phrase));
  // Whatever the wording around it, no rank that did submit is among those waited for.
  const std::vector<int> named = ranksWaitedFor(outcome.message);
  INFO("ranks the message says it waited for: " << ranksPhrase(named));
  CHECK(named == missing);
  for (int r : submitters) CHECK(std::find(named.begin(), named.end(), r) == named.end());
  CHECK(waited >= 1.5);   // not before the configured 2 s
  CHECK(waited <= 15.0);  // and not much after it
}

void allreduceEveryone(const std::string& name) {
  const int me = accord::rank();
  Buffer b(DType::Float32, {16});
  b.fill([&](std::int64_t i) { return fillValue(DType::Float32, ReduceOp::Sum, me, i); });
  accord::AllreduceOptions options;
  options.name = name;
  const auto error = describe(finish(accord::allreduce_async(b.view(), options), name), name);
  INFO(error);
  CHECK(error.empty());
  const auto diff = compareElements(DType::Float32, b.data(), 16, [&](std::int64_t i) {
    return reducedValue(DType::Float32, ReduceOp::Sum, allRanks(accord::size()), i);
  });
  INFO(name << ": " << diff);
  CHECK(diff.empty());
}

}  // namespace

TEST_CASE("stall: the last rank never submits; the others time out") {
  const int n = accord::size();
  std::vector<int> submitters;
  for (int r = 0; r < n - 1; ++r) submitters.push_back(r);
  if (n == 1) submitters.push_back(0);
  stallOn("stall.missing.last", submitters);
  allreduceEveryone("stall.after.1");
}

TEST_CASE("stall: only rank 0 submits; every other rank is named") {
  stallOn("stall.only.rank0", {0});
  allreduceEveryone("stall.after.2");
}

TEST_CASE("stall: a rank that is late but within the limit is fine") {
  if (accord::rank() == accord::size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
  allreduceEveryone("stall.late");
}

int main(int argc, char** argv) {
  MainOptions options;
  options.env = {{"ACCORD_STALL_CHECK_TIME", "1"}, {"ACCORD_STALL_SHUTDOWN_TIME", "2"}};
  return runMain(argc, argv, options);
}

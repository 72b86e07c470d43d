// Which transport a process set uses: a silent fall-back from shared memory to MPI (or
// the reverse) would pass every other test, so this one asserts it. The ranks of a CTest
// job always share one host; ACCORD_SHARED_MEMORY (default 1) decides.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <accord/error.h>

#include <cstdlib>
#include <string>

using namespace accord_test;

namespace {

accord::Transport expectedForSize(int size) {
  if (size == 1) return accord::Transport::Local;
  const char* shm = std::getenv("ACCORD_SHARED_MEMORY");
  const bool off = shm && std::string(shm) == "0";
  return off ? accord::Transport::Mpi : accord::Transport::SharedMemory;
}

}  // namespace

TEST_CASE("the global process set uses the transport the settings ask for") {
  const auto kind = accord::process_set_transport(accord::kGlobalProcessSet);
  INFO("global set: " << accord::transport_name(kind));
  CHECK(kind == expectedForSize(accord::size()));
}

TEST_CASE("added process sets get their own transport") {
  const int n = accord::size(), me = accord::rank();
  const auto solo = accord::add_process_set({0});
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  const auto everyone = accord::add_process_set(all);
  if (me == 0) {
    CHECK(accord::process_set_transport(solo) == accord::Transport::Local);
  } else {
    const Outcome outside = attempt([&] { accord::process_set_transport(solo); });
    CHECK(outside.kind == "InvalidArgument");
    CHECK(contains(outside.message, "not a member of process set " + std::to_string(solo)));
  }
  CHECK(accord::process_set_transport(everyone) == expectedForSize(n));
  // The set's transport really carries a collective.
  Buffer b(DType::Int32, {3});
  b.fill([&](std::int64_t i) { return static_cast<double>(i + me); });
  accord::AllreduceOptions o;
  o.name = "transport.everyone";
  o.process_set = everyone;
  CHECK(finish(accord::allreduce_async(b.view(), o), o.name).ok());
  for (std::int64_t i = 0; i < 3; ++i) CHECK(b.get(i) == n * i + n * (n - 1) / 2);
  accord::remove_process_set(everyone);
  accord::remove_process_set(solo);
}

TEST_CASE("transport names") {
  CHECK(std::string(accord::transport_name(accord::Transport::Local)) == "local");
  CHECK(std::string(accord::transport_name(accord::Transport::SharedMemory)) == "shared-memory");
  CHECK(std::string(accord::transport_name(accord::Transport::Mpi)) == "mpi");
}

int main(int argc, char** argv) { return runMain(argc, argv); }

#include "runtime/world_comm.h"

#include "runtime/mpi_check.h"

#include <accord/error.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>

namespace accord {

namespace {

// A tag of Accord's own for MPI_Comm_create_group ("Ac").
constexpr int kCreateGroupTag = 0x4163;

std::string listed(const std::vector<int>& ranks) {
  constexpr std::size_t kShown = 16;
  std::string out = "[";
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) out += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return out + "]";
}

int worldRank() {
  int rank = 0;
  ACCORD_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

// comm's members as ranks of `target`'s group (MPI_UNDEFINED where not a member).
std::vector<int> translated(MPI_Comm comm, MPI_Comm target) {
  int n = 0;
  ACCORD_MPI_CHECK(MPI_Comm_size(comm, &n));
  MPI_Group from, to;
  ACCORD_MPI_CHECK(MPI_Comm_group(comm, &from));
  ACCORD_MPI_CHECK(MPI_Comm_group(target, &to));
  std::vector<int> in(n), out(n);
  std::iota(in.begin(), in.end(), 0);
  const int rc = MPI_Group_translate_ranks(from, n, in.data(), to, out.data());
  MPI_Group_free(&from);
  MPI_Group_free(&to);
  ACCORD_MPI_CHECK(rc);
  return out;
}

void refuseIntercommunicator(MPI_Comm comm, const std::string& what) {
  int inter = 0;
  ACCORD_MPI_CHECK(MPI_Comm_test_inter(comm, &inter));
  if (inter)
    throw InvalidArgument(what +
                          ": comm is an intercommunicator; Accord runs over an "
                          "intracommunicator (MPI_Intercomm_merge makes one of it)");
}

void checkWorldRanks(const std::vector<int>& ranks, const std::string& what) {
  int size = 0;
  ACCORD_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= size)
      throw InvalidArgument(what + ": rank " + std::to_string(r) +
                            " is not a rank of "
                            "MPI_COMM_WORLD (0.." +
                            std::to_string(size - 1) + ")");
    if (!seen.insert(r).second)
      throw InvalidArgument(what + ": rank " + std::to_string(r) + " is given twice in " +
                            listed(ranks));
  }
  const int me = worldRank();
  if (!seen.count(me))
    throw InvalidArgument(what + ": this process is rank " + std::to_string(me) +
                          " of MPI_COMM_WORLD, which is not among the ranks given " +
                          listed(ranks) +
                          "; only the ranks listed call init with the list (the "
                          "others may start Accord over a list of their own)");
}

// FNV-1a over the list: equal on every member when they all passed the same list.
std::uint64_t fingerprint(const std::vector<int>& ranks) {
  std::uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    h ^= static_cast<std::uint32_t>(r);
    h *= 1099511628211ull;
  }
  return h;
}

MPI_Comm createFromWorldRanks(const std::vector<int>& ranks, const std::string& what) {
  checkWorldRanks(ranks, what);
  MPI_Group world, chosen;
  ACCORD_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  const int rc = MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &chosen);
  MPI_Group_free(&world);
  ACCORD_MPI_CHECK(rc);
  MPI_Comm out = MPI_COMM_NULL;
  const int created = MPI_Comm_create_group(MPI_COMM_WORLD, chosen, kCreateGroupTag, &out);
  MPI_Group_free(&chosen);
  ACCORD_MPI_CHECK(created);
  // Lists of the same ranks in different orders make a communicator all the same.
  std::uint64_t bounds[2] = {fingerprint(ranks), ~fingerprint(ranks)};
  ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_UINT64_T, MPI_MAX, out));
  if (bounds[0] != fingerprint(ranks) || bounds[1] != ~fingerprint(ranks)) {
    MPI_Comm_free(&out);
    throw InvalidArgument(what + ": the ranks listed passed different lists (this one " +
                          listed(ranks) +
                          "); every rank listed must pass the same list, in "
                          "the same order");
  }
  return out;
}

}  // namespace

std::string WorldSource::call() const {
  switch (kind) {
    case Kind::World:
      return "accord::init()";
    case Kind::Comm:
      return "accord::init(comm)";
    case Kind::Ranks:
      return "accord::init(world_ranks)";
  }
  return "accord::init";
}

void checkSourceBeforeMpi(const WorldSource& source) {
  if (source.kind == WorldSource::Kind::Comm && source.comm == MPI_COMM_NULL)
    throw InvalidArgument(source.call() +
                          ": comm is MPI_COMM_NULL; pass a communicator "
                          "this process is a member of (MPI_Comm_split gives MPI_COMM_NULL "
                          "to the ranks it leaves out)");
  if (source.kind == WorldSource::Kind::Ranks && source.ranks.empty())
    throw InvalidArgument(source.call() +
                          ": the list names no rank; give the ranks of "
                          "MPI_COMM_WORLD to run over, this process's among them");
}

MPI_Comm makeWorld(const WorldSource& source) {
  MPI_Comm out = MPI_COMM_NULL;
  switch (source.kind) {
    case WorldSource::Kind::World:
      ACCORD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &out));
      break;
    case WorldSource::Kind::Comm:
      refuseIntercommunicator(source.comm, source.call());
      ACCORD_MPI_CHECK(MPI_Comm_dup(source.comm, &out));
      break;
    case WorldSource::Kind::Ranks:
      out = createFromWorldRanks(source.ranks, source.call());
      break;
  }
  return out;
}

std::string describeWorld(const WorldSource& source, MPI_Comm world) {
  if (source.kind == WorldSource::Kind::World) return "";
  return " (over " +
         std::string(source.kind == WorldSource::Kind::Comm ? "a communicator"
                                                            : "a list of ranks") +
         " of the application's: ranks 0, 1, ... are world ranks " +
         listed(translated(world, MPI_COMM_WORLD)) + ")";
}

bool sameRanks(const WorldSource& source, MPI_Comm world) {
  switch (source.kind) {
    case WorldSource::Kind::World:
      return true;  // init() again does nothing, whichever ranks Accord runs over
    case WorldSource::Kind::Comm: {
      int result = MPI_UNEQUAL;
      ACCORD_MPI_CHECK(MPI_Comm_compare(source.comm, world, &result));
      return result == MPI_IDENT || result == MPI_CONGRUENT;
    }
    case WorldSource::Kind::Ranks:
      return translated(world, MPI_COMM_WORLD) == source.ranks;
  }
  return false;
}

std::vector<int> ranksIn(MPI_Comm comm, MPI_Comm world, const std::string& what) {
  if (comm == MPI_COMM_NULL) throw InvalidArgument(what + ": comm is MPI_COMM_NULL");
  refuseIntercommunicator(comm, what);
  auto ranks = translated(comm, world);
  const auto outside = std::find(ranks.begin(), ranks.end(), MPI_UNDEFINED);
  if (outside != ranks.end()) {
    const auto member = static_cast<std::size_t>(outside - ranks.begin());
    throw InvalidArgument(what + ": rank " +
                          std::to_string(translated(comm, MPI_COMM_WORLD)[member]) +
                          " of MPI_COMM_WORLD (rank " + std::to_string(member) +
                          " of comm) is not among the ranks Accord runs over");
  }
  return ranks;
}

}  // namespace accord

// Which ranks Accord runs over: every rank of MPI_COMM_WORLD (init()), the members of an
// application's communicator (init(MPI_Comm)), or a list of world ranks
// (init(world_ranks), Horovod's init(comm=[...])). Whichever it is, init() duplicates it
// into the runtime's own communicator (Runtime::world), from which every other
// communicator of Accord's is made: Accord's ranks are that communicator's.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace accord {

struct WorldSource {
  enum class Kind { World, Comm, Ranks };
  Kind kind = Kind::World;
  MPI_Comm comm = MPI_COMM_NULL;  // Kind::Comm
  std::vector<int> ranks;         // Kind::Ranks: world ranks, in Accord's rank order
  // How the call that gave it reads, for messages: "accord::init(comm)".
  std::string call() const;
};

// Refusals that need no MPI call: MPI_COMM_NULL, an empty list. Before MPI is known
// to be initialized.
void checkSourceBeforeMpi(const WorldSource& source);

// A new communicator over the source's ranks (collective over them), with MPI
// initialized: MPI_Comm_dup of the world or of comm, MPI_Comm_create_group for a
// list. Throws InvalidArgument for an intercommunicator, a list with a rank outside
// the world, twice, or without this process, and for a list that differs between the
// ranks it names (as far as they can tell: lists that name different ranks may leave
// MPI waiting for ranks that never call).
MPI_Comm makeWorld(const WorldSource& source);

// For init's log line: "" over MPI_COMM_WORLD, else which world ranks Accord's ranks
// are, since every message names ranks by their rank in `world`.
std::string describeWorld(const WorldSource& source, MPI_Comm world);

// Whether `source` names the ranks of `world` in the same order (init() called again);
// a plain init() always does, as in Horovod.
bool sameRanks(const WorldSource& source, MPI_Comm world);

// The ranks in `world` of comm's members, in comm's rank order; InvalidArgument naming
// the first member outside `world` (by its rank in MPI_COMM_WORLD).
std::vector<int> ranksIn(MPI_Comm comm, MPI_Comm world, const std::string& what);

}  // namespace accord

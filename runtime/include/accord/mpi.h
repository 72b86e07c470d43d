// Accord on a communicator of the application's: for an application that uses MPI
// itself and wants Accord over some of its ranks only (a job split into independent
// groups, the ranks of one pipeline stage, ...). Include it where <mpi.h> is available
// (an application that has communicators has MPI); <accord/accord.h> comes with it.
#pragma once

#include <accord/accord.h>

#include <mpi.h>

#include <vector>

namespace accord {

// Starts Accord over the ranks of `comm`, an intracommunicator of the initialized MPI
// (collective over comm: every member calls it with the same communicator). Accord
// works on its own duplicates of comm: rank() and size() are this process's rank and
// the size of comm, every rank Accord names (in process sets, roots, messages) is a
// rank of comm, and nothing Accord sends leaves comm. Ranks outside comm may start
// their own Accord over another communicator; each process runs one Accord at a time.
// The application owns MPI here, so shutdown() leaves it initialized.
//
// Throws InvalidArgument for MPI_COMM_NULL or an intercommunicator, NotInitialized
// when MPI is not initialized (or finalized), and InvalidArgument when Accord already
// runs over a communicator with other ranks (over the same ranks it does nothing, as
// init() does).
void init(MPI_Comm comm);

// The same over the ranks of MPI_COMM_WORLD listed, in that order (Accord's rank i is
// world rank world_ranks[i]): what Horovod's init(comm=[...]) takes. Collective over
// the ranks listed, which all pass the same list; the others do not call it (they may
// start Accord over a list of their own). Accord initializes MPI where the application
// has not, and finalizes it at shutdown (MPI_Finalize returns once every process of the
// job has called it, those outside the list too). Throws InvalidArgument for
// an empty list, a rank outside MPI_COMM_WORLD or given twice, a list without this
// process, and lists that differ between the ranks listed.
void init(const std::vector<int>& world_ranks);

// Accord's ranks of comm's members, in comm's rank order: for a process set of the
// members of a communicator the application made (add_process_set(ranks_of(comm))).
// Local; throws InvalidArgument when a member is outside Accord's ranks.
std::vector<int> ranks_of(MPI_Comm comm);

}  // namespace accord

// Which ranks share a host, as Accord sees it.
//
// MPI says which ranks share memory (MPI_COMM_TYPE_SHARED). ACCORD_HOSTNAME (or
// Horovod's HOROVOD_HOSTNAME) can split those further: ranks that set different names
// count as different hosts although the kernel is the same, as in containers that
// share a host's kernel, or in tests that lay 2 + 2 ranks out as two hosts on one
// machine. Ranks that share a name but not memory are still different hosts, so a
// name can never put ranks that cannot share memory into one shared-memory window.
//
// Every place that decides "same host" goes through splitByHost: the topology that
// local_rank() and cross_rank() report, the shared-memory transport, and the
// hierarchical allreduces on host memory and on CUDA tensors.
#pragma once

#include <mpi.h>

#include <string>

namespace accord {

// This process's ACCORD_HOSTNAME ("" when unset), set once by init() before the
// background thread starts, read by splitByHost on that thread afterwards.
void setHostName(std::string name);
const std::string& hostName();

// The ranks of `comm` on this rank's host, ordered by `key` (MPI_Comm_split's key).
// Collective over `comm`; the caller frees the result.
MPI_Comm splitByHost(MPI_Comm comm, int key);

}  // namespace accord

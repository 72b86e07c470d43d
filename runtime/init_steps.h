// The collective steps init() and shutdown() take over the runtime's communicator
// (api.cc runs them; they keep none of its lifetime state): where this rank is among
// the hosts, the checks that every rank's settings are valid and agree, and the
// barrier before MPI_Finalize.
#pragma once

#include "runtime/runtime.h"

#include <mpi.h>

#include <chrono>
#include <optional>
#include <string>

namespace accord {

// local_*: this rank among the ranks of its host. cross_*: its host among the hosts,
// numbered in the order of their lowest global ranks.
void initTopology(Runtime& rt);

// A bad ACCORD_* value on some ranks (`error`, empty where this rank's are valid) fails
// init() on every rank, rather than leaving the others waiting in init()'s collectives.
void checkConfigParsed(const Runtime& rt, const std::string& error);

// The settings that shape fusion plans and the cache must be the same on every rank.
void checkConfigAgrees(const Runtime& rt);

// ACCORD_AUTOTUNE_LOG must open on rank 0, which writes it: else init() fails everywhere.
void checkAutotuneLog(const Runtime& rt);

// Rank 0 warns of misspelt ACCORD_* variables and Horovod settings Accord does not read.
void warnUnknownVariables(int rank);

// Every rank of Accord's world has reached shutdown(): a barrier, waited for at most
// `bound` where one is given (then false if some rank did not come in time).
bool everyRankReachedShutdown(MPI_Comm world, std::optional<std::chrono::milliseconds> bound);

}  // namespace accord

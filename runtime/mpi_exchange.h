// The MPI exchanges of a negotiation cycle, when the set's ranks do not share one host
// (or ACCORD_SHARED_MEMORY=0): the bitwise AND of every cycle, and, when the cache
// cannot answer, the gather of requests to the set's rank 0 and the broadcast of its
// responses.
//
// All of them are non-blocking calls waited for politely (a short spin, then growing
// sleeps): ranks reach negotiation at different times, and a blocking MPI call would
// busy-poll a core the application needs. And every wait has a deadline: every rank
// negotiates every cycle, so a peer silent for ACCORD_STALL_SHUTDOWN_TIME has died or
// hangs, and the wait fails with a CommError naming it instead of hanging this rank.
#pragma once

#include "process_sets.h"

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace accord {

// Waits for non-blocking MPI requests without pinning a core. Returns false if they
// are not all done after `timeout` (0: never gives up).
bool waitPolitely(MPI_Request* requests, int count, std::chrono::milliseconds timeout);

// In-place bitwise AND of `bits` over every rank of `set` (same length everywhere).
void andAllreduce(std::vector<std::uint64_t>& bits, const ProcessSet& set,
                  std::chrono::milliseconds timeout);

// Every rank's `mine` at the set's rank 0, in rank order (empty elsewhere). Rank 0
// receives from each rank separately, so a timeout names exactly the ranks missing.
std::vector<std::vector<std::uint8_t>> gatherToRoot(const std::vector<std::uint8_t>& mine,
                                                    const ProcessSet& set,
                                                    std::chrono::milliseconds timeout);

// Rank 0's `bytes` on every rank of the set.
void broadcastFromRoot(std::vector<std::uint8_t>& bytes, const ProcessSet& set,
                       std::chrono::milliseconds timeout);

}  // namespace accord

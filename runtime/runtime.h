// The process-wide runtime state between init() and shutdown().
#pragma once

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/process_sets.h"
#include "runtime/tensor_queue.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

namespace accord {

struct Runtime {
  ~Runtime();  // never std::terminate on a joinable loop thread

  Config config;
  MPI_Comm world = MPI_COMM_NULL;  // Accord's own communicator: its ranks (world_comm.h)
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool finalize_mpi = false;  // Accord called MPI_Init_thread, so it calls MPI_Finalize
  bool finalize_mpi_everywhere = false;  // ... on every rank of its world

  TensorQueue queue;
  ProcessSetTable sets;
  // Created before the loop starts, then used by the background thread only.
  std::unique_ptr<Backend> backend;
  std::thread loop;
  // Set by the background thread when a transport failed: MPI can then no longer be
  // torn down (see shutdown()).
  std::atomic<bool> failed{false};

  // Generated names ("allreduce.noname.3") count per process set and collective type, in the
  // order the application issues unnamed collectives.
  std::mutex names_mu;
  std::map<std::pair<ProcessSetId, RequestType>, std::uint64_t> name_counters;
};

// A completed join restarts the counts of generated names in its set, on every rank
// at the same point: while a rank had joined, the others issued collectives it did not
// (allreduces it stood in for, others that failed), and their next unnamed
// collectives would otherwise never pair. Called on the background thread.
void restartGeneratedNames(Runtime& rt, ProcessSetId set);

// Throws NotInitialized before init() and after shutdown(), and in a process forked
// after init().
Runtime& runtime(const char* what);

// A collective failed with Timeout (`error`): shutdown() must then not wait in
// MPI_Finalize for late ranks that may never come, only a bounded time for them to
// reach shutdown. Background thread.
void noteStallTimeout(const std::string& error);

// The background thread's body.
//
// Throughout the runtime, "the background thread" names the thread that runs a cycle:
// the background thread itself, or an application thread that waits on a handle and
// runs one cycle in its place, holding the cycle lock (ACCORD_INLINE_CYCLES). One thread
// at a time either way, so state that is "background thread only" needs no lock.
void runBackgroundLoop(Runtime& rt) noexcept;
// True on the thread running a cycle (where Allocators run).
bool onBackgroundThread();

}  // namespace accord

// Accord's public C++ API: init, topology, asynchronous collectives and handles.
//
// Every collective is asynchronous: it records the request, wakes the background
// thread and returns a Handle at once. The background thread negotiates a global
// order with the other ranks, fuses small tensors and runs the collective; wait()
// blocks on the handle and rethrows any failure in the caller's thread.
//
// Ranks passed to or returned by a collective (root, splits, join's last rank) are
// ranks within the collective's process set; the global set's ranks are MPI ranks.
//
// CUDA tensors (Device::cuda) are ordered with the application's CUDA work through
// streams, as in PyTorch: every collective's options name the stream (`stream`, a
// cudaStream_t passed as void* so that this header needs no CUDA header) on which the
// tensor's contents are ready. The runtime records an event on that stream at
// submission and runs the collective on its own stream after that event; the
// application must not write the tensor again until the collective completed, which
// it learns from wait() or, without blocking the host, from Handle::cuda_event().
#pragma once

#include <accord/error.h>
#include <accord/tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// The version of these headers. From 1.0 on they change compatibly within a major
// version: functions and option fields (with defaults) are added, none removed or
// changed. The build reads its version from these three lines. 1.1: accord/mpi.h
// (init over a communicator or a list of world ranks, ranks_of). 1.2:
// grouped_allgather, grouped_reducescatter.
#define ACCORD_VERSION_MAJOR 1
#define ACCORD_VERSION_MINOR 2
#define ACCORD_VERSION_PATCH 0

namespace accord {

namespace detail {
struct HandleState;
}

// Adasum (added last, so that the values before it keep their meaning between ranks):
// an adaptive sum of floating-point tensors, allreduce only, over a power-of-two number
// of ranks. Ranks combine in pairs, level by level as in a binary tree, each tensor as
// (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b: orthogonal gradients add up, parallel
// ones average. See docs/adasum.md.
enum class ReduceOp : std::uint8_t { Sum, Average, Min, Max, Product, Adasum };
inline constexpr int kNumReduceOps = 6;  // one past the last ReduceOp (asserted in tensor.cc)
const char* reduce_op_name(ReduceOp op);

using ProcessSetId = std::int32_t;
inline constexpr ProcessSetId kGlobalProcessSet = 0;

// ---- lifetime and topology ------------------------------------------------------

// Starts the runtime on every rank (collective: every rank calls it). Calls
// MPI_Init_thread if the application has not initialized MPI itself; either way Accord
// works on its own duplicates of MPI_COMM_WORLD. Reads and validates every ACCORD_*
// environment variable. After shutdown() it may start Accord again if the application
// owns MPI; it throws NotInitialized if Accord finalized MPI, or if the last runtime
// ended in a communication failure.
void init();
// The first rank to call shutdown() ends the runtime on every rank: all ranks leave
// the background loop in the same cycle, and collectives still pending on any rank
// complete with ShutDown (so a rank that stops early cannot leave the others hanging).
// Every rank should still call it to release resources. Safe to call more than once;
// a process that returns from main without it shuts down at exit, and an application
// that calls MPI_Finalize without it shuts Accord down first, inside MPI_Finalize (with
// a warning). It must not run while other threads of the process still call Accord.
//
// After a CommError (a rank died or stopped answering) shutdown() returns within
// ACCORD_STALL_SHUTDOWN_TIME without tearing MPI down, since MPI_Finalize would wait for
// the failed ranks. After a Timeout (a collective that some ranks never submitted) it
// waits, where Accord initialized MPI, up to ACCORD_SHUTDOWN_WAIT_TIME for every rank to
// reach shutdown() and then finalizes MPI; where some rank does not come in time (or the
// application initialized MPI) it returns without tearing MPI down. In those cases the
// process should then exit with a non-zero status and must not call MPI_Finalize;
// buffers of the failed collective may still be written by MPI until it exits.
//
// The runtime belongs to the process that called init(): in a process forked from it
// afterwards every call throws NotInitialized naming that process (fork before init()).
void shutdown();
bool is_initialized();

int rank();
int size();
int local_rank();  // rank among the processes on this host
int local_size();
int cross_rank();  // index of this host among hosts
int cross_size();

// The version of the library loaded at run time, which may differ from the headers an
// application was compiled with (ACCORD_VERSION_*): a different major version means an
// incompatible library.
struct Version {
  int major = 0;
  int minor = 0;
  int patch = 0;
};
Version version();

// What this build of Accord contains (known without init()): `cuda`, device tensors
// are taken (the CUDA toolkit was found at build time); `nccl`, they are reduced with
// NCCL rather than staged through host memory for MPI.
struct BuildFeatures {
  bool cuda = false;
  bool nccl = false;
};
BuildFeatures build_features();

// The CUDA devices this process can use (known without init()). Where there are none,
// 0, and `why` (if given) gets the reason in plain words: no NVIDIA driver (or one too
// old for this build's CUDA), no device visible, or a build without GPU support.
int cuda_device_count(std::string* why = nullptr);

// ---- handles ----------------------------------------------------------------------

class Handle {
 public:
  // Made by the runtime; a default-constructed Handle is not valid().
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool poll() const;  // true once the collective finished (successfully or not)
  // Blocks; rethrows the failure in the caller's thread. With ACCORD_INLINE_CYCLES (the
  // default) the waiting thread may run Accord's negotiation cycle itself for a moment,
  // which is what makes small collectives fast.
  void wait() const;
  // Blocks for at most `timeout`: false if the collective is still running, true once it
  // finished (rethrowing its failure as wait() does). Lets a caller that must stay
  // responsive (an interpreter checking for Ctrl-C) wait in slices. From 100 ms up it
  // may run a cycle as wait() does, and then return up to one cycle late (normally
  // under 20 ms: as long as the slowest rank takes to reach its next cycle).
  bool wait_for(std::chrono::milliseconds timeout) const;

  // Results of particular collectives; each waits first, as wait() does. On a handle
  // of another collective: empty, and -1.
  const std::vector<std::int64_t>& received_splits() const;  // alltoall: rows from each rank
  int last_joined_rank() const;                              // join

  // CUDA tensors: the cudaEvent_t (as void*) that completes on the GPU when the
  // collective's results are in place, so that the caller's stream can wait for it
  // (cudaStreamWaitEvent) instead of blocking the host in wait(). Blocks only until
  // the runtime has launched the collective on its stream, not until it completed.
  // nullptr when the collective failed before it was launched (wait() says why) and for
  // collectives on CPU tensors (after they completed). The event belongs to the handle:
  // it stays valid while this Handle or a copy of it exists. A collective that fails on
  // the GPU (a peer died) also fails wait(), which therefore remains the place to learn
  // of errors.
  void* cuda_event() const;
  // CUDA tensors: makes `stream` (a cudaStream_t as void*) wait on the GPU for
  // cuda_event() and returns true, without blocking the host beyond the launch: work
  // queued on `stream` after this call sees the results. false where there is nothing
  // to wait for on the GPU: a collective on CPU tensors (returns once it completed) or
  // one that failed before it was launched. wait() stays the place to learn of errors.
  bool wait_on_stream(void* stream) const;

 private:
  std::shared_ptr<detail::HandleState> state_;
};

// Returns the output view for a collective whose output shape is known only after
// negotiation (allgather, alltoall, reducescatter). Called on the thread that runs the
// negotiation cycle: the background thread, or an application thread waiting on any
// handle meanwhile (ACCORD_INLINE_CYCLES=0 keeps it on the background thread), so it
// must not rely on thread-local state, and must not call back into Accord: a collective or shutdown() there
// throws InvalidArgument (it would wait on the thread that is to run it). The view must
// be on the input's device and hold the shape's elements; one that does not, or an
// exception the allocator throws, fails this rank's collective with InvalidArgument
// (the allocator's own message kept) while the other ranks' complete.
using Allocator = std::function<TensorView(const Shape& shape)>;

// ---- collectives ------------------------------------------------------------------
// Every collective has an asynchronous form (`*_async`, returns a Handle at once) and a
// blocking one (waits, and rethrows a failure in the caller's thread).

// What every collective's options hold.
struct CollectiveOptions {
  // An empty name gets a generated one ("allreduce.noname.7") that is the same on every rank
  // as long as every rank issues its unnamed collectives in the same order.
  std::string name;
  ProcessSetId process_set = kGlobalProcessSet;
  void* stream = nullptr;  // CUDA tensors: cudaStream_t they are ready on; null: legacy default
};

// What the reducing collectives (allreduce, reducescatter) add.
struct ReductionOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0;   // applied to the input before reduction
  double postscale = 1.0;  // applied to the result (after Average's division)
};

struct AllreduceOptions : ReductionOptions {};
// Reduces `tensor` in place.
Handle allreduce_async(TensorView tensor, const AllreduceOptions& options = {});
void allreduce(TensorView tensor, const AllreduceOptions& options = {});

// All tensors are negotiated, fused and completed as one unit; tensor i is named
// "<name>.<i>". One handle for the whole group.
Handle grouped_allreduce_async(std::vector<TensorView> tensors,
                               const AllreduceOptions& options = {});
void grouped_allreduce(std::vector<TensorView> tensors, const AllreduceOptions& options = {});

struct AllgatherOptions : CollectiveOptions {};
// Concatenates every rank's input along the first dimension, which may differ per
// rank; the other dimensions must agree. The output comes from `output`.
Handle allgather_async(TensorView input, Allocator output, const AllgatherOptions& options = {});
void allgather(TensorView input, Allocator output, const AllgatherOptions& options = {});
// As grouped_allreduce_async: the inputs are negotiated, fused and completed as one unit
// (one dtype and device), input i named "<name>.<i>" and gathered into outputs[i].
Handle grouped_allgather_async(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                               const AllgatherOptions& options = {});
void grouped_allgather(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                       const AllgatherOptions& options = {});

struct BroadcastOptions : CollectiveOptions {
  int root = 0;
};
// Overwrites `tensor` on every rank with root's `tensor`.
Handle broadcast_async(TensorView tensor, const BroadcastOptions& options = {});
void broadcast(TensorView tensor, const BroadcastOptions& options = {});

struct AlltoallOptions : CollectiveOptions {
  // splits[r] = rows of the first dimension sent to rank r; empty = equal parts
  // (the first dimension must then divide evenly).
  std::vector<std::int64_t> splits;
};
// Sends rows splits[r] of `input` to rank r; the output, from `output`, holds what
// every rank sent this one, in rank order. The blocking form returns the rows received
// from each rank (what Handle::received_splits gives).
Handle alltoall_async(TensorView input, Allocator output, const AlltoallOptions& options = {});
std::vector<std::int64_t> alltoall(TensorView input, Allocator output,
                                   const AlltoallOptions& options = {});

struct ReducescatterOptions : ReductionOptions {};
// Reduces `input` (same shape on every rank) and gives rank r the r-th block of rows;
// the first ranks get one row more when the first dimension does not divide evenly.
Handle reducescatter_async(TensorView input, Allocator output,
                           const ReducescatterOptions& options = {});
void reducescatter(TensorView input, Allocator output, const ReducescatterOptions& options = {});
// The inputs reduced and scattered as one unit, as grouped_allgather_async.
Handle grouped_reducescatter_async(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                                   const ReducescatterOptions& options = {});
void grouped_reducescatter(std::vector<TensorView> inputs, std::vector<Allocator> outputs,
                           const ReducescatterOptions& options = {});
// Rows of the first dimension that `rank` of `set_size` receives from reducescatter.
std::int64_t reducescatter_rows(std::int64_t rows, int rank, int set_size);

Handle barrier_async(ProcessSetId process_set = kGlobalProcessSet);
void barrier(ProcessSetId process_set = kGlobalProcessSet);

// A rank that has run out of data joins: until every rank has joined, the other
// ranks' allreduces go on and the joined rank contributes zeros (the neutral element
// for Min, Max and Product); their other collectives fail at once with InvalidArgument
// naming the joined ranks, as in Horovod. A barrier and a process set's addition or
// removal are the exception: they need every rank's own request, joined or not (a rank
// that joined with join_async may still make one), so they wait for the joined ranks,
// up to ACCORD_STALL_SHUTDOWN_TIME, whose error then says that they joined. Completes
// when all ranks have joined, which also restarts the count of generated names on
// every rank; the handle gives the last rank to join.
Handle join_async(ProcessSetId process_set = kGlobalProcessSet);
int join(ProcessSetId process_set = kGlobalProcessSet);
// The same, naming the device where this rank takes its part in the device
// collectives that go on while it has joined (Horovod's join(device)): by default the
// device of its latest device tensor, or GPU 0 if it never submitted one, which on a
// host of several GPUs may be another rank's. A CPU device, or any device in a build
// without GPU support or a process that sees no GPU (neither has device collectives),
// changes nothing; a GPU this process does not see, where it sees some, is an
// InvalidArgument.
Handle join_async(ProcessSetId process_set, Device device);
int join(ProcessSetId process_set, Device device);

// ---- process sets -----------------------------------------------------------------
// Adding and removing is collective over all ranks (every rank calls it with the same
// ranks, in the same order relative to other process-set calls).

ProcessSetId add_process_set(std::vector<int> ranks);
void remove_process_set(ProcessSetId id);
std::vector<int> process_set_ranks(ProcessSetId id);  // global ranks, ascending
bool process_set_included(ProcessSetId id);           // is this rank a member?
int process_set_rank(ProcessSetId id);                // this rank's in the set; -1: not in it
int process_set_size(ProcessSetId id);

// How a process set's members reach each other for host memory, fixed when the set is
// created: Local (a set of one rank), SharedMemory (every member on this host and
// ACCORD_SHARED_MEMORY=1: negotiation and allreduce through a shared window, other
// collectives through MPI) or Mpi (MPI point-to-point messages). Only on members.
enum class Transport : std::uint8_t { Local, SharedMemory, Mpi };
Transport process_set_transport(ProcessSetId id);
const char* transport_name(Transport transport);  // "local", "shared-memory", "mpi"

// ---- timeline ---------------------------------------------------------------------
// A Chrome trace (open it in chrome://tracing or https://ui.perfetto.dev) of every
// tensor's phases on rank 0: queue, negotiate, the collective and its steps (copy in,
// reduce, copy out), with the fused group and its bytes. ACCORD_TIMELINE=<path> writes
// one from init() to shutdown(); these calls start and stop one at run time. Only rank
// 0 writes; on other ranks they do nothing. The file is valid JSON whenever the
// process ends, a crash included (it is completed after every cycle).
void start_timeline(const std::string& path);  // InvalidArgument if it cannot be created
void stop_timeline();
// The application's own activities on tracks of their own (e.g. the trainer's
// "compute", "comm wait", "data wait"): `activity` begins on `track`, ending the one
// before; timeline_end ends it. Any thread; nothing happens without a timeline.
void timeline_begin(const std::string& track, const std::string& activity);
void timeline_end(const std::string& track);

}  // namespace accord

// The finalizer: completes the handles of device collectives when the GPU is done.
//
// Thread boundary: the background thread launches a collective on the runtime's stream,
// records an event after it and hands the collective's handles over (add); the
// finalizer's own thread polls the events (cudaEventQuery) and completes or fails the
// handles. So negotiating the next cycle never waits for the GPU, and a GPU that stops
// making progress is noticed while the background thread goes on.
//
// A collective on a communicator that can fail asynchronously (NCCL's) carries it as
// a Watched: while the collective is pending the finalizer polls the communicator's
// asynchronous error, and when it reports one, or the collective has not completed
// ACCORD_STALL_SHUTDOWN_TIME after the one before it on the same device, the
// finalizer aborts the communicator and fails every pending collective on it with a
// CommError that names the collective, and the rank to blame where the runtime knows
// (runtime/peer_watch.h; it waits up to half a second to learn it): each once its done
// event has completed (what was queued with it may still use the caller's tensors; an
// aborted communicator's kernels return at once), or at most 10 s
// (ACCORD_STALL_SHUTDOWN_TIME if shorter) after the failure was seen.
#pragma once

#include "runtime/handle_state.h"
#include "runtime/message.h"
#include "runtime/tensor_entry.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace accord::cuda {

// A communicator the finalizer watches. Thread-safe.
class Watched {
 public:
  virtual ~Watched() = default;
  // "" while healthy, else what went wrong (the finalizer polls this).
  virtual std::string asyncError() = 0;
  // Stops the communicator's collectives for good; later ones fail at once with
  // `reason`. Only the first call acts.
  virtual void abort(const std::string& reason) = 0;
  // The reason given to abort(), or "" while usable.
  virtual std::string broken() const = 0;
};

// A collective launched on a device stream.
struct Launched {
  std::string what;  // "allreduce 'a', 'b'", for messages
  int device = 0;
  std::shared_ptr<void> done;  // recorded after the collective (get(): the cudaEvent_t)
  struct Part {
    std::shared_ptr<detail::HandleState> handle;
    std::exception_ptr error;  // this rank's own failure: the handle fails with it
  };
  std::vector<Part> parts;
  std::shared_ptr<Watched> comm;  // null where nothing can fail asynchronously
};

class Finalizer {
 public:
  // `timeout`: ACCORD_STALL_SHUTDOWN_TIME (0: wait for ever).
  explicit Finalizer(std::chrono::milliseconds timeout);
  // Completes what is still in flight (each collective within the timeout), then stops.
  ~Finalizer();
  Finalizer(const Finalizer&) = delete;
  Finalizer& operator=(const Finalizer&) = delete;

  void add(Launched launched);
  // Blocks until no collective on `comm` is in flight, or until `deadline`; false then.
  bool drain(const Watched* comm, std::chrono::steady_clock::time_point deadline);

 private:
  struct Item {
    Launched launched;
    std::chrono::steady_clock::time_point since;  // launched, or the last completion before
    // Failed (this collective, or its communicator): the reason, and since when the
    // handles wait for the GPU to get through what was queued with it.
    std::string failure;
    std::chrono::steady_clock::time_point failed_at{};
    bool own = false;  // the failure is this rank's own GPU's, not another rank's
  };
  enum class Outcome { Pending, Completed, Failed };

  void run();
  Outcome poll(Item& item, std::chrono::steady_clock::time_point now);
  void finish(Item& item, std::exception_ptr error);

  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable wake_;     // new work or stop
  std::condition_variable drained_;  // a collective finished
  std::deque<Item> items_;
  std::map<const Watched*, int> in_flight_;                         // per communicator (null: none)
  std::map<int, std::chrono::steady_clock::time_point> last_done_;  // per device
  std::uint64_t added_ = 0;  // launches so far: a new one restarts the fast polling
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything it uses
};

// Hands entries that need no GPU work over to the finalizer, each to complete when its
// own ready event has (the point on the application's stream it was submitted at):
// an allreduce alone, unscaled, leaves the data as it is. An entry whose ready event
// has completed already is left to the executor, which completes it at once. Every
// entry must be local, without an error, and have a ready event.
void completeWhenReady(Finalizer& finalizer, int device, const Response& response,
                       std::vector<TensorEntry*>& entries);

// Hands the local entries of a response launched on `stream` over to the finalizer:
// records the done event, reports each part launched to its handle, and marks the
// entries as completed by the backend (TensorEntry::backend_completes); entries already
// so marked are left alone. Entries with an `error` fail with it once the GPU is done
// with their buffers; alltoall's received splits go to the handle now. Call it with
// `device` current.
void completeWhenDone(Finalizer& finalizer, int device, cudaStream_t stream,
                      const Response& response, std::vector<TensorEntry*>& entries,
                      std::shared_ptr<Watched> comm);

}  // namespace accord::cuda

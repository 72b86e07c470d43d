// PendingOp: what a Python collective call returns. It holds the runtime's handle and,
// for collectives whose output Accord allocates, the slot the background thread fills.
#pragma once

#include "buffer.h"

#include <accord/accord.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace accord::python {

// Filled on the background thread by the allocator, read after the handle completes
// (the handle's completion orders the two).
struct OutputSlot {
  std::shared_ptr<Buffer> buffer;
};

class PendingOp {
 public:
  PendingOp(Handle handle, std::shared_ptr<OutputSlot> output)
      : handle_(std::move(handle)), outputs_{std::move(output)} {}
  // A group: one slot per member (null where the caller gave the output).
  PendingOp(Handle handle, std::vector<std::shared_ptr<OutputSlot>> outputs)
      : handle_(std::move(handle)), outputs_(std::move(outputs)) {}

  bool poll() const { return handle_.poll(); }
  // Waits with the GIL released, in slices so that Ctrl-C and other signal handlers
  // (pytest-timeout's, for one) still run; rethrows the collective's failure.
  void wait() const;
  // Member `i`'s output (0 for a single collective), after wait(); throws if Accord
  // allocated none there.
  std::shared_ptr<Buffer> output(std::size_t i = 0) const;
  std::vector<std::int64_t> receivedSplits() const { return handle_.received_splits(); }
  int lastJoinedRank() const { return handle_.last_joined_rank(); }
  std::uintptr_t cudaEvent() const;  // GIL released while the launch is awaited
  bool waitOnStream(std::uintptr_t stream) const;  // Handle::wait_on_stream, GIL released

 private:
  void waitSliced() const;

  Handle handle_;
  std::vector<std::shared_ptr<OutputSlot>> outputs_;
};

// An allocator that makes a Buffer of the negotiated shape and leaves it in `slot`.
Allocator allocateInto(std::shared_ptr<OutputSlot> slot, DType dtype);

}  // namespace accord::python

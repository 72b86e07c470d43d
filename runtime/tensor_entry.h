// One local tensor taking part in a collective: what the application submitted, and
// what the backend reports back.
//
// The runtime queues entries and completes their handles; the backends in ops/ run
// them. It lives in runtime/ because ops/ depends on runtime/, never the reverse.
#pragma once

#include "runtime/handle_state.h"

#include <accord/accord.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace accord {

struct TensorEntry {
  std::string name;
  TensorView tensor;  // input; also the output of allreduce and broadcast (in place)
  Allocator output;   // allgather, alltoall, reducescatter: called once with the shape
  std::vector<std::int64_t> splits;             // alltoall: rows sent to each rank
  std::shared_ptr<detail::HandleState> handle;  // completed or failed by the runtime
  std::vector<std::int64_t> received_splits;    // alltoall: written by the backend
  // Set by the backend when this rank could not do its part with the application's
  // buffers (its output allocator threw or returned too little). The rank still took
  // part, with scratch space, so that no other rank waits for it; the handle then
  // fails with this error while the other ranks' handles complete.
  std::exception_ptr error;

  // Device tensors: the point on the application's stream after which the tensor is
  // ready, marked at submission by Backend::deviceReady (opaque to the runtime; the
  // device backend's event).
  std::shared_ptr<void> ready;
  // Set by a backend that has taken this entry's completion over: the collective was
  // launched on a GPU stream and the backend's finalizer completes or fails the handle
  // (with `error`, and alltoall's received splits) when the GPU is done with it, so the
  // background thread never waits for the GPU. The executor then leaves the handle
  // alone. Host collectives never set it: their handles complete when execute returns.
  bool backend_completes = false;
};

}  // namespace accord

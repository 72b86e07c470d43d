// The interface between the runtime and a communication backend.
//
// The controller hands every negotiated (possibly fused) response to the OpManager
// together with this rank's entries for its tensors. Backends register Ops; the
// manager runs the first registered op whose enabled() accepts the response (NCCL
// before MPI, so device tensors go to NCCL and host tensors fall through to MPI).
#pragma once

#include "runtime/config.h"
#include "runtime/message.h"

#include <accord/accord.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace accord {

namespace detail {
struct HandleState;
}
namespace mpi {
class SharedMemory;
}

// One local tensor taking part in a response.
struct TensorEntry {
  std::string name;
  TensorView tensor;  // input; also the output of allreduce and broadcast (in place)
  Allocator output;   // allgather, alltoall, reducescatter: called once with the shape
  std::vector<std::int64_t> splits;                 // alltoall: rows sent to each rank
  std::shared_ptr<detail::HandleState> handle;      // completed by the controller
  std::vector<std::int64_t> received_splits;        // alltoall: written by the op
};

// What an op may use. comm is the process set's communicator (a duplicate owned by the
// runtime); rank/size are within it.
struct ExecContext {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  const Config* config = nullptr;
  // Set when every rank of comm shares this host and ACCORD_SHARED_MEMORY allows it.
  mpi::SharedMemory* shm = nullptr;
};

class Op {
 public:
  virtual ~Op() = default;
  virtual bool enabled(const Response& response) const = 0;
  // entries[i] belongs to response.names[i]; it is nullptr on a rank that has joined,
  // which contributes zeros (the op's neutral element for Min, Max, Product) and
  // discards the result. Throws on failure; the controller fails the entries' handles.
  virtual void execute(ExecContext& ctx, const Response& response,
                       std::vector<TensorEntry*>& entries) = 0;
};

class OpManager {
 public:
  OpManager();  // registers every backend compiled in
  ~OpManager();
  void execute(ExecContext& ctx, const Response& response, std::vector<TensorEntry*>& entries);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace accord

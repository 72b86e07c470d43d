// The host backend's entry points (connectHost, makeHostOp: see ops/common/op.h).
#include "ops/mpi/mpi_ops.h"
#include "ops/mpi/mpi_transport.h"

#include <accord/error.h>

#include <string>

namespace accord {

std::unique_ptr<OpTransport> connectHost(MPI_Comm comm, std::vector<int> global_ranks,
                                         const Config& config) {
  return std::make_unique<mpi::MpiTransport>(comm, std::move(global_ranks), config);
}

std::unique_ptr<Op> makeHostOp(ResponseType type) {
  switch (type) {
    case ResponseType::Allreduce:
      return mpi::makeAllreduce();
    case ResponseType::Allgather:
      return mpi::makeAllgather();
    case ResponseType::Broadcast:
      return mpi::makeBroadcast();
    case ResponseType::Alltoall:
      return mpi::makeAlltoall();
    case ResponseType::Reducescatter:
      return mpi::makeReducescatter();
    default:
      break;
  }
  throw InvalidArgument(std::string("no host op runs ") + responseTypeName(type) + " responses");
}

}  // namespace accord

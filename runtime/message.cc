// Names and byte counts of negotiation messages (message.h).
//
// The type names are the words users see at the start of every error message
// ("allreduce 'w1': ..."), so they match the public function names.
#include "runtime/message.h"

#include <accord/error.h>

namespace accord {

const char* requestTypeName(RequestType type) {
  switch (type) {
    case RequestType::Allreduce:
      return "allreduce";
    case RequestType::Allgather:
      return "allgather";
    case RequestType::Broadcast:
      return "broadcast";
    case RequestType::Alltoall:
      return "alltoall";
    case RequestType::Reducescatter:
      return "reducescatter";
    case RequestType::Barrier:
      return "barrier";
    case RequestType::Join:
      return "join";
    case RequestType::AddProcessSet:
      return "add_process_set";
    case RequestType::RemoveProcessSet:
      return "remove_process_set";
  }
  return "invalid-request-type";
}

const char* responseTypeName(ResponseType type) {
  switch (type) {
    case ResponseType::Allreduce:
      return "allreduce";
    case ResponseType::Allgather:
      return "allgather";
    case ResponseType::Broadcast:
      return "broadcast";
    case ResponseType::Alltoall:
      return "alltoall";
    case ResponseType::Reducescatter:
      return "reducescatter";
    case ResponseType::Barrier:
      return "barrier";
    case ResponseType::Join:
      return "join";
    case ResponseType::AddProcessSet:
      return "add_process_set";
    case ResponseType::RemoveProcessSet:
      return "remove_process_set";
    case ResponseType::Error:
      return "error";
  }
  return "invalid-response-type";
}

std::size_t Response::tensorBytes(std::size_t i) const {
  if (i >= shapes.size()) {
    throw InvalidArgument("Response::tensorBytes(" + std::to_string(i) + "): the response has " +
                          std::to_string(shapes.size()) + " shapes");
  }
  return num_bytes(shapes[i], dtype);
}

// Responses without tensors (barrier, join, process sets, errors) carry no shapes and
// so weigh nothing, which keeps them out of any fusion arithmetic.
std::size_t Response::totalBytes() const {
  std::size_t total = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (__builtin_add_overflow(total, tensorBytes(i), &total)) {
      throw InvalidArgument(std::string(responseTypeName(type)) + " of " +
                            std::to_string(shapes.size()) +
                            " tensors: their byte counts sum past SIZE_MAX");
    }
  }
  return total;
}

}  // namespace accord

// Names and byte counts of negotiation messages (message.h).
//
// The type names are the words users see at the start of every error message
// ("allreduce 'w1': ..."), so they match the public function names.
#include "runtime/message.h"

#include <accord/error.h>

#include <cstring>
#include <string_view>

namespace accord {

namespace {

// Each switch names every enumerator, so -Wswitch flags one added without a name, and
// the static_asserts below then flag a kNum* constant that was not raised with it.
constexpr const char* requestName(RequestType type) {
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
  return nullptr;
}

constexpr const char* responseName(ResponseType type) {
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
  return nullptr;
}

// The timeline's phases use Horovod's words, so that a trace reads as Horovod's does.
constexpr const char* negotiateName(RequestType type) {
  switch (type) {
    case RequestType::Allreduce:
      return "NEGOTIATE_ALLREDUCE";
    case RequestType::Allgather:
      return "NEGOTIATE_ALLGATHER";
    case RequestType::Broadcast:
      return "NEGOTIATE_BROADCAST";
    case RequestType::Alltoall:
      return "NEGOTIATE_ALLTOALL";
    case RequestType::Reducescatter:
      return "NEGOTIATE_REDUCESCATTER";
    case RequestType::Barrier:
      return "NEGOTIATE_BARRIER";
    case RequestType::Join:
      return "NEGOTIATE_JOIN";
    case RequestType::AddProcessSet:
      return "NEGOTIATE_ADD_PROCESS_SET";
    case RequestType::RemoveProcessSet:
      return "NEGOTIATE_REMOVE_PROCESS_SET";
  }
  return nullptr;
}

constexpr const char* collectiveName(ResponseType type) {
  switch (type) {
    case ResponseType::Allreduce:
      return "ALLREDUCE";
    case ResponseType::Allgather:
      return "ALLGATHER";
    case ResponseType::Broadcast:
      return "BROADCAST";
    case ResponseType::Alltoall:
      return "ALLTOALL";
    case ResponseType::Reducescatter:
      return "REDUCESCATTER";
    case ResponseType::Barrier:
      return "BARRIER";
    case ResponseType::Join:
      return "JOIN";
    case ResponseType::AddProcessSet:
      return "ADD_PROCESS_SET";
    case ResponseType::RemoveProcessSet:
      return "REMOVE_PROCESS_SET";
    case ResponseType::Error:
      return "ERROR";
  }
  return nullptr;
}

static_assert(detail::namedExactly(negotiateName, kNumRequestTypes),
              "every RequestType needs a timeline name");
static_assert(detail::namedExactly(collectiveName, kNumResponseTypes),
              "every ResponseType needs a timeline name");

static_assert(detail::namedExactly(requestName, kNumRequestTypes),
              "kNumRequestTypes must count the RequestTypes");
static_assert(detail::namedExactly(responseName, kNumResponseTypes),
              "kNumResponseTypes must count the ResponseTypes");

// validation.cc turns a request's type into its response's with a cast: every
// RequestType must have the ResponseType of the same value and name.
constexpr bool responseTypesMirrorRequestTypes() {
  for (int v = 0; v < kNumRequestTypes; ++v) {
    if (std::string_view(requestName(static_cast<RequestType>(v))) !=
        responseName(static_cast<ResponseType>(v)))
      return false;
  }
  return true;
}
static_assert(responseTypesMirrorRequestTypes(),
              "ResponseType must begin with the RequestTypes, in the same order");

}  // namespace

const char* requestTypeName(RequestType type) {
  const char* name = requestName(type);
  return name ? name : "invalid-request-type";
}

const char* responseTypeName(ResponseType type) {
  const char* name = responseName(type);
  return name ? name : "invalid-response-type";
}

std::string_view callerName(const char* type, std::string_view name) {
  for (std::string_view prefix : {std::string_view(""), std::string_view("grouped_")}) {
    const std::size_t n = prefix.size() + std::strlen(type) + 1;
    if (name.size() > n && name.starts_with(prefix) &&
        name.substr(prefix.size()).starts_with(type) && name[n - 1] == '.')
      return name.substr(n);
  }
  return name;
}

std::string describeCollective(const char* type, const std::string& name) {
  const std::string_view shown = callerName(type, name);
  const bool grouped = shown.size() < name.size() && name.starts_with("grouped_");
  return (grouped ? "grouped " : "") + std::string(type) + " '" + std::string(shown) + "'";
}

const char* negotiatePhaseName(RequestType type) {
  const char* name = negotiateName(type);
  return name ? name : "NEGOTIATE_INVALID";
}

const char* collectivePhaseName(ResponseType type) {
  const char* name = collectiveName(type);
  return name ? name : "INVALID";
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

// Names and byte counts of negotiation messages (message.h).
//
// The type names are the words users see at the start of every error message
// ("allreduce 'w1': ..."), so they match the public function names.
#include "runtime/message.h"

#include <accord/error.h>

#include <array>
#include <cctype>
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

std::string describe(const Request& r) {
  if (r.type == RequestType::Join) return "join";
  return describeCollective(requestTypeName(r.type), r.name);
}

namespace {

// The timeline's phases use Horovod's words: the type names above in capitals, after
// `before` ("NEGOTIATE_ALLREDUCE", "ALLREDUCE"). Built once; an index past the table
// (a value no enumerator has) gets `invalid`.
template <typename E, int N>
const char* phaseName(E type, const char* (*name)(E), const char* before, const char* invalid) {
  static const std::array<std::string, N> names = [&] {
    std::array<std::string, N> out;
    for (int v = 0; v < N; ++v) {
      out[v] = before;
      for (const char* c = name(static_cast<E>(v)); *c; ++c)
        out[v] += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    }
    return out;
  }();
  const auto v = static_cast<std::size_t>(type);
  return v < names.size() ? names[v].c_str() : invalid;
}

}  // namespace

const char* negotiatePhaseName(RequestType type) {
  return phaseName<RequestType, kNumRequestTypes>(type, requestName, "NEGOTIATE_",
                                                  "NEGOTIATE_INVALID");
}

const char* collectivePhaseName(ResponseType type) {
  return phaseName<ResponseType, kNumResponseTypes>(type, responseName, "", "INVALID");
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

// The values ranks exchange during negotiation.
//
// A Request is one rank's wish to run one named collective; a Response is what every
// rank executes once rank 0 has seen matching requests from all ranks of the process
// set. A fused Response carries several tensors (names[i], shapes[i]). These are plain
// values: wire.h turns them into bytes, the coordinator reasons about them without MPI.
#pragma once

#include <accord/accord.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

enum class RequestType : std::uint8_t {
  Allreduce,
  Allgather,
  Broadcast,
  Alltoall,
  Reducescatter,
  Barrier,
  Join,
  AddProcessSet,
  RemoveProcessSet,
};
inline constexpr int kNumRequestTypes = 9;      // one past the last (asserted in message.cc)
const char* requestTypeName(RequestType type);  // "allreduce", ...
// "allreduce 'loss'": a collective as messages name it. A name that carries its
// operation in front, as the Python layer gives them (Horovod's "allreduce.loss",
// "grouped_allreduce.loss.0", shown "grouped allreduce 'loss.0'") and as unnamed ones
// are generated ("allreduce.noname.7"), is shown without it: the name the caller
// wrote. The timeline shows whole names.
std::string describeCollective(const char* type, const std::string& name);
// That shown name: `name` without "<type>." or "grouped_<type>." in front.
std::string_view callerName(const char* type, std::string_view name);
// The timeline's name of a request's negotiation, Horovod's: "NEGOTIATE_ALLREDUCE", ...
const char* negotiatePhaseName(RequestType type);
// The collectives whose tensors may be submitted as one group (grouped_*_async): those
// that fusion merges, so that a group goes out as one fused response.
inline bool groupable(RequestType type) {
  return type == RequestType::Allreduce || type == RequestType::Allgather ||
         type == RequestType::Reducescatter;
}

// What a rank asks for: every field that says which collective, on what, and how. The
// response cache compares signatures with this struct's own ==, so a field added here
// is compared there too; wire.cc counts the fields so that it cannot miss one either.
struct RequestSignature {
  RequestType type = RequestType::Allreduce;
  std::string name;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  Device device;
  Shape shape;
  std::int32_t root = 0;  // broadcast root
  double prescale = 1.0;
  double postscale = 1.0;
  // Alltoall: rows sent to each rank. AddProcessSet: the member ranks (global).
  // RemoveProcessSet: {id}.
  std::vector<std::int64_t> splits;
  // Grouped allreduce, allgather or reducescatter (groupable()): every member carries
  // the group's name and member count; the group becomes ready, and is fused, as one
  // unit. Empty group = not grouped.
  std::string group;
  std::int32_t group_size = 0;

  bool operator==(const RequestSignature&) const = default;
};

// One submission of a signature: the envelope that differs per rank and per call.
struct Request : RequestSignature {
  std::int32_t rank = 0;  // sender's rank within the process set
  std::uint64_t seq = 0;  // sender's submission counter in this process set (ordering)

  bool operator==(const Request&) const = default;
};

// "allreduce 'loss'": how messages name the request's collective ("join" for a join,
// whose name is Accord's own).
std::string describe(const Request& r);

// "" when the value is one of its enum's, else why not, e.g. "op 17 is not a ReduceOp
// (expected 0..4: sum, average, min, max, product)". Only a cast in the caller can make
// such a value; rejected at submission, it never reaches the other ranks. Defined in
// tensor.cc beside the names.
std::string invalidEnum(DType dtype);
std::string invalidEnum(DeviceType type);
std::string invalidEnum(ReduceOp op);

enum class ResponseType : std::uint8_t {
  Allreduce,
  Allgather,
  Broadcast,
  Alltoall,
  Reducescatter,
  Barrier,
  Join,
  AddProcessSet,
  RemoveProcessSet,
  Error,
};
inline constexpr int kNumResponseTypes = 10;  // one past the last (asserted in message.cc)
const char* responseTypeName(ResponseType type);
// The timeline's name of a response's collective phase, Horovod's: "ALLREDUCE", ...
const char* collectivePhaseName(ResponseType type);

struct Response {
  ResponseType type = ResponseType::Allreduce;
  std::vector<std::string> names;  // one per tensor; fused responses have several
  // Per tensor. Allgather: the output shape (first dim = sum over ranks).
  // Alltoall: rank 0's input shape with the first dimension set to 0 (rows vary).
  std::vector<Shape> shapes;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  Device device;
  std::int32_t root = 0;  // broadcast root; join: the last rank to join
  double prescale = 1.0;
  double postscale = 1.0;
  // Allgather: rows of every rank, tensor-major: rank_rows[t * set_size + r].
  // Alltoall: the split matrix, rank_rows[src * set_size + dst].
  // AddProcessSet: the member ranks. RemoveProcessSet: {id}.
  std::vector<std::int64_t> rank_rows;
  std::string error;  // ResponseType::Error: the message every named handle fails with
  // Error responses: which exception the handles raise.
  enum class ErrorKind : std::uint8_t { Mismatch, Stall, Invalid } error_kind = ErrorKind::Mismatch;

  bool operator==(const Response&) const = default;
  // num_bytes(shapes[i], dtype); both throw InvalidArgument rather than wrap around.
  std::size_t tensorBytes(std::size_t i) const;
  std::size_t totalBytes() const;
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;

  bool operator==(const ResponseList&) const = default;
};

namespace detail {

// True when exactly the values 0..count-1 of the one-byte enum E have a name (name()
// returns nullptr for the others): how each kNum* constant is asserted against the
// switch that names its enum's values.
template <typename E>
constexpr bool namedExactly(const char* (*name)(E), int count) {
  static_assert(sizeof(E) == 1, "the loop below covers one-byte enums");
  for (int v = 0; v <= UINT8_MAX; ++v)
    if ((name(static_cast<E>(v)) != nullptr) != (v < count)) return false;
  return true;
}

// Converts to any member type, so that fieldCount can probe an aggregate's members.
struct AnyField {
  template <typename T>
  operator T() const;
};

// The number of members of aggregate T (a base class counts as one): the most
// initializers T{...} accepts. Code that must list every field by hand (the wire
// format, tests) asserts this count, so a new field cannot be forgotten there.
template <typename T, typename... Fields>
constexpr std::size_t fieldCount() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; })
    return fieldCount<T, Fields..., AnyField>();
  else
    return sizeof...(Fields);
}

}  // namespace detail

}  // namespace accord

// Accord's exception hierarchy. Every failure a caller can see is one of these; the
// message says what happened, which tensor, which ranks and what differed.
#pragma once

#include <stdexcept>
#include <string>

namespace accord {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad argument or configuration value; also a collective whose output this rank could
// not provide (its allocator threw or returned too little), which it still took part in.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Called in the wrong state: before init(), after shutdown().
class NotInitialized : public Error {
 public:
  using Error::Error;
};

// Ranks submitted the same collective with different dtype, shape, op, root, ...
class MismatchError : public Error {
 public:
  using Error::Error;
};

// Communication failed: MPI reported an error, or a rank stopped answering for
// ACCORD_STALL_SHUTDOWN_TIME (died, frozen, hung) inside negotiation or a collective.
// The runtime cannot go on: every pending and later collective fails with the same
// error, naming the rank (see shutdown() for what to do next). A failed NCCL
// communicator is narrower: the device collectives of its process set fail with a
// CommError naming the collective, while host collectives go on.
class CommError : public Error {
 public:
  using Error::Error;
};

// The stall inspector gave up, after ACCORD_STALL_SHUTDOWN_TIME, on a collective that
// some ranks never submitted; the message names them. Only that collective fails: the
// runtime goes on.
class Timeout : public Error {
 public:
  using Error::Error;
};

// The runtime shut down while the collective was pending.
class ShutDown : public Error {
 public:
  using Error::Error;
};

}  // namespace accord

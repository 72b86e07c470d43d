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

// A bad argument or configuration value, detected before any communication.
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

// MPI, NCCL or the CUDA runtime reported a failure.
class CommError : public Error {
 public:
  using Error::Error;
};

// The stall inspector gave up waiting for ranks that never submitted a tensor.
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

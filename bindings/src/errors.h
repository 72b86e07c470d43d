#pragma once

#include <accord/error.h>

#include <pybind11/pybind11.h>

namespace accord::python {

// A submitted collective's InvalidArgument, rethrown by PendingOp::wait(): Python sees
// an InvalidCollectiveError, both a ValueError and a HorovodInternalError (Horovod
// raises every failure of a submitted collective as the latter).
class InvalidCollective : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Maps Accord's C++ exceptions to Python ones (the classes live in accord/errors.py):
// a bad argument or a name already in flight is a ValueError (an InvalidCollective, a
// submitted collective that cannot run, also a HorovodInternalError); a mismatch, a
// communication failure, a stall and a shut-down runtime are HorovodInternalError
// subclasses (a RuntimeError), as Horovod raises them; calls before init() are a
// NotInitializedError (a ValueError, as in Horovod).
void registerErrors(pybind11::module_& m);

// Whether shutdown() ended the runtime: a call after it then says so, rather than only
// that Accord is not initialized.
void noteShutDown(bool shut_down);

}  // namespace accord::python

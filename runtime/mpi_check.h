// ACCORD_MPI_CHECK: turns a failed MPI call into a CommError.
//
// The message carries the call as written, MPI's own error string and file:line, e.g.
//   MPI_Allreduce(...) failed: MPI_ERR_TRUNCATE: message truncated (ops/mpi/allreduce.cc:88)
// This only fires if the communicator returns errors instead of aborting: the runtime
// sets MPI_ERRORS_RETURN on the communicators it duplicates.
#pragma once

#include <accord/error.h>
#include <mpi.h>

#include <string>

namespace accord::detail {

[[noreturn]] inline void throwMpiError(const char* call, int code, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  std::string message = std::string(call) + " failed: ";
  message += length > 0 ? std::string(text, length) : "MPI error code " + std::to_string(code);
  message += " (" + std::string(file) + ":" + std::to_string(line) + ")";
  throw CommError(message);
}

}  // namespace accord::detail

#define ACCORD_MPI_CHECK(call)                                                    \
  do {                                                                            \
    const int accord_mpi_rc_ = (call);                                            \
    if (accord_mpi_rc_ != MPI_SUCCESS)                                            \
      ::accord::detail::throwMpiError(#call, accord_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

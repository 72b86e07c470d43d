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

// MPI's own words for an error code.
inline std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS || length <= 0)
    return "MPI error code " + std::to_string(code);
  return std::string(text, length);
}

[[noreturn]] inline void throwMpiError(const char* call, int code, const char* file, int line) {
  throw CommError(std::string(call) + " failed: " + mpiErrorString(code) + " (" +
                  std::string(file) + ":" + std::to_string(line) + ")");
}

}  // namespace accord::detail

#define ACCORD_MPI_CHECK(call)                                                    \
  do {                                                                            \
    const int accord_mpi_rc_ = (call);                                            \
    if (accord_mpi_rc_ != MPI_SUCCESS)                                            \
      ::accord::detail::throwMpiError(#call, accord_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

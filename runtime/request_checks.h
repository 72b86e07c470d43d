// The checks every public collective's request passes in the caller's thread, before
// anything is queued: a bad tensor or argument fails there, naming the collective, and
// never reaches the other ranks. Pure functions of the request (collectives.cc calls
// them; the negotiation checks what ranks sent against each other in validation.cc).
#pragma once

#include "message.h"

#include <accord/tensor.h>

#include <string>

namespace accord {

// Enums, then the byte size (which must not wrap), then a data pointer where bytes are.
void checkTensor(const Request& r, const TensorView& t);
void checkScale(const Request& r, double factor, const char* which);
// Bool reduces as logic: no Average and no scale factors.
void checkLogical(const Request& r);
// Adasum: allreduce only, floating point, a power-of-two number of ranks.
void checkAdasum(const Request& r, int set_size);

}  // namespace accord

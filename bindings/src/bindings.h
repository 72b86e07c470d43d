// The parts of the accord._core module, each defined in its own file.
#pragma once

#include "buffer.h"

#include <pybind11/pybind11.h>

namespace accord::python {

void defineRuntime(pybind11::module_& m);      // runtime.cc: lifetime, topology, sets
void defineCollectives(pybind11::module_& m);  // collectives.cc

// The buffer-protocol view of an output (NumPy reads it without a copy). bfloat16 has
// no buffer-protocol format and is exposed as uint16, its bit pattern.
pybind11::buffer_info bufferInfo(Buffer& buffer);

}  // namespace accord::python

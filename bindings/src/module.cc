// accord._core: Accord's C++ API for Python. It links the same libaccord as C++ code
// in the process, so there is one runtime per process whichever side started it.
#include "bindings.h"
#include "errors.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "Accord's runtime: lifetime, topology, process sets and collectives";
  accord::python::registerErrors(m);
  accord::python::defineRuntime(m);
  accord::python::defineCollectives(m);
}

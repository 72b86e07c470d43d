#include "errors.h"

#include <accord/error.h>

#include <string>

namespace py = pybind11;

namespace accord::python {

namespace {

// The Python classes, looked up once at import. Deliberately never released: the
// translator may run until the interpreter is gone, and a decref then would crash.
struct ErrorClasses {
  PyObject* internal;
  PyObject* mismatch;
  PyObject* comm;
  PyObject* stall;
  PyObject* shut_down;
  PyObject* not_initialized;
  PyObject* invalid_collective;
};
ErrorClasses g_errors{};
bool g_shut_down = false;  // only touched with the GIL held

PyObject* lookup(const py::module_& errors, const char* name) {
  return py::object(errors.attr(name)).release().ptr();
}

}  // namespace

void noteShutDown(bool shut_down) { g_shut_down = shut_down; }

void registerErrors(py::module_& m) {
  // accord.errors is pure Python and imports nothing from here, so there is no cycle.
  const auto errors = py::module_::import("accord.errors");
  g_errors = {lookup(errors, "HorovodInternalError"),
              lookup(errors, "MismatchError"),
              lookup(errors, "CommError"),
              lookup(errors, "StallError"),
              lookup(errors, "ShutDownError"),
              lookup(errors, "NotInitializedError"),
              lookup(errors, "InvalidCollectiveError")};
  m.attr("errors") = errors;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidCollective& e) {
      PyErr_SetString(g_errors.invalid_collective, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const NotInitialized& e) {
      std::string message = e.what();
      if (g_shut_down) {
        message += " (it was shut down in this process by shutdown())";
      }
      PyErr_SetString(g_errors.not_initialized, message.c_str());
    } catch (const MismatchError& e) {
      PyErr_SetString(g_errors.mismatch, e.what());
    } catch (const CommError& e) {
      PyErr_SetString(g_errors.comm, e.what());
    } catch (const Timeout& e) {
      PyErr_SetString(g_errors.stall, e.what());
    } catch (const ShutDown& e) {
      PyErr_SetString(g_errors.shut_down, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_errors.internal, e.what());
    }
  });
}

}  // namespace accord::python

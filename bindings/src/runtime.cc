// Lifetime, topology, process sets and what this build contains, for accord._core.
// Calls that wait on other ranks (init, shutdown, process-set changes) release the GIL:
// the background thread never takes it, but other Python threads may need it.
#include "bindings.h"
#include "errors.h"
#include "pending.h"

#include <accord/accord.h>
#include <accord/mpi.h>

#include <mpi.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <type_traits>

namespace py = pybind11;

namespace accord::python {

namespace {

int mpiThreadLevel() {
  if (!is_initialized()) {
    throw NotInitialized("mpi_threads_supported: Accord is not initialized; call init() first");
  }
  int level = 0;
  MPI_Query_thread(&level);  // a local query, safe beside Accord's background thread
  return level;
}

// A communicator from its handle as mpi4py gives it (MPI._handleof): a pointer in Open
// MPI, an integer in MPICH.
template <typename Comm = MPI_Comm>
Comm communicator(std::uintptr_t handle) {
  if constexpr (std::is_pointer_v<Comm>)
    return reinterpret_cast<Comm>(handle);
  else
    return static_cast<Comm>(handle);
}

std::string mpiLibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);  // callable before MPI_Init
  return std::string(text, length);
}

// init() and its variants: they wait on the other ranks without the GIL.
template <typename Start>
void started(Start start) {
  {
    py::gil_scoped_release release;
    start();
  }
  noteShutDown(false);
}

}  // namespace

py::buffer_info bufferInfo(Buffer& b) {
  const char* format = nullptr;
  switch (b.dtype()) {
    case DType::UInt8:
      format = "B";
      break;
    case DType::Int8:
      format = "b";
      break;
    case DType::Int32:
      format = "i";
      break;
    case DType::Int64:
      format = "q";
      break;
    case DType::Float16:
      format = "e";
      break;
    case DType::BFloat16:
      format = "H";
      break;
    case DType::Float32:
      format = "f";
      break;
    case DType::Float64:
      format = "d";
      break;
    case DType::Int16:
      format = "h";
      break;
    case DType::UInt16:
      format = "H";
      break;
    case DType::Bool:
      format = "?";
      break;
  }
  const auto itemsize = static_cast<py::ssize_t>(dtype_size(b.dtype()));
  std::vector<py::ssize_t> shape(b.shape().begin(), b.shape().end());
  std::vector<py::ssize_t> strides(shape.size(), itemsize);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return py::buffer_info(b.data(), itemsize, format, static_cast<py::ssize_t>(shape.size()), shape,
                         strides);
}

void defineRuntime(py::module_& m) {
  m.def("init", [] { started([] { init(); }); });
  m.def(
      "init_comm", [](std::uintptr_t handle) { started([&] { init(communicator(handle)); }); },
      py::arg("handle"));
  m.def(
      "init_ranks",
      [](const std::vector<int>& ranks) { started([&] { init(ranks); }); },
      py::arg("world_ranks"));
  m.def(
      "ranks_of", [](std::uintptr_t handle) { return ranks_of(communicator(handle)); },
      py::arg("handle"));
  m.def("mpi_library_version", &mpiLibraryVersion);
  m.def("shutdown", [] {
    const bool was_running = is_initialized();
    {
      py::gil_scoped_release release;
      shutdown();
    }
    if (was_running) noteShutDown(true);
  });
  m.def("is_initialized", &is_initialized);
  m.def("rank", &rank);
  m.def("size", &size);
  m.def("local_rank", &local_rank);
  m.def("local_size", &local_size);
  m.def("cross_rank", &cross_rank);
  m.def("cross_size", &cross_size);
  m.def("mpi_thread_level", &mpiThreadLevel);
  m.attr("MPI_THREAD_MULTIPLE") = static_cast<int>(MPI_THREAD_MULTIPLE);

  // The timeline writes from the background thread; starting and stopping it waits for
  // that thread's current write, so neither holds the GIL meanwhile.
  m.def(
      "start_timeline",
      [](const std::string& path) {
        py::gil_scoped_release release;
        start_timeline(path);
      },
      py::arg("path"));
  m.def("stop_timeline", [] {
    py::gil_scoped_release release;
    stop_timeline();
  });
  m.def("timeline_begin", &timeline_begin, py::arg("track"), py::arg("activity"));
  m.def("timeline_end", &timeline_end, py::arg("track"));

  m.def("add_process_set", &add_process_set, py::arg("ranks"),
        py::call_guard<py::gil_scoped_release>());
  m.def("remove_process_set", &remove_process_set, py::arg("id"),
        py::call_guard<py::gil_scoped_release>());
  m.def("process_set_ranks", &process_set_ranks, py::arg("id"));
  m.def("process_set_included", &process_set_included, py::arg("id"));
  m.def("process_set_rank", &process_set_rank, py::arg("id"));
  m.def("process_set_size", &process_set_size, py::arg("id"));
  m.def("process_set_transport",
        [](ProcessSetId id) { return std::string(transport_name(process_set_transport(id))); });

  // Codes the Python side passes for dtypes and ops: the C++ enums' own values.
  for (int d = 0; d < kNumDTypes; ++d) m.attr(dtype_name(static_cast<DType>(d))) = d;
  py::dict ops;
  for (int o = 0; o < kNumReduceOps; ++o) ops[reduce_op_name(static_cast<ReduceOp>(o))] = o;
  m.attr("reduce_ops") = ops;

  const Version v = version();
  m.attr("__version__") = std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
                          std::to_string(v.patch);

  // What this build contains: the library's own answer, so that a wheel built without
  // the CUDA toolkit says so.
  const BuildFeatures features = build_features();
  py::dict built;
  built["mpi"] = true;
  built["cuda"] = features.cuda;
  built["nccl"] = features.nccl;
  m.attr("built") = built;
}

}  // namespace accord::python

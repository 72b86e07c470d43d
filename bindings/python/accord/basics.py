"""The framework-independent half of Accord's Python API: lifetime, topology, build
queries and reduction ops; process sets (from accord.process_sets) and the table of
pending collectives that ``poll()`` and ``synchronize()`` look handles up in (from
accord._pending).
``accord.torch`` and ``accord.numpy`` re-export what applies to them.
"""

import os
import warnings

from accord import _comm, _core, _driver
from accord._pending import (Pending, pending_call, poll, register,  # noqa: F401
                             register_combined, synchronize, wait_all)
from accord.errors import InvalidCollectiveError
from accord.process_sets import (ProcessSet, _get_process_set_ids_and_ranks,  # noqa: F401
                                 _init_process_sets, add_process_set, as_integer,
                                 forget_registered, global_process_set, remove_process_set)

# ---- reduction ops ---------------------------------------------------------------
# The runtime's own codes.
Sum = _core.reduce_ops["sum"]
Average = _core.reduce_ops["average"]
Min = _core.reduce_ops["min"]
Max = _core.reduce_ops["max"]
Product = _core.reduce_ops["product"]
Adasum = _core.reduce_ops["adasum"]  # floating point, allreduce only, 2^k ranks

_OP_NAMES = {v: k for k, v in _core.reduce_ops.items()}


def resolve_op(op, average, what, adasum=True):
    """The op a call means, from Horovod's op= and its deprecated average=. With
    ``adasum=False`` (the reduce-scatters) Adasum is refused as Horovod refuses it there:
    with an error that is a RuntimeError (and, as Accord's refusals, a ValueError)."""
    if op is not None and average is not None:
        raise ValueError(f"{what}: pass op= or the deprecated average=, not both")
    if average is not None:
        warnings.warn("average= is deprecated: use op=Average or op=Sum",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if op is None:
        return Average
    if op not in _OP_NAMES:
        raise ValueError(f"{what}: op {op!r} is not one of Average, Sum, Min, Max, Product, "
                         "Adasum")
    if op == Adasum and not adasum:
        raise InvalidCollectiveError(f"{what}: Adasum applies to allreduce only; use Sum or "
                                     "Average")
    return op


def op_name(op):
    """Average, Sum, Min, Max, Product or Adasum, as the API spells them."""
    return _OP_NAMES[op].capitalize() if op in _OP_NAMES else repr(op)


# ---- lifetime and topology ---------------------------------------------------------
_homogeneous = None


def init(comm=None, process_sets=None):
    """Starts Accord on every rank (collective). ``comm``: the ranks to run over, every
    rank of MPI_COMM_WORLD by default; a list of world ranks (Accord's rank i is world
    rank comm[i]; only those ranks call init with it) or an mpi4py communicator (its
    members call init with it; the application owns MPI then). ``process_sets``:
    ProcessSet objects to register right away, in the same order on every rank; or
    Horovod's "dynamic", which Accord needs not be told (add_process_set works after
    init() in any case)."""
    global _homogeneous
    if comm is not None and _driver.under_driver():
        raise ValueError("init(comm=...): under accordrun's elastic driver Accord runs over "
                         "every rank the driver started; use process sets for a subset")
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError(f'init(process_sets={process_sets!r}): give a list of ProcessSet '
                             'objects, or "dynamic"')
        process_sets = None
    _comm.start(comm, shutdown)
    _driver.export_launcher_variables(rank(), size(), local_rank(), local_size(), cross_rank(),
                                      cross_size())
    _driver.report_uncaught_errors(rank())
    # Whether every host runs the same number of ranks must read the same on every
    # rank: compare the local sizes once here, through the runtime itself.
    _homogeneous = _all_local_sizes_equal()
    global_process_set._set_id(0)
    global_process_set.mpi_comm = comm if _comm.is_communicator(comm) else None
    if process_sets:
        _init_process_sets(process_sets, "init(process_sets=...)")


def _all_local_sizes_equal():
    import array
    mine = array.array("q", [_core.local_size(), -_core.local_size()])
    addr, _ = mine.buffer_info()
    op = _core.allreduce_async(addr, _core.int64, [2], -1, "accord.init.local_size",
                               Max, 1.0, 1.0, 0)
    op.wait()
    # max(local) == -max(-local) == min(local): every host has the same count.
    return mine[0] == -mine[1]


def shutdown():
    """Ends the runtime on every rank; collectives still pending fail with
    ShutDownError. Safe to call more than once."""
    _core.shutdown()
    # Pending handles stay: they have completed (with ShutDownError), and synchronize()
    # still says so.
    forget_registered()


is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
cross_rank = _core.cross_rank
cross_size = _core.cross_size


def is_homogeneous():
    """True if every host runs the same number of ranks."""
    if not _core.is_initialized():
        _core.rank()  # raises NotInitializedError with the runtime's message
    return _homogeneous


# ---- what this build contains (truthful: Accord has MPI and no GPU path yet) -------
def mpi_built():
    return _core.built["mpi"]


def mpi_enabled():
    """MPI carries every collective in Accord: True once initialized."""
    return _core.built["mpi"] and _core.is_initialized()


def mpi_threads_supported():
    """True if MPI runs with MPI_THREAD_MULTIPLE (the application may call MPI from any
    thread beside Accord's)."""
    return _core.mpi_thread_level() >= _core.MPI_THREAD_MULTIPLE


def nccl_built():
    """As Horovod's: NCCL's version code (21805 for 2.18.5) where this build has NCCL,
    else 0. Scripts compare it with versions (Horovod's tests skip alltoall below 2700)."""
    if not _core.built["nccl"]:
        return 0
    return _nccl_version()


def _nccl_version():
    global _nccl_version_code
    if _nccl_version_code is None:
        import ctypes
        _nccl_version_code = 1  # built with NCCL: true even where the version is unknown
        try:
            # The library Accord loaded (found by its soname), asked for its version.
            version = ctypes.c_int()
            if ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(version)) == 0:
                _nccl_version_code = version.value
        except (OSError, AttributeError):
            pass
    return _nccl_version_code


_nccl_version_code = None


def cuda_built():
    return _core.built["cuda"]


def rocm_built():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def ccl_built():
    return False


def ddl_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts a Chrome trace of every tensor's phases at ``file_path`` (Horovod's call).

    Call it on every rank; rank 0 writes the file. Negotiation cycles are always in the
    trace, so ``mark_cycles`` is accepted for Horovod's signature and changes nothing. A
    path that cannot be created raises ValueError naming it. ACCORD_TIMELINE=<path>
    (or HOROVOD_TIMELINE) records from init() instead."""
    _core.start_timeline(os.fspath(file_path))


def stop_timeline():
    """Ends the timeline; the file is complete, valid JSON, when this returns."""
    _core.stop_timeline()

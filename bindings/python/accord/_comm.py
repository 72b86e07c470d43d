"""Accord over the application's own MPI communicators, as Horovod takes them:
``init(comm=...)`` with a list of ranks of MPI_COMM_WORLD or an mpi4py communicator,
and ``ProcessSet(comm)`` with an mpi4py communicator. mpi4py is needed only for the
communicators themselves; it must run on the MPI library Accord was built against.
"""

import atexit
import numbers
import os
import sys

from accord import _core


def is_communicator(obj):
    """Whether ``obj`` is an mpi4py communicator (without importing mpi4py)."""
    return type(obj).__module__.split(".")[0] == "mpi4py" and hasattr(obj, "Get_size")


def _handle(comm, what):
    from mpi4py import MPI
    ours = _core.mpi_library_version().strip().splitlines()[0]
    theirs = MPI.Get_library_version().strip().splitlines()[0]
    if ours != theirs:
        raise ValueError(
            f"{what}: mpi4py runs on {theirs!r} but Accord on {ours!r}; a communicator cannot "
            "pass between two MPI libraries (build mpi4py against Accord's MPI: "
            "pip install --no-binary mpi4py mpi4py, or Debian's python3-mpi4py)")
    if comm == MPI.COMM_NULL:
        raise ValueError(f"{what}: the communicator is MPI.COMM_NULL; pass one this rank is a "
                         "member of (Split gives COMM_NULL to the ranks it leaves out)")
    return MPI._handleof(comm)


def _world_ranks(comm):
    ranks = list(comm)
    bad = [r for r in ranks if not isinstance(r, numbers.Integral) or isinstance(r, bool)]
    if bad:
        raise ValueError(f"init(comm={ranks!r}): ranks of MPI_COMM_WORLD are integers, "
                         f"got {bad[0]!r}")
    return [int(r) for r in ranks]


def start(comm, shutdown):
    """Starts the runtime over ``comm``: None (every rank), a list of world ranks, or an
    mpi4py communicator. ``shutdown``: what ends it, run at exit where mpi4py owns MPI."""
    if comm is None:
        _core.init()
    elif is_communicator(comm):
        _core.init_comm(_handle(comm, "init(comm=...)"))
    elif hasattr(comm, "__iter__") and not isinstance(comm, (str, bytes)):
        _core.init_ranks(_world_ranks(comm))
    else:
        raise ValueError(f"init(comm={comm!r}): expected a list of ranks of MPI_COMM_WORLD or "
                         "an mpi4py communicator")
    if "mpi4py.MPI" in sys.modules:
        # mpi4py finalizes MPI as the interpreter ends, before the runtime's own shutdown
        # at exit (a C handler) could run: shut down first, from Python's atexit.
        _shut_down_at_exit(shutdown)


_registered_exit = False


def _shut_down_at_exit(shutdown):
    global _registered_exit
    if _registered_exit:
        return
    owner = os.getpid()

    def shut_down():
        if os.getpid() == owner and _core.is_initialized():
            shutdown()

    atexit.register(shut_down)
    _registered_exit = True


def members(comm, what):
    """The Accord ranks of ``comm``'s members, in the communicator's order; [] for
    MPI.COMM_NULL (a rank left out of every communicator, which check_partition names on
    every rank)."""
    from mpi4py import MPI
    if comm == MPI.COMM_NULL:
        return []
    return list(_core.ranks_of(_handle(comm, what)))


def memberships(mine):
    """Every rank's list of members (Accord ranks), gathered from each rank's own (a
    collective over every rank): an allreduce of the n x n membership matrix."""
    import array
    n = _core.size()
    matrix = array.array("i", bytes(4 * n * n))
    me = _core.rank()
    for r in mine:
        matrix[me * n + r] = 1
    addr, _ = matrix.buffer_info()
    op = _core.allreduce_async(addr, _core.int32, [n * n], -1, "accord.process_set.from_comm",
                               _core.reduce_ops["max"], 1.0, 1.0, 0)
    op.wait()
    return [[c for c in range(n) if matrix[r * n + c]] for r in range(n)]


def check_partition(rows, what):
    """Raises ValueError (on every rank alike: every rank has every row) unless the
    communicators are the same on every member: for each rank, its members' lists equal
    its own."""
    left_out = [r for r, row in enumerate(rows) if not row]
    if left_out:
        raise ValueError(f"{what}: rank(s) {left_out} passed "
                         "MPI.COMM_NULL; every rank passes a communicator it is a member of")
    for r, row in enumerate(rows):
        for other in row:
            if rows[other] != row:
                raise ValueError(
                    f"{what}: rank {r}'s communicator has ranks "
                    f"{row}, but rank {other}'s has {rows[other]}; the members of one "
                    "communicator must all pass it")

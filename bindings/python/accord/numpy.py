"""Accord's collectives on NumPy arrays: ``import accord.numpy as acc``.

The same runtime as accord.torch (one per process; either module's ``init()`` starts
it). Arrays cross without a copy when C-contiguous; dtypes uint8, int8, int16, uint16,
int32, int64, float16, float32, float64 and bool (NumPy has no bfloat16). Results that Accord allocates
(allgather, alltoall, reducescatter) are arrays over Accord's memory, again without a
copy. Every function has an ``_async`` form returning a handle for poll() and
synchronize(); ``allreduce_`` and ``broadcast_`` work in place.
"""

import operator

import numpy as np

from accord import _core
from accord.basics import (  # noqa: F401  (re-exported)
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, cross_rank, cross_size,
    global_process_set, init, is_homogeneous, is_initialized, local_rank, local_size, poll,
    rank, register, remove_process_set, resolve_op, shutdown, size, synchronize)
from accord.errors import HorovodInternalError  # noqa: F401

_DTYPES = {np.dtype(np.uint8): _core.uint8, np.dtype(np.int8): _core.int8,
           np.dtype(np.int16): _core.int16, np.dtype(np.uint16): _core.uint16,
           np.dtype(np.int32): _core.int32, np.dtype(np.int64): _core.int64,
           np.dtype(np.float16): _core.float16, np.dtype(np.float32): _core.float32,
           np.dtype(np.float64): _core.float64, np.dtype(np.bool_): _core.bool}


def _code(array, what, name):
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{what} '{name or ''}': expected a numpy.ndarray, got "
                         f"{type(array).__name__}")
    code = _DTYPES.get(array.dtype)
    if code is None:
        raise ValueError(f"{what} '{name or ''}': dtype {array.dtype} is not supported by Accord "
                         f"(supported: {', '.join(str(d) for d in _DTYPES)})")
    return code


def _view(array, what, name):
    """(data pointer, dtype code, shape) of a C-contiguous array."""
    return array.ctypes.data, _code(array, what, name), array.shape


def _in_place(array, what, name):
    _code(array, what, name)  # an ndarray of a dtype Accord takes, before its flags are read
    if not array.flags.writeable:
        raise ValueError(f"{what}: the array is read-only")
    if array.flags.c_contiguous:
        return array, lambda: array
    work = np.ascontiguousarray(array)

    def copy_back():
        array[...] = work
        return array

    return work, copy_back


def _output(op):
    return np.asarray(op.output())


# ---- allreduce -----------------------------------------------------------------------
def allreduce_async_(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    op = resolve_op(op, None, "allreduce")
    work, finish = _in_place(array, "allreduce", name)
    data, code, shape = _view(work, "allreduce", name)
    core = _core.allreduce_async(data, code, shape, -1, name or "", op, float(prescale_factor),
                                 float(postscale_factor), process_set._id("allreduce"))
    return register([core], (array, work), finish)


def allreduce_async(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    return allreduce_async_(np.array(array, order="C"), op, name, prescale_factor,
                            postscale_factor, process_set)


def allreduce(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Returns ``array`` reduced over the ranks (Average unless ``op`` says otherwise)."""
    return synchronize(allreduce_async(array, op, name, prescale_factor, postscale_factor,
                                       process_set))


def allreduce_(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces ``array`` in place and returns it."""
    return synchronize(allreduce_async_(array, op, name, prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async(arrays, op=None, name=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = resolve_op(op, None, "grouped_allreduce")
    outputs = [np.array(a, order="C") for a in arrays]
    args = [(*_view(o, "grouped_allreduce", name), -1) for o in outputs]
    core = _core.grouped_allreduce_async(args, name or "", op, float(prescale_factor),
                                         float(postscale_factor),
                                         process_set._id("grouped_allreduce"))
    return register([core], outputs, lambda: outputs)


def grouped_allreduce(arrays, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Returns the list of ``arrays`` reduced as one unit."""
    return synchronize(grouped_allreduce_async(arrays, op, name, prescale_factor,
                                               postscale_factor, process_set))


# ---- broadcast -----------------------------------------------------------------------
def broadcast_async_(array, root_rank, name=None, process_set=global_process_set):
    work, finish = _in_place(array, "broadcast", name)
    data, code, shape = _view(work, "broadcast", name)
    root = process_set.set_rank_of(root_rank, "broadcast")
    core = _core.broadcast_async(data, code, shape, -1, name or "", root,
                                 process_set._id("broadcast"))
    return register([core], (array, work), finish)


def broadcast_async(array, root_rank, name=None, process_set=global_process_set):
    return broadcast_async_(np.array(array, order="C"), root_rank, name, process_set)


def broadcast(array, root_rank, name=None, process_set=global_process_set):
    """Returns root's ``array`` (``root_rank`` is a global rank)."""
    return synchronize(broadcast_async(array, root_rank, name, process_set))


def broadcast_(array, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(array, root_rank, name, process_set))


# ---- collectives with outputs Accord allocates -----------------------------------------
def allgather_async(array, name=None, process_set=global_process_set):
    work = np.asarray(array, order="C")  # a 0-d array stays 0-d, and is refused
    data, code, shape = _view(work, "allgather", name)
    core = _core.allgather_async(data, code, shape, -1, name or "", process_set._id("allgather"))
    return register([core], work, lambda: _output(core))


def allgather(array, name=None, process_set=global_process_set):
    """Returns every rank's ``array`` concatenated along the first dimension."""
    return synchronize(allgather_async(array, name, process_set))


def _split_list(splits):
    """The rows for each rank as ints; ValueError for splits that are not integers
    (1.5 rows would otherwise be cut to 1 without a word)."""
    if splits is None:
        return []
    if isinstance(splits, np.ndarray) and splits.size and splits.dtype.kind not in "iu":
        raise ValueError(f"alltoall: splits must be integers (a list of ints or an integer "
                         f"array), got an array of {splits.dtype}")
    try:
        return [operator.index(s) for s in splits]
    except TypeError:
        raise ValueError(f"alltoall: splits must be integers (a list of ints or an integer "
                         f"array), got {list(splits)!r}") from None


def alltoall_async(array, splits=None, name=None, process_set=global_process_set):
    splits = _split_list(splits)  # before anything is submitted
    work = np.asarray(array, order="C")  # a 0-d array stays 0-d, and is refused
    data, code, shape = _view(work, "alltoall", name)
    core = _core.alltoall_async(data, code, shape, -1, splits, name or "",
                                process_set._id("alltoall"))
    return register([core], work, lambda: (_output(core),
                                           np.array(core.received_splits(), dtype=np.int32)))


def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[r]`` rows to rank r (equal parts if None); returns the rows
    received and, with ``splits`` given, the rows received from each rank."""
    output, received = synchronize(alltoall_async(array, splits, name, process_set))
    return output if splits is None else (output, received)


def reducescatter_async(array, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    op = resolve_op(op, None, "reducescatter", adasum=False)
    work = np.asarray(array, order="C")  # a 0-d array stays 0-d, and is refused
    data, code, shape = _view(work, "reducescatter", name)
    core = _core.reducescatter_async(data, code, shape, -1, name or "", op,
                                     float(prescale_factor), float(postscale_factor),
                                     process_set._id("reducescatter"))
    return register([core], work, lambda: _output(core))


def reducescatter(array, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's block of rows of ``array`` reduced over the ranks."""
    return synchronize(reducescatter_async(array, name, op, process_set, prescale_factor,
                                           postscale_factor))


def barrier(process_set=global_process_set):
    _core.barrier_async(process_set._id("barrier")).wait()


def join(process_set=global_process_set):
    """As accord.torch.join: returns the rank that joined last."""
    op = _core.join_async(process_set._id("join"))
    op.wait()
    last = op.last_joined_rank()
    return last if process_set is global_process_set else process_set.ranks[last]

"""Every collective of accord.torch in one namespace, as horovod.torch.mpi_ops has
them, plus barrier and join."""

import torch as _torch

from accord import _core
# What Horovod's mpi_ops calls _basics (its HorovodBasics): scripts and Horovod's own
# process-set tests call _basics._get_process_set_ids_and_ranks().
from accord import basics as _basics  # noqa: F401
from accord.basics import (  # noqa: F401  (re-exported)
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
    cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set,
    init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, poll, rank, remove_process_set, rocm_built, shutdown,
    size, start_timeline, stop_timeline, synchronize)
from accord.basics import as_integer as _as_integer
from accord.basics import pending_call as _pending_call
from accord.errors import HorovodInternalError  # noqa: F401
from accord.torch._tensor import cuda_device as _cuda_device
from accord.torch.allreduce import (  # noqa: F401
    allreduce, allreduce_, allreduce_async, allreduce_async_, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_)
from accord.torch.broadcast import (  # noqa: F401
    broadcast, broadcast_, broadcast_async, broadcast_async_)
from accord.torch.gather import (  # noqa: F401
    allgather, allgather_async, alltoall, alltoall_async, grouped_allgather,
    grouped_allgather_async, grouped_reducescatter, grouped_reducescatter_async, reducescatter,
    reducescatter_async)
from accord.torch.sparse import SparseHandle, sparse_allreduce_async  # noqa: F401


def wait_on_stream(handle, stream=None):
    """Makes ``stream`` (a torch.cuda.Stream; by default PyTorch's current one on the
    collective's GPU) wait on the GPU for the collective behind ``handle`` and returns
    without blocking the host beyond the collective's launch: work queued on that
    stream afterwards reads its results, including an in-place result copied back into
    a tensor that was not contiguous (queued there too, once: synchronize() then makes
    its current stream wait for that copy rather than copy again). The handle stays valid:
    ``synchronize(handle)`` still returns the result, raises a failure, and lets go of
    the collective's memory. True where the stream waits; False where nothing is left to
    wait for on the GPU: CPU tensors (waited for here, on the host; the result is
    synchronize's) or a collective that has failed."""
    pending = _pending_call(handle, "wait_on_stream")
    if stream is None:
        device = _cuda_device(pending.keep)
        stream = _torch.cuda.current_stream(device) if device is not None else None
    pointer = stream.cuda_stream if stream is not None else 0
    waits = [op.wait_on_stream(pointer) for op in pending.ops]  # every op, even after a False
    if not all(waits):
        return False
    if pending.after_wait is not None:
        pending.after_wait(stream)
    return True


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    _core.barrier_async(process_set._id("barrier")).wait()


def join(device=-1, process_set=global_process_set):
    """Says this rank has run out of data: until every rank has joined, the others'
    allreduces go on with this rank contributing the op's neutral element (zeros for Sum
    and Average, which Horovod sends for every op). Returns the rank that joined
    last. ``device`` (a GPU ordinal, as in Horovod) is where this rank takes its part in
    the others' CUDA collectives meanwhile; by default the GPU of its latest CUDA
    tensor, or GPU 0 if it has sent none, which on a host of several GPUs may be
    another rank's. -1, or any value where there is no GPU path or no GPU, changes
    nothing; a GPU this process does not see, where it sees some, is a ValueError."""
    device = _as_integer(device, "join: device must be a GPU ordinal (an int, -1 for none)")
    op = _core.join_async(process_set._id("join"), device)
    op.wait()
    last = op.last_joined_rank()  # a rank within the set
    return last if process_set is global_process_set else process_set.ranks[last]

"""The table of pending collectives: each submitted call registers its runtime ops
under an int handle (as Horovod's are), which ``poll()`` and ``synchronize()`` look up.
Re-exported by accord.basics."""

import itertools


class Pending:
    """One submitted call: the runtime ops behind it, what must stay alive until they
    finish, how to turn them into the call's result, and (``after_wait``, or None) the
    part of that which is GPU work a stream can queue instead (accord.torch's
    wait_on_stream)."""

    __slots__ = ("ops", "keep", "finish", "after_wait")

    def __init__(self, ops, keep, finish, after_wait=None):
        self.ops = ops
        self.keep = keep
        self.finish = finish
        self.after_wait = after_wait


_pending = {}
_handles = itertools.count(1)


def register(ops, keep, finish, after_wait=None):
    """Registers a submitted call and returns its handle, an int as in Horovod."""
    handle = next(_handles)
    _pending[handle] = Pending(ops, keep, finish, after_wait)
    return handle


def register_combined(handles, keep, finish):
    """Registers a call made of calls already submitted (a sparse allreduce is two
    allgathers): its handle is done when all of theirs are, and ``finish``, which
    synchronizes them, gives its result."""
    ops = [op for h in handles for op in pending_call(h, "register_combined").ops]
    return register(ops, keep, finish)


def pending_call(handle, what):
    """The Pending record behind ``handle``; ValueError naming ``what`` (the caller) for
    a handle that is unknown or already synchronized."""
    handle = getattr(handle, "handle", handle)  # a SparseHandle holds its int
    pending = _pending.get(handle)
    if pending is None:
        raise ValueError(f"{what}: handle {handle!r} is unknown or already synchronized")
    return pending


def poll(handle):
    """True once the collective behind ``handle`` finished (``synchronize`` then
    returns without blocking)."""
    return all(op.poll() for op in pending_call(handle, "poll").ops)


def synchronize(handle):
    """Waits for the collective behind ``handle`` (releasing the GIL) and returns its
    result; raises its failure on this rank. Interrupted (Ctrl-C), the handle stays
    valid, and so does the memory the collective writes into."""
    handle = getattr(handle, "handle", handle)
    pending = _pending.get(handle)
    if pending is None:
        raise ValueError(f"synchronize: handle {handle!r} is unknown or already synchronized")
    try:
        wait_all(pending.ops)
    except KeyboardInterrupt:
        raise
    except BaseException:
        del _pending[handle]
        raise
    del _pending[handle]
    return pending.finish()


def wait_all(ops):
    """Waits for every op, then raises the first failure: an op's memory must not be
    released while another op of the same call may still write into it."""
    error = None
    for op in ops:
        try:
            op.wait()
        except KeyboardInterrupt:
            raise
        except Exception as e:
            error = error or e
    if error is not None:
        raise error

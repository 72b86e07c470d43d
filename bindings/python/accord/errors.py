"""Exceptions raised by Accord's Python API.

Every failure of a submitted collective (what ``synchronize()`` raises) is a
:class:`HorovodInternalError` (a ``RuntimeError``; Horovod's name, so existing ``except``
clauses keep working): mismatches between ranks, communication failures, stalls,
collectives cut short by shutdown, and collectives the ranks submitted that cannot run
as submitted (:class:`InvalidCollectiveError`, also a ``ValueError``). Bad arguments
refused before anything is submitted, including a name that is already in flight, raise
``ValueError``. Calls before ``init()`` raise :class:`NotInitializedError`, a
``ValueError`` as in Horovod.

This module imports nothing from Accord's extension: the extension imports it.
"""

import re
import sys


class HorovodInternalError(RuntimeError):
    """A collective failed on every rank that took part in it."""


class MismatchError(HorovodInternalError):
    """Ranks submitted the same name with a different dtype, shape, op, root, ..."""


class CommError(HorovodInternalError):
    """Communication failed: a rank died or stopped answering. Exit the process."""


class StallError(HorovodInternalError):
    """Some ranks never submitted a collective the others did
    (after ACCORD_STALL_SHUTDOWN_TIME)."""


class ShutDownError(HorovodInternalError):
    """The runtime shut down while the collective was pending."""


class InvalidCollectiveError(HorovodInternalError, ValueError):
    """The collective cannot run as the ranks submitted it (an allgather or broadcast
    while a rank has joined, a root outside the set, splits that do not add up, ...),
    raised on every rank that submitted it; or, at once on the calling rank, as
    given (a grouped allreduce over tensors on different devices). A
    HorovodInternalError (a RuntimeError) as Horovod reports these, and a ValueError
    as Accord reported them before."""


class ProcessSetRanksError(ValueError):
    """A process set names ranks this job does not have: most often a set of fixed ranks
    registered again after accordrun's elastic driver restarted the job on fewer ranks.
    Raised on every rank alike, before anything is submitted. Under the elastic driver it
    ends the job (a restart on the same hosts would raise it again) instead of counting as
    a failure of the host it was raised on."""

    restart_cannot_help = True  # read by accord.elastic (notice.py) and the driver


class NotInitializedError(ValueError):
    """Called before init(), or after shutdown()."""

    def __init__(self, *args):
        # The runtime's message names its C++ API ("accord::rank: ... call accord::init()
        # first"); a Python caller needs the names it calls.
        if len(args) == 1 and isinstance(args[0], str):
            args = (_python_names(args[0]),)
        super().__init__(*args)


def _python_names(message):
    """``message`` with the C++ API's names replaced by those of the Python modules
    this process imported (which module's init() the caller means)."""
    inits = [call for module, call in (("accord.torch", "hvd.init() (accord.torch.init())"),
                                       ("accord.numpy", "accord.numpy.init()"))
             if module in sys.modules] or ["accord.torch.init()"]
    shut = " (it was shut down in this process by shutdown())"
    if message.endswith(shut) and "call " in message:
        # After shutdown() an init() starts Accord again only where the application
        # initialized MPI itself: the usual hint would send the caller into that error.
        message = re.sub(r"; call (accord::)?init\(\) first", "", message[:-len(shut)])
        message += ("; it was shut down in this process by shutdown(), and init() starts it "
                    "again only where the application initialized MPI itself (mpi4py)")
    message = re.sub(r"call (accord::)?init\(\) first", f"call {' or '.join(inits)} first", message)
    return message[len("accord::"):] if message.startswith("accord::") else message

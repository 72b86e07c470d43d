"""Exceptions raised by Accord's Python API.

Mismatches between ranks, communication failures, stalls and collectives cut short by
shutdown raise :class:`HorovodInternalError` subclasses (a ``RuntimeError``; Horovod's
name, so existing ``except`` clauses keep working). Bad arguments, including a name that
is already in flight, raise ``ValueError``. Calls before ``init()`` raise
:class:`NotInitializedError`, a ``ValueError`` as in Horovod.

This module imports nothing from Accord's extension: the extension imports it.
"""


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


class NotInitializedError(ValueError):
    """Called before init(), or after shutdown()."""

"""The launcher's notices to a running job, and the job's reports to the launcher.

Notices (launcher -> job): accordrun's elastic driver writes a line to mpirun's standard
input, which Open MPI forwards to rank 0's (srun does the same with --input=0). That
needs no transport of Accord's own and reaches rank 0 wherever it runs, with no shared
file system. Rank 0 reads it on a thread of its own; commit() and check_host_updates()
then agree on it through one allreduce, so every rank acts on it in the same step.

Reports (job -> launcher): one JSON line on standard error, prefixed with MARKER, which
mpirun passes on to the launcher with the rest of the job's output (accord/_driver.py).
"""

import os
import threading

from accord._driver import (EXIT_HOSTS_UPDATED, EXIT_RESTART, MARKER, report,  # noqa: F401
                            report_fatal, report_raised)

_updated = threading.Event()
_reader = None
_lock = threading.Lock()


def listening():
    """Whether the launcher sends notices to this process (rank 0 under the driver)."""
    return os.environ.get("ACCORDRUN_ELASTIC_NOTICE") == "stdin"


def start(rank):
    """Starts rank 0's reader of the launcher's notices, once."""
    global _reader
    with _lock:
        if _reader is not None or rank != 0 or not listening():
            return
        # A daemon thread: the process must not wait for a notice that never comes.
        _reader = threading.Thread(target=_read, name="accord-elastic-notice", daemon=True)
        _reader.start()


def _read():
    pending = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip() == b"hosts-updated":
                _updated.set()


def hosts_updated():
    """Whether a host-set change was announced to this process and not yet acted on."""
    return _updated.is_set()


def clear():
    _updated.clear()

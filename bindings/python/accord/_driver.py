"""What a process started by accordrun's elastic driver reads from it and reports to it,
for the parts of Accord that run without torch (accord.basics); accord.elastic
(notice.py, runner.py) builds on it.

Reports (job -> launcher): one JSON line on standard error, prefixed with MARKER, which
mpirun passes on to the launcher with the rest of the job's output
(tools/accord_elastic.py reads them).
"""

import json
import os
import socket
import sys

MARKER = "[accord-elastic] "


def under_driver():
    """Whether accordrun's elastic driver started this process."""
    return bool(os.environ.get("ACCORDRUN_ELASTIC_JOB"))


def restarts():
    """How many times the driver restarted this job (0: its first start, or no driver)."""
    try:
        return int(os.environ.get("ACCORDRUN_ELASTIC_RESET", "0"))
    except ValueError:
        return 0


def report(event, **fields):
    """One line for the launcher (and the person reading the log)."""
    line = MARKER + json.dumps(dict(event=event, **fields), sort_keys=True) + "\n"
    os.write(2, line.encode())


def report_fatal(error, rank, host=None):
    """Reports ``error`` (whose class says ``restart_cannot_help``) as the end of the job:
    the driver stops with it instead of restarting. Once per error."""
    if getattr(error, "_accord_reported", False):
        return
    error._accord_reported = True
    report("fatal", rank=rank, host=host or socket.gethostname(),
           error=f"{type(error).__name__}: {error}")


def report_if_uncaught(error, rank):
    """Under the driver: if ``error`` ends this process uncaught (raised where no
    hvd.elastic.run reports it, e.g. by init(process_sets=...)), report it as fatal.
    A script that catches it and goes on reports nothing."""
    if not under_driver():
        return
    previous = sys.excepthook

    def hook(kind, value, traceback):
        if value is error:
            report_fatal(error, rank)
        sys.excepthook = previous
        previous(kind, value, traceback)

    sys.excepthook = hook

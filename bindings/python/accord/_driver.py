"""What a process started by accordrun's elastic driver reads from it and reports to it,
for the parts of Accord that run without torch (accord.basics); accord.elastic
(notice.py, runner.py) builds on it.

Reports (job -> launcher): one JSON line on standard error, prefixed with MARKER, which
mpirun passes on to the launcher with the rest of the job's output
(tools/accord_elastic.py reads them).
"""

import json
import os
import re
import select
import socket
import sys

MARKER = "[accord-elastic] "

# Exit statuses the launcher reads (tools/accord_elastic.py keeps the same numbers).
EXIT_RESTART = 75        # a communication failure: restart from the last commit
EXIT_HOSTS_UPDATED = 76  # the host set changed: restart on the new one, nothing lost

# The runtime's words for ranks it blames (runtime/peer_watch.cc): "rank 2 did not ...
# and stopped answering", "ranks 2, 3 stopped answering", "rank 3 also stopped answering",
# "(rank 2 did not answer either, ...)".
_BLAMED = re.compile(r"\branks? ([0-9]+(?:, [0-9]+)*)(?:(?: did not [^;.]*?and)?(?: also)? stopped answering"
                     r"| did not answer either)")


def blamed_ranks(message):
    """The ranks a failure's message says stopped answering, in order."""
    ranks = set()
    for m in _BLAMED.finditer(message):
        ranks.update(int(r) for r in m.group(1).split(", "))
    return sorted(ranks)


def under_driver():
    """Whether accordrun's elastic driver started this process."""
    return bool(os.environ.get("ACCORDRUN_ELASTIC_JOB"))


def restarts():
    """How many times the driver restarted this job (0: its first start, or no driver)."""
    try:
        return int(os.environ.get("ACCORDRUN_ELASTIC_RESET", "0"))
    except ValueError:
        return 0


def host_of_rank(rank):
    """This rank's host by the name the driver was given for it (-H, --hostfile or the
    discovery script), or None: the machine's own name where the driver's hosts of this
    run (ACCORDRUN_ELASTIC_HOSTS) hold it, else, for a host given by an address or an
    alias, the one the driver put ``rank`` on (each host's ranks in turn, as mpirun
    places them). tools/accord_elastic.py blames failed ranks by the same rule."""
    ranks = []
    for entry in os.environ.get("ACCORDRUN_ELASTIC_HOSTS", "").split(","):
        host, _, slots = entry.rpartition(":")
        if host and slots.isdigit():
            ranks += [host] * int(slots)
    if socket.gethostname() in ranks:
        return socket.gethostname()
    return ranks[rank] if 0 <= rank < len(ranks) else None


def export_launcher_variables(rank, size, local_rank, local_size, cross_rank, cross_size):
    """Under the driver, once init() knows them: the variables horovodrun's elastic
    launcher sets in each worker's environment, which elastic scripts written for it
    read (HOROVOD_RANK ... HOROVOD_CROSS_SIZE, and HOROVOD_HOSTNAME, the host's name as
    the launcher was given it). The counts are Accord's own; a HOROVOD_HOSTNAME that the
    environment already sets stays (the runtime counts hosts by it, docs/configuration.md).
    The driver restarts the processes at every reset, so HOROVOD_RANK is the rank of the
    current run."""
    if not under_driver():
        return
    os.environ.update({
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(local_rank), "HOROVOD_LOCAL_SIZE": str(local_size),
        "HOROVOD_CROSS_RANK": str(cross_rank), "HOROVOD_CROSS_SIZE": str(cross_size)})
    os.environ.setdefault("HOROVOD_HOSTNAME", host_of_rank(rank) or socket.gethostname())


def report(event, **fields):
    """One line for the launcher (and the person reading the log), in one write of at
    most PIPE_BUF bytes, which a pipe passes on whole, never mixed with another process's
    output; an error too long for that is cut short."""
    while True:
        line = (MARKER + json.dumps(dict(event=event, **fields), sort_keys=True) + "\n").encode()
        error = fields.get("error")
        if len(line) <= select.PIPE_BUF or not isinstance(error, str) or len(error) < 100:
            break
        fields["error"] = error[:len(error) // 2] + " ..."
    os.write(2, line)


def _report_once(event, error, rank, host):
    """Reports ``error`` under ``event``, unless it was reported already."""
    if getattr(error, "_accord_reported", False):
        return
    try:
        error._accord_reported = True
    except AttributeError:
        pass
    report(event, rank=rank, host=host or socket.gethostname(),
           error=f"{type(error).__name__}: {error}")


def report_fatal(error, rank, host=None):
    """Reports ``error`` (whose class says ``restart_cannot_help``) as the end of the job:
    the driver stops with it instead of restarting. Once per error."""
    _report_once("fatal", error, rank, host)


def report_raised(error, rank, host=None):
    """Reports ``error``, raised in user code, to the driver: it blames this rank's host,
    or stops the job where ranks on every host raised it. Once per error."""
    _report_once("raised", error, rank, host)


def report_uncaught_errors(rank):
    """Under the driver, from init() on: an exception that ends this process uncaught is
    reported as raised in user code, as hvd.elastic.run reports its own. A mistake in
    the script's set-up (before or outside hvd.elastic.run, on every rank) then stops
    the job at once with its error, rather than costing each host in turn a reset.

    A communication failure (a rank lost, in a collective before or after
    hvd.elastic.run: a broadcast of the initial weights, a final evaluation) is no
    mistake of the script: it is reported as hvd.elastic.run reports its own, naming
    the ranks lost, and the process leaves with EXIT_RESTART at once (finalizing MPI
    would wait for the lost rank), so that the launcher blames their hosts, not this
    one, and restarts the job."""
    if not under_driver() or getattr(sys.excepthook, "_accord_reports", False):
        return
    previous = sys.excepthook

    def hook(kind, value, traceback):
        if _lost_a_rank(value):
            message = str(value)
            report("failed", rank=rank, host=host_of_rank(rank) or socket.gethostname(),
                   lost_ranks=blamed_ranks(message),
                   error=message.splitlines()[0] if message else "")
            previous(kind, value, traceback)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_RESTART)
        if not isinstance(value, KeyboardInterrupt):
            report_raised(value, rank)
        previous(kind, value, traceback)

    hook._accord_reports = True
    sys.excepthook = hook


def _lost_a_rank(error):
    from accord.errors import CommError
    return isinstance(error, CommError) or bool(blamed_ranks(str(error)))


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

"""hvd.elastic.run: the training function's way in and out of a restart.

In: resume() the state (the newest commit of any host, the reset callbacks after a
reset, a sync of every rank). Out, when the job must change: the process exits with a
status the launcher reads (notice.py), after the last commit is on this host's disk:
- HostsUpdatedInterrupt: the state is committed (if commit() did not just do it), every
  rank waits for every other at a barrier, and all exit EXIT_HOSTS_UPDATED: the launcher
  restarts on the new hosts from exactly this step.
- HorovodInternalError (a rank died or stopped answering): the report names the ranks
  and hosts the runtime blamed, and the process exits EXIT_RESTART at once, without
  finalizing MPI (which would wait for the failed rank).
- an exception whose class says ``restart_cannot_help`` (ProcessSetRanksError): reported
  as fatal, then raised; the launcher stops the job with it rather than restart it.
- any other exception: reported, then raised as usual (the process fails; the launcher
  takes its host as failed).
"""

import functools
import os
import re
import sys
import traceback

from accord._driver import restarts
from accord.elastic import notice
from accord.elastic.state import HostsUpdatedInterrupt
from accord.errors import HorovodInternalError

# The runtime's words for ranks it blames (runtime/peer_watch.cc): "rank 2 did not ...
# and stopped answering", "ranks 2, 3 stopped answering", "rank 3 also stopped answering",
# "(rank 2 did not answer either, ...)".
_BLAMED = re.compile(r"\branks? ([0-9]+(?:, [0-9]+)*)(?:(?: did not [^;.]*?and)?(?: also)? stopped answering"
                     r"| did not answer either)")


def blamed_ranks(message):
    ranks = set()
    for m in _BLAMED.finditer(message):
        ranks.update(int(r) for r in m.group(1).split(", "))
    return sorted(ranks)


def run(func):
    """Horovod's decorator: ``@hvd.elastic.run def train(state, ...)``."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        from accord.basics import rank
        me = rank()
        notice.start(me)
        try:
            state.resume(after_reset=restarts() > 0)
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt as e:
            _leave_for_new_hosts(state, e, me)
        except HorovodInternalError as e:
            _leave_after_failure(state, e, me)
        except BaseException as e:
            if getattr(e, "restart_cannot_help", False):
                notice.report_fatal(e, rank=me, host=_host(state, me))
            elif not isinstance(e, (KeyboardInterrupt, SystemExit)) or \
                    (isinstance(e, SystemExit) and e.code not in (0, None)):
                notice.report_raised(e, rank=me, host=_host(state, me))
            _finish_writing(state)
            raise
        # Over: the job's commits are no longer needed on this host.
        state.store().remove()
        return result

    return wrapper


def _host(state, rank):
    from accord.elastic.store import host_name
    return state.hosts[rank] if state.hosts and rank < len(state.hosts) else host_name()


def _finish_writing(state):
    try:
        state.store().wait()
    except OSError as e:
        print(f"accord elastic: {e}", file=sys.stderr)


def _leave_for_new_hosts(state, interrupt, me):
    from accord.torch.mpi_ops import barrier
    if not interrupt.committed:
        state.save()
    state.store().wait()
    barrier()  # every rank's commit is on its disk before any leaves
    notice.report("hosts-updated", rank=me, host=_host(state, me), commit=state._commits)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(notice.EXIT_HOSTS_UPDATED)


def _leave_after_failure(state, error, me):
    _finish_writing(state)
    message = str(error)
    ranks = blamed_ranks(message)
    hosts = sorted({state.hosts[r] for r in ranks if state.hosts and r < len(state.hosts)})
    notice.report("failed", rank=me, host=_host(state, me), lost_ranks=ranks, lost_hosts=hosts,
                  commit=state._commits, error=message.splitlines()[0] if message else "")
    if os.environ.get("ACCORDRUN_ELASTIC_TRACEBACK"):
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(notice.EXIT_RESTART)

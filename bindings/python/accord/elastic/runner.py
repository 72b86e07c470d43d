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
And when the function returns: its state is committed once more, and the commits stay on
the hosts' disks until the process ends well, so that a rank lost after it (in a final
evaluation or save) restarts the job from its end: the function returns at once and the
script's work after it runs again (the launcher says so). A rank that does not end well
keeps its host's commits; a restarted job none of whose hosts holds the final commit
stops (TrainingLostError) instead of training from the beginning. Each state a script
hands hvd.elastic.run (a training's, then a fine-tuning's) keeps commits of its own, so
that a restart during a later call replays the earlier ones from their ends; calls with
the same state share its commits, the newest kept.
"""

import atexit
import functools
import os
import sys
import traceback

from accord._driver import blamed_ranks, restarts, under_driver
from accord.elastic import notice
from accord.elastic.state import HostsUpdatedInterrupt
from accord.errors import HorovodInternalError

_states = []    # the states hvd.elastic.run met in this process, in order; a restart repeats it
_stores = set()  # their folders, removed at the process's end if it ends well


class TrainingLostError(RuntimeError):
    """Training had finished before a restart, but no host of the restarted job holds
    its final commit: training it again from the beginning would not be what the job
    was restarted for."""
    restart_cannot_help = True


def run(func):
    """Horovod's decorator: ``@hvd.elastic.run def train(state, ...)``."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        from accord.basics import rank
        me = rank()
        notice.start(me)
        number = next((i for i, s in enumerate(_states) if s is state), None)
        if number is None:  # each state its own commits (store.py)
            number = len(_states)
            _states.append(state)
            state.use_store(number)
            _remove_at_exit(state.store())
        try:
            state.resume(after_reset=restarts() > 0)
            _check_training_kept(state, number)
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
        _commit_final(state, me, number)
        return result

    return wrapper


def _check_training_kept(state, number):
    """After a restart of a job in which a call with this state (the process's state
    ``number``) had returned, the launcher says which commit was its last (per state:
    "0:13,1:20"): that commit must have been found."""
    finals = {}
    for item in os.environ.get("ACCORDRUN_ELASTIC_TRAINED", "").split(","):
        which, _, commit = item.partition(":")
        if which.isdigit() and commit.isdigit():
            finals[int(which)] = int(commit)
    final = finals.get(number, 0)
    if final and state._commits < final:
        found = f"commit {state._commits}" if state._commits else "no commit"
        raise TrainingLostError(
            f"training had finished before this restart (its final commit is number {final}), "
            f"but the hosts of this run hold {found}: the others were lost with their hosts or "
            "removed by ranks that had ended well. Not training again from the beginning; "
            "the script's work after hvd.elastic.run did not complete")


def _commit_final(state, me, number):
    """The function returned on every rank: its state is committed (a collective), so
    that a restart from here on resumes at the end of training. Rank 0 tells the
    launcher; the commits are removed when the process ends well. Without the
    launcher nothing restarts the job, and nothing is committed."""
    if not under_driver():
        return
    try:
        state.save()
        state.store().wait()
    except HorovodInternalError as e:
        _leave_after_failure(state, e, me)
    if me == 0:
        notice.report("trained", rank=me, host=_host(state, me), commit=state._commits,
                      state=number)


def _remove_at_exit(store):
    """Registers the removal of ``store``'s commits when the process ends well; a later
    state's folder (inside the first's) goes first, atexit running them in reverse."""
    if store.directory is not None and store.directory not in _stores:
        _stores.add(store.directory)
        atexit.register(_remove_if_ended_well, store)


def _remove_if_ended_well(store):
    """At the end of the process: its host's commits are removed, unless an exception
    ended it (the interpreter then set sys.last_value), which may be a failure the
    launcher restarts the job after. The exits EXIT_RESTART and EXIT_HOSTS_UPDATED skip
    this altogether."""
    if getattr(sys, "last_value", None) is not None:
        return
    try:
        store.remove()
    except OSError as e:
        print(f"accord elastic: removing the commits in {store.directory}: {e}", file=sys.stderr)


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

"""Process sets (Horovod's ProcessSet, add_process_set, remove_process_set): sets of
ranks that run collectives together, registered on every rank in the same order, and the
table of what the runtime has registered. Re-exported by accord.basics."""

import operator

from accord import _comm, _core, _driver
from accord.errors import ProcessSetRanksError


def as_integer(value, what):
    """``value`` as an int where it is an integer: a Python or NumPy one, or anything else
    ``operator.index`` takes, but not a bool or a float. Else ValueError: ``what`` (what
    it must be), then the value."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise ValueError(f"{what}, got {value!r} ({type(value).__name__})")


class ProcessSet:
    """A set of ranks that run collectives together (Horovod's ProcessSet).

    Create it with a list of global ranks, then register it on every rank with
    ``add_process_set`` or ``init(process_sets=[...])``. Roots passed to broadcast
    are global ranks, as in Horovod.
    """

    def __init__(self, ranks_or_comm):  # Horovod's parameter name
        ranks = ranks_or_comm
        self.mpi_comm = None
        if _comm.is_communicator(ranks):
            # Its members are known once registered (add_process_set).
            self.mpi_comm = ranks
            self.ranks = None
            self.process_set_id = None
            self._set_ranks = None
            return
        if not hasattr(ranks, "__iter__"):
            raise ValueError(f"ProcessSet takes a list of ranks or an mpi4py communicator, "
                             f"got {ranks!r}")
        ranks = sorted(as_integer(r, "ProcessSet: ranks must be integers (global ranks)")
                       for r in ranks)
        self.ranks = ranks
        self.process_set_id = None
        self._set_ranks = None  # global rank -> rank in the set, once registered

    def _set_id(self, process_set_id):
        self.process_set_id = process_set_id
        self._set_ranks = None
        if process_set_id is not None:
            self.ranks = list(_core.process_set_ranks(process_set_id))
            self._set_ranks = {r: i for i, r in enumerate(self.ranks)}

    def _id(self, what):
        if self.process_set_id is None:
            raise ValueError(f"{what}: {self} is not registered; call add_process_set() "
                             "on every rank first")
        return self.process_set_id

    def size(self):
        """Number of ranks in the set, or None if not registered."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self):
        """This rank's rank within the set, or None if not registered or not a member."""
        if self._set_ranks is None:
            return None
        return self._set_ranks.get(_core.rank())

    def included(self):
        """Whether this rank belongs to the set (None if not registered)."""
        if self.process_set_id is None:
            return None
        return _core.rank() in self._set_ranks

    def set_rank_of(self, global_rank, what):
        """The rank within this set of ``global_rank``, for roots given as global ranks."""
        global_rank = _root(global_rank, what)
        try:
            return self._set_ranks[global_rank]
        except (KeyError, TypeError):
            raise ValueError(f"{what}: root rank {global_rank} is not in {self}") from None

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id \
            and self.ranks == other.ranks

    def __hash__(self):
        return hash((self.process_set_id, tuple(self.ranks or ())))

    def __repr__(self):
        comm = "" if self.mpi_comm is None else f", mpi_comm={self.mpi_comm!r}"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}{comm})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        super().__init__([])
        self.process_set_id = 0

    def _set_id(self, process_set_id):
        super()._set_id(process_set_id)
        self.process_set_id = 0  # always id 0, even before init

    def _id(self, what):
        return 0

    def size(self):
        return _core.size()

    def rank(self):
        return _core.rank()

    def included(self):
        return True

    def set_rank_of(self, global_rank, what):
        return _root(global_rank, what)  # the runtime checks that it is a rank of the job


def _root(root_rank, what):
    return as_integer(root_rank, f"{what}: root_rank must be an integer, the global rank of "
                                 "the root")


global_process_set = _GlobalProcessSet()
# The ProcessSet objects holding an id (several may hold one: init() again with the same
# sets gives the new objects the ids the sets have), and what the runtime has
# registered: {ranks: id}, the same on every rank.
_registered_sets = []
_ids_by_ranks = {}


def add_process_set(process_set):
    """Registers a process set on every rank (collective over all ranks, in the same
    order everywhere) and returns it; a list of ranks makes a new ProcessSet. The ranks
    of a set already registered (the global set's included) are refused: ValueError;
    except under accordrun's elastic driver, where a set of every rank of the job is
    the global set (id 0). Ranks the job does not have: ProcessSetRanksError. A set made
    from an mpi4py communicator stands on each rank for that rank's communicator: every
    distinct one is registered (the halves of a Split, say), in the order of their
    lowest ranks."""
    return _add_process_sets([process_set], "add_process_set")[0]


def _add_process_sets(process_sets, what):
    """Registers sets on every rank, all or none: every set's ranks are known (a
    communicator's from every rank, through an exchange) and checked against those
    registered and each other before the first is registered, so that a refusal is
    raised on every rank alike and leaves nothing behind."""
    sets = _as_process_sets(process_sets)
    for ps in sets:
        if ps.process_set_id is not None:
            raise ValueError(f"{what}: {ps} is already registered")
    plan, _ = _plan(sets, what)
    taken = dict(_ids_by_ranks)
    taken[tuple(range(_core.size()))] = 0
    for ps, ranks in plan:
        if _every_rank_under_driver(ranks):
            continue
        if tuple(ranks) in taken:
            # As Horovod: two ids for one set of ranks would be two names for it.
            known = taken[tuple(ranks)]
            raise ValueError(f"{what}: ranks {ranks} are "
                             + (f"already process set {known}; use that one (or remove it "
                                "first)" if known is not None else "given twice"))
        taken[tuple(ranks)] = None
    for ps, ranks in plan:
        _adopt(ps, 0 if _every_rank_under_driver(ranks) else _register(ranks))
    return sets


def _init_process_sets(process_sets, what):
    """init(process_sets=[...]) as Horovod's: every set any rank names (a communicator's
    on each of its members, a list on every rank) is registered once, in order, on
    every rank, and a set already registered (by an earlier init) is that set again.
    Then this rank's own list takes the ids: a set it names twice, or the global set's
    ranks, stays unregistered and raises ValueError on this rank only, after the others
    were registered, so that init() called again with each set once goes on, as
    Horovod's own tests do. Ranks the job does not have, or a communicator some rank
    left out of, are refused first, on every rank alike, with nothing registered."""
    sets = _as_process_sets(process_sets)
    plan, own = _plan(sets, what)
    every_rank = list(range(_core.size()))
    for ps, ranks in plan:
        if ranks != every_rank and tuple(ranks) not in _ids_by_ranks:
            pid = _register(ranks)
            # Another rank's communicator keeps its stand-in; this rank's sets take their
            # ids below.
            if all(ps is not given for given in sets):
                _adopt(ps, pid)
    taken = {0: "the global set"}
    twice = []
    for ps, ranks in zip(sets, own):
        pid = 0 if ranks == every_rank else _ids_by_ranks[tuple(ranks)]
        if pid == 0 and _driver.under_driver():
            _adopt(ps, 0)
        elif pid in taken:
            if pid == 0:
                twice.append(f"ranks {ranks} are already process set 0, the global set (use "
                             "global_process_set)")
            else:
                twice.append(f"ranks {ranks} are given twice in this rank's list "
                             f"({_given(taken[pid])} and {_given(ps)})")
            if ps is not taken.get(pid):
                ps._set_id(None)
                _registered_sets[:] = [e for e in _registered_sets if e is not ps]
        else:
            _adopt(ps, pid)
            taken[pid] = ps
    if twice:
        raise ValueError(f"{what}: {'; '.join(twice)}; the other sets are registered on "
                         "every rank: call init() again with each set once")
    return sets


def _given(ps):
    return "a communicator" if ps.mpi_comm is not None else f"the list {ps.ranks}"


def _as_process_sets(process_sets):
    return [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]


def _plan(sets, what):
    """([(ProcessSet, ranks)] to register, in order, the same on every rank; [this
    rank's ranks of each set]). Raises on every rank alike for a communicator some rank
    was left out of or ranks this job does not have."""
    if not _core.is_initialized():
        _core.add_process_set([0])  # raises the runtime's NotInitializedError
    plan, own = [], []
    for ps in sets:
        if ps.mpi_comm is None:
            plan.append((ps, ps.ranks))
            own.append(ps.ranks)
        else:
            mine, members = _communicator_sets(ps, what)
            plan += members
            own.append(mine)
    for _, ranks in plan:
        _check_ranks_exist(ranks, what)
    return plan, own


def _every_rank_under_driver(ranks):
    # Under the elastic driver the job's size is not the script's to choose: a set of
    # ranks 0, 1 registered again on a job of 2 ranks is every rank, and becomes the
    # global set rather than an error.
    return _driver.under_driver() and ranks == list(range(_core.size()))


def _register(ranks):
    pid = _core.add_process_set(ranks)
    _ids_by_ranks[tuple(ranks)] = pid
    return pid


def _adopt(ps, pid):
    ps._set_id(pid)
    if all(e is not ps for e in _registered_sets):
        _registered_sets.append(ps)


def _communicator_sets(process_set, what):
    """(this rank's ranks, [(ProcessSet, ranks)]) for a set made from a communicator:
    one per distinct communicator over all ranks, this rank's own being
    ``process_set``."""
    what = f"{what}: ProcessSet(comm)"
    mine = _comm.members(process_set.mpi_comm, what)
    rows = _comm.memberships(mine)
    _comm.check_partition(rows, what)
    distinct = []
    for row in rows:
        if sorted(row) not in distinct:
            distinct.append(sorted(row))
    own = sorted(mine)
    return own, [(process_set if ranks == own else ProcessSet(ranks), ranks)
                 for ranks in distinct]


def _check_ranks_exist(ranks, what):
    """Raises ProcessSetRanksError, on every rank alike, if a set names ranks beyond
    this job's (a script's fixed sets after an elastic restart on fewer ranks)."""
    n = _core.size()
    gone = [r for r in ranks if r >= n]
    if not gone:
        return
    which = ", ".join(map(str, gone))
    message = (f"{what}: process set {ranks} names rank"
               f"{'s' if len(gone) > 1 else ''} {which}, which this job does not have: it runs "
               f"on {n} rank{'s' if n > 1 else ''} (0..{n - 1})")
    restarts = _driver.restarts()
    if restarts:
        message += (f", since accordrun's elastic driver restarted it (reset {restarts}); build "
                    "process sets from hvd.size() (every run registers its sets anew), or keep "
                    "--min-np at the size the sets need")
    error = ProcessSetRanksError(message)
    _driver.report_if_uncaught(error, rank=_core.rank())
    raise error


def remove_process_set(process_set):
    """Removes a registered process set on every rank (collective). Returns False for
    the global set or a set that is not registered, as Horovod does. Every ProcessSet
    object holding its id is unregistered."""
    pid = process_set.process_set_id
    if pid in (None, 0):
        return False
    _core.remove_process_set(pid)
    for ranks in [r for r, i in _ids_by_ranks.items() if i == pid]:
        del _ids_by_ranks[ranks]
    holders = [e for e in _registered_sets if e.process_set_id == pid]
    # By identity: ProcessSet's == compares ids and ranks, which another object may share.
    _registered_sets[:] = [e for e in _registered_sets if e.process_set_id != pid]
    for ps in [*holders, process_set]:
        ps._set_id(None)
    return True


def _get_process_set_ids_and_ranks():
    """{id: ranks} of every registered set, the global set (0) included: what Horovod's
    HorovodBasics answers under this name (its process-set tests read it)."""
    table = {0: list(range(_core.size()))}
    table.update({pid: list(ranks) for ranks, pid in sorted(_ids_by_ranks.items(),
                                                           key=lambda item: item[1])})
    return table


def forget_registered():
    """After shutdown: no set holds an id any more (the global set's is set again by
    the next init())."""
    for ps in _registered_sets:
        ps._set_id(None)
    _registered_sets.clear()
    _ids_by_ranks.clear()

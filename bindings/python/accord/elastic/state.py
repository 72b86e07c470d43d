"""Horovod's elastic State, on Accord's restart-based elastic training.

A State is a set of handlers, one per thing it keeps (a model, an optimizer, a sampler,
plain attributes). Each handler copies its thing (snapshot), puts a copy back (load),
and makes every rank hold root's (sync). commit() takes a snapshot: kept in this
process's memory for restore(), and written to this host's local disk (store.py) so
that the processes a restart starts can resume from it. After a restart, resume() finds
the newest commit on any host, loads it on the lowest rank that holds it, and syncs
every rank from there, newcomers included.
"""

import copy

import torch

from accord.basics import rank, size
from accord.elastic import notice
from accord.elastic.store import CommitStore, host_name, store_directory


class HostsUpdatedInterrupt(RuntimeError):
    """The launcher announced a change of hosts: every rank raises it in the same
    commit() or check_host_updates(). ``skip_sync`` is Horovod's attribute (a restart
    always syncs)."""

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the job changed; the job restarts on the new set")
        self.skip_sync = skip_sync
        self.committed = False


class ObjectHandler:
    """Plain attributes of the state (epoch=0, batch=0, ...), pickled."""

    def __init__(self, state, names):
        self.state, self.names = state, list(names)

    def snapshot(self):
        return {n: copy.deepcopy(getattr(self.state, n)) for n in self.names}

    def load(self, snapshot):
        for n in self.names:
            setattr(self.state, n, copy.deepcopy(snapshot[n]))

    def sync(self, root):
        from accord.torch.functions import broadcast_object
        values = broadcast_object({n: getattr(self.state, n) for n in self.names}, root,
                                  name="accord.elastic.objects")
        for n in self.names:
            setattr(self.state, n, values[n])


class State:
    """Horovod's hvd.elastic.State: commit, restore, sync, check_host_updates,
    register_reset_callbacks, on_hosts_updated, save, reset. Subclasses add handlers
    (ObjectState, TorchState)."""

    def __init__(self, bcast_object=None, get_rank=None):
        # bcast_object and get_rank are Horovod's (a subclass passes them on); Accord
        # brings its own.
        object.__setattr__(self, "_handlers", {})
        self._reset_callbacks = []
        self._saved = None          # what restore() puts back: the last commit or sync
        self._saved_number = 0      # the commit _saved is (0: a sync's, not a commit)
        self._commits = 0           # the last commit's number; the same on every rank
        self._root = 0              # the rank sync() broadcasts from
        self._store = None
        self.hosts = None           # every rank's host, in rank order (after sync)
        self._announced = 0         # the newest on_hosts_updated() timestamp
        self._acted_on = 0          # the newest one check_host_updates() acted on

    # ---- Horovod's API ----------------------------------------------------------------
    def register_reset_callbacks(self, callbacks):
        """Functions called after every reset (a restart with a new set of ranks), before
        the state is synced: rescale the learning rate to hvd.size() there."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._acted_on = self._announced
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (in memory and on this host's disk), then checks for a change
        of hosts: a step after it is redone after a failure, none before it."""
        self.save()
        try:
            self.check_host_updates()
        except HostsUpdatedInterrupt as e:
            e.committed = True
            raise

    def on_hosts_updated(self, timestamp, update_res=None):
        """Horovod's listener call: a change of hosts was announced at ``timestamp`` (any
        number that grows; ``update_res`` is Horovod's kind of change, not needed here:
        a restart always syncs). The next commit() or check_host_updates() raises
        HostsUpdatedInterrupt on every rank, as after the launcher's notice; an
        announcement no newer than one already acted on is ignored."""
        try:
            timestamp = float(timestamp)
        except (TypeError, ValueError):
            raise TypeError(f"on_hosts_updated: timestamp must be a number, got "
                            f"{timestamp!r}") from None
        self._announced = max(self._announced, timestamp)

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank alike when the launcher announced a
        change of hosts, or on_hosts_updated() did on any rank (agreed through one
        allreduce)."""
        from accord.torch.mpi_ops import Max, allreduce_
        # The newest announcement of any rank, which every rank then counts as acted on.
        seen = torch.tensor([1.0 if notice.hosts_updated() else 0.0, self._announced],
                            dtype=torch.float64)
        allreduce_(seen, op=Max, name="accord.elastic.hosts_updated")
        noticed, newest = float(seen[0]), float(seen[1])
        if noticed or newest > self._acted_on:
            notice.clear()
            self._acted_on = newest
            raise HostsUpdatedInterrupt(False)

    def save(self):
        """Takes a snapshot of every handler (collective: every rank saves together)."""
        snapshot = self._snapshot()
        self._saved = snapshot
        self._commits += 1
        self._saved_number = self._commits
        self.store().write(self._commits, {"number": self._commits, "state": snapshot})

    def restore(self):
        """Puts back what this process last committed or synced, whichever came later."""
        if self._saved is None:
            raise ValueError("restore(): nothing was committed or synced yet")
        for name, h in self._handlers.items():
            getattr(h, "restore", h.load)(self._saved[name])

    def sync(self):
        """Makes every rank's live state the root's (rank 0, or after a restart the rank
        that held the newest commit); restore() puts that state back until the next
        commit (in memory: a sync is no commit)."""
        for h in self._handlers.values():
            h.sync(self._root)
        self._saved = self._snapshot()
        self._saved_number = 0

    def _snapshot(self):
        return {name: h.snapshot() for name, h in self._handlers.items()}

    def reset(self):
        """Called on a reset, before the callbacks; subclasses re-read hvd.size()."""
        for h in self._handlers.values():
            if hasattr(h, "reset"):
                h.reset()

    # ---- Accord's restart --------------------------------------------------------------
    def store(self):
        if self._store is None:
            self.use_store(0)
        return self._store

    def use_store(self, number):
        """Commits go to (and resume from) the folder of the process's state number
        ``number`` (from 0, in the order hvd.elastic.run met them), after the previous
        folder's last write."""
        from accord.basics import local_rank
        if self._store is not None:
            self._store.wait()
        self._store = CommitStore(store_directory(number), writer=local_rank() == 0)

    def resume(self, after_reset):
        """Collective: loads the newest commit of any host (on the lowest rank that has
        it), calls the reset callbacks after a reset, and syncs every rank."""
        from accord.torch.functions import allgather_object
        from accord.torch.mpi_ops import Max, Min, allreduce_
        self.hosts = allgather_object(host_name(), name="accord.elastic.hosts")
        on_disk = self.store().newest()
        have = max(on_disk, self._saved_number)
        newest = torch.tensor([have], dtype=torch.int64)
        allreduce_(newest, op=Max, name="accord.elastic.newest")
        newest = int(newest[0])
        holder = torch.tensor([rank() if newest and have == newest else size()], dtype=torch.int64)
        allreduce_(holder, op=Min, name="accord.elastic.holder")
        self._root = int(holder[0]) if newest else 0
        if newest and rank() == self._root:
            # Loaded here, then handed to every rank by sync().
            state = self._saved if self._saved_number == newest else \
                self.store().load(newest)["state"]
            for name, h in self._handlers.items():
                h.load(state[name])
        if after_reset:
            self.on_reset()
        self.sync()
        self._root = 0
        # Every rank now holds the commit: in memory (the sync's snapshot) for restore(),
        # and on each host's disk, so that it outlives the hosts it came from.
        self._commits = self._saved_number = newest
        if newest and on_disk < newest:
            self.store().write(newest, {"number": newest, "state": self._saved})

    def _add_handler(self, name, handler):
        self._handlers[name] = handler


class ObjectState(State):
    """Horovod's ObjectState: the keyword arguments become attributes of the state,
    committed, restored and synced (pickled)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        # bcast_object and get_rank are Horovod's; Accord brings its own.
        super().__init__()
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._add_handler("objects", ObjectHandler(self, kwargs))

"""Where committed state lives between processes: each host's local disk.

A restart starts new processes, so a commit must outlive the ones that made it, and
without a shared file system it must outlive the loss of any host. Every rank holds the
same committed state (data parallelism), so one copy per host is enough: the host's
first local rank writes it to <store>/<job>/<hostname>/commit-<n>.pt, and after a
restart the lowest rank whose host holds the newest number hands it to all (sync()).

The write runs on a thread of its own so that commit() costs one copy of the state in
memory, not a disk write; the next commit, and every way out of the process, waits for
it, so a commit that returned is on disk before the process leaves.
"""

import os
import re
import socket
import tempfile
import threading

import torch

_NAME = re.compile(r"commit-([0-9]+)\.pt")


def host_name():
    """This host's name as the launcher and the other ranks see it (on simulated hosts,
    the name of the namespace's own UTS)."""
    return socket.gethostname()


def store_directory(state=0):
    """<ACCORDRUN_ELASTIC_STORE or /tmp/accord-elastic>/<job>/<host>, or None where no job id
    was given (a script run without the elastic launcher commits in memory only). The
    commits of the second and later states the process hands hvd.elastic.run (a
    fine-tuning's after a training's) go in a folder of their own inside it, state-<n>
    (n from 2)."""
    job = os.environ.get("ACCORDRUN_ELASTIC_JOB")
    if not job:
        return None
    base = os.environ.get("ACCORDRUN_ELASTIC_STORE") or "/tmp/accord-elastic"
    folder = os.path.join(base, job, host_name())
    return os.path.join(folder, f"state-{state + 1}") if state else folder


class CommitStore:
    """One host's committed snapshots on its local disk; only the writer rank writes."""

    def __init__(self, directory, writer):
        self.directory = directory
        self.writer = writer
        self._thread = None
        self._error = None

    def newest(self):
        """The newest commit number on this host's disk, 0 if none."""
        if self.directory is None or not os.path.isdir(self.directory):
            return 0
        numbers = [int(m.group(1)) for m in map(_NAME.fullmatch, os.listdir(self.directory)) if m]
        return max(numbers, default=0)

    def load(self, number):
        path = os.path.join(self.directory, f"commit-{number}.pt")
        with open(path, "rb") as f:
            # The job's own file, written by write() below: its pickled attributes (numpy
            # scalars, the script's own classes) are trusted, and PyTorch 2.6 on would
            # otherwise refuse every global but a tensor's.
            return torch.load(f, weights_only=False)

    def write(self, number, snapshot):
        """Starts writing ``snapshot`` as commit ``number`` (after the previous write)."""
        self.wait()
        if self.directory is None or not self.writer:
            return
        self._thread = threading.Thread(target=self._write, args=(number, snapshot),
                                        name="accord-elastic-commit", daemon=True)
        self._thread.start()

    def wait(self):
        """Returns once the last write is on disk; raises what it failed with."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def remove(self):
        """Deletes this host's copies (the job is over)."""
        self.wait()
        if self.directory is None or not self.writer or not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if _NAME.fullmatch(name) or name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass  # another writer of this folder removed it first
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def _write(self, number, snapshot):
        # Written whole under a temporary name of its own and renamed: a process killed
        # mid-write leaves the previous commit, never half of one. The name is this
        # writer's alone, since two writers may share the folder: ranks that count as
        # two hosts (ACCORD_HOSTNAME, or hosts given as aliases of one machine) keep the
        # same commit on the same disk.
        try:
            os.makedirs(self.directory, exist_ok=True)
            final = os.path.join(self.directory, f"commit-{number}.pt")
            fd, tmp = tempfile.mkstemp(prefix=f"commit-{number}.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                torch.save(snapshot, f)
            os.replace(tmp, final)
            for name in os.listdir(self.directory):
                m = _NAME.fullmatch(name)
                if m and int(m.group(1)) < number:
                    try:
                        os.unlink(os.path.join(self.directory, name))
                    except FileNotFoundError:
                        pass  # the other writer removed it first
        except BaseException as e:  # handed to the training thread by wait()
            self._error = OSError(f"accord elastic: writing commit {number} to "
                                  f"{self.directory} failed: {e}")

"""What the elastic scenario tests share: a job run in the background with its output
kept line by line with the time each arrived, signals to a simulated host's ranks, and
checks recorded rather than stopping at the first failure."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

RUNS = []


class Run:
    """accordrun in the background; its lines kept with the time each arrived."""

    def __init__(self, cmd, env):
        RUNS.append(self)
        self.lines = []
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.threads = [threading.Thread(target=self._read, args=(s,), daemon=True)
                        for s in (self.proc.stdout, self.proc.stderr)]
        for t in self.threads:
            t.start()

    def _read(self, stream):
        for line in stream:
            sys.stdout.write(line)
            sys.stdout.flush()
            with self.cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.cond.notify_all()

    def wait_for(self, pattern, timeout):
        """The first line matching ``pattern`` (its time and match), waiting up to timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, line in self.lines:
                    m = re.search(pattern, line)
                    if m:
                        return t, m
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return None, None
                self.cond.wait(min(left, 0.5))

    def finish(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        for t in self.threads:
            t.join(timeout=10)
        return rc

    def matching(self, pattern):
        return [(t, m) for t, line in self.lines for m in [re.search(pattern, line)] if m]


def signal_host(out, reset, host, sig):
    """Sends ``sig`` to every rank of ``host`` in run ``reset``; returns their ranks."""
    ranks = []
    for name in os.listdir(os.path.join(out, "pids", str(reset))):
        h, rank, pid = name.rsplit(".", 2)
        if h == host:
            os.kill(int(pid), sig)
            ranks.append(int(rank))
    return sorted(ranks)


class Checks:
    """Records every check of a scenario (a failed one does not stop the job early, so
    that one run reports all that went wrong); assert_none_failed() is the verdict."""

    def __init__(self):
        self.failed = []

    def __call__(self, cond, what):
        print(("ok: " if cond else "FAILED: ") + what, flush=True)
        if not cond:
            self.failed.append(what)


def assert_none_failed(failed):
    assert not failed, f"{len(failed)} check(s) failed: " + "; ".join(failed)

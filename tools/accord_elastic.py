"""accordrun's elastic driver: keeps a job training on the hosts that are healthy.

The driver never talks to the ranks over a transport of its own: it starts the job
with the cluster's launcher (mpirun) on the current hosts, and when the job ends for a
reason other than success it starts it again, on the hosts still usable, from the last
commit (which the ranks keep on their hosts' disks; bindings/python/accord/elastic).

  hosts        -H/--hostfile (fixed), or --host-discovery-script (polled), less the
               hosts blacklisted after a failure (for the cool-down, if one is given)
  start        mpirun -np <slots, at most --max-np> -H <hosts> ..., once at least
               --min-np slots are usable (waiting up to --elastic-timeout)
  watch        the job's output passes through; the ranks' reports (one JSON line
               each, "[accord-elastic] {...}") and mpirun's own notices say who failed
  host change  discovery offers or withdraws hosts: one line on mpirun's standard
               input (Open MPI hands it to rank 0), and every rank leaves together at its
               next commit with EXIT_HOSTS_UPDATED; no step is lost
  failure      the failed hosts are blacklisted, the reset is logged once with its
               cause, and the job starts again, at most --reset-limit times
  fatal        a rank reports an error that no restart mends (a process set naming
               ranks the job no longer has), or ranks on every host raise the same error
               in user code: the driver stops with it and the script's status, blaming
               no host
  trained      rank 0 reports that a call of hvd.elastic.run returned (its state's final
               commit): a failure after it restarts the job at the end of that call, told
               which commit that is (ACCORDRUN_ELASTIC_TRAINED), to run the work after it
               again
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

# The ranks' side of the protocol (bindings/python/accord/elastic/notice.py).
MARKER = "[accord-elastic] "
EXIT_RESTART = 75
EXIT_HOSTS_UPDATED = 76

# Open MPI 4's notices: a rank killed by a signal, a rank's non-zero exit, a lost daemon.
_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?")
_EXITED = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_LOST_DAEMON = re.compile(r"Remote daemon:\s*\[\[\d+,\d+\],\d+\] on node (\S+)")
# srun's: "srun: error: node1: task 3: Killed", "...: tasks 0-1,3: Exited with exit code 75".
_SRUN_TASKS = re.compile(r"srun: error: (\S+): tasks? ([0-9,\-]+): (.+)")


def task_list(text):
    """"0-1,3" -> [0, 1, 3]."""
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def log(message):
    print(f"accordrun: {message}", file=sys.stderr, flush=True)


def parse_discovered(text, slots_per_host):
    """A discovery script's output: 'host:slots' or 'host' (then --slots-per-host) per line."""
    hosts = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9.\-_]*)(?::([0-9]+))?", line)
        if not m:
            raise ValueError(f"bad line '{line}': expected host:slots")
        slots = int(m.group(2)) if m.group(2) else slots_per_host
        if slots is None:
            raise ValueError(f"'{line}' gives no slots: print host:slots, or pass --slots-per-host")
        if slots > 0:  # a host named again adds its slots, as in -H
            hosts[m.group(1)] = hosts.get(m.group(1), 0) + slots
    return hosts


class Hosts:
    """The hosts offered (fixed or discovered) and those blacklisted after failures."""

    def __init__(self, opts, fixed):
        self.opts = opts
        self.fixed = fixed
        self.offered = dict(fixed or {})
        self.failures = {}   # host -> times blacklisted
        self.until = {}      # host -> time its cool-down ends (inf: for good)
        self.causes = {}     # host -> why it was blacklisted

    def discover(self):
        if self.fixed is not None:
            return self.offered
        try:
            out = subprocess.run([self.opts.host_discovery_script], capture_output=True, text=True,
                                 timeout=30)
            if out.returncode != 0:
                raise ValueError(f"exit status {out.returncode}: {out.stderr.strip()}")
            self.offered = parse_discovered(out.stdout, self.opts.slots_per_host)
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            log(f"host discovery script {self.opts.host_discovery_script} failed ({e}); keeping the "
                "hosts it gave before")
        return self.offered

    def blacklist(self, host, cause, now):
        self.failures[host] = self.failures.get(host, 0) + 1
        self.causes[host] = cause
        low, high = self.opts.cooldown or (None, None)
        if low is None:
            self.until[host] = float("inf")
        else:  # doubles with each failure of the host, within the range
            self.until[host] = now + min(high, low * 2 ** (self.failures[host] - 1))
        return self.until[host] - now

    def usable(self, now):
        return {h: s for h, s in self.offered.items() if self.until.get(h, 0) <= now}

    def may_change(self, now):
        """Whether waiting can bring more slots: discovery may offer hosts, or a host's
        cool-down ends. Fixed hosts blacklisted for good never come back."""
        return self.fixed is None or any(now < t < float("inf") for t in self.until.values())


def for_how_long(seconds):
    return "for good" if seconds == float("inf") else f"for {seconds:g} s"


def plan(usable, max_np, keep=()):
    """The hosts to run on and their ranks, up to max_np ranks: first those of ``keep``
    still usable, in its order (the hosts the job runs on, or last ran on: they hold its
    commits, and a discovery script listing the same hosts in another order must not
    move it), then the others in the offered order."""
    order = [h for h in keep if h in usable] + [h for h in usable if h not in keep]
    chosen, total = [], 0
    for host in order:
        slots = usable[host]
        if max_np is not None and total >= max_np:
            break
        take = slots if max_np is None else min(slots, max_np - total)
        chosen.append((host, take))
        total += take
    return chosen


def same_hosts(a, b):
    """Whether two plans run as many ranks on each host, whatever their order."""
    return dict(a) == dict(b)


def ranks_on(chosen):
    """rank -> host, as mpirun maps by slot: each host's ranks in turn."""
    out = []
    for host, n in chosen:
        out += [host] * n
    return out


_JSON = json.JSONDecoder()


def reports_in(line):
    """The ranks' reports in a line of the job's output. Each report is one write of a
    whole line, but mpirun passes on every rank's output as it comes: where another rank
    had written part of a line (Python's traceback goes out piece by piece, a progress
    bar rewrites its line), the report lands in the middle of that line. So a report is
    read wherever its marker starts, up to the end of its JSON object."""
    found = []
    at = line.find(MARKER)
    while at >= 0:
        try:
            report, end = _JSON.raw_decode(line, at + len(MARKER))
        except ValueError:
            report, end = None, at + len(MARKER)
        if isinstance(report, dict):
            found.append(report)
        at = line.find(MARKER, end)
    return found


class Job:
    """One run of mpirun, its output passed through and read for reports."""

    def __init__(self, cmd, env):
        self.reports = []
        self.stderr_tail = ""
        self.first_step = None
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self._pumps = [threading.Thread(target=self._pump, args=(self.proc.stdout, sys.stdout), daemon=True),
                       threading.Thread(target=self._pump, args=(self.proc.stderr, sys.stderr), daemon=True)]
        for t in self._pumps:
            t.start()

    def _pump(self, source, sink):
        for raw in iter(source.readline, b""):
            sink.buffer.write(raw)
            sink.flush()
            line = raw.decode(errors="replace")
            with self._lock:
                self.reports += reports_in(line)
                if sink is sys.stderr:
                    self.stderr_tail = (self.stderr_tail + line)[-65536:]

    def notify_hosts_updated(self):
        try:
            self.proc.stdin.write(b"hosts-updated\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the job is ending anyway

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def finish(self):
        rc = self.proc.wait()
        for t in self._pumps:
            t.join(timeout=10)
        return rc


def script_failure(reports, chosen, rank_hosts):
    """Why the run failed by the script's own doing, which no restart on other hosts
    mends (Horovod's driver stops when all its workers failed); None otherwise. That is so
    where ranks on every host of the run raised the same error in user code, or errors
    that differ only in their numbers (an error that names its rank: "rank 3 fails").
    One rank per host suffices: mpirun ends the other ranks once one has left, often
    before they report."""
    first = {}  # host -> (rank, error): the first report from each host
    for r in reports:
        if r.get("event") == "raised":
            first.setdefault(host_of(r.get("rank"), r.get("host"), rank_hosts), (r.get("rank"), r.get("error")))
    hosts = [h for h, _ in chosen]
    if not first or not set(first) >= set(hosts):
        return None
    errors = {error for _, error in first.values()}
    if len(errors) == 1:
        return f"ranks on every host ({', '.join(hosts)}) raised {errors.pop()}"
    if len({re.sub(r"[0-9]+", "#", str(error)) for error in errors}) == 1:
        shown = [f"rank {first[h][0]} on {h} raised {first[h][1]}" for h in hosts[:3]]
        more = len(hosts) - len(shown)
        return (f"ranks on every host ({', '.join(hosts)}) raised the same error but for its "
                f"numbers: {'; '.join(shown)}" + (f"; and {more} more" if more else ""))
    return None


def host_of(rank, named, rank_hosts):
    """The host of the run that ``rank`` failed on, by the name the driver knows it by
    (given to -H or printed by the discovery script). ``named`` is the name mpirun or
    the rank itself gave: the machine's own, which is the driver's where hosts are named
    so (srun's nodes always are, wherever srun placed the ranks). Where it names no host
    of the run, the host was given by an address or an alias (10.0.0.5, localhost,
    127.0.0.1), which no rank reports: then the host the driver put the rank on, mpirun
    placing each host's ranks in turn."""
    if named in rank_hosts:
        return named
    if isinstance(rank, int) and 0 <= rank < len(rank_hosts):
        return rank_hosts[rank]
    return named


def failure_causes(job, rc, rank_hosts):
    """{host: cause} for the hosts this run's output blames, and a cause for the log."""
    blamed = {}

    def blame(host, cause):
        if host and host not in blamed:
            blamed[host] = cause

    tail = job.stderr_tail
    for m in _SIGNALLED.finditer(tail):
        name = f" ({m.group(4)})" if m.group(4) else ""
        host = host_of(int(m.group(1)), m.group(2), rank_hosts)
        blame(host, f"rank {m.group(1)} on {host} was killed by signal {m.group(3)}{name}")
    for m in _LOST_DAEMON.finditer(tail):
        blame(m.group(1), f"mpirun lost its daemon on {m.group(1)}")
    killed = False  # srun kills a step's other tasks after one is killed: blame the first
    for m in _SRUN_TASKS.finditer(tail):
        what = m.group(3).strip()
        if what == "Killed":
            if killed:
                continue
            killed = True
        code = re.fullmatch(r"Exited with exit code (\d+)", what)
        if code and int(code.group(1)) in (0, EXIT_RESTART, EXIT_HOSTS_UPDATED):
            continue  # survivors leaving for a restart, as asked
        ranks = task_list(m.group(2))
        blame(m.group(1), f"rank{'s' if len(ranks) > 1 else ''} {m.group(2)} on {m.group(1)} "
                          + ("was killed (srun: Killed)" if what == "Killed" else f"failed (srun: {what})"))
    for r in job.reports:
        if r.get("event") == "raised":
            host = host_of(r.get("rank"), r.get("host"), rank_hosts)
            blame(host, f"rank {r.get('rank')} on {host} raised {r.get('error')}")
    lost = {}  # host -> (ranks every survivor's report blamed there, the first report)
    for r in job.reports:
        if r.get("event") == "failed":
            for x in r.get("lost_ranks", []):
                if x < len(rank_hosts):
                    lost.setdefault(rank_hosts[x], (set(), r))[0].add(x)
    for host, (ranks, r) in lost.items():
        error = (r.get("error") or "").split(". ")[0]
        blame(host, f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, sorted(ranks)))} on {host} "
                    f"stopped answering (rank {r.get('rank')}: {error})")
    for m in _EXITED.finditer(tail):
        rank, code = int(m.group(1)), int(m.group(2))
        if code not in (EXIT_RESTART, EXIT_HOSTS_UPDATED) and rank < len(rank_hosts):
            blame(rank_hosts[rank], f"rank {rank} on {rank_hosts[rank]} exited with status {code}")
    if blamed:
        return blamed, "; ".join(blamed.values())
    return {}, f"the job exited with status {rc} and named no failed rank"


class Driver:
    def __init__(self, opts, fixed_hosts, command_for, environ):
        self.opts = opts
        self.hosts = Hosts(opts, fixed_hosts)
        self.command_for = command_for  # (chosen hosts, env) -> (argv, env)
        self.environ = environ
        self.job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.resets = 0
        self.job = None
        self.had = []
        self.ran_on = set()  # every host a run of the job used: where commits may lie
        self.trained = {}  # the script's state number -> its final commit, once a call returned

    def run(self):
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        while True:
            chosen = self.wait_for_hosts()
            if chosen is None:
                return 1
            rc, cause, blamed = self.run_once(chosen)
            if rc == 0:
                return 0
            if self.stopping:
                return rc
            if blamed is None:  # an error no restart mends: the script's own, on every rank
                log(f"not restarting: {cause}; exiting with status {rc}")
                return rc
            now = time.monotonic()
            out = [f"{host} {for_how_long(self.hosts.blacklist(host, why, now))}"
                   for host, why in sorted(blamed.items())]
            if self.opts.reset_limit is not None and self.resets >= self.opts.reset_limit:
                log(f"reset limit {self.opts.reset_limit} reached; not restarting after: {cause}; "
                    f"exiting with status {rc}")
                return rc
            self.resets += 1
            log(f"reset {self.resets}: {cause}" + (f"; blacklisted {', '.join(out)}" if out else "")
                + self._trained_note())

    stopping = False

    def _trained_note(self):
        if not self.trained:
            return ""
        number = max(self.trained)
        which = f"hvd.elastic.run with state {number + 1}" if number else "training"
        return (f"; {which} had finished (commit {self.trained[number]}): the job resumes at "
                "its end and runs the script's work after it again")

    def environment(self, chosen):
        """The variables each run of the job gets from the driver (read by accord.elastic;
        ACCORDRUN_ELASTIC_HOSTS: the run's hosts and ranks, by the names given for them)."""
        env = dict(self.environ, ACCORDRUN_ELASTIC_JOB=self.job_id,
                   ACCORDRUN_ELASTIC_RESET=str(self.resets), ACCORDRUN_ELASTIC_NOTICE="stdin",
                   ACCORDRUN_ELASTIC_HOSTS=",".join(f"{h}:{n}" for h, n in chosen))
        if self.opts.elastic_store:
            env["ACCORDRUN_ELASTIC_STORE"] = os.path.abspath(self.opts.elastic_store)
        if self.trained:  # a restart after training: each state resumes its final commit or stops
            env["ACCORDRUN_ELASTIC_TRAINED"] = ",".join(f"{s}:{n}" for s, n in sorted(self.trained.items()))
        return env

    def _forward(self, signum, frame):
        self.stopping = True
        if self.job is not None:
            self.job.stop()
        else:
            sys.exit(128 + signum)

    def wait_for_hosts(self):
        deadline = time.monotonic() + self.opts.elastic_timeout
        waiting = False
        while True:
            self.hosts.discover()
            chosen = plan(self.hosts.usable(time.monotonic()), self.opts.max_np,
                          keep=[h for h, _ in self.had])
            total = sum(n for _, n in chosen)
            if total >= self.opts.min_np:
                if self.ran_on and not self.ran_on & {h for h, _ in chosen}:
                    log("none of the hosts the job ran on (" + ", ".join(sorted(self.ran_on)) +
                        ") is usable, and its commits lie on their disks: it starts again from "
                        "its beginning")
                return chosen
            if not self.hosts.may_change(time.monotonic()):
                self._stop_for_want_of_hosts(
                    total, chosen,
                    "none can come back (fixed hosts, -H or --hostfile, and each one left out "
                    "is blacklisted for good: give --blacklist-cooldown-range for hosts to "
                    "return, or --host-discovery-script for new ones)" if self.hosts.causes else
                    "the fixed hosts (-H or --hostfile) offer no more; give --min-np at most "
                    f"{total}, or more hosts")
                return None
            if not waiting and not self.stopping:
                waiting = True
                log(f"only {total} slots usable, fewer than --min-np {self.opts.min_np}; waiting up to "
                    f"{self.opts.elastic_timeout:g} s (--elastic-timeout) for more hosts")
            if time.monotonic() >= deadline or self.stopping:
                self._stop_for_want_of_hosts(
                    total, chosen, "no host was offered within --elastic-timeout "
                    f"{self.opts.elastic_timeout:g} s")
                return None
            time.sleep(min(self.opts.discovery_interval, max(0.1, deadline - time.monotonic())))

    def _stop_for_want_of_hosts(self, total, chosen, why):
        lost = "; ".join(f"{h}: {cause}" for h, cause in self.hosts.causes.items()) or "none"
        had = ", ".join(f"{h}:{n}" for h, n in self.had) or "none yet"
        left = ", ".join(f"{h}:{n}" for h, n in chosen) or "none"
        log(f"only {total} slots usable ({left}), fewer than --min-np {self.opts.min_np}, and "
            f"{why}; the job had {had}; lost: {lost}. Stopping.")

    def run_once(self, chosen):
        """Runs the job on ``chosen`` once: (exit status, cause, {host: cause} blamed), with
        blamed None where a rank reported an error that no restart mends ("fatal")."""
        self.had = chosen
        self.ran_on |= {h for h, _ in chosen}
        cmd, env = self.command_for(chosen, self.environment(chosen))
        log(f"starting {sum(n for _, n in chosen)} ranks on " + ", ".join(f"{h}:{n}" for h, n in chosen)
            + (f" (reset {self.resets})" if self.resets else ""))
        if self.opts.verbose:
            log(" ".join(shlex.quote(c) for c in cmd))
        self.job = Job(cmd, env)
        notified = None
        next_poll = time.monotonic() + self.opts.discovery_interval
        while self.job.proc.poll() is None:
            time.sleep(0.1)
            if time.monotonic() < next_poll:
                continue
            next_poll = time.monotonic() + self.opts.discovery_interval
            self.hosts.discover()
            wanted = plan(self.hosts.usable(time.monotonic()), self.opts.max_np,
                          keep=[h for h, _ in chosen])
            if not same_hosts(wanted, chosen) and wanted != notified:
                notified = wanted
                log("hosts changed (now " + ", ".join(f"{h}:{n}" for h, n in wanted) + "); the job moves "
                    "to them at its next commit")
                self.job.notify_hosts_updated()
        rc = self.job.finish()
        job, self.job = self.job, None
        for r in job.reports:
            if r.get("event") == "trained":
                number = int(r.get("state") or 0)
                self.trained[number] = max(self.trained.get(number, 0), int(r.get("commit") or 0))
        if rc == 0:
            return 0, "", {}
        events = {r.get("event") for r in job.reports}
        if events == {"hosts-updated"}:
            before, after = dict(chosen), dict(notified or [])
            change = [f"+{h}:{n}" for h, n in after.items() if before.get(h) != n] + \
                     [f"-{h}:{n}" for h, n in before.items() if after.get(h) != n]
            return rc, f"the hosts changed ({' '.join(change)}) at commit " \
                       f"{job.reports[0].get('commit')}", {}
        rank_hosts = ranks_on(chosen)
        fatal = [r for r in job.reports if r.get("event") == "fatal"]
        if fatal:
            r = min(fatal, key=lambda r: r.get("rank", 0))
            host = host_of(r.get("rank"), r.get("host"), rank_hosts)
            return rc, f"rank {r.get('rank')} on {host} raised {r.get('error')}", None
        own = script_failure(job.reports, chosen, rank_hosts)
        if own:
            return rc, own, None
        blamed, cause = failure_causes(job, rc, rank_hosts)
        return rc, cause, blamed


def run(opts, fixed_hosts, command_for, environ):
    return Driver(opts, fixed_hosts, command_for, environ).run()


def dry_run(opts, fixed_hosts, command_for, environ):
    """Prints the first mpirun command the driver would run, with the variables it sets."""
    driver = Driver(opts, fixed_hosts, command_for, environ)
    driver.hosts.discover()
    chosen = plan(driver.hosts.usable(time.monotonic()), opts.max_np)
    total = sum(n for _, n in chosen)
    if total < opts.min_np:
        log(f"only {total} slots usable now ({', '.join(f'{h}:{n}' for h, n in chosen) or 'none'}), "
            f"fewer than --min-np {opts.min_np}: the driver would wait up to --elastic-timeout "
            f"{opts.elastic_timeout:g} s for more hosts")
        return 1
    cmd, env = command_for(chosen, driver.environment(chosen))
    changed = {k: v for k, v in env.items() if environ.get(k) != v}
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(changed.items()))
    print((prefix + " " if prefix else "") + " ".join(shlex.quote(c) for c in cmd))
    return 0


if __name__ == "__main__":
    sys.exit("accord_elastic.py is accordrun's elastic driver, not a program of its own: run "
             "accordrun --min-np N --max-np M ... (accordrun --help)")

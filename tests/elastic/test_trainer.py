"""accord-resnet under accordrun's elastic driver on simulated hosts (run inside
`simhosts.sh 2,2 --run`): Fashion-MNIST, the default model, --commit-every K.

  test_trainer.py kill <accordrun> <accord-resnet>
  test_trainer.py stop <accordrun> <accord-resnet>

kill: first an undisturbed run on 2+2 ranks; then the same run with simhost1's ranks
SIGKILLed mid-epoch, after a commit, and simhost1's commit directory deleted (its disk
is lost with it). The second run must finish on simhost0's 2 ranks, resumed from the
newest commit made before the kill (so fewer than K steps are redone), with one reset
naming simhost1 and signal 9, and a final test accuracy within BAND points of the first
run's.

stop: first a job failing alike on every rank (--resume of a missing file): accordrun
stops at once with its status. Then a shorter run (2 epochs of 4,096 images) with
simhost1's ranks frozen (SIGSTOP) after a commit: the survivors report the frozen ranks
within the stall bound (ACCORD_STALL_SHUTDOWN_TIME), the launcher blames simhost1's
ranks, and the job finishes on simhost0's 2 ranks, resumed from the newest commit
before the freeze.

Both check that the first step after the restart comes within the stall bound + 10 s of
the kill or freeze, and print that time as a FIGURE line.

  test_trainer.py newcomer <accordrun> <accord-resnet>     (in `simhosts.sh 2,2,2 --run`)

newcomer: 4 ranks of 6 slots, on simhost0 and simhost1. simhost1 is killed and its disk
lost; the job restarts on simhost0 and simhost2, which held no commit and writes the one
it resumed from at once. Then simhost0 is killed and its disk lost before the next
commit: the job must resume on simhost2 alone from that copy, not from the start.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_log import Checks, Run, RUNS, assert_none_failed  # noqa: E402  (the same log reader)

COMMIT_EVERY = 8
KILL_AFTER = 13 * COMMIT_EVERY  # step 104: early in the second epoch
BAND = 6.0  # accuracy points; two undisturbed runs of different seeds differ by ~1-2
TRAIN = ["--train-limit", "12000", "--epochs", "3", "--batch-size", "32", "--no-progress",
         "--commit-every", str(COMMIT_EVERY)]
STALL = float(os.environ.get("ACCORD_STALL_SHUTDOWN_TIME", "5"))
RECOVERY_BOUND = STALL + 10  # seconds from the failure to the first step after it


def trainer(accordrun_path, resnet, out, name, train=TRAIN):
    cmd = [accordrun_path, "-np", "4", "--min-np", "2", "-H", os.environ["SIMHOSTS_HOSTS"],
           "--elastic-store", os.path.join(out, name), "--", resnet] + train + [
           "--metrics", os.path.join(out, name + ".jsonl")]
    print("+", " ".join(cmd), flush=True)
    return Run(cmd, dict(os.environ))


def metric_epochs(path):
    try:
        with open(path) as f:
            return [json.loads(line)["epoch"] for line in f if line.strip()]
    except (OSError, ValueError, KeyError) as e:
        return f"unreadable: {e}"


def accuracy(run):
    m = run.matching(r"^final test accuracy: ([0-9.]+)%")
    return float(m[-1][1].group(1)) if m else None


def host_ranks(host_index):
    """The accord-resnet processes in simulated host ``host_index``'s namespace."""
    out = subprocess.run(["ip", "netns", "pids", f"accsim{host_index}"], capture_output=True, text=True)
    pids = []
    for pid in out.stdout.split():
        try:  # argv[0]: the trainer re-executes itself as /proc/self/exe (comm "exe")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if os.path.basename(f.read().split(b"\0")[0]) == b"accord-resnet":
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def signal_after_commit(run, check, step, sig):
    """Waits for the commit after ``step`` on 4 ranks, lets a few steps pass (those are
    redone), then sends ``sig`` to simhost1's ranks; returns their pids and when."""
    t, _ = run.wait_for(rf"^commit after step {step} ", 300)
    check(t is not None, f"the job committed at step {step} on 4 ranks")
    if t is None:
        return [], None
    time.sleep(1.0)
    pids = host_ranks(1)
    for pid in pids:
        os.kill(pid, sig)
    return pids, time.monotonic()


def check_reset_and_recovery(run, check, causes, since, what, *steps):
    """One reset, whose line names every text in ``causes``; then check_resumed from
    ``since`` (``what`` happened then), printing the recovery figure."""
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and all(c in resets[0][1].group(2) for c in causes),
          f"one reset, naming {causes}: {[m.group(0) for _, m in resets]}")
    recovery = check_resumed(run, check, since, *steps)
    if recovery:
        redone = recovery[1] if recovery[1] is not None else f"<= {COMMIT_EVERY}"
        print(f"FIGURE recovery {recovery[0]:.1f} s from {what} to the first step on 2 ranks; "
              f"redone steps {redone} (4-rank steps)", flush=True)


def check_resumed(run, check, failed_at, steps_per_epoch_4, steps_per_epoch_2):
    """The job resumed on 2 ranks from the newest commit before ``failed_at``, redid fewer
    than COMMIT_EVERY steps, re-cut its position for 2 ranks, and took its first step on
    them within RECOVERY_BOUND; returns the recovery time (None if unknown)."""
    before = [int(m.group(1)) for tt, m in run.matching(r"^commit after step (\d+) ")
              if failed_at and tt < failed_at]
    resumed = run.matching(r"^resumed from the commit on rank (\d+)'s host \(step (\d+) of 4 ranks"
                           r" x batch 32\), now after step (\d+) .* on 2 ranks")
    # The newest commit announced before the failure: its copy was taken then, and its
    # write to simhost0's disk finished before the survivors left. Or the next one, if the
    # lost ranks took part in it just before they were lost (announced after).
    check(len(resumed) == 1 and before and
          int(resumed[0][1].group(2)) in (max(before), max(before) + COMMIT_EVERY),
          f"resumed on 2 ranks from the newest commit before the failure (step "
          f"{max(before) if before else None}): {[m.group(0) for _, m in resumed]}")
    if not (resumed and before):
        return None
    start = int(resumed[0][1].group(2))
    reports = [int(m.group(1)) for _, m in run.matching(r'"step": (\d+)')]
    redone = max(reports) - start if reports else None
    # Commits come every COMMIT_EVERY steps: no more than that were done past the newest.
    check(redone is None or 0 <= redone <= COMMIT_EVERY,
          f"redone steps {redone} (survivors' reports) <= {COMMIT_EVERY}")
    # 2 ranks x 32 take half the samples a step of 4 x 32 took: the same sample of the
    # same epoch, and the global step as if every epoch had had 2 ranks.
    epoch, within = divmod(start, steps_per_epoch_4)
    expected = epoch * steps_per_epoch_2 + 2 * within
    check(int(resumed[0][1].group(3)) == expected,
          f"the position re-cut for 2 ranks: step {resumed[0][1].group(3)} of 2 x 32 "
          f"samples (expected {expected})")
    after = run.matching(r"^first step after the restart")
    check(bool(after), "the restarted job took a step")
    if not after:
        return None
    took = after[0][0] - failed_at
    check(took <= RECOVERY_BOUND, f"first step on 2 ranks {took:.1f} s after the failure "
                                  f"(<= stall bound + 10 s = {RECOVERY_BOUND:g} s)")
    return took, redone


def scenario_kill(accordrun_path, resnet, out, check):
    plain = trainer(accordrun_path, resnet, out, "plain")
    rc = plain.finish(400)
    base = accuracy(plain)
    check(rc == 0 and base is not None, f"the undisturbed run finishes (exit {rc}, {base}%)")

    run = trainer(accordrun_path, resnet, out, "killed")
    # A commit early in the second epoch (an epoch is 93 steps of 4 x 32), so that
    # the first epoch's metrics line was written before simhost1 is lost.
    killed, killed_at = signal_after_commit(run, check, KILL_AFTER, signal.SIGKILL)
    if killed_at is not None:
        for job in os.listdir(os.path.join(out, "killed")):
            shutil.rmtree(os.path.join(out, "killed", job, "simhost1"), ignore_errors=True)
    check(len(killed) == 2, f"killed simhost1's 2 ranks ({killed})")
    rc = run.finish(400)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    check_reset_and_recovery(run, check, ["simhost1", "signal 9"], killed_at, "the kill",
                             12000 // 128, 12000 // 64)
    # The metrics file goes on across the restart: every epoch once, in order.
    epochs = metric_epochs(os.path.join(out, "killed.jsonl"))
    check(epochs == [1, 2, 3], f"killed.jsonl holds epochs 1, 2, 3 once each: {epochs}")
    acc = accuracy(run)
    check(acc is not None and base is not None and abs(acc - base) <= BAND,
          f"test accuracy {acc}% within {BAND} points of the undisturbed run's {base}%")
    check(base is not None and base >= 60, f"the undisturbed run learned ({base}% >= 60%)")
    leftover = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(out, "killed")) for f in fs]
    check(not leftover, f"the finished job removed its commits: {leftover}")


STOP_TRAIN = ["--train-limit", "4096", "--epochs", "2", "--batch-size", "32", "--no-progress",
              "--commit-every", str(COMMIT_EVERY)]
STOP_AFTER = 2 * COMMIT_EVERY  # step 16 of the 32 steps of 4 x 32 in an epoch
# Commits 32 steps apart (64 steps an epoch): room to lose the restarted job's first
# host before its next commit, even where a loaded machine is slow to notice its start.
NEWCOMER_EVERY = 32
NEWCOMER_TRAIN = ["--train-limit", "8192", "--epochs", "2", "--batch-size", "32", "--no-progress",
                  "--commit-every", str(NEWCOMER_EVERY)]


def scenario_stop(accordrun_path, resnet, out, check):
    # First an error of the job's own, alike on every rank (a --resume file that is not
    # there): accordrun stops at once with the trainer's status, blaming no host.
    missing = os.path.join(out, "missing.ckpt")
    run = trainer(accordrun_path, resnet, out, "missing", STOP_TRAIN + ["--resume", missing])
    rc = run.finish(120)
    check(rc == 1, f"a job failing alike on every rank: accordrun exits 1 (got {rc})")
    stop = run.matching(r"^accordrun: not restarting: ranks on every host \(simhost0, simhost1\) "
                        r"raised accord-resnet: --resume failed on rank 0: " + re.escape(missing))
    check(len(stop) == 1 and not run.matching(r"^accordrun: reset "),
          f"it stops, naming the error, with no reset: "
          f"{[line for _, line in run.lines if line.startswith('accordrun: ')]}")

    run = trainer(accordrun_path, resnet, out, "stopped", STOP_TRAIN)
    frozen = []
    try:
        frozen, frozen_at = signal_after_commit(run, check, STOP_AFTER, signal.SIGSTOP)
        check(len(frozen) == 2, f"froze simhost1's 2 ranks ({frozen})")
        rc = run.finish(300)
    finally:
        for pid in frozen:  # whatever mpirun did with them
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    # Both survivors fail within the stall bound, blaming no rank but the frozen ones. A
    # survivor waiting on rank 0 (which waits on the frozen ranks) may name none: its roll
    # call can find every rank it asks answering. When mpirun ends the job it continues
    # the frozen ranks before it kills them, and one may report its own view meanwhile:
    # only the survivors' reports count.
    reports = [(tt, m) for tt, m in run.matching(
                   r'\[accord-elastic\] .*"lost_ranks": \[([0-9, ]*)\], "rank": ([0-9]+)')
               if frozen_at and tt > frozen_at and int(m.group(2)) in (0, 1)]
    named = [set(map(int, m.group(1).split(", "))) if m.group(1) else set() for _, m in reports]
    check(len(reports) == 2 and all(n <= {2, 3} for n in named) and {2, 3} in named,
          f"both survivors report, blaming only ranks 2, 3: {[m.group(0)[:160] for _, m in reports]}")
    if reports:
        failed = max(tt for tt, _ in reports) - frozen_at
        # The bound, plus what a loaded 2-core machine adds to the roll call and the exit.
        check(failed <= STALL + 5, f"the survivors failed {failed:.1f} s after the freeze "
                                   f"(stall bound {STALL:g} s)")
        print(f"FIGURE survivors failed {failed:.1f} s after SIGSTOP (stall bound {STALL:g} s)",
              flush=True)
    check_reset_and_recovery(run, check,
                             ["ranks 2, 3 on simhost1 stopped answering", "blacklisted simhost1"],
                             frozen_at, "SIGSTOP", 4096 // 128, 4096 // 64)
    epochs = metric_epochs(os.path.join(out, "stopped.jsonl"))
    check(epochs == [1, 2], f"stopped.jsonl holds epochs 1, 2 once each: {epochs}")
    check(accuracy(run) is not None, "the job finished and evaluated")


def lose_host(out, name, host_index):
    """SIGKILLs the trainer's ranks on simhost<host_index> and deletes its commits (its
    disk is lost with it); returns the pids killed."""
    killed = host_ranks(host_index)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    for job in os.listdir(os.path.join(out, name)):
        shutil.rmtree(os.path.join(out, name, job, f"simhost{host_index}"), ignore_errors=True)
    return killed


def scenario_newcomer(accordrun_path, resnet, out, check):
    hosts = os.environ["SIMHOSTS_HOSTS"]
    cmd = [accordrun_path, "-np", "4", "--min-np", "2", "--max-np", "4", "-H", hosts,
           "--elastic-store", os.path.join(out, "newcomer"), "--", resnet] + NEWCOMER_TRAIN
    print("+", " ".join(cmd), flush=True)
    run = Run(cmd, dict(os.environ))
    t, _ = run.wait_for(rf"^commit after step {NEWCOMER_EVERY} ", 300)
    check(t is not None and len(lose_host(out, "newcomer", 1)) == 2,
          f"killed simhost1's 2 ranks after the commit at step {NEWCOMER_EVERY}")
    t, _ = run.wait_for(r"^accordrun: starting 4 ranks on simhost0:2, simhost2:2 \(reset 1\)", 120)
    check(t is not None, "the job restarts on simhost0 and simhost2")
    # simhost2's copy of the commit the job resumed from, written beside its first steps.
    copy, deadline = None, time.monotonic() + 60
    while t is not None and copy is None and time.monotonic() < deadline:
        store = os.path.join(out, "newcomer")
        found = [os.path.join(store, job, "simhost2", "accord-resnet.ckpt") for job in os.listdir(store)]
        copy = next((f for f in found if os.path.exists(f)), None)
        time.sleep(0.02)
    first, _ = run.wait_for(r"^first step after the restart", 60)
    own = [m.group(0) for tt, m in run.matching(r"^commit after step \d+") if t and tt > t]
    check(copy is not None and first is not None and not own,
          f"simhost2 holds the resumed commit ({copy}), before a commit of its own ({own})")
    # At once: the restarted job's own next commit, 32 steps on, would put one there too.
    killed = lose_host(out, "newcomer", 0) if copy and first else []
    check(len(killed) == 2, f"killed simhost0's 2 ranks ({killed})")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    resumed = run.matching(r"^resumed from the commit on rank (\d+)'s host \(step (\d+) of (\d+) ranks")
    # The same step: the copy simhost2 wrote when the job resumed, no later commit.
    check(len(resumed) == 2 and resumed[1][1].group(3) == "4"
          and resumed[1][1].group(2) == resumed[0][1].group(2),
          f"the second restart resumed from the commit simhost2 wrote: "
          f"{[m.group(0) for _, m in resumed]}")
    check(bool(run.matching(r"^accordrun: starting 2 ranks on simhost2:2 \(reset 2\)")),
          "the job went on on simhost2 alone")
    check(accuracy(run) is not None, "the job finished and evaluated")


def main():
    scenario, accordrun_path, resnet = sys.argv[1:4]
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("skipped: no Fashion-MNIST in /usr/share/datasets/fashion-mnist")
        return 77
    if not os.environ.get("SIMHOSTS_HOSTS"):
        print("test_trainer.py runs inside `simhosts.sh 2,2 --run` (newcomer: 2,2,2)",
              file=sys.stderr)
        return 2
    check = Checks()
    with tempfile.TemporaryDirectory() as out:
        try:
            {"kill": scenario_kill, "stop": scenario_stop,
             "newcomer": scenario_newcomer}[scenario](accordrun_path, resnet, out, check)
        finally:
            for r in RUNS:
                if r.proc.poll() is None:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                    r.proc.wait()
    assert_none_failed(check.failed)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

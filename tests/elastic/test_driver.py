"""accordrun's elastic driver on simulated hosts (run inside `simhosts.sh <slots> --run`),
with train.py: real ranks, real signals, checked from the job's output. Hosts offered
and withdrawn by a discovery script are test_discovery.py's; a host lost after training,
test_after_training.py's.

  test_driver.py <scenario> <accordrun> <python>

  kill     2+2 ranks; simhost0's ranks (rank 0's host) SIGKILLed mid-epoch and its
           commits deleted (no shared file system): the job ends on simhost1's 2 ranks,
           every epoch takes every sample once, at most --commit-every steps are redone,
           the parameters agree, the launcher logs one reset naming simhost0 and signal 9
  raise    2+2 ranks; rank 2 (on simhost1) raises in user code at step 6: the others fail
           within the stall bound, the launcher blames rank 2's host with the error, and
           the job ends on simhost0's 2 ranks. Then every rank raises the same error:
           accordrun stops at once with the script's status, blaming no host
  stop     2+2 ranks; simhost1's ranks frozen (SIGSTOP): the survivors blame them
           within ACCORD_STALL_SHUTDOWN_TIME and the job ends on simhost0's 2 ranks
  reset-limit  1+1+1 ranks, --reset-limit 1: the second failure stops the job, saying so
  cooldown 2+2 ranks, --blacklist-cooldown-range 3 60: simhost1 killed, left out for 3 s,
           taken back at a commit, killed again, left out for 6 s; the job finishes
  srun     (inside `slurm_cluster.sh 2`, no simulated hosts) 2 ranks started by srun on
           the allocation's node; rank 1 SIGKILLed: the node is left out for its 1 s
           cool-down, and the job resumes there on 2 ranks from the last commit
  process-sets  2+2 ranks with process sets: [0, 1] given to hvd.init and the even
           ranks of hvd.size() added after it; simhost1 killed: the restarted job on 2
           ranks registers both anew ([0, 1] and [0]) and every step's allreduce over each
           set counts its members. Then a job whose set [2, 3] outlives simhost1's ranks:
           the restart raises an error naming ranks 2 and 3, and the launcher stops at once
           with it (no host blamed for it, no waiting for --elastic-timeout)
  newcomer 4 ranks of 2+2+2 slots: simhost1 killed and its disk lost, the job restarts on
           simhost0 and simhost2, which held no commit and writes the one it resumed
           from at once; simhost0 then killed and its disk lost before the next commit:
           the job resumes on simhost2 alone from that copy, not from the start. The
           script inits with process_sets="dynamic" and adds the even ranks' set, which
           each run registers anew
  double   1+1+1 ranks: simhost2 killed, then simhost1 killed while the job restarts (its
           new rank is up, in a reset callback slowed to 2 s, before its first step): two resets, the job finishes on simhost0
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_log import RUNS, Checks, Run, assert_none_failed, signal_host  # noqa: E402
COMMIT_EVERY = 4
STALL_BOUND = float(os.environ.get("ACCORD_STALL_SHUTDOWN_TIME", "5"))


def accordrun(accordrun_path, python, out, flags, train_flags=()):
    cmd = [accordrun_path] + flags + ["--elastic-store", os.path.join(out, "store"), "--",
                                      python, os.path.join(HERE, "train.py"), "--out", out,
                                      "--commit-every", str(COMMIT_EVERY)] + list(train_flags)
    print("+", " ".join(cmd), flush=True)
    return Run(cmd, dict(os.environ, ACCORD_STALL_SHUTDOWN_TIME=os.environ.get("ACCORD_STALL_SHUTDOWN_TIME", "5")))


def check_training(run, check, epochs, final_size, redone_limit=COMMIT_EVERY):
    """What every scenario that ends well must show."""
    steps = [int(m.group(1)) for _, m in run.matching(r"^STEP (\d+) ")]
    redone = len(steps) - len(set(steps))
    check(redone <= redone_limit, f"redone steps {redone} <= {redone_limit} (the commit interval per failure)")
    check(sorted(set(steps)) == list(range(1, max(steps, default=0) + 1)), "no step number skipped")
    epochs_seen = {int(m.group(1)): m.group(2) for _, m in run.matching(r"^EPOCH (\d+) once (\w+)")}
    check(epochs_seen == {e: "True" for e in range(epochs)},
          f"every epoch took every sample exactly once: {epochs_seen}")
    final = run.matching(r"^FINAL size (\d+) identical (\w+) epochs (\d+)")
    check(len(final) == 1 and final[0][1].groups() == (str(final_size), "True", str(epochs)),
          f"the job ends on {final_size} ranks with identical parameters: "
          f"{[m.group(0) for _, m in final]}")
    return steps, redone


def recovery(run, check, since, what, bounded=True, extra=""):
    """The first step on 2 ranks after `since` (the fault): within the stall bound + 10 s
    where `bounded`, and printed as a FIGURE line."""
    after = [tt for tt, _ in run.matching(r"^STEP \d+ epoch \d+ size 2 ")]
    if since is None or not after:
        return
    took = after[0] - since
    if bounded:
        check(took <= STALL_BOUND + 10, f"first step on 2 ranks {took:.1f} s after {what} "
                                        f"(<= stall bound + 10 s)")
    print(f"FIGURE recovery {took:.1f} s from {what} to the first step on 2 ranks{extra}", flush=True)


def scenario_kill(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "-H", hosts])
    t, _ = run.wait_for(r"^STEP 6 ", 120)
    check(t is not None, "training reached step 6 on 4 ranks")
    killed_at = None
    if t is not None:
        killed_at = time.monotonic()
        ranks = signal_host(out, 0, "simhost0", signal.SIGKILL)
        store = os.path.join(out, "store")
        for job in os.listdir(store) if os.path.isdir(store) else []:  # simhost0's disk is lost with it
            shutil.rmtree(os.path.join(store, job, "simhost0"), ignore_errors=True)
        check(ranks == [0, 1], f"killed simhost0's ranks {ranks}")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    steps, redone = check_training(run, check, 3, 2)
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and "simhost0" in resets[0][1].group(2) and "signal 9" in resets[0][1].group(2),
          f"one reset logged, naming simhost0 and signal 9: {[m.group(0) for _, m in resets]}")
    recovery(run, check, killed_at, "the kill", bounded=False,
             extra=f"; redone steps {redone}")
    return check.failed


def scenario_stop(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "-H", hosts])
    t, _ = run.wait_for(r"^STEP 6 ", 120)
    check(t is not None, "training reached step 6 on 4 ranks")
    stopped, stopped_at = [], None
    try:
        if t is not None:
            stopped_at = time.monotonic()
            stopped = signal_host(out, 0, "simhost1", signal.SIGSTOP)
        rc = run.finish(300)
    finally:
        for name in os.listdir(os.path.join(out, "pids", "0")):
            if name.startswith("simhost1."):
                try:
                    os.kill(int(name.rsplit(".", 1)[1]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    check(stopped == [2, 3], f"froze simhost1's ranks {stopped}")
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    check_training(run, check, 3, 2)
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and "ranks 2, 3 on simhost1 stopped answering" in resets[0][1].group(2)
          and "blacklisted simhost1" in resets[0][1].group(2),
          f"one reset, naming simhost1's ranks: {[m.group(0) for _, m in resets]}")
    recovery(run, check, stopped_at, "SIGSTOP")
    return check.failed


def scenario_raise(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "-H", hosts],
                    ["--raise-at", "6:2"])
    raised, _ = run.wait_for(r"^STEP 6 ", 120)
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    check_training(run, check, 3, 2)
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and "rank 2 on simhost1 raised RuntimeError: user code failed at step 6 "
          "on rank 2" in resets[0][1].group(2) and "blacklisted simhost1" in resets[0][1].group(2),
          f"one reset, naming rank 2 on simhost1 and its error: {[m.group(0) for _, m in resets]}")
    recovery(run, check, raised, "the raise")

    # The same error raised on every rank is the script's own: no host is blamed, and
    # accordrun stops with the script's status rather than restart it elsewhere.
    every = os.path.join(out, "every")
    os.makedirs(every)
    run = accordrun(accordrun_path, python, every, ["-np", "4", "--min-np", "2", "-H", hosts],
                    ["--raise-at", "6:all"])
    rc = run.finish(120)
    check(rc == 1, f"accordrun exits with the script's status 1 (got {rc})")
    stop = run.matching(r"accordrun: not restarting: ranks on every host \(simhost0, simhost1\) raised "
                        r"RuntimeError: user code failed at step 6 on every rank; exiting with status 1")
    check(len(stop) == 1, f"the launcher stops, saying why: "
                          f"{[line for _, line in run.lines if line.startswith('accordrun: ')]}")
    check(not run.matching(r"accordrun: reset "), "no reset, no host blamed")
    return check.failed


def scenario_reset_limit(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "3", "--min-np", "1", "--reset-limit", "1",
                                                  "-H", hosts])
    t, _ = run.wait_for(r"^STEP 3 ", 120)
    check(t is not None, "training reached step 3 on 3 ranks")
    if t is not None:
        signal_host(out, 0, "simhost2", signal.SIGKILL)
    t, _ = run.wait_for(r"^STEP \d+ epoch \d+ size 2 ", 120)
    check(t is not None, "training goes on with 2 ranks")
    if t is not None:
        signal_host(out, 1, "simhost1", signal.SIGKILL)
    rc = run.finish(120)
    check(rc != 0, f"accordrun exits non-zero (got {rc})")
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and "simhost2" in resets[0][1].group(2), f"one reset: {[m.group(0) for _, m in resets]}")
    limit = run.matching(r"accordrun: reset limit 1 reached; not restarting after: (.*simhost1.*)")
    check(len(limit) == 1, f"the second failure stops the job, saying so: {[m.group(0) for _, m in limit]}")
    check(not run.matching(r"^STEP \d+ epoch \d+ size 1 "), "no third run")
    return check.failed


def scenario_cooldown(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "-H", hosts,
                                                  "--blacklist-cooldown-range", "3", "60",
                                                  "--discovery-interval", "0.5"],
                    ["--epochs", "8"])
    t, _ = run.wait_for(r"^STEP 4 ", 120)
    check(t is not None, "training reached step 4 on 4 ranks")
    if t is not None:
        check(signal_host(out, 0, "simhost1", signal.SIGKILL) == [2, 3], "killed simhost1's ranks")
    first, m1 = run.wait_for(r"accordrun: reset 1: .*blacklisted simhost1 for 3 s", 120)
    check(first is not None, "reset 1 blacklists simhost1 for 3 s (the cool-down's minimum)")
    back, m2 = run.wait_for(r"accordrun: starting 4 ranks on simhost0:2, simhost1:2 \(reset (\d+)\)", 120)
    check(back is not None, "simhost1 is taken back after its cool-down")
    if first and back:
        check(back - first >= 3, f"not before its cool-down ends ({back - first:.1f} s)")
        again = m2.group(1)
        # Two steps on the 4 ranks of the new run, then simhost1 fails again.
        while run.proc.poll() is None and \
                len([tt for tt, _ in run.matching(r"^STEP \d+ epoch \d+ size 4 ") if tt > back]) < 2:
            time.sleep(0.1)
        check(signal_host(out, int(again), "simhost1", signal.SIGKILL) == [2, 3],
              "killed simhost1's ranks again, after it came back")
    second, _ = run.wait_for(r"accordrun: reset \d+: .*simhost1 was killed.*blacklisted simhost1 for 6 s", 120)
    check(second is not None, "the second failure blacklists simhost1 for 6 s (doubled)")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    if second:
        returns = [tt for tt, m in run.matching(r"accordrun: starting 4 ranks on simhost0:2, simhost1:2 ")
                   if tt > second]
        if returns:
            check(returns[0] - second >= 6, f"simhost1 left out at least 6 s ({returns[0] - second:.1f} s)")
    failures = run.matching(r"accordrun: reset \d+: .*blacklisted")
    check(len(failures) == 2, f"two failures logged: {[m.group(0) for _, m in failures]}")
    final = run.matching(r"^FINAL size (\d+) identical True epochs 8")
    check(len(final) == 1, "the job finishes every epoch with identical parameters")
    check_training(run, check, 8, int(final[0][1].group(1)) if final else 0, 2 * COMMIT_EVERY)
    return check.failed


def scenario_double(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "3", "--min-np", "1", "-H", hosts],
                    ["--reset-delay", "2"])
    t, _ = run.wait_for(r"^STEP 5 ", 120)
    check(t is not None, "training reached step 5 on 3 ranks")
    if t is not None:
        check(signal_host(out, 0, "simhost2", signal.SIGKILL) == [2], "killed simhost2's rank")
    reset, _ = run.wait_for(r"accordrun: starting 2 ranks on simhost0:1, simhost1:1 \(reset 1\)", 120)
    check(reset is not None, "the job restarts on simhost0 and simhost1")
    killed = []
    if reset is not None:  # simhost1's new rank is up (it wrote its pid after init) ...
        pids, deadline = os.path.join(out, "pids", "1"), time.monotonic() + 60
        while time.monotonic() < deadline and not any(n.startswith("simhost1.") for n in
                                                      (os.listdir(pids) if os.path.isdir(pids) else [])):
            time.sleep(0.05)
        killed = signal_host(out, 1, "simhost1", signal.SIGKILL)
        # ... and the job has not taken a step since the restart: the kill fell into the recovery.
        check(not run.matching(r"^STEP \d+ epoch \d+ size 2 "), "simhost1 killed before the first step on 2 ranks")
    check(killed == [1], f"killed simhost1's new rank {killed}")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check([m.group(2).split("; blacklisted ")[-1] for _, m in resets] == ["simhost2 for good", "simhost1 for good"],
          f"two resets, blaming simhost2 then simhost1: {[m.group(0) for _, m in resets]}")
    check_training(run, check, 3, 1, 2 * COMMIT_EVERY)
    return check.failed


def scenario_process_sets(accordrun_path, python, out, hosts):
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "-H", hosts],
                    ["--process-set", "0,1", "--process-set", "even"])
    t, _ = run.wait_for(r"^STEP 6 ", 120)
    check(t is not None and signal_host(out, 0, "simhost1", signal.SIGKILL) == [2, 3],
          "killed simhost1's ranks at step 6")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    sets = [m.group(1) for _, m in run.matching(r"^SETS (.*)")]
    check(sets == ["size 4 1=[0,1] 2=[0,2]", "size 2 0=[0,1] 1=[0]"],
          f"the sets registered on 4 ranks, then anew on 2: {sets}")
    check_training(run, check, 3, 2)

    gone = os.path.join(out, "gone")
    os.makedirs(gone)
    run = accordrun(accordrun_path, python, gone, ["-np", "4", "--min-np", "2", "-H", hosts],
                    ["--process-set", "2,3"])
    t, _ = run.wait_for(r"^STEP 6 ", 120)
    check(t is not None and signal_host(gone, 0, "simhost1", signal.SIGKILL) == [2, 3],
          "killed simhost1's ranks (those of set [2, 3]) at step 6")
    rc = run.finish(120)
    check(rc not in (0, None), f"accordrun exits non-zero (got {rc})")
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and "simhost1" in resets[0][1].group(2),
          f"one reset, for the kill: {[m.group(0) for _, m in resets]}")
    stop = run.matching(r"accordrun: not restarting: rank 0 on simhost0 raised ProcessSetRanksError: "
                        r"init\(process_sets=\.\.\.\): process set \[2, 3\] names ranks 2, 3, which this job does "
                        r"not have: it runs on 2 ranks \(0\.\.1\), since accordrun's elastic driver "
                        r"restarted it \(reset 1\)")
    check(len(stop) == 1, f"the launcher stops, naming ranks 2 and 3: "
                          f"{[line for _, line in run.lines if 'not restarting' in line]}")
    check(not run.matching(r"accordrun: (reset 2|only \d+ slots usable)"),
          "no second reset, no wait for hosts")
    return check.failed


def scenario_newcomer(accordrun_path, python, out, hosts):
    check = Checks()
    # With a process set of the even ranks, after hvd.init(process_sets="dynamic"):
    # registered anew by each run, whatever its size.
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "--max-np", "4",
                                                  "-H", hosts],
                    ["--commit-every", "16", "--epochs", "2", "--step-time", "0.25",
                     "--process-set", "even"])
    t, _ = run.wait_for(r"^STEP 18 ", 120)
    check(t is not None and signal_host(out, 0, "simhost1", signal.SIGKILL) == [2, 3],
          "killed simhost1's ranks at step 18, after the commit at step 16")
    store = os.path.join(out, "store")
    for job in os.listdir(store) if t is not None else []:
        shutil.rmtree(os.path.join(store, job, "simhost1"), ignore_errors=True)
    t, _ = run.wait_for(r"accordrun: starting 4 ranks on simhost0:2, simhost2:2 \(reset 1\)", 120)
    check(t is not None, "the job restarts on simhost0 and simhost2")
    copy, deadline = None, time.monotonic() + 60
    while t is not None and copy is None and time.monotonic() < deadline:
        found = [os.path.join(store, job, "simhost2", name) for job in os.listdir(store)
                 for name in (os.listdir(os.path.join(store, job, "simhost2"))
                              if os.path.isdir(os.path.join(store, job, "simhost2")) else [])]
        copy = next((f for f in found if re.fullmatch(r"commit-\d+\.pt", os.path.basename(f))), None)
        time.sleep(0.02)
    check(copy is not None, f"simhost2, which held no commit, holds the one resumed from ({copy})")
    # At once: the restarted job's next commit (at the epoch's end, 6 steps of 0.25 s on)
    # would put one there anyway.
    killed = signal_host(out, 1, "simhost0", signal.SIGKILL) if copy else []
    commits = sorted(os.listdir(os.path.dirname(copy))) if copy else []
    for job in os.listdir(store) if killed else []:
        shutil.rmtree(os.path.join(store, job, "simhost0"), ignore_errors=True)
    check(killed == [0, 1], f"killed simhost0's ranks of the second run ({killed})")
    steps_before = [int(m.group(1)) for tt, m in run.matching(r"^STEP (\d+) epoch \d+ size 4 ")]
    check(len(commits) == 1 and max(steps_before, default=0) < 24,
          f"before the second run's first commit (simhost2 holds {commits})")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    check(bool(run.matching(r"accordrun: starting 2 ranks on simhost2:2 \(reset 2\)")),
          "the job goes on on simhost2 alone")
    # From simhost2's copy of the commit at step 16: the steps since it redone, twice.
    check_training(run, check, 2, 2, 2 * 16)
    sets = [m.group(1) for _, m in run.matching(r"^SETS (.*)")]
    check(sets == ["size 4 1=[0,2]", "size 4 1=[0,2]", "size 2 1=[0]"],
          f"the even ranks' set registered by each run: {sets}")
    return check.failed


def scenario_srun(accordrun_path, python, out, hosts):
    check = Checks()
    node = socket.gethostname()
    run = accordrun(accordrun_path, python, out, ["-np", "2", "--min-np", "1", "--verbose",
                                                  "--blacklist-cooldown-range", "1", "10",
                                                  "--elastic-timeout", "60"])
    t, _ = run.wait_for(r"^STEP 6 ", 120)
    check(t is not None, "training reached step 6 on 2 ranks")
    killed_at = None
    if t is not None:
        for name in os.listdir(os.path.join(out, "pids", "0")):
            h, rank, pid = name.rsplit(".", 2)
            if rank == "1":
                os.kill(int(pid), signal.SIGKILL)
                killed_at = time.monotonic()
    check(killed_at is not None, "killed rank 1")
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    cmds = run.matching(r"^accordrun: (\S*srun) .*--nodelist " + re.escape(node) + r" .*--input 0 ")
    check(len(cmds) == 2, f"both runs started by srun on {node}: {[m.group(0)[:80] for _, m in cmds]}")
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and f"rank 1 on {node} was killed" in resets[0][1].group(2)
          and f"blacklisted {node} for 1 s" in resets[0][1].group(2),
          f"one reset, naming rank 1 on {node}, left out for 1 s: {[m.group(0) for _, m in resets]}")
    check(bool(run.matching(rf"accordrun: starting 2 ranks on {re.escape(node)}:2 \(reset 1\)")),
          "the job resumes on the node after its cool-down")
    check_training(run, check, 3, 2)
    after = [tt for tt, m in run.matching(r"^STEP \d+ epoch \d+ size 2 ") if killed_at and tt > killed_at]
    resumed = [tt for tt, _ in run.matching(r"^RESET size 2 ")]
    if resumed and after:
        first = [tt for tt in after if tt > resumed[0]]
        if first:
            print(f"FIGURE recovery {first[0] - killed_at:.1f} s from the kill to the first step after "
                  f"the restart under srun", flush=True)
    return check.failed


SCENARIOS = {"srun": scenario_srun, "kill": scenario_kill, "stop": scenario_stop,
             "reset-limit": scenario_reset_limit, "cooldown": scenario_cooldown, "double": scenario_double,
             "process-sets": scenario_process_sets, "raise": scenario_raise,
             "newcomer": scenario_newcomer}


def main(scenarios=None):
    scenarios = scenarios or SCENARIOS
    scenario, accordrun_path, python = sys.argv[1:4]
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"skipped: {python} has no torch")
        return 77
    hosts = os.environ.get("SIMHOSTS_HOSTS")
    if scenario == "srun" and not os.environ.get("SLURM_JOB_ID"):
        print("test_driver.py srun runs inside `slurm_cluster.sh 2 --`", file=sys.stderr)
        return 2
    if not hosts and scenario != "srun":
        print("test_driver.py runs inside `simhosts.sh <slots> --run`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as out:
        try:
            failed = scenarios[scenario](accordrun_path, python, out, hosts)
        finally:  # nothing of the job outlives the test, whatever happened
            for run in RUNS:
                if run.proc.poll() is None:
                    os.killpg(run.proc.pid, signal.SIGKILL)
                    run.proc.wait()
    assert_none_failed(failed)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

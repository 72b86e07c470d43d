"""hvd.elastic on one host, under mpirun (state_phase.py): a commit survives the
processes that made it and resumes on a different number of ranks, with a plain and
with a sharded optimizer; the sampler's epoch goes on exactly once; a host notice raises
HostsUpdatedInterrupt on every rank.

  test_state.py <mpirun> <python>
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
mpirun, python = sys.argv[1], sys.argv[2]


def mpi(np, phase, out, env, stdin=None):
    cmd = [mpirun, "-np", str(np), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [python, os.path.join(HERE, "state_phase.py"), phase, out]
    p = subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=120)
    print(f"--- {phase} (np {np}): exit {p.returncode}\n{p.stdout}{p.stderr}", flush=True)
    return p


def after_training(out, env):
    """A failure after run() returned: the job restarts from the end of training, not
    its beginning; where that commit is gone, it stops."""
    failures = []
    folder = os.path.join(out, "store", "final-test")
    p = mpi(2, "final", out, env)
    trained = re.findall(r'\[accord-elastic\] \{"commit": (\d+), "event": "trained", "host": "[^"]+", '
                         r'"rank": (\d), "state": 0\}', p.stderr)
    if p.returncode == 0 or "FAILED" in p.stderr or trained != [("2", "0")]:
        failures.append(f"final: exit {p.returncode} (want non-zero), trained reports {trained} "
                        "(want rank 0's, commit 2)")
    kept = [f for d in os.listdir(folder) for f in os.listdir(os.path.join(folder, d))] \
        if os.path.isdir(folder) else []
    if kept != ["commit-2.pt"]:
        failures.append(f"a process ended by an exception after run() keeps the commits: {kept}")
    restart = dict(env, ACCORDRUN_ELASTIC_RESET="1", ACCORDRUN_ELASTIC_TRAINED="0:2")
    p = mpi(2, "final-again", out, restart)
    if p.returncode != 0 or "STEP" in p.stdout or p.stdout.count("AFTER batch 3") != 2:
        failures.append("final-again: the restart takes no step and runs the work after run()")
    if os.path.isdir(folder) and any(os.listdir(os.path.join(folder, d)) for d in os.listdir(folder)):
        failures.append("a process that ends well after run() removes the commits")
    p = mpi(2, "final-lost", out, restart)
    if p.returncode == 0 or "STEP" in p.stdout or '"event": "fatal"' not in p.stderr or \
            not re.search(r'TrainingLostError: training had finished before this restart \(its '
                          r'final commit is number 2\), but the hosts of this run hold no commit',
                          p.stderr):
        failures.append("final-lost: a restart that finds no final commit stops, fatal")
    return failures


def two_calls(out, env):
    """A training, then a fine-tuning, each an hvd.elastic.run call with its own state: a
    failure in the second replays the first from its end and resumes the second from its
    own commit."""
    failures = []
    folder = os.path.join(out, "store", "two-calls")
    p = mpi(2, "two-calls", out, env)
    trained = re.findall(r'"commit": (\d+), "event": "trained", "host": "[^"]+", "rank": 0, '
                         r'"state": 0', p.stderr)
    if p.returncode != 75 or "FAILED" in p.stderr or trained != ["2", "3"]:
        failures.append(f"two-calls: exit {p.returncode} (want 75), the first state's trained "
                        f"reports {trained} (want commits 2 and 3)")
    kept = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder)
                  for f in files)
    host = kept[0].split(os.sep)[0] if kept else "?"
    want = [os.path.join(host, "commit-3.pt"), os.path.join(host, "state-2", "commit-1.pt")]
    if kept != want:
        failures.append(f"each state keeps its own commits, the newest: {kept} (want {want})")
    p = mpi(2, "two-calls-again", out, dict(env, ACCORDRUN_ELASTIC_RESET="1",
                                            ACCORDRUN_ELASTIC_TRAINED="0:3"))
    if p.returncode != 0 or "A STEP" in p.stdout or p.stdout.count("B EPOCH 2") != 2 \
            or "B EPOCH 1" in p.stdout or "PHASE two-calls-again OK" not in p.stdout:
        failures.append("two-calls-again: the first call takes no step, the second goes on "
                        "from its own commit")
    left = [f for _, _, files in os.walk(folder) for f in files]
    if left:
        failures.append(f"a process that ends well removes every state's commits: {left}")
    return failures


def main():
    if not os.path.exists(python) or \
            subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"skipped: {python} has no torch")
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, ACCORDRUN_ELASTIC_JOB="state-test", ACCORDRUN_ELASTIC_STORE=out + "/store")
        env.pop("ACCORDRUN_ELASTIC_RESET", None)
        p = mpi(2, "first", out, env)
        if p.returncode != 75 or "FAILED" in p.stderr:
            failures.append("phase first")
        host_dir = os.path.join(out, "store", "state-test")
        kept = [f for d in os.listdir(host_dir) for f in os.listdir(os.path.join(host_dir, d))]
        if kept != ["commit-1.pt"]:
            failures.append(f"the host keeps one commit on disk: {kept}")
        p = mpi(3, "second", out, dict(env, ACCORDRUN_ELASTIC_RESET="1"))
        if p.returncode != 0 or "PHASE second OK" not in p.stdout:
            failures.append("phase second")
        if os.path.exists(host_dir) and any(os.listdir(os.path.join(host_dir, d)) for d in os.listdir(host_dir)):
            failures.append("a job that ends removes its commits")
        # The notice reaches rank 0 through mpirun's standard input.
        p = mpi(2, "notice", out, dict(env, ACCORDRUN_ELASTIC_NOTICE="stdin", ACCORDRUN_ELASTIC_JOB="notice"),
                stdin="hosts-updated\n")
        reports = re.findall(r'\[accord-elastic\] \{"commit": 1, "event": "hosts-updated", "host": "[^"]+", "rank": (\d)\}',
                             p.stderr)
        if p.returncode != 76 or sorted(reports) != ["0", "1"]:
            failures.append(f"notice: exit {p.returncode} (want 76), reports from ranks {reports}")
        # A ShardedOptimizer in the state: committed on 2 ranks, resumed on 3.
        env = dict(env, ACCORDRUN_ELASTIC_JOB="sharded-test")
        p = mpi(2, "sharded-first", out, env)
        if p.returncode != 75 or "FAILED" in p.stderr:
            failures.append("phase sharded-first")
        p = mpi(3, "sharded-second", out, dict(env, ACCORDRUN_ELASTIC_RESET="1"))
        if p.returncode != 0 or "PHASE sharded-second OK" not in p.stdout:
            failures.append("phase sharded-second")
        failures += after_training(out, dict(env, ACCORDRUN_ELASTIC_JOB="final-test"))
        failures += two_calls(out, dict(env, ACCORDRUN_ELASTIC_JOB="two-calls"))
    for f in failures:
        print("FAILED:", f)
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""A ShardedOptimizer in hvd.elastic's TorchState, under mpirun on one host
(sharded_phase.py): a commit taken on 2 ranks resumes on 3, each rank re-cut its part.

  test_sharded_state.py <mpirun> <python>
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
mpirun, python = sys.argv[1], sys.argv[2]


def mpi(np, phase, out, env):
    cmd = [mpirun, "-np", str(np), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [python, os.path.join(HERE, "sharded_phase.py"), phase, out]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    print(f"--- {phase} (np {np}): exit {p.returncode}\n{p.stdout}{p.stderr}", flush=True)
    return p


def main():
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"skipped: {python} has no torch")
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, ACCORDRUN_ELASTIC_JOB="sharded-test",
                   ACCORDRUN_ELASTIC_STORE=out + "/store")
        env.pop("ACCORDRUN_ELASTIC_RESET", None)
        p = mpi(2, "first", out, env)
        if p.returncode != 75 or "FAILED" in p.stderr:
            failures.append("phase first")
        p = mpi(3, "second", out, dict(env, ACCORDRUN_ELASTIC_RESET="1"))
        if p.returncode != 0 or "PHASE second OK" not in p.stdout:
            failures.append("phase second")
    for f in failures:
        print("FAILED:", f)
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""`accordrun --dry-run` with elastic flags: prints the driver's first mpirun command (on
the hosts usable now, at most --max-np ranks, with the variables it passes the ranks)
and starts nothing; below --min-np it says so and exits 1.

  test_dry_run.py <accordrun>
"""
import os
import shlex
import subprocess
import sys
import tempfile

ACCORDRUN = sys.argv[1]
failed = []


def check(cond, what):
    print(("ok: " if cond else "FAILED: ") + what, flush=True)
    if not cond:
        failed.append(what)


def accordrun(*args):
    try:  # a dry run answers at once; one that runs the job tries to reach the hosts
        p = subprocess.run([ACCORDRUN, *args], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as e:
        p = subprocess.CompletedProcess(e.cmd, None, (e.stdout or b"").decode(), (e.stderr or b"").decode())
    print(f"+ accordrun {' '.join(args)}\n  exit {p.returncode}\n  stdout: {p.stdout}  stderr: {p.stderr}")
    return p


def words(line):
    """(variables set, argv) of a printed command."""
    parts = shlex.split(line)
    env = {}
    while parts and "=" in parts[0] and not parts[0].startswith("-"):
        k, v = parts.pop(0).split("=", 1)
        env[k] = v
    return env, parts


def after(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


with tempfile.TemporaryDirectory() as tmp:
    marker = os.path.join(tmp, "ran")

    # Fixed hosts: the first run takes every slot up to -np.
    p = accordrun("--dry-run", "-np", "3", "--min-np", "2", "-H", "nodea:2,nodeb:2",
                  "--elastic-store", os.path.join(tmp, "store"), "touch", marker)
    check(p.returncode == 0, f"exit 0 (got {p.returncode})")
    lines = p.stdout.strip().splitlines()
    check(len(lines) == 1, f"one line printed ({len(lines)})")
    env, argv = words(lines[0] if lines else "")
    check(os.path.basename(argv[0]) == "mpirun" if argv else False, f"an mpirun command: {argv[:1]}")
    check(after(argv, "-np") == ["3"], f"-np 3 (the first run's ranks): {after(argv, '-np')}")
    check(after(argv, "-H") == ["nodea:2,nodeb:1"], f"-H nodea:2,nodeb:1: {after(argv, '-H')}")
    check(argv[-2:] == ["touch", marker], f"the program last: {argv[-2:]}")
    passed = set(after(argv, "-x"))
    check({"ACCORDRUN_ELASTIC_JOB", "ACCORDRUN_ELASTIC_RESET", "ACCORDRUN_ELASTIC_NOTICE",
           "ACCORDRUN_ELASTIC_STORE"} <= passed, f"the driver's variables passed to the ranks: {sorted(passed)}")
    check(env.get("ACCORDRUN_ELASTIC_RESET") == "0" and
          env.get("ACCORDRUN_ELASTIC_STORE") == os.path.join(tmp, "store"),
          f"and set: reset 0, the store: {env}")
    check(not os.path.exists(marker), "nothing started")
    check("accordrun: starting" not in p.stderr, "the driver did not start a job")

    # A discovery script: run once; --max-np caps the ranks.
    script = os.path.join(tmp, "hosts.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho nodea:2\necho nodeb:3\n")
    os.chmod(script, 0o755)
    p = accordrun("--dry-run", "--min-np", "2", "--max-np", "4", "--host-discovery-script", script,
                  "touch", marker)
    env, argv = words(p.stdout.strip())
    check(p.returncode == 0 and after(argv, "-np") == ["4"] and after(argv, "-H") == ["nodea:2,nodeb:2"],
          f"discovered hosts, capped at --max-np 4: exit {p.returncode}, -np {after(argv, '-np')}, "
          f"-H {after(argv, '-H')}")
    check(not os.path.exists(marker), "nothing started")

    # Fewer slots than --min-np: no command, a message, exit 1 (and no wait).
    p = accordrun("--dry-run", "--min-np", "6", "--host-discovery-script", script,
                  "--elastic-timeout", "300", "touch", marker)
    check(p.returncode == 1 and p.stdout == "" and "fewer than --min-np 6" in p.stderr
          and "nodea:2, nodeb:3" in p.stderr,
          f"below --min-np: exit 1 naming the hosts, nothing printed (exit {p.returncode})")
    check(not os.path.exists(marker), "nothing started")

print("OK" if not failed else f"FAILED: {len(failed)} checks")
sys.exit(1 if failed else 0)

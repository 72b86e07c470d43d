#!/usr/bin/env python3
"""Runs a Python example under mpirun and checks what it prints.

    run_example.py --np 2 --work-dir /tmp/w --at-least 'accuracy ([0-9.]+)%' 50 \
        examples/python/pytorch_fashion_mnist.py --epochs 1

Skipped (exit 77) when --python lacks a module of --requires. Otherwise passes when
the run exits with 0 (or, with --fail, with anything else), every --expect
pattern occurs in its output, and the first group of every --at-least pattern is a
number at least that large wherever the pattern occurs (and it occurs at least once).

--horovod treats the script as one written for Horovod (horovod_api_training.py): its
Horovod import lines become Accord's (`import horovod.torch as hvd` -> `import
accord.torch as hvd`, and `import horovod` -> `import accord as horovod`), and nothing
else changes. The rewritten copy is what runs; a script without `import horovod.torch
as hvd`, or with a Horovod import left after the rewrite, fails the test.
"""
import argparse
import gzip
import os
import re
import shlex
import struct
import subprocess
import sys

REWRITES = [(re.compile(r"^import horovod\.torch as hvd$", re.M), "import accord.torch as hvd"),
            (re.compile(r"^import horovod$", re.M), "import accord as horovod")]
LEFTOVER = re.compile(r"^\s*(import|from)\s+horovod\b", re.M)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpiexec", default="mpirun")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--timeout", type=float, default=300, help="seconds before the run is killed")
    p.add_argument("--work-dir", required=True, help="scratch directory (created)")
    p.add_argument("--expect", action="append", default=[], metavar="REGEX")
    p.add_argument("--at-least", action="append", nargs=2, default=[], metavar=("REGEX", "VALUE"))
    p.add_argument("--fail", action="store_true", help="the run must exit with a non-zero status")
    p.add_argument("--requires", default="", metavar="MODULES",
                   help="comma-separated modules the script imports: without them the test is skipped (exit 77)")
    p.add_argument("--horovod", action="store_true", help="rewrite a Horovod script's import lines first")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args()


def rewrite_horovod(source_path, work_dir):
    with open(source_path) as f:
        text = f.read()
    if not REWRITES[0][0].search(text):
        sys.exit(f"{source_path}: no line `import horovod.torch as hvd` to rewrite")
    for pattern, replacement in REWRITES:
        text = pattern.sub(replacement, text)
    leftover = LEFTOVER.search(text)
    if leftover:
        sys.exit(f"{source_path}: a Horovod import is left after the rewrite: {leftover.group(0).strip()}")
    path = os.path.join(work_dir, os.path.basename(source_path))
    with open(path, "w") as f:
        f.write(text)
    return path


def skip_unless_importable(python, modules):
    """Exits with 77 (CTest's skip code here) when `python` is missing or cannot import
    one of `modules`, naming what is missing."""
    if not modules:
        return
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        print(f"SKIPPED: no interpreter {python} (ci/python-env.sh makes the PyTorch 2.x one)")
        sys.exit(77)
    probe = "import importlib, sys\nfor m in sys.argv[1:]:\n    try: importlib.import_module(m)\n    except ImportError: print(m)"
    missing = subprocess.run([python, "-c", probe] + modules, stdout=subprocess.PIPE, text=True).stdout.split()
    if missing:
        print(f"SKIPPED: {python} cannot import {', '.join(missing)} "
              f"(Debian: apt-get install python3-<name>; a virtual environment: pip install <name>)")
        sys.exit(77)


def check(output, returncode, args):
    failures = []
    if args.fail and returncode == 0:
        failures.append("the run exited with 0, a failure was expected")
    if not args.fail and returncode != 0:
        failures.append(f"the run exited with {returncode}")
    for pattern in args.expect:
        if not re.search(pattern, output, re.M):
            failures.append(f"no line matches {pattern!r}")
    for pattern, minimum in args.at_least:
        values = [float(m.group(1)) for m in re.finditer(pattern, output, re.M)]
        if not values:
            failures.append(f"no line matches {pattern!r}")
        elif min(values) < float(minimum):
            failures.append(f"{pattern!r}: {min(values):g} is below {minimum}")
    return failures


def main():
    args = parse_args()
    skip_unless_importable(args.python, [m for m in args.requires.split(",") if m])
    os.makedirs(args.work_dir, exist_ok=True)
    script = rewrite_horovod(args.script, args.work_dir) if args.horovod else os.path.abspath(args.script)
    script_args = list(args.args[1:] if args.args[:1] == ["--"] else args.args)
    # The examples import helpers that sit beside them (bench_stats.py).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(args.script)),
                                                      env.get("PYTHONPATH")]))
    # Forwarded with -x, or through the MCA parameter mca_base_env_list where that is
    # set (ci/sanitize.sh preloads the sanitizer with it): Open MPI refuses both at once.
    forward = ["-x", "PYTHONPATH"]
    if env.get("OMPI_MCA_mca_base_env_list"):
        env["OMPI_MCA_mca_base_env_list"] += ";PYTHONPATH"
        forward = []
    cmd = [args.mpiexec, "-np", str(args.np), "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           *forward, args.python, script] + script_args
    print("+", shlex.join(cmd), flush=True)
    # mpirun forwards SIGTERM to its ranks; SIGKILL would leave them running.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=args.work_dir, env=env)
    try:
        output, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        print(output)
        sys.exit(f"FAILED: no result within {args.timeout:g} s")
    returncode = proc.returncode
    print(output, flush=True)
    failures = check(output, returncode, args)
    for failure in failures:
        print("FAILED:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

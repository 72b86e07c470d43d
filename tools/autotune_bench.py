#!/usr/bin/env python3
"""Does ACCORD_AUTOTUNE find settings as good as the best hand-picked ones?

Runs the ResNet-50 gradient set of accord-bench (161 named tensors per step, Sum) under
mpirun once per hand-picked setting of a grid, then once with ACCORD_AUTOTUNE=1 started
from a poor point (no fusion, 16 KiB pieces, 5 ms cycles), whose untimed warm-up steps
cover the search; repeats the whole set --repeats times, alternating, and prints each
one's median step time and autotune's over the best hand-picked one:

  python3 tools/autotune_bench.py --bench build/tools/accord-bench -np 2

Each timed figure is a median over --steps steps of one run; the final ratio uses the
median over repeats. < 1.05 meets the target "within 5% of the best hand-picked".
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

FUSION = ["64K", "1M", "4M", "16M", "64M"]
CHUNK = ["512K", "1M", "2M"]
BAD_START = "ACCORD_FUSION_THRESHOLD=0 ACCORD_CHUNK_BYTES=16K ACCORD_CYCLE_TIME=5"
TUNABLE = ("ACCORD_FUSION_THRESHOLD", "ACCORD_CHUNK_BYTES", "ACCORD_CYCLE_TIME",
           "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "ACCORD_AUTOTUNE",
           "HOROVOD_AUTOTUNE", "ACCORD_AUTOTUNE_START", "ACCORD_AUTOTUNE_STEPS")


def run_bench(args, env_extra, warmup, log_path=None):
    """Median ms of Accord's ResNet-50 step (Sum) in one accord-bench run."""
    env = {k: v for k, v in os.environ.items() if k not in TUNABLE}
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    env.update(env_extra)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.csv")
        cmd = [args.mpirun, "-np", str(args.np), "--bind-to", "none"]
        for var in sorted(env_extra):  # mpirun forwards them to every rank
            cmd += ["-x", var]
        cmd += [args.bench, "--resnet-only", "--resnet-steps", str(args.steps),
                "--resnet-warmup", str(warmup), "--csv", out]
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=args.timeout)
        if done.returncode != 0:
            sys.exit(f"autotune_bench: {' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}")
        with open(out, newline="") as f:
            for row in csv.DictReader(f):
                if row["section"] == "resnet50" and row["variant"] == "accord_sum":
                    return float(row["time_us"]) / 1000.0
    sys.exit("autotune_bench: accord-bench wrote no accord_sum row")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default="build/tools/accord-bench", help="accord-bench binary")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("-np", "--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--steps", type=int, default=15, help="timed steps per run (default 15)")
    p.add_argument("--repeats", type=int, default=2, help="passes over every case (default 2)")
    p.add_argument("--tune-steps", type=int, default=3,
                   help="ACCORD_AUTOTUNE_STEPS for the autotuned run (default 3)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--log", help="keep the last autotuned run's trial log here (CSV)")
    args = p.parse_args()
    for name in ("np", "steps", "repeats", "tune_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if not os.access(args.bench, os.X_OK):
        p.error(f"--bench {args.bench}: not an executable (build accord-bench first)")

    # 1 + 7 + 5 + 3 trials of (1 + tune_steps) steps, and a margin.
    search_steps = 16 * (1 + args.tune_steps) + 4
    cases = [(f"fusion {f}, pieces {c}", {"ACCORD_FUSION_THRESHOLD": f, "ACCORD_CHUNK_BYTES": c,
                                          "ACCORD_CYCLE_TIME": "0"}, 2)
             for f in FUSION for c in CHUNK]
    log_path = os.path.abspath(args.log) if args.log else os.path.join(
        tempfile.gettempdir(), f"autotune_bench_{os.getpid()}.csv")
    tuned_env = {"ACCORD_AUTOTUNE": "1", "ACCORD_AUTOTUNE_STEPS": str(args.tune_steps),
                 "ACCORD_AUTOTUNE_START": BAD_START, "ACCORD_AUTOTUNE_LOG": log_path}
    cases.append((f"autotune from [{BAD_START}]", tuned_env, search_steps))
    cases.append(("the bad start itself (no autotune)", {
        "ACCORD_FUSION_THRESHOLD": "0", "ACCORD_CHUNK_BYTES": "16K", "ACCORD_CYCLE_TIME": "5"}, 2))

    times = {name: [] for name, _, _ in cases}
    total = len(cases) * args.repeats
    done = 0
    for rep in range(args.repeats):
        order = cases if rep % 2 == 0 else list(reversed(cases))
        for name, env, warmup in order:
            done += 1
            print(f"[{done}/{total}] {name} ...", file=sys.stderr, flush=True)
            times[name].append(run_bench(args, env, warmup))

    print(f"# ResNet-50 gradient set, {args.np} ranks: median step (ms) per run, Accord Sum")
    hand = [name for name, _, _ in cases[:-2]]
    for name, _, _ in cases:
        runs = " ".join(f"{t:8.2f}" for t in times[name])
        print(f"  {name:<72} {statistics.median(times[name]):8.2f}   runs: {runs}")
    best = min(hand, key=lambda n: statistics.median(times[n]))
    tuned = statistics.median(times[cases[-2][0]])
    best_ms = statistics.median(times[best])
    print(f"  best hand-picked: {best} ({best_ms:.2f} ms)")
    if os.path.exists(log_path):
        with open(log_path) as f:
            settled = [line.strip() for line in f if line.startswith("settled,")]
        if settled:
            fields = settled[-1].split(",")
            print(f"  autotune settled on: fusion {fields[1]} B, pieces {fields[2]} B, "
                  f"cycle {fields[3]} ms (trial log: {log_path})")
    print(f"  autotune/best hand-picked time ratio {tuned / best_ms:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Medians over repeated accord-bench runs.

One accord-bench run times Accord and raw MPI alternately and reports medians over its
iterations; runs on a shared machine still differ. Give this the CSV files of several
runs (accord-bench --csv FILE) and it prints, per case, every run's Accord/MPI figure
and their median:

  for i in 1 2 3 4 5; do mpirun -np 2 build/tools/accord-bench --csv run$i.csv; done
  python3 tools/bench_summary.py run*.csv

Sweep and latency rows give the speed ratio MPI time / Accord time (= Accord busbw /
MPI busbw; > 1 means Accord is faster). ResNet-50 rows give Accord's time over the
best raw-MPI strategy of the same run (< 1 means Accord is faster).
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict

RAW_RESNET = ("mpi_a_blocking", "mpi_b_iallreduce", "mpi_c_concatenated")


def human(nbytes):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            value = nbytes / (1 << shift)
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return str(nbytes)


def read_run(path):
    """{(section, variant, bytes): time_us} and the rank count of one CSV file."""
    times, ranks = {}, set()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"section", "variant", "bytes", "ranks", "time_us"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            sys.exit(f"bench_summary: {path} is not an accord-bench CSV "
                     f"(expected columns {', '.join(sorted(need))})")
        for row in reader:
            key = (row["section"], row["variant"], int(float(row["bytes"])))
            times[key] = float(row["time_us"])
            ranks.add(int(row["ranks"]))
    if not times:
        sys.exit(f"bench_summary: {path} holds no measurements")
    return times, ranks


def figures(times):
    """{(section, label, bytes): value} for one run."""
    out = {}
    for (section, variant, nbytes), t in times.items():
        if section in ("sweep", "latency") and variant == "accord":
            mpi = times.get((section, "mpi_allreduce", nbytes))
            if mpi:
                out[(section, "MPI/Accord speed", nbytes)] = mpi / t
            if section == "latency":
                out[(section, "Accord us", nbytes)] = t
                if mpi:
                    out[(section, "MPI us", nbytes)] = mpi
        elif section == "resnet50" and variant.startswith("accord"):
            raw = [times[(section, v, nbytes)] for v in RAW_RESNET if (section, v, nbytes) in times]
            if raw:
                out[(section, variant.replace("accord_", "") + " / best MPI", nbytes)] = t / min(raw)
    return out


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Example: python3 tools/bench_summary.py run1.csv run2.csv run3.csv")
    parser.add_argument("csv", nargs="+", help="accord-bench --csv files, one per run")
    args = parser.parse_args()

    per_case = defaultdict(list)
    all_ranks = set()
    for path in args.csv:
        try:
            times, ranks = read_run(path)
        except OSError as e:
            sys.exit(f"bench_summary: cannot read {path}: {e.strerror}")
        all_ranks |= ranks
        for key, value in figures(times).items():
            per_case[key].append(value)
    if len(all_ranks) > 1:
        sys.exit(f"bench_summary: the files mix runs on {sorted(all_ranks)} ranks")

    print(f"# {len(args.csv)} runs on {all_ranks.pop()} ranks: each run's figure, then the median")
    order = {"sweep": 0, "latency": 1, "resnet50": 2}
    for (section, label, nbytes) in sorted(per_case, key=lambda k: (order[k[0]], k[2], k[1])):
        values = per_case[(section, label, nbytes)]
        runs = " ".join(f"{v:7.2f}" for v in values)
        print(f"{section:9} {human(nbytes):>6} {label:24} {runs}   median {statistics.median(values):.2f}")


if __name__ == "__main__":
    main()

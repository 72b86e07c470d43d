#!/usr/bin/env python3
"""Accord's Adasum allreduce against Horovod's, in one run on the same ranks.

    mpirun -np 2 python3 examples/python/bench_adasum.py

Reduces every gradient of --model (ResNet-50: 161 tensors, 98 MiB of float32) with
op=Adasum, all submitted at once as DistributedOptimizer submits them, and prints the
time as mean +- 95% confidence interval for:

- accord Adasum: accord.torch.allreduce_async_(op=Adasum);
- accord Average: the same tensors averaged, what Adasum costs beyond a plain
  allreduce (the two interleaved: in every round each reduces the set once, in
  alternating order);
- horovod Adasum: horovod.torch's, where Horovod is importable in the same
  interpreter, after Accord's rounds: Horovod starts then, on the MPI that Accord
  started, each runtime on its own duplicate of the communicator. Not interleaved with
  Accord's: Horovod's background thread allreduces every cycle (1 ms) even when idle,
  which on a host with few cores slows whatever runs beside it (Accord's Adasum took
  3x as long with Horovod idle in the same processes), while Accord's idle cycle costs
  little.

and the ratios accord Adasum / horovod Adasum (of the means) and / accord Average
(the mean of the rounds' ratios); below 1 the first is faster. Both Adasums get the
same inputs; the largest difference between their results is printed too (Accord
combines in the same order and precision as Horovod's CPU Adasum, so on 2 ranks it is
0). A sample is the slowest rank's time. Needs a power-of-two number of ranks.
"""
import argparse
import time

import torch
import torchvision

import accord.torch as hvd
from bench_stats import format_ci, mean_ci

MIB = 1 << 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50",
                   help="torchvision model whose parameter shapes are reduced (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=8, help="timed rounds (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default: %(default)s)")
    p.add_argument("--no-horovod", action="store_true",
                   help="leave Horovod out even where it is importable")
    args = p.parse_args()
    if args.rounds < 2:
        p.error(f"--rounds must be at least 2 (for an interval), got {args.rounds}")
    if args.warmup < 0:
        p.error(f"--warmup must not be negative, got {args.warmup}")
    constructor = getattr(torchvision.models, args.model, None)
    if args.model.startswith("_") or args.model[:1].isupper() or not callable(constructor):
        p.error(f"--model {args.model}: not a model constructor in torchvision.models")
    args.constructor = constructor
    return args


def slowest(seconds):
    """The slowest rank's time (every rank waits for the same collectives)."""
    return hvd.allreduce(torch.tensor([seconds], dtype=torch.float64), op=hvd.Max,
                         name="bench.slowest").item()


def timed(reduce, tensors, prefix):
    hvd.barrier()
    start = time.perf_counter()
    reduce(tensors, prefix)
    return slowest(time.perf_counter() - start)


def accord_reduce(op):
    def run(tensors, prefix):
        handles = [hvd.allreduce_async_(t, op=op, name=f"{prefix}.{i}")
                   for i, t in enumerate(tensors)]
        for h in handles:
            hvd.synchronize(h)
    return run


def horovod_reduce(hh):
    def run(tensors, prefix):
        handles = [hh.allreduce_async_(t, op=hh.Adasum, name=f"{prefix}.{i}")
                   for i, t in enumerate(tensors)]
        for h in handles:
            hh.synchronize(h)
    return run


def main():
    args = parse_args()
    hvd.init()
    n = hvd.size()
    if n & (n - 1):
        raise SystemExit(f"bench_adasum: Adasum needs a power-of-two number of ranks; this "
                         f"job has {n}")
    torch.manual_seed(1 + hvd.rank())
    shapes = [p.shape for p in args.constructor().parameters()]
    source = [torch.randn(s) for s in shapes]
    total = sum(t.numel() * t.element_size() for t in source)

    def rounds(variants, times, outputs):
        for r in range(args.warmup + args.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                tensors = [t.clone() for t in source]
                seconds = timed(variants[name], tensors, name.replace(" ", "."))
                if r >= args.warmup:
                    times.setdefault(name, []).append(seconds)
                outputs[name] = tensors

    times, outputs = {}, {}
    rounds({"accord Adasum": accord_reduce(hvd.Adasum),
            "accord Average": accord_reduce(hvd.Average)}, times, outputs)
    hh = None
    if not args.no_horovod:
        try:
            import horovod.torch as hh
        except ImportError:
            hh = None
    if hh is not None:
        hh.init()
        rounds({"horovod Adasum": horovod_reduce(hh)}, times, outputs)
        # Before Accord's shutdown: Accord finalizes the MPI it started, and Horovod's
        # background thread must be gone by then.
        hh.shutdown()
    if hvd.rank() != 0:
        hvd.shutdown()
        return
    print(f"{args.model} gradients: {len(source)} tensors, {total / MIB:.1f} MiB of float32, "
          f"{n} ranks, {args.rounds} rounds")
    for name, samples in times.items():
        print(f"  {name:15s} {format_ci(samples, 1e3)} ms")
    base = times["accord Adasum"]
    if "horovod Adasum" in times:
        ratio = mean_ci(base)[0] / mean_ci(times["horovod Adasum"])[0]
        print(f"  ratio accord Adasum / horovod Adasum (of the means): {ratio:.3f}")
    mean, ci = mean_ci([a / b for a, b in zip(base, times["accord Average"])])
    print(f"  ratio accord Adasum / accord Average: {mean:.3f} +- {ci:.3f}")
    if hh is not None:
        diff = max((a - b).abs().max().item()
                   for a, b in zip(outputs["accord Adasum"], outputs["horovod Adasum"]))
        print(f"  largest difference accord Adasum - horovod Adasum: {diff:.3g}")
    else:
        print("  (Horovod is not importable here, or --no-horovod: no horovod Adasum "
              "baseline)")
    hvd.shutdown()


if __name__ == "__main__":
    main()

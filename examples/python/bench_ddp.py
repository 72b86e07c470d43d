#!/usr/bin/env python3
"""Accord against PyTorch's DistributedDataParallel (gloo), in one run on the same ranks.

    mpirun -np 2 python3 examples/python/bench_ddp.py

Three measurements, each printed as mean +- 95% confidence interval and as the ratio
Accord / PyTorch (below 1: Accord is faster):

1. A training step of --model (ResNet-18) on a fixed synthetic batch: forward, loss,
   backward, SGD step, with accord.torch.DistributedOptimizer and with
   torch.nn.parallel.DistributedDataParallel over gloo (its defaults: 25 MiB buckets,
   buffers broadcast every forward), and, for reference, without any communication
   ("local"): the difference to it is what communication adds to a step. All models
   start from the same weights.
2. The bare allreduce (sum) of every gradient of --allreduce-model (ResNet-50: 161
   tensors, 98 MiB of float32): hvd.allreduce_async_ against
   torch.distributed.all_reduce(async_op=True), first one call per tensor, then over
   the tensors flattened into --bucket-mb buckets as DDP forms them.
3. The latency of one 4 KiB allreduce, called back to back.

The variants run interleaved: in every round each runs its steps, in alternating
order, so a burst of machine noise hits both sides. A sample is the slowest rank's
time. Ratios are the mean of the rounds' own ratios.

torch.distributed starts from the launcher's variables (OMPI_COMM_WORLD_RANK/SIZE,
PMI_RANK/SIZE or SLURM_PROCID/NTASKS), which must agree with Accord's rank and size; it
meets at MASTER_ADDR:MASTER_PORT, by default rank 0's host and a free port there, which
rank 0 sends to the others through Accord.
"""
import argparse
import copy
import datetime
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

import accord.torch as hvd
from bench_stats import format_ci, mean_ci

MIB = 1 << 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18", help="torchvision model of the training step (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=16, help="images per rank and step (default: %(default)s)")
    p.add_argument("--image-size", type=int, default=224, help="image height and width (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=6, help="rounds of every measurement (default: %(default)s)")
    p.add_argument("--steps", type=int, default=3, help="training steps per variant and round (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first (default: %(default)s)")
    p.add_argument("--allreduce-model", default="resnet50",
                   help="torchvision model whose parameter shapes the bare allreduce uses; "
                        "'none' skips it (default: %(default)s)")
    p.add_argument("--allreduce-reps", type=int, default=3,
                   help="allreduces of the whole gradient set per variant and round (default: %(default)s)")
    p.add_argument("--latency-reps", type=int, default=200,
                   help="4 KiB allreduces per variant and round; 0 skips them (default: %(default)s)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size in MiB, DDP's default (default: %(default)s)")
    p.add_argument("--skip-step", action="store_true", help="measure the allreduces only")
    p.add_argument("--no-local", action="store_true",
                   help="leave out the training step without communication, the reference for what "
                        "communication adds")
    p.add_argument("--threads", type=int, default=0,
                   help="PyTorch CPU threads per rank; 0: this host's cores divided among its ranks")
    args = p.parse_args()
    for flag in ("batch_size", "image_size", "rounds", "steps", "allreduce_reps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.warmup < 0 or args.latency_reps < 0 or args.threads < 0 or args.bucket_mb <= 0:
        p.error("--warmup, --latency-reps and --threads must not be negative, --bucket-mb must be positive")
    for name in (args.model, args.allreduce_model):
        if name != "none" and not callable(getattr(torchvision.models, name, None)):
            p.error(f"{name}: not a model constructor in torchvision.models")
    return args


def launcher_rank_size():
    for rank_var, size_var in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var]), rank_var
    return hvd.rank(), hvd.size(), "Accord"


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def init_torch_distributed():
    rank, size, source = launcher_rank_size()
    if (rank, size) != (hvd.rank(), hvd.size()):
        raise SystemExit(f"bench_ddp: {source} says rank {rank} of {size}, Accord says rank "
                         f"{hvd.rank()} of {hvd.size()}: launch both from the same mpirun")
    endpoint = None
    if hvd.rank() == 0:
        endpoint = (os.environ.get("MASTER_ADDR") or socket.gethostname(),
                    int(os.environ.get("MASTER_PORT") or free_port()))
    addr, port = hvd.broadcast_object(endpoint, root_rank=0, name="bench_ddp.endpoint")
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(minutes=5))


def slowest(samples):
    """Each sample's maximum over the ranks: a collective is done when its last rank is."""
    t = torch.tensor(samples, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def interleave(variants, rounds, reps):
    """{name: [per-round lists of seconds]}; each round runs every variant `reps` times,
    in reversed order every other round."""
    names = list(variants)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            # Untimed: a variant without communication lets the ranks drift apart, and the
            # next variant's first step would otherwise absorb the skew.
            dist.barrier()
            samples = []
            for _ in range(reps):
                start = time.perf_counter()
                variants[name]()
                samples.append(time.perf_counter() - start)
            times[name].append(slowest(samples))
    return times


def report(title, times, unit, scale, accord, other):
    """Prints each variant's mean +- CI and the ratio accord/other per round."""
    print(title, flush=True)
    width = max(len(n) for n in times)
    for name, rounds in times.items():
        flat = [s for r in rounds for s in r]
        print(f"  {name:<{width}}  {format_ci(flat, scale)} {unit}", flush=True)
    ratios = [mean_ci(a)[0] / mean_ci(o)[0] for a, o in zip(times[accord], times[other])]
    print(f"  ratio {accord} / {other}: {format_ci(ratios, 1.0, 3)}", flush=True)


def bench_step(args, log):
    torch.manual_seed(0)
    base = getattr(torchvision.models, args.model)()
    hvd.broadcast_parameters(base.state_dict(), root_rank=0)
    # Three models with rank 0's initial weights, one per variant.
    ddp_model = DistributedDataParallel(copy.deepcopy(base), bucket_cap_mb=args.bucket_mb)
    local_model = copy.deepcopy(base)
    accord_model = base
    accord_opt = hvd.DistributedOptimizer(torch.optim.SGD(accord_model.parameters(), lr=0.01, momentum=0.9),
                                          named_parameters=accord_model.named_parameters())
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01, momentum=0.9)
    local_opt = torch.optim.SGD(local_model.parameters(), lr=0.01, momentum=0.9)

    torch.manual_seed(1 + hvd.rank())  # each rank its own batch, as each would its own shard
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, 1000, (args.batch_size,))

    def step(model, opt):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    variants = {"accord": lambda: step(accord_model, accord_opt), "ddp": lambda: step(ddp_model, ddp_opt)}
    if not args.no_local:
        variants["local"] = lambda: step(local_model, local_opt)
    for run in variants.values():
        for _ in range(args.warmup):
            run()
    times = interleave(variants, args.rounds, args.steps)
    gap = max((a - d).abs().max().item() for a, d in zip(accord_model.parameters(), ddp_model.parameters()))
    if log:
        report(f"Training step: {args.model}, batch {args.batch_size} per rank, {args.image_size}x{args.image_size}, "
               f"SGD momentum 0.9 ({args.rounds} rounds x {args.steps} steps)", times, "ms", 1e3, "accord", "ddp")
        if "local" in times:
            for name in ("accord", "ddp"):
                extra = [mean_ci(v)[0] - mean_ci(l)[0] for v, l in zip(times[name], times["local"])]
                print(f"  {name} - local (what communication adds): {format_ci(extra, 1e3)} ms", flush=True)
        print(f"  largest parameter difference Accord vs DDP after "
              f"{args.warmup + args.rounds * args.steps} steps: {gap:.2e}", flush=True)


def buckets_of(tensors, bucket_bytes):
    """Flat buffers holding consecutive tensors of the gradient order (last layer first,
    as backward produces them and DDP fills its buckets) up to bucket_bytes each."""
    buckets, current, size = [], [], 0
    for t in reversed(tensors):
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(t)
        size += nbytes
    buckets.append(current)
    return [torch.zeros(sum(t.numel() for t in b)) for b in buckets]


def bench_allreduce(args, log):
    # Zeros: a sum of zeros stays zero however often it is repeated (no overflow, no
    # denormals), and its speed is that of any other float32 data.
    shapes = [p.shape for p in getattr(torchvision.models, args.allreduce_model)().parameters()]
    tensors = [torch.zeros(s) for s in shapes]
    buckets = buckets_of(tensors, int(args.bucket_mb * MIB))

    def accord_all(ts, prefix):
        handles = [hvd.allreduce_async_(t, name=f"{prefix}.{i}", op=hvd.Sum) for i, t in enumerate(ts)]
        for h in handles:
            hvd.synchronize(h)

    def gloo_all(ts):
        for work in [dist.all_reduce(t, async_op=True) for t in ts]:
            work.wait()

    for name, ts in (("per tensor", tensors), ("bucketed", buckets)):
        variants = {"accord": lambda ts=ts, name=name: accord_all(ts, name.replace(" ", "_")),
                    "gloo": lambda ts=ts: gloo_all(ts)}
        for run in variants.values():
            run()
        times = interleave(variants, args.rounds, args.allreduce_reps)
        if log:
            mib = sum(t.numel() for t in tensors) * 4 / MIB
            what = (f"{len(tensors)} tensors" if name == "per tensor"
                    else f"{len(buckets)} buckets of up to {args.bucket_mb:g} MiB")
            report(f"{args.allreduce_model} gradient allreduce, {name}: {what}, {mib:.1f} MiB float32, sum "
                   f"({args.rounds} rounds x {args.allreduce_reps})", times, "ms", 1e3, "accord", "gloo")


def bench_latency(args, log):
    t = torch.zeros(1024)  # 4 KiB of float32

    def accord_many():
        for _ in range(args.latency_reps):
            hvd.allreduce_(t, name="latency", op=hvd.Sum)

    def gloo_many():
        for _ in range(args.latency_reps):
            dist.all_reduce(t)

    variants = {"accord": accord_many, "gloo": gloo_many}
    for run in variants.values():
        run()
    times = interleave(variants, args.rounds, 1)
    if log:
        per_call = {k: [[s / args.latency_reps for s in r] for r in v] for k, v in times.items()}
        report(f"4 KiB allreduce, one call at a time ({args.rounds} rounds x {args.latency_reps} calls)",
               per_call, "us", 1e6, "accord", "gloo")


def main():
    args = parse_args()
    hvd.init()
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(args.threads or max(1, cores // hvd.local_size()))
    init_torch_distributed()
    log = hvd.rank() == 0
    if log:
        settings = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("ACCORD_"))
        print(f"bench_ddp: {hvd.size()} ranks, {torch.get_num_threads()} thread(s) each, torch {torch.__version__}"
              f"{', ' + settings if settings else ''}", flush=True)
    if not args.skip_step:
        bench_step(args, log)
    if args.allreduce_model != "none":
        bench_allreduce(args, log)
    if args.latency_reps:
        bench_latency(args, log)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

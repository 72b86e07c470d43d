#!/usr/bin/env python3
"""Training throughput of a torchvision model on synthetic data, with Accord.

Every rank trains the same model (ResNet-50 unless --model says otherwise) on one fixed
random batch, so the figure measures compute plus gradient averaging and nothing of a
data pipeline. Gradients go through accord.torch.DistributedOptimizer, which starts
each parameter's allreduce as soon as backward has produced its gradient.

After --num-warmup-batches untimed steps, --num-iters iterations of
--num-batches-per-iter steps each are timed. Printed: each iteration's img/sec on
rank 0, then every rank's img/sec and the total over all ranks, each as the mean over
the iterations +- the half-width of its 95% confidence interval.

    mpirun -np 2 python3 examples/python/pytorch_synthetic_benchmark.py --model resnet18
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
import torchvision

import accord.torch as hvd
from bench_stats import format_ci


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50",
                   help="a torchvision.models constructor: resnet18, resnet50, vgg16, ... (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank and step (default: %(default)s)")
    p.add_argument("--image-size", type=int, default=224,
                   help="height and width of the synthetic images (default: %(default)s)")
    p.add_argument("--num-warmup-batches", type=int, default=10,
                   help="untimed steps before the first iteration (default: %(default)s)")
    p.add_argument("--num-batches-per-iter", type=int, default=10,
                   help="steps per timed iteration (default: %(default)s)")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations (default: %(default)s)")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="send gradients as float16 (hvd.Compression.fp16)")
    p.add_argument("--use-adasum", action="store_true",
                   help="combine the ranks' steps with Adasum (a power-of-two number of ranks)")
    p.add_argument("--no-cuda", action="store_true", help="stay on the CPU even where CUDA is available")
    p.add_argument("--threads", type=int, default=0,
                   help="PyTorch CPU threads per rank; 0: this host's cores divided among its ranks")
    args = p.parse_args()
    for flag in ("batch_size", "image_size", "num_batches_per_iter", "num_iters"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.num_warmup_batches < 0 or args.threads < 0:
        p.error("--num-warmup-batches and --threads must not be negative")
    constructor = getattr(torchvision.models, args.model, None)
    if args.model.startswith("_") or args.model[:1].isupper() or not callable(constructor):
        p.error(f"--model {args.model}: not a model constructor in torchvision.models")
    args.constructor = constructor
    return args


def main():
    args = parse_args()
    hvd.init()
    cuda = torch.cuda.is_available() and not args.no_cuda
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    else:
        cores = len(os.sched_getaffinity(0))
        torch.set_num_threads(args.threads or max(1, cores // hvd.local_size()))
    device = torch.device("cuda" if cuda else "cpu")
    kind = "GPU" if cuda else "CPU"

    model = args.constructor().to(device)
    # Adasum combines whole steps, which keep each rank's own size: no scaling by the
    # rank count (Accord's Adasum is between every rank, on either device).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * (1 if args.use_adasum else hvd.size()))
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def timed_steps(n):
        start = time.perf_counter()
        for _ in range(n):
            step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    def log(line):
        if hvd.rank() == 0:
            print(line, flush=True)

    threads = "" if cuda else f", {torch.get_num_threads()} thread(s) each"
    log(f"Model: {args.model}, batch size {args.batch_size} per rank, "
        f"{args.image_size}x{args.image_size} images, {hvd.size()} {kind}(s){threads}")
    log(f"Running {args.num_warmup_batches} warmup steps...")
    timed_steps(args.num_warmup_batches)

    log(f"Running {args.num_iters} iterations of {args.num_batches_per_iter} steps...")
    rates = []
    for i in range(args.num_iters):
        seconds = timed_steps(args.num_batches_per_iter)
        rates.append(args.batch_size * args.num_batches_per_iter / seconds)
        log(f"Iter #{i}: {rates[-1]:.1f} img/sec per {kind} (rank 0)")

    # Each rank's rates, iteration by iteration: the steps of one iteration end together
    # on every rank (each waits for the same allreduces), so summing over the ranks per
    # iteration gives the total's own samples.
    all_rates = hvd.allgather(torch.tensor([rates], dtype=torch.float64), name="benchmark.rates")
    for r in range(hvd.size()):
        log(f"Img/sec on rank {r}: {format_ci(all_rates[r].tolist())}")
    log(f"Img/sec per {kind}: {format_ci(all_rates.mean(0).tolist())}")
    log(f"Total img/sec on {hvd.size()} {kind}(s): {format_ci(all_rates.sum(0).tolist())}"
        f"  (mean +- 95% confidence interval over {args.num_iters} iterations)")


if __name__ == "__main__":
    main()

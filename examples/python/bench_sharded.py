#!/usr/bin/env python3
"""ShardedOptimizer (stages 1 and 2) against DistributedOptimizer and PyTorch's
ZeroRedundancyOptimizer (over DistributedDataParallel, gloo), in one run on the same ranks.

    mpirun -np 2 --bind-to none python3 examples/python/bench_sharded.py

For each model - torchvision's ResNet-50 and an nn.TransformerEncoder of about 100 M
parameters (12 layers, width 768, feed-forward 3072, plus a 16k-token embedding) - on a
fixed synthetic batch with AdamW (and, with --models resnet50-params, ResNet-50's
parameters under a forward of one multiply per parameter: the optimizers' own cost,
which a model's compute otherwise hides on a machine whose cores it fills), four
variants train from the same weights, beside two that do not communicate, the floors:

  replicated  hvd.DistributedOptimizer (every rank holds the whole optimizer state)
  sharded-1   hvd.ShardedOptimizer(stage=1)
  sharded-2   hvd.ShardedOptimizer(stage=2)
  torch-zero  torch.distributed.optim.ZeroRedundancyOptimizer over DDP (gloo)
  compute     forward and backward alone, no communication and no update: the floor
  compute+update  forward, backward and AdamW's step of this rank's part of every
              parameter (the sharded optimizer's cut) from the local gradient, nothing
              communicated: the floor of any optimizer that shards the update, ZeRO's
              included (the update is memory-bound work every variant does, on 1/N of the
              parameters where sharded)

Printed per variant: the step time (mean +- 95% confidence interval; a sample is the
slowest rank's step) and the part of it spent in ``optimizer.step()`` (where the
variants differ most: the replicated and torch-zero gradients are reduced during
backward, the sharded ones too, but their parameters are gathered in step(), as
torch-zero's are broadcast), the page faults per step (rank 0's median: memory
freed to the system and touched again; with glibc's malloc the gradients a variant
lets go of and the optimizer's temporaries come back this way), the optimizer-state
bytes this rank holds (measured from the state tensors after the steps: they are
allocated at the first step and never grow) and the gradient bytes it still holds after
the step; then the ratios the sharded variants are judged by: step time against
replicated and against torch-zero, state against replicated / N (the step-time ratios as
the mean of each round's ratio, and as the ratio of the median steps, which a burst of
load from other processes on a shared machine moves less), and the floor's step time
against torch-zero's, under which no ratio can go. The variants run interleaved, in alternating order, as in bench_ddp.py.

Memory: the five copies of the transformer live side by side, about 8 GiB per rank;
--layers makes it smaller. Needs torchvision (ResNet-50 and bench_ddp.py's helpers).
"""
import argparse
import copy
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

import accord.torch as hvd
from accord.torch.sharded_cut import shard_extent
from bench_ddp import init_torch_distributed, interleave, slowest
from bench_stats import format_ci, mean_ci

MIB = 1 << 20
MODELS = ("resnet50", "transformer", "resnet50-params")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,transformer",
                   help="comma-separated: resnet50, transformer, resnet50-params (ResNet-50's "
                        "parameters, next to no compute) (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="ResNet-50 images per rank and step (default: %(default)s)")
    p.add_argument("--image-size", type=int, default=128,
                   help="image height and width (default: %(default)s)")
    p.add_argument("--sequences", type=int, default=4,
                   help="transformer sequences per rank and step (default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=16,
                   help="tokens per sequence (default: %(default)s)")
    p.add_argument("--layers", type=int, default=12,
                   help="transformer layers (default: %(default)s: about 100 M parameters)")
    p.add_argument("--rounds", type=int, default=4, help="rounds (default: %(default)s)")
    p.add_argument("--steps", type=int, default=1,
                   help="steps per variant and round (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed steps per variant first (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1,
                   help="PyTorch's threads per rank (default: %(default)s; on a machine with "
                        "more cores than ranks, the cores per rank)")
    args = p.parse_args()
    if args.threads < 1:
        p.error(f"--threads {args.threads}: expected at least 1")
    for name in args.models.split(","):
        if name not in MODELS:
            p.error(f"--models: unknown model '{name}' (expected {', '.join(MODELS)})")
    return args


class Transformer(torch.nn.Module):
    def __init__(self, layers, vocab=16384, width=768):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        layer = torch.nn.TransformerEncoderLayer(width, nhead=12, dim_feedforward=4 * width,
                                                 dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


class ParametersOnly(torch.nn.Module):
    """A model's parameters with next to no compute: the output is the sum of every
    parameter times the input (a number), so each gradient is the input, everywhere."""

    def __init__(self, model):
        super().__init__()
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(p.detach().clone()) for p in model.parameters())

    def forward(self, x):
        return sum((p * x).sum() for p in self.params)


def model_and_batch(args, name):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1 + hvd.rank())  # each rank its own batch
    if name == "resnet50-params":
        model = ParametersOnly(torchvision.models.resnet50())
        x = torch.rand((), generator=g) + 0.5
        what = "ResNet-50's parameters, next to no compute (the output: their sum times a number)"
        return model, x, None, lambda out: out, what
    if name == "resnet50":
        model = torchvision.models.resnet50()
        x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g)
        y = torch.randint(0, 1000, (args.batch_size,), generator=g)
        what = f"ResNet-50, batch {args.batch_size} per rank, {args.image_size}x{args.image_size}"
        return model, x, y, lambda out: F.cross_entropy(out, y), what
    model = Transformer(args.layers)
    x = torch.randint(0, 16384, (args.sequences, args.seq_len), generator=g)
    y = torch.randint(0, 16384, (args.sequences, args.seq_len), generator=g)
    what = (f"nn.TransformerEncoder, {args.layers} layers, width 768, batch {args.sequences} "
            f"x {args.seq_len} tokens per rank")
    return model, x, y, lambda out: F.cross_entropy(out.flatten(0, 1), y.flatten()), what


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)


def variants_of(base):
    """{name: (model, optimizer)}, every model with rank 0's initial weights."""
    hvd.broadcast_parameters(base.state_dict(), root_rank=0)
    out = {}
    model = copy.deepcopy(base)
    out["replicated"] = (model, hvd.DistributedOptimizer(
        adamw(model.parameters()), named_parameters=model.named_parameters()))
    for stage in (1, 2):
        model = copy.deepcopy(base)
        out[f"sharded-{stage}"] = (model, hvd.ShardedOptimizer(
            adamw(model.parameters()), named_parameters=model.named_parameters(), stage=stage))
    model = DistributedDataParallel(base, gradient_as_bucket_view=True)
    out["torch-zero"] = (model, ZeroRedundancyOptimizer(
        model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4, weight_decay=0.01))
    out["compute"] = (copy.deepcopy(base), None)
    model = copy.deepcopy(base)
    out["compute+update"] = (model, ShardUpdateOnly(model))
    return out


class ShardUpdateOnly:
    """compute+update's optimizer: AdamW on this rank's part of every parameter, cut as
    ShardedOptimizer cuts it (shard_extent), stepped from the local gradient; nothing is
    communicated, so the parameters drift apart."""

    def __init__(self, model):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.cuts = []
        for p in self.params:
            offset, count = shard_extent(p.numel(), hvd.rank(), hvd.size())
            self.cuts.append((offset, offset + count))
        self.views = [p.detach().view(-1)[lo:hi] for p, (lo, hi) in zip(self.params, self.cuts)]
        self.inner = adamw(self.views)
        self.state = self.inner.state

    def zero_grad(self):
        # The views' gradients too: each is a view of its parameter's, and keeping it
        # would keep the whole gradient alive while backward allocates the next one.
        for p, v in zip(self.params, self.views):
            p.grad = v.grad = None

    def step(self):
        for v, p, (lo, hi) in zip(self.views, self.params, self.cuts):
            v.grad = p.grad.view(-1)[lo:hi]
        self.inner.step()


def state_bytes(opt):
    if opt is None:
        return 0
    if isinstance(opt, ZeroRedundancyOptimizer):
        opt = opt.optim  # this rank's partition
    return sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
               if isinstance(v, torch.Tensor))


def grad_bytes(model, opt):
    tensors = [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [s.piece.grad for s in getattr(opt, "_shards", []) if s.piece.grad is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


def median(rounds):
    """A shared machine's bursts land on single steps; the median step shrugs them off."""
    flat = sorted(s for r in rounds for s in r)
    return (flat[(len(flat) - 1) // 2] + flat[len(flat) // 2]) / 2


def bench(args, name, log):
    base, x, y, loss_fn, what = model_and_batch(args, name)
    params = sum(p.numel() for p in base.parameters())
    runs = variants_of(base)

    update = {v: [] for v in runs}  # seconds in opt.step() alone, per timed step
    faults = {v: [] for v in runs}  # this process's page faults per timed step

    def step(model, opt, name):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        (opt or model).zero_grad()
        loss_fn(model(x)).backward()
        start = time.perf_counter()
        if opt is not None:
            opt.step()
        update[name].append(time.perf_counter() - start)
        faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

    variants = {v: (lambda m=m, o=o, v=v: step(m, o, v)) for v, (m, o) in runs.items()}
    for run in variants.values():
        for _ in range(args.warmup):
            run()
    for v in update:
        update[v].clear()
        faults[v].clear()
    times = interleave(variants, args.rounds, args.steps)
    update = {v: slowest(t) for v, t in update.items()}
    held = {v: (state_bytes(o), grad_bytes(m, o)) for v, (m, o) in runs.items()}
    first = dict(runs["replicated"][0].named_parameters())
    gap = {v: max((p.detach() - first[n.replace("module.", "", 1)].detach()).abs().max().item()
                  for n, p in m.named_parameters()) for v, (m, o) in runs.items()
           if o and not isinstance(o, ShardUpdateOnly)}
    if not log:
        return
    n = hvd.size()
    steps = args.warmup + args.rounds * args.steps
    print(f"{what}: {params / 1e6:.1f} M parameters, AdamW, {n} ranks x "
          f"{torch.get_num_threads()} thread(s) ({args.rounds} rounds x {args.steps} steps), "
          f"torch {torch.__version__}", flush=True)
    print(f"  {'variant':<14} {'step (ms)':>18} {'of it step() (ms)':>18} "
          f"{'page faults/step':>17} {'state MiB/rank':>15} {'grads MiB/rank':>15} "
          f"{'max |param - replicated|':>25}", flush=True)
    for v in runs:
        flat = [s for r in times[v] for s in r]
        print(f"  {v:<14} {format_ci(flat, 1e3):>18} {format_ci(update[v], 1e3):>18} "
              f"{sorted(faults[v])[len(faults[v]) // 2]:>17} "
              f"{held[v][0] / MIB:>15.1f} {held[v][1] / MIB:>15.1f} "
              f"{format(gap[v], '.2e') if v in gap else '-':>25}", flush=True)
    for v in ("sharded-1", "sharded-2"):
        for other in ("replicated", "torch-zero"):
            ratios = [mean_ci(a)[0] / mean_ci(o)[0] for a, o in zip(times[v], times[other])]
            print(f"  step time {v} / {other}: {format_ci(ratios, 1.0, 3)} "
                  f"(median step {v} / {other}: {median(times[v]) / median(times[other]):.3f})",
                  flush=True)
        share = held["replicated"][0] / n
        largest = max(p.numel() * p.element_size() for p in base.parameters())
        print(f"  state {v} / (replicated / {n}): {held[v][0] / share:.4f} "
              f"(excess {(held[v][0] - share) / MIB:+.2f} MiB; largest parameter "
              f"{largest / MIB:.2f} MiB)", flush=True)
    for floor, what in (("compute", "no variant that also communicates and updates"),
                        ("compute+update", "no variant that shards the update and also "
                                           "communicates")):
        ratios = [mean_ci(a)[0] / mean_ci(o)[0]
                  for a, o in zip(times[floor], times["torch-zero"])]
        print(f"  step time {floor} / torch-zero: {format_ci(ratios, 1.0, 3)} (median step "
              f"{median(times[floor]) / median(times['torch-zero']):.3f}): a floor, below "
              f"which {what} can go", flush=True)
    print(f"  (parameters compared after {steps} steps of each variant)", flush=True)


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    init_torch_distributed()
    log = hvd.rank() == 0
    for name in args.models.split(","):
        bench(args, name, log)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""The training script of the elastic tests (test_driver.py), written as a Horovod
elastic script is: a model, a DistributedOptimizer, an ElasticSampler, a TorchState
committed every --commit-every steps, a reset callback that rescales the learning rate.

Besides training it keeps, in the state, how often each sample of the epoch went
through a committed step (summed over ranks): after a reset the steps since the last
commit are redone from the committed counts, so at the end of an epoch every count must
be exactly 1. Rank 0 prints, for the test to read:
  STEP <n> epoch <e> size <ranks> lr <lr>      each step, n counted over the whole job
  EPOCH <e> once <True|False> <min> <max>      at the end of each epoch
  RESET size <ranks> lr <lr>                   from the reset callback
  TRAINED size <ranks> epochs <e>             once hvd.elastic.run returned
  FINAL size <ranks> identical <True|False> epochs <e> checksum <x>
  SETS size <ranks> <id>=<ranks> ...           the process sets registered (--process-set)
and every rank writes its pid to <out>/pids/<reset>/<host>.<rank>.<pid>, for the test
to signal one host's ranks.
"""
import argparse
import os
import socket
import time

import torch

import accord.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=192)
p.add_argument("--batch-size", type=int, default=4)
p.add_argument("--commit-every", type=int, default=4)
p.add_argument("--step-time", type=float, default=0.1)
p.add_argument("--base-lr", type=float, default=0.01)
p.add_argument("--reset-delay", type=float, default=0,
               help="seconds each reset callback takes (a slow recovery a test can fail into)")
p.add_argument("--process-set", action="append", default=[],
               help="ranks '0,1' (given to hvd.init), or 'even': the even ranks of hvd.size() "
                    "(add_process_set after init); each step allreduces over every set")
p.add_argument("--raise-at", default=None, metavar="STEP:RANK",
               help="in the job's first run, RANK (or every rank: 'all') raises a "
                    "RuntimeError at step STEP")
p.add_argument("--after-pause", type=float, default=0,
               help="seconds every rank waits after training, before the final allgather "
                    "(a window in which a test can fail a host after training)")
args = p.parse_args()

fixed = [hvd.ProcessSet([int(r) for r in spec.split(",")]) for spec in args.process_set
         if spec != "even"]
# With sets but none fixed, Horovod's "dynamic": the sets are added after init.
hvd.init(process_sets=fixed or ("dynamic" if args.process_set else None))
sets = fixed + [hvd.add_process_set(list(range(0, hvd.size(), 2)))
                for spec in args.process_set if spec == "even"]
reset = os.environ.get("ACCORDRUN_ELASTIC_RESET", "0")
pids = os.path.join(args.out, "pids", reset)
os.makedirs(pids, exist_ok=True)
open(os.path.join(pids, f"{socket.gethostname()}.{hvd.rank()}.{os.getpid()}"), "w").close()

torch.manual_seed(0)
N = args.samples
data = torch.randn(N, 8, generator=torch.Generator().manual_seed(1))
labels = torch.arange(N) % 4
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=0.9),
    named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(range(N), shuffle=True, seed=3, batch_size=args.batch_size)


def say(text):
    if hvd.rank() == 0:
        print(text, flush=True)


def rescale():
    for group in optimizer.param_groups:
        group["lr"] = args.base_lr * hvd.size()
    time.sleep(args.reset_delay)
    say(f"RESET size {hvd.size()} lr {args.base_lr * hvd.size():g}")


if sets:
    say(f"SETS size {hvd.size()} " + " ".join(f"{ps.process_set_id}={ps.ranks}".replace(" ", "")
                                               for ps in sets))


def check_sets(step):
    """Every member of each set sums one per member: the set has exactly its ranks."""
    for ps in sets:
        if ps.included():
            got = hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"set.{step}",
                                process_set=ps)
            if int(got[0]) != len(ps.ranks):
                raise AssertionError(f"{ps}: {int(got[0])} ranks took part")


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0,
                               counts=torch.zeros(N, dtype=torch.int64))
state.register_reset_callbacks([rescale])


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        ids = list(sampler)
        batches = [ids[i:i + args.batch_size] for i in range(0, len(ids), args.batch_size)]
        for b, batch in enumerate(batches):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(data[batch]), labels[batch])
            loss.backward()
            optimizer.step()
            seen = torch.zeros(N, dtype=torch.int64)
            seen[batch] += 1
            state.counts += hvd.allreduce(seen, op=hvd.Sum, name="seen")
            check_sets(state.step)
            if args.raise_at and reset == "0" and \
                    args.raise_at in (f"{state.step}:{hvd.rank()}", f"{state.step}:all"):
                who = "every rank" if args.raise_at.endswith(":all") else f"rank {hvd.rank()}"
                raise RuntimeError(f"user code failed at step {state.step} on {who}")
            sampler.record_batch(b, args.batch_size)
            state.step += 1
            say(f"STEP {state.step} epoch {state.epoch} size {hvd.size()} "
                f"lr {optimizer.param_groups[0]['lr']:g}")
            time.sleep(args.step_time)
            if state.step % args.commit_every == 0:
                state.commit()
        counts = state.counts
        say(f"EPOCH {state.epoch} once {bool((counts == 1).all())} {int(counts.min())} {int(counts.max())}")
        state.counts = torch.zeros(N, dtype=torch.int64)
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()


train(state)
say(f"TRAINED size {hvd.size()} epochs {state.epoch}")
time.sleep(args.after_pause)
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
every = hvd.allgather_object(flat.tolist())
say(f"FINAL size {hvd.size()} identical {all(x == every[0] for x in every)} epochs {state.epoch} "
    f"checksum {float(flat.double().sum()):.6f}")

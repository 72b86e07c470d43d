"""One phase of test_sharded_state.py, run under mpirun: a ShardedOptimizer in
hvd.elastic's TorchState across a restart on another number of ranks.

  first   2 ranks: 3 steps of AdamW sharded (stage 2), commit, 2 uncommitted steps, then
          leave as a failed process would; rank 0 writes the committed parameters and
          the whole optimizer state (consolidated) to OUT/expected.pt
  second  3 ranks, after a reset: resume() must give every rank the committed
          parameters and its part of the committed optimizer state, cut for 3 ranks
          (consolidated again, it equals the committed one); then 2 more steps keep the
          ranks' parameters equal
"""
import os
import sys

import torch

import accord.torch as hvd

phase, out = sys.argv[1], sys.argv[2]
hvd.init()
me = hvd.rank()
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"rank {me}: FAILED {what}", file=sys.stderr, flush=True)


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


torch.manual_seed(1 if phase == "first" else 2)  # the second run's start is overwritten
model = torch.nn.Sequential(torch.nn.Linear(6, 11), torch.nn.Tanh(), torch.nn.Linear(11, 5))
optimizer = hvd.ShardedOptimizer(torch.optim.AdamW(model.parameters(), lr=0.01),
                                 named_parameters=model.named_parameters(), stage=2)
state = hvd.elastic.TorchState(model, optimizer, step=0)


def train(steps):
    for _ in range(steps):
        g = torch.Generator().manual_seed(100 * state.step + me)
        optimizer.zero_grad()
        model(torch.randn(4, 6, generator=g)).pow(2).mean().backward()
        optimizer.step()
        state.step += 1


@hvd.elastic.run
def first(state):
    train(3)
    state.commit()
    optimizer.consolidate_state_dict(0)
    if me == 0:
        torch.save({"model": {k: v.clone() for k, v in model.state_dict().items()},
                    "optimizer": optimizer.state_dict()}, os.path.join(out, "expected.pt"))
    train(2)  # not committed: lost by the restart
    state.store().wait()
    sys.stdout.flush()
    hvd.barrier()
    os._exit(75 if not failures else 1)  # as a process leaving for a restart does


@hvd.elastic.run
def second(state):
    expected = torch.load(os.path.join(out, "expected.pt"))
    check(state.step == 3, f"resume() gives the committed step: {state.step}")
    check(all(torch.equal(v, expected["model"][k]) for k, v in model.state_dict().items()),
          "resume() gives every rank the committed parameters")
    optimizer.consolidate_state_dict(0)
    if me == 0:
        check(same(optimizer.state_dict(), expected["optimizer"]),
              "the optimizer state, cut for 3 ranks and consolidated, is the committed one")
    part = optimizer.sharded_state_dict()["accord_sharded"]
    check(part["size"] == 3 and part["rank"] == me, f"each rank holds its part of 3: {part['size']}")
    train(2)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = hvd.allgather_object(params)
    check(all(torch.equal(p, everyone[0]) for p in everyone), "the ranks train on in step")


{"first": first, "second": second}[phase](state)
bad = hvd.allreduce(torch.tensor([len(failures)]), op=hvd.Sum, name="failures")
if me == 0:
    print(f"PHASE {phase} {'OK' if int(bad) == 0 else 'FAILED'}", flush=True)
sys.exit(0 if int(bad) == 0 else 1)

"""One phase of test_state.py, run under mpirun: hvd.elastic's State, ElasticSampler and
run() across a restart on one host, with the commit store on disk.

  first   2 ranks: 3 steps, commit, restore() in process, 2 uncommitted steps, then
          leave as a failed process would (the commit stays on disk); rank 0 writes what
          was committed to OUT/expected.pt
  second  3 ranks, after a reset: resume() must give every rank the committed model,
          optimizer, attributes, sampler record and the object a handler of the
          script's own keeps (Horovod's registry); the reset callback sees 3 ranks; the
          rest of the epoch takes every remaining sample exactly once
  notice  2 ranks: rank 0's standard input announces new hosts; check_host_updates()
          raises on every rank in the same call and run() exits 76
  sharded-first, sharded-second
          the same restart from 2 ranks to 3 with a ShardedOptimizer (AdamW, stage 2)
          in the state: every rank resumes with the committed parameters and its part
          of the committed optimizer state cut for 3 ranks (consolidated, equal to the
          committed state), and the ranks train on in step
  final   2 ranks: 3 steps with a commit after the second, and run() returns: the
          function's end is committed (commit 2, on disk) and rank 0 reports it to the
          launcher; then every rank raises after run() (a failure in a final
          evaluation), and the commits stay on disk for the restart
  final-again  the restart (the launcher's ACCORDRUN_ELASTIC_TRAINED=2): run() resumes
          at the end of training, the function takes no step, the script's work after it
          runs again, and the process, ending well, removes the commits
  final-lost  a restart after training whose final commit no host holds: run() stops
          with TrainingLostError, reported as fatal, instead of training from the start
  two-calls   2 ranks, two run-wrapped functions of different states (a training, then a
          fine-tuning): the first returns (its commits kept), is called once more with
          the same state (nothing left to do: one more commit in the same folder), and
          the second commits once and leaves as a failed process would
  two-calls-again  the restart: the first call resumes at its end and takes no step, the
          second resumes from its own commit (not the first's) and finishes; ending
          well, the process removes both states' commits
"""
import os
import sys
import time

import numpy as np
import torch

import accord.torch as hvd

N, BATCH = 40, 3
phase, out = sys.argv[1], sys.argv[2]
hvd.init()
me = hvd.rank()
failures = []


class Meter:
    """A user's own class among the state's attributes: committed pickled, and loaded
    back (PyTorch 2.6's torch.load refuses such globals by default)."""

    def __init__(self, count):
        self.count = count


class Lowest:
    """The lowest loss so far: a script's own object, kept by a handler of its own
    registered as Horovod's scripts do (its saved value is committed to disk)."""

    def __init__(self):
        self.loss = float("inf")


class LowestHandler(hvd.elastic.state.StateHandler):
    def __init__(self, lowest):
        super().__init__(lowest)
        self.saved = lowest.loss

    def save(self):
        self.saved = self.value.loss

    def restore(self):
        self.value.loss = self.saved

    def sync(self):
        self.value.loss = hvd.broadcast_object(self.value.loss, root_rank=0)


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"rank {me}: FAILED {what}", file=sys.stderr, flush=True)


torch.manual_seed(1 if phase in ("first", "sharded-first") else 2)
if phase.startswith("sharded"):
    model = torch.nn.Sequential(torch.nn.Linear(4, 11), torch.nn.Tanh(), torch.nn.Linear(11, 3))
    optimizer = hvd.ShardedOptimizer(torch.optim.AdamW(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), stage=2)
else:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
data = torch.arange(N * 4, dtype=torch.float32).reshape(N, 4) / 100
labels = torch.arange(N) % 3
sampler = hvd.elastic.ElasticSampler(range(N), shuffle=True, seed=5, batch_size=BATCH)
registry = hvd.elastic.state.get_handler_registry()
hvd.elastic.state.set_handler_registry(registry + [(Lowest, LowestHandler)])
lowest = Lowest()
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0, note="x",
                               best=0.0, meter=None, lowest=lowest)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


def step(indices):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(data[indices]), labels[indices])
    loss.backward()
    for p in model.parameters():
        hvd.allreduce_(p.grad, op=hvd.Average)
    optimizer.step()


def batches():
    ids = list(sampler)
    return [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)]


@hvd.elastic.run
def first(state):
    for b, ids in enumerate(batches()[:3]):
        step(ids)
        sampler.record_batch(b, BATCH)
        state.batch += 1
    state.note = "committed"
    state.best, state.meter = np.float64(0.75), Meter(3)  # numpy's and the user's objects
    lowest.loss = 0.25
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    if me == 0:
        torch.save({"model": committed, "processed": sorted(sampler.processed_indices),
                    "optimizer": optimizer.state_dict()}, os.path.join(out, "expected.pt"))
    # restore() in the same process puts the commit back.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    state.note, state.batch, lowest.loss = "changed", 99, 0.125
    state.restore()
    check(lowest.loss == 0.25, f"restore() gives the registered handler's object: {lowest.loss}")
    check(all(torch.equal(v, committed[k]) for k, v in model.state_dict().items()),
          "restore() gives the committed parameters")
    check((state.note, state.batch) == ("committed", 3), f"restore() gives the attributes: {state.note} {state.batch}")
    for b, ids in enumerate(batches()[3:5]):  # not committed: lost by the restart
        step(ids)
    state.store().wait()
    sys.stdout.flush()
    hvd.barrier()
    os._exit(75 if not failures else 1)  # as a process leaving for a restart does


@hvd.elastic.run
def second(state):
    expected = torch.load(os.path.join(out, "expected.pt"))
    check(all(torch.equal(v, expected["model"][k]) for k, v in model.state_dict().items()),
          "resume() gives every rank the committed parameters")
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    want = [expected["optimizer"]["state"][i]["momentum_buffer"] for i in range(len(momentum))]
    check(all(torch.equal(a, b) for a, b in zip(momentum, want)), "resume() gives the optimizer state")
    check((state.note, state.batch, state.epoch) == ("committed", 3, 0),
          f"resume() gives the attributes: {state.note} {state.batch} {state.epoch}")
    check(type(state.best) is np.float64 and state.best == 0.75 and state.meter.count == 3,
          f"resume() gives a numpy scalar and an object of the script's own class: "
          f"{state.best!r} {vars(state.meter)}")
    check(lowest.loss == 0.25, f"resume() gives every rank the registered handler's committed "
          f"value: {lowest.loss}")
    check(resets == [3], f"the reset callback ran once, after the ranks were set: {resets}")
    check(sorted(sampler.processed_indices) == expected["processed"],
          "the sampler's record is the committed one, of every rank")
    taken = []
    for b, ids in enumerate(batches()):
        step(ids)
        sampler.record_batch(b, BATCH)
        taken += ids
    everyone = hvd.allgather_object(taken)
    check(len({len(batches())} | set(hvd.allgather_object(len(batches())))) == 1,
          "every rank takes the same number of batches")
    counts = torch.zeros(N, dtype=torch.int64)
    for i in expected["processed"] + [i for ids in everyone for i in ids]:
        counts[i] += 1
    check(bool((counts == 1).all()), f"every sample of the epoch once: counts {counts.tolist()}")
    check(len(expected["processed"]) == 3 * BATCH * 2, "the commit recorded 3 batches of 2 ranks")


@hvd.elastic.run
def notice(state):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state.check_host_updates()
        time.sleep(0.05)
    check(False, "check_host_updates() raised within 30 s")


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def sharded_steps(count):
    for _ in range(count):
        g = torch.Generator().manual_seed(100 * state.batch + me)
        indices = torch.randint(0, N, (4,), generator=g)
        optimizer.zero_grad()  # the sharded optimizer reduces the gradients itself
        torch.nn.functional.cross_entropy(model(data[indices]), labels[indices]).backward()
        optimizer.step()
        state.batch += 1


@hvd.elastic.run
def sharded_first(state):
    sharded_steps(3)
    state.commit()
    optimizer.consolidate_state_dict(0)
    if me == 0:
        torch.save({"model": {k: v.clone() for k, v in model.state_dict().items()},
                    "optimizer": optimizer.state_dict()}, os.path.join(out, "sharded.pt"))
    sharded_steps(2)  # not committed: lost by the restart
    state.store().wait()
    sys.stdout.flush()
    hvd.barrier()
    os._exit(75 if not failures else 1)


@hvd.elastic.run
def sharded_second(state):
    expected = torch.load(os.path.join(out, "sharded.pt"))
    check(state.batch == 3, f"resume() gives the committed step: {state.batch}")
    check(all(torch.equal(v, expected["model"][k]) for k, v in model.state_dict().items()),
          "resume() gives every rank the committed parameters")
    optimizer.consolidate_state_dict(0)
    if me == 0:
        check(same(optimizer.state_dict(), expected["optimizer"]),
              "the optimizer state, cut for 3 ranks and consolidated, is the committed one")
    part = optimizer.sharded_state_dict()["accord_sharded"]
    check((part["size"], part["rank"]) == (3, me), f"each rank holds its part of 3: {part}")
    sharded_steps(2)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = hvd.allgather_object(params)
    check(all(torch.equal(p, everyone[0]) for p in everyone), "the ranks train on in step")


@hvd.elastic.run
def final(state):
    while state.batch < 3:  # a loop that resumes where the state says
        step(list(range(state.batch * BATCH, (state.batch + 1) * BATCH)))
        state.batch += 1
        if state.batch == 2:
            state.commit()
        print(f"rank {me}: STEP {state.batch}", flush=True)


def after_final():
    """The script's work after run() returned."""
    if hvd.local_rank() == 0:  # the host's writer
        final = "commit-3.pt" if phase == "final-again" else "commit-2.pt"
        kept = sorted(os.listdir(state.store().directory))
        check(kept == [final] and state.batch == 3,
              f"run() committed the function's end: {kept}, batch {state.batch}")
    if phase == "final":
        raise RuntimeError("the evaluation after training failed")  # uncaught: commits kept
    print(f"rank {me}: AFTER batch {state.batch}", flush=True)


def two_calls():
    """A training and a fine-tuning, each its own run() call and state."""
    first_state = hvd.elastic.ObjectState(a_step=0)
    second_state = hvd.elastic.ObjectState(b_epoch=0, note="fine-tuning")

    @hvd.elastic.run
    def train(s):
        while s.a_step < 3:
            s.a_step += 1
            print(f"rank {me}: A STEP {s.a_step}", flush=True)
            if s.a_step == 2:
                s.commit()

    @hvd.elastic.run
    def fine_tune(s):
        check(s.note == "fine-tuning", f"the second call resumes its own state: {s.note!r}")
        while s.b_epoch < 2:
            s.b_epoch += 1
            print(f"rank {me}: B EPOCH {s.b_epoch}", flush=True)
            s.commit()
            if phase == "two-calls":  # leave as a failed process does, the commit kept
                s.store().wait()
                sys.stdout.flush()
                hvd.barrier()
                os._exit(75 if not failures else 1)

    train(first_state)
    train(first_state)  # the same state again: its folder, its newest commit
    check(first_state.a_step == 3, f"the first calls end at their end: {first_state.a_step}")
    fine_tune(second_state)
    check(second_state.b_epoch == 2, f"the second call ends at its end: {second_state.b_epoch}")


if phase.startswith("two-calls"):
    two_calls()
else:
    {"first": first, "second": second, "notice": notice, "sharded-first": sharded_first,
     "sharded-second": sharded_second, "final": final, "final-again": final,
     "final-lost": final}[phase](state)
if phase.startswith("final"):
    after_final()
bad = hvd.allreduce(torch.tensor([len(failures)]), op=hvd.Sum, name="failures")
if me == 0:
    print(f"PHASE {phase} {'OK' if int(bad) == 0 else 'FAILED'}", flush=True)
sys.exit(0 if int(bad) == 0 else 1)

"""join: ranks with fewer batches join early, and the others' allreduces go on with
the joined ranks contributing zeros; every other collective fails at once while a rank
has joined, as in Horovod."""

import time

import pytest
import torch


def test_join_with_uneven_batches(hvd):
    me, n = hvd.rank(), hvd.size()
    batches = me + 1  # rank r has r + 1 batches: the last rank joins last
    for step in range(batches):
        out = hvd.allreduce(torch.full((5,), float(me + 1)), op=hvd.Sum, name=f"join.{step}")
        # Ranks with fewer than step + 1 batches have joined and add zeros.
        expected = sum(r + 1 for r in range(n) if r + 1 > step)
        assert torch.all(out == expected), f"step {step}: {out.tolist()} != {expected}"
        # Average divides by every rank, the joined ones too, in every element.
        out = hvd.allreduce(torch.full((7,), float(me + 1)), op=hvd.Average,
                            name=f"join.average.{step}")
        assert torch.allclose(out, torch.full((7,), expected / n)), \
            f"step {step}: {out.tolist()} != {expected / n}"
    assert hvd.join() == n - 1


def test_join_in_training_then_broadcast_from_the_last_rank(hvd):
    """Horovod's pattern: train on uneven data, join, broadcast from the last joiner."""
    me, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(me)
    for _ in range(2 * me + 1):
        opt.zero_grad()
        model(torch.randn(4, 3, generator=g, dtype=torch.float64)).pow(2).mean().backward()
        opt.step()
    last = hvd.join()
    assert last == n - 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert all(torch.equal(row, flat) for row in hvd.allgather(flat.unsqueeze(0)))


def test_other_collectives_fail_at_once_while_a_rank_has_joined(hvd):
    """Horovod's scripts (and tests) catch the error as RuntimeError and join in turn: it
    must come at once, on every rank that submitted the collective, and the join must
    then complete and leave no joined state behind."""
    me, n = hvd.rank(), hvd.size()
    if n == 1:
        pytest.skip("needs a rank that has not joined")
    problems = []  # checked once every rank has joined, so that none is left waiting
    for first in range(n):
        if me == first:
            last = hvd.join()
        else:
            root = (first + 1) % n  # a rank that has not joined
            calls = {
                "allgather": lambda: hvd.allgather(torch.ones(2, 3), name=f"joined.ag.{first}"),
                "broadcast": lambda: hvd.broadcast(torch.ones(3), root, name=f"joined.bc.{first}"),
                "alltoall": lambda: hvd.alltoall(torch.ones(n, 2), name=f"joined.a2a.{first}"),
                "reducescatter": lambda: hvd.reducescatter(torch.ones(n, 2),
                                                           name=f"joined.rs.{first}"),
            }
            for what, call in calls.items():
                started = time.monotonic()
                try:
                    call()
                    problems.append(f"{what} with rank {first} joined did not fail")
                except RuntimeError as e:
                    if not (isinstance(e, hvd.HorovodInternalError) and isinstance(e, ValueError)
                            and f"rank {first} has joined" in str(e)):
                        problems.append(f"{what}: {type(e).__name__}: {e}")
                except Exception as e:  # noqa: BLE001  (what Horovod's scripts do not catch)
                    problems.append(f"{what} raised {type(e).__name__}, not a RuntimeError: {e}")
                if time.monotonic() - started > 10:
                    problems.append(f"{what} took {time.monotonic() - started:.0f} s to fail")
            last = hvd.join()
        if last == first:
            problems.append(f"join() returned {last}, the rank that joined first")
        if hvd.allgather_object(last) != [last] * n:
            problems.append("join() returned different ranks")
    # Nothing joined is left behind: every collective works again.
    gathered = hvd.allgather(torch.full((1,), me), name="joined.after")
    assert not problems, problems
    assert gathered.tolist() == list(range(n))


def test_unnamed_collectives_pair_again_after_a_join(hvd):
    """While a rank had joined, the others issued unnamed allreduces it did not; once
    every rank has joined, the next unnamed collectives still pair up (the generated
    names restart together), rather than stalling."""
    me, n = hvd.rank(), hvd.size()
    for _ in range(me):  # rank r issues r of them
        hvd.allreduce(torch.ones(2), op=hvd.Sum)
    hvd.join()
    out = hvd.allreduce(torch.full((1,), float(me)), op=hvd.Sum)
    assert out.item() == n * (n - 1) / 2
    assert hvd.allgather(torch.full((1,), me)).tolist() == list(range(n))


def test_join_takes_horovods_device_argument(hvd):
    # join(device): where the joined rank takes its part in CUDA collectives. A GPU
    # ordinal where the process sees no GPU (or the build has no GPU path) changes
    # nothing, as for hvd.join(hvd.local_rank()) in a script run on CPUs; a value that
    # is not an ordinal is refused before anything is submitted.
    for bad in ("cuda:0", 1.0, torch.device("cpu")):
        with pytest.raises(ValueError, match="device must be a GPU ordinal"):
            hvd.join(device=bad)
    lasts = []
    if not torch.cuda.is_available():
        lasts.append(hvd.join(device=hvd.local_rank()))
    lasts.append(hvd.join(device=-1))
    assert all(last in range(hvd.size()) for last in lasts)
    assert hvd.allgather_object(lasts) == [lasts] * hvd.size()

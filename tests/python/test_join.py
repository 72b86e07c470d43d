"""join: ranks with fewer batches join early, and the others' allreduces go on with
the joined ranks contributing zeros."""

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

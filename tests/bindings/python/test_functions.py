"""broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object."""

import pickle
import threading
import time

import pytest
import torch


def model_for(rank):
    torch.manual_seed(100 + rank)  # a different model on every rank
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                               torch.nn.Linear(4, 2)).double()


def test_broadcast_parameters_from_a_state_dict_and_from_named_parameters(hvd):
    me, root = hvd.rank(), hvd.size() - 1
    model = model_for(me)
    with torch.no_grad():
        model[1].running_mean.fill_(me)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    expected = model_for(root)
    with torch.no_grad():
        expected[1].running_mean.fill_(root)
    for (k, v), (_, e) in zip(model.state_dict().items(), expected.state_dict().items()):
        assert torch.equal(v, e), k
    other = model_for(me + 1)
    hvd.broadcast_parameters(list(other.named_parameters()), root_rank=0)
    for p, e in zip(other.parameters(), model_for(1).parameters()):
        assert torch.equal(p, e)


def local_steps(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 3, generator=g, dtype=torch.float64)).pow(2).mean().backward()
        opt.step()


def flatten_state(state_dict):
    """The optimizer state as (key, value) pairs, tensors as lists, for comparing."""
    out = []
    for pid, s in sorted(state_dict["state"].items()):
        for k, v in sorted(s.items()):
            out.append((pid, k, v.tolist() if torch.is_tensor(v) else v))
    groups = [{k: v for k, v in g.items()} for g in state_dict["param_groups"]]
    return out, groups


def test_broadcast_optimizer_state_gives_every_rank_roots_state(hvd):
    """Root has trained (its Adam has moments and a step count); the others have fresh
    optimizers with another learning rate and no state at all."""
    me, root = hvd.rank(), 0
    model = model_for(0)
    if me == root:
        opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.9))
        local_steps(model, opt, 3, seed=5)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    mine = flatten_state(opt.state_dict())
    roots = hvd.broadcast_object(mine, root_rank=root)
    assert mine == roots
    assert len(mine[0]) > 0 and mine[1][0]["lr"] == 0.01 and mine[1][0]["betas"] == (0.8, 0.9)
    # Identical state and parameters: the next steps stay identical on every rank.
    local_steps(model, opt, 2, seed=6)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(row, flat) for row in gathered)


def test_broadcast_optimizer_state_of_sgd_with_momentum_into_a_distributed_optimizer(hvd):
    me = hvd.rank()
    model = model_for(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if me == 0:
        local_steps(model, opt, 2, seed=7)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = flatten_state(opt.state_dict())
    assert mine == hvd.broadcast_object(mine, root_rank=0)
    assert len(mine[0]) == len(list(model.parameters()))  # a momentum buffer each


def scheduled_sgd(lr, momentum):
    """A model, SGD with momentum, and a StepLR made for that SGD (before any wrapping)."""
    torch.manual_seed(11)
    model = torch.nn.Linear(4, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)


def scheduled_steps(model, opt, scheduler, steps):
    x = torch.ones(2, 4, dtype=torch.float64)  # the same rows on every rank
    for _ in range(steps):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        scheduler.step()


def step_with_gradient(model, opt, value):
    for p in model.parameters():
        p.grad = torch.full_like(p, value)
    opt.step()


def test_broadcast_optimizer_state_keeps_the_objects_a_scheduler_drives(hvd):
    """The scheduler is made for the optimizer before it is wrapped, and the ranks
    start with other hyperparameters and momentum buffers: after the broadcast every
    rank holds root's values in the objects it had (the scheduler's among them), so
    the scheduled steps equal root's without Accord."""
    me = hvd.rank()
    model, base, scheduler = scheduled_sgd(lr=1.0 if me == 0 else 5.0,
                                           momentum=0.9 if me == 0 else 0.5)
    step_with_gradient(model, base, me + 1.0)  # momentum buffers that differ by rank
    base.state[model.bias]["visits"] = 3 + me  # a value that is not a tensor
    if me != 0:
        base.state[model.bias]["stale"] = True  # not in root's state: must go
    group, buffer = base.param_groups[0], base.state[model.weight]["momentum_buffer"]
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    # Checked after the steps: a rank that failed here would leave the others' allreduces
    # without a partner.
    kept = [opt.param_groups is base.param_groups, opt.param_groups[0] is group,
            opt.state is base.state, opt.state[model.weight]["momentum_buffer"] is buffer]
    hyperparameters = (group["lr"], group["momentum"])
    bias_state = {k: v for k, v in opt.state[model.bias].items() if k != "momentum_buffer"}
    scheduled_steps(model, opt, scheduler, 3)
    assert kept == [True] * 4
    assert hyperparameters == (1.0, 0.9)
    assert bias_state == {"visits": 3}

    ref_model, ref_opt, ref_scheduler = scheduled_sgd(lr=1.0, momentum=0.9)
    step_with_gradient(ref_model, ref_opt, 1.0)
    scheduled_steps(ref_model, ref_opt, ref_scheduler, 3)
    assert group["lr"] == ref_opt.param_groups[0]["lr"]  # 1 -> 0.1 -> 0.01 -> 0.001
    for p, e in zip(model.parameters(), ref_model.parameters()):
        assert torch.allclose(p, e, rtol=0, atol=1e-12), f"{p.tolist()} instead of {e.tolist()}"


def test_broadcast_optimizer_state_before_the_first_step(hvd):
    """No rank has state yet (Adam makes it in its first step): root's hyperparameters
    arrive, and training goes on as root's alone would."""
    def fresh(lr):
        model = model_for(0)
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    model, opt = fresh(0.01 if hvd.rank() == 0 else 0.5)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert len(opt.state) == 0 and opt.param_groups[0]["lr"] == 0.01
    ref_model, ref_opt = fresh(0.01)
    for m, o in ((model, opt), (ref_model, ref_opt)):
        for _ in range(2):
            o.zero_grad()
            m(torch.ones(5, 3, dtype=torch.float64)).pow(2).mean().backward()
            o.step()
    for p, e in zip(model.parameters(), ref_model.parameters()):
        assert torch.allclose(p, e, rtol=0, atol=1e-12)


def test_broadcast_optimizer_state_with_a_frozen_parameter_leaves_zero_gradients(hvd):
    """Horovod's test_broadcast_state_no_grad: a frozen integer parameter is no trouble,
    and where the optimizer had no state yet every parameter that requires a gradient
    has a zero one afterwards, as Horovod leaves them (scripts read them), the frozen
    one none. Unlike Horovod, nothing is stepped: weight decay has not moved a thing."""
    class Indexed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.index = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32),
                                            requires_grad=False)
            self.weight = torch.nn.Parameter(torch.arange(4.0) + hvd.rank())

        def forward(self, x):
            return torch.index_select(self.weight, 0, self.index.long()) * x

    model = Indexed()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.5, momentum=0.9,
                        nesterov=True),
        named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert model.index.grad is None
    assert model.weight.grad is not None and torch.equal(model.weight.grad, torch.zeros(4))
    assert torch.equal(model.weight.detach(), torch.arange(4.0))
    assert torch.equal(hvd.broadcast(model.weight.grad, root_rank=0, name="no_grad.bc"),
                       model.weight.grad)
    opt.zero_grad()
    model(torch.ones(2)).sum().backward()
    opt.step()  # and training goes on
    assert torch.equal(model.weight.detach(),
                       hvd.broadcast(model.weight.detach(), root_rank=0, name="no_grad.after"))


def nested(rank):
    return {"rank": rank, "list": [1, (2, "three"), {"four": [rank] * rank}],
            "tensor": torch.arange(rank + 1), "none": None, "text": "x" * (1000 * rank)}


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if torch.is_tensor(a):
        return torch.equal(a, b)
    return a == b


def test_broadcast_object_with_nested_objects(hvd):
    me, n = hvd.rank(), hvd.size()
    for root in range(n):
        got = hvd.broadcast_object(nested(me) if me == root else None, root_rank=root)
        assert same(got, nested(root))
    assert hvd.broadcast_object(nested(me), root_rank=0, name="named") is not None


@pytest.mark.parametrize("name", [None, "unpicklable"])
def test_broadcast_object_that_root_cannot_pickle_fails_everywhere_at_once(hvd, name):
    """Root raises its own error; the others, rather than wait for the stall bound, a
    PicklingError quoting it. The next broadcast_object pairs up as usual."""
    me, root = hvd.rank(), hvd.size() - 1
    start = time.monotonic()
    expected = TypeError if me == root else pickle.PicklingError
    with pytest.raises(expected, match=r"cannot pickle '_thread.lock' object"
                       if me == root else rf"^broadcast_object: root rank {root} could not "
                       r"pickle the object: TypeError: cannot pickle '_thread.lock' object"):
        hvd.broadcast_object({"lock": threading.Lock()} if me == root else None, root, name)
    assert time.monotonic() - start < 10  # the stall bound in the tests is 30 s
    assert hvd.broadcast_object(("after", me), root, name) == ("after", root)


def test_allgather_object_with_nested_objects(hvd, process_sets):
    me, n = hvd.rank(), hvd.size()
    got = hvd.allgather_object(nested(me))
    assert len(got) == n and all(same(g, nested(r)) for r, g in enumerate(got))
    for ps in process_sets:
        if ps.included():
            got = hvd.allgather_object(("set", me), process_set=ps)
            assert got == [("set", r) for r in ps.ranks]

"""The optimizers' step beside the plain backward-then-step(): DistributedOptimizer with
a closure (evaluated once by SGD, several times by LBFGS) and with grouped allreduces
over several backward passes; both optimizers with parameters frozen after wrapping;
ShardedOptimizer under an LR scheduler made before wrapping. Each expected value is
computed here, by hand or by a plain torch optimizer on the averaged gradients."""

import warnings

import pytest
import torch


def assert_same_on_every_rank(hvd, tensors):
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
    gathered = hvd.allgather(flat.unsqueeze(0))
    for r in range(gathered.shape[0]):
        assert torch.equal(gathered[r], flat), f"rank {r}'s parameters differ from this rank's"


# ---- step(closure) -------------------------------------------------------------------
@pytest.mark.parametrize("how", ["closure", "backward_first", "scheduler"])
def test_closure_steps_on_the_averaged_gradient(hvd, how):
    """Rank r's gradient is r + 1 everywhere; SGD with lr 1 from zero must land on minus
    their average, on every rank, and leave nothing pending for the next zero_grad()."""
    me, n = hvd.rank(), hvd.size()
    model = torch.nn.Linear(2, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    base = torch.optim.SGD(model.parameters(), lr=1.0)
    # A scheduler made before wrapping steps the original through its counting wrapper.
    scheduler = torch.optim.lr_scheduler.StepLR(base, 1, 0.5) if how == "scheduler" else None
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    x = torch.full((1, 2), me + 1.0, dtype=torch.float64)

    def closure():
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        return loss

    if how == "backward_first":  # gradients the closure then replaces: synchronized first
        (3.0 * model(x).sum()).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
        loss = opt.step(closure)
        if scheduler is not None:
            scheduler.step()
    assert loss.item() == 0.0  # the closure's own loss, from the weights before the step
    expected = -(n + 1) / 2
    assert torch.equal(model.weight.detach(), torch.full((1, 2), expected, dtype=torch.float64))
    assert torch.equal(model.weight.grad, torch.full((1, 2), (n + 1) / 2, dtype=torch.float64))
    assert opt._handles == {}
    opt.zero_grad()  # nothing pending
    if scheduler is not None:
        assert base.param_groups[0]["lr"] == 0.5


def _lbfgs_data(rank):
    g = torch.Generator().manual_seed(40 + rank)
    x = torch.randn(5, 3, generator=g, dtype=torch.float64)
    y = torch.randn(5, 1, generator=g, dtype=torch.float64)
    return x, y


def _lbfgs_model():
    torch.manual_seed(11)
    return torch.nn.Linear(3, 1).double()


def _make_lbfgs(model):
    return torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=6, history_size=4)


def _lbfgs_alone(ranks, steps):
    """One process minimising the average of the ranks' losses."""
    model = _lbfgs_model()
    opt = _make_lbfgs(model)
    data = [_lbfgs_data(r) for r in ranks]

    def closure():
        opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in data) / len(data)
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return list(model.parameters()), opt.state[next(iter(model.parameters()))]["func_evals"]


def test_lbfgs_minimises_the_average_of_the_ranks_losses(hvd):
    """LBFGS evaluates the closure several times per step: each evaluation's gradients
    are averaged, and the loss it returns is averaged by the closure itself, so every
    rank takes the same steps as one process on the averaged objective."""
    me, n = hvd.rank(), hvd.size()
    model = _lbfgs_model()
    opt = hvd.DistributedOptimizer(_make_lbfgs(model), named_parameters=model.named_parameters())
    x, y = _lbfgs_data(me)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return hvd.allreduce(loss.detach(), name="lbfgs.loss")

    steps = 3
    for _ in range(steps):
        opt.step(closure)
    assert_same_on_every_rank(hvd, list(model.parameters()))
    expected, evaluations = _lbfgs_alone(range(n), steps)
    assert opt.state[model.weight]["func_evals"] == evaluations > steps  # several per step
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.detach(), e.detach(), rtol=1e-9, atol=1e-11)
    if n > 1:  # ... and differs from this rank's data alone (the test can tell)
        alone, _ = _lbfgs_alone([me], steps)
        assert max((p - a).abs().max().item() for p, a in zip(model.parameters(), alone)) > 1e-3


# ---- groups= with backward_passes_per_step ------------------------------------------
@pytest.mark.parametrize("groups", [None, 1, "lists"])
def test_grouped_parameter_without_a_gradient_in_the_last_pass(hvd, groups):
    """b gets a gradient in the first of two passes only: its group goes out at step(),
    with the gradient b accumulated, as b alone does without groups."""
    me, n = hvd.rank(), hvd.size()
    a, b = (torch.nn.Linear(2, 1, bias=False).double() for _ in range(2))
    for m in (a, b):
        torch.nn.init.zeros_(m.weight)
    if groups == "lists":
        groups = [[a.weight, b.weight]]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([a.weight, b.weight], lr=1.0),
                                   named_parameters=[("a", a.weight), ("b", b.weight)],
                                   backward_passes_per_step=2, groups=groups)
    x = torch.full((1, 2), me + 1.0, dtype=torch.float64)
    for step in range(2):
        opt.zero_grad()
        (a(x) + b(x)).sum().backward()  # pass 1: a and b
        a(x).sum().backward()  # pass 2: a only
        opt.step()
        mean = (n + 1) / 2  # of the ranks' r + 1
        assert torch.equal(a.weight.grad, torch.full((1, 2), 2 * mean, dtype=torch.float64))
        assert torch.equal(b.weight.grad, torch.full((1, 2), mean, dtype=torch.float64))
        assert torch.equal(a.weight.detach(), torch.full((1, 2), -2 * mean * (step + 1),
                                                         dtype=torch.float64))
        assert torch.equal(b.weight.detach(), torch.full((1, 2), -mean * (step + 1),
                                                         dtype=torch.float64))
        assert opt._handles == {}


# ---- parameters frozen after wrapping ------------------------------------------------
def _small_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 2)).double()


def _rows(step, ranks):
    g = torch.Generator().manual_seed(70 + step)
    return (torch.randn(2 * ranks, 3, generator=g, dtype=torch.float64),
            torch.randn(2 * ranks, 2, generator=g, dtype=torch.float64))


def _train_freezing(wrap, set_to_none, me=0, ranks=1, steps=3):
    """SGD with momentum and weight decay; the first layer frozen after the first step.
    ``wrap`` None: one plain torch process on every rank's rows (the reference). Returns
    the parameters, and the first layer's weight as it was when frozen."""
    model = _small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    if wrap is not None:
        opt = wrap(opt, model)
    frozen = None
    for step in range(steps):
        if step == 1:
            model[0].requires_grad_(False)
            frozen = model[0].weight.detach().clone()
        x, y = _rows(step, ranks)
        if wrap is not None:
            x, y = x[2 * me:2 * me + 2], y[2 * me:2 * me + 2]
        opt.zero_grad(set_to_none=set_to_none)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()], frozen


def _check_frozen(hvd, wrap, set_to_none, moves):
    """The frozen layer stays where it was frozen (unless ``moves``: it holds a zero
    gradient, and momentum and weight decay move it as they move torch's); everything
    equals plain torch on the whole batch."""
    got, frozen = _train_freezing(wrap, set_to_none, hvd.rank(), hvd.size())
    expected, _ = _train_freezing(None, set_to_none, ranks=hvd.size())
    assert_same_on_every_rank(hvd, got)
    assert torch.equal(got[0], frozen) != moves
    for p, e in zip(got, expected):
        torch.testing.assert_close(p, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("groups", [None, 1, "lists"])
def test_distributed_optimizer_leaves_a_layer_frozen_after_wrapping_alone(hvd, groups):
    def wrap(opt, model):
        g = [[model[0].weight, model[2].weight], [model[0].bias, model[2].bias]] \
            if groups == "lists" else groups
        return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                        groups=g)
    _check_frozen(hvd, wrap, set_to_none=True, moves=False)


@pytest.mark.parametrize("stage", [1, 2])
def test_sharded_optimizer_leaves_a_layer_frozen_after_wrapping_alone(hvd, stage):
    def wrap(opt, model):
        return hvd.ShardedOptimizer(opt, named_parameters=model.named_parameters(), stage=stage)
    _check_frozen(hvd, wrap, set_to_none=True, moves=False)


@pytest.mark.parametrize("optimizer", ["distributed", "sharded"])
def test_a_frozen_layer_holding_a_zero_gradient_moves_as_in_torch(hvd, optimizer):
    """zero_grad(set_to_none=False) leaves it a zero gradient, with which torch steps it
    too (stage 1: stage 2 lets go of every gradient once it is sent)."""
    def wrap(opt, model):
        if optimizer == "sharded":
            return hvd.ShardedOptimizer(opt, named_parameters=model.named_parameters(), stage=1)
        return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    _check_frozen(hvd, wrap, set_to_none=False, moves=True)


# ---- an LR scheduler made before wrapping ---------------------------------------------
@pytest.mark.parametrize("stage", [1, 2])
def test_sharded_optimizer_counts_its_steps_for_an_earlier_scheduler(hvd, stage):
    """The scheduler counts the steps through the optimizer it was made for: stepped in
    the right order, it must not warn that it was stepped first, and the learning rate
    it sets must reach the sharded step."""
    me, n = hvd.rank(), hvd.size()

    def train(wrap):
        model = _small_model()
        base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(base, 1, 0.5)
        opt = hvd.ShardedOptimizer(base, named_parameters=model.named_parameters(),
                                   stage=stage) if wrap else base
        for step in range(3):
            x, y = _rows(step, n)
            if wrap:
                x, y = x[2 * me:2 * me + 2], y[2 * me:2 * me + 2]
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            scheduler.step()
        return [p.detach().clone() for p in model.parameters()], base.param_groups[0]["lr"]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
        got, lr = train(wrap=True)
    assert lr == 0.1 * 0.5 ** 3
    expected, _ = train(wrap=False)  # one process, every rank's rows
    for p, e in zip(got, expected):
        torch.testing.assert_close(p, e, rtol=1e-10, atol=1e-12)

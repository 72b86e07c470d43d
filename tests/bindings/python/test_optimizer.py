"""DistributedOptimizer: N steps on every rank's share of a batch must leave the same
parameters on every rank, equal to one process training on the whole batch."""

import warnings

import pytest
import torch

STEPS = 5
ROWS = 4  # per rank and step


def make_model(dtype=torch.float64, seed=7):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3)).to(dtype)


def global_batch(step, ranks, dtype=torch.float64, rows=ROWS):
    """Step ``step``'s batch: ``rows`` rows for each of ``ranks`` ranks, the same on all."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(rows * ranks, 6, generator=g, dtype=torch.float64)
    y = torch.randn(rows * ranks, 3, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def make_optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)
    return torch.optim.Adam(params, lr=0.01)


def reference(kind, steps=STEPS, ranks=None, dtype=torch.float64, clip=None, passes=1):
    """One process, the whole batch of every step (all ranks' rows, all passes)."""
    model = make_model(dtype)
    opt = make_optimizer(kind, model.parameters())
    for step in range(steps):
        x, y = global_batch(step, ranks * passes, dtype)
        opt.zero_grad()
        loss_fn(model, x, y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def my_rows(x, index, count):
    return x[index * ROWS:(index + 1) * ROWS] if count else x


def train(hvd, kind, dtype=torch.float64, process_set=None, passes=1, clip=None, **kwargs):
    process_set = process_set or hvd.global_process_set
    ranks, me = process_set.size(), process_set.rank()
    model = make_model(dtype)
    if hvd.rank() != process_set.ranks[0]:  # broadcast_parameters must undo this
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    hvd.broadcast_parameters(model.state_dict(), root_rank=process_set.ranks[0],
                             process_set=process_set)
    opt = hvd.DistributedOptimizer(make_optimizer(kind, model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   process_set=process_set, backward_passes_per_step=passes,
                                   **kwargs)
    for step in range(STEPS):
        x, y = global_batch(step, ranks * passes, dtype)
        opt.zero_grad()
        for p in range(passes):  # pass p's rows of every rank come after pass p-1's
            i = p * ranks + me
            (loss_fn(model, x[i * ROWS:(i + 1) * ROWS], y[i * ROWS:(i + 1) * ROWS])
             / passes).backward()
        if clip is not None:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
    return [p.detach().clone() for p in model.parameters()], opt


def assert_same_on_every_rank(hvd, params, process_set=None):
    flat = torch.cat([p.reshape(-1).to(torch.float64) for p in params])
    gathered = hvd.allgather(flat.unsqueeze(0), process_set=process_set or hvd.global_process_set)
    for r in range(gathered.shape[0]):
        assert torch.equal(gathered[r], flat), f"rank {r}'s parameters differ from this rank's"


def assert_close(params, expected, tol):
    for p, e in zip(params, expected):
        close = bool(torch.allclose(p.to(torch.float64), e.to(torch.float64), rtol=tol, atol=tol))
        assert close, f"max difference {(p.to(torch.float64) - e.to(torch.float64)).abs().max().item()}"


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_equals_single_process_training(hvd, kind):
    params, _ = train(hvd, kind)
    assert_same_on_every_rank(hvd, params)
    assert_close(params, reference(kind, ranks=hvd.size()), 1e-10)
    # ... and differs from training on this rank's rows alone (the test can tell).
    if hvd.size() > 1:
        alone = reference(kind, ranks=1)
        assert max((p - a).abs().max().item() for p, a in zip(params, alone)) > 1e-4


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_backward_passes_per_step_equals_a_doubled_batch(hvd, kind):
    params, _ = train(hvd, kind, passes=2)
    assert_same_on_every_rank(hvd, params)
    assert_close(params, reference(kind, ranks=hvd.size(), passes=2), 1e-10)


@pytest.mark.parametrize("groups", [1, 3])
def test_grouped_gradients_give_the_same_result(hvd, groups):
    params, _ = train(hvd, "sgd", groups=groups)
    assert_same_on_every_rank(hvd, params)
    assert_close(params, reference("sgd", ranks=hvd.size()), 1e-10)


def test_groups_as_lists_of_parameters(hvd):
    ranks, me = hvd.size(), hvd.rank()
    model = make_model()
    w1, b1, w2, b2 = model.parameters()
    opt = hvd.DistributedOptimizer(make_optimizer("sgd", model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   groups=[[w1, w2], [b2]])
    for step in range(STEPS):
        x, y = global_batch(step, ranks)
        opt.zero_grad()
        loss_fn(model, my_rows(x, me, 1), my_rows(y, me, 1)).backward()
        opt.step()
    assert_close(list(model.parameters()), reference("sgd", ranks=ranks), 1e-10)


def test_gradient_predivide_factor(hvd):
    params, _ = train(hvd, "sgd", gradient_predivide_factor=4.0)
    assert_close(params, reference("sgd", ranks=hvd.size()), 1e-10)


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression_is_close_to_fp32(hvd, compression):
    exact, _ = train(hvd, "sgd", dtype=torch.float32)
    params, _ = train(hvd, "sgd", dtype=torch.float32,
                      compression=getattr(hvd.Compression, compression))
    assert_same_on_every_rank(hvd, params)
    tol = 2e-3 if compression == "fp16" else 2e-2
    assert_close(params, exact, tol)
    if hvd.size() > 1:  # the cast must really have happened: not bit-identical
        assert any(not torch.equal(p, e) for p, e in zip(params, exact))


def test_skip_synchronize_with_gradient_clipping(hvd):
    params, _ = train(hvd, "sgd", clip=0.05)
    assert_same_on_every_rank(hvd, params)
    assert_close(params, reference("sgd", ranks=hvd.size(), clip=0.05), 1e-10)
    unclipped = reference("sgd", ranks=hvd.size())
    assert max((p - u).abs().max().item() for p, u in zip(params, unclipped)) > 1e-4


def test_step_after_synchronize_without_skip_warns(hvd):
    model = make_model()
    opt = hvd.DistributedOptimizer(make_optimizer("sgd", model.parameters()),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    loss_fn(model, x, y).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()


def test_zero_grad_with_pending_allreduces_raises(hvd):
    model = make_model()
    opt = hvd.DistributedOptimizer(make_optimizer("sgd", model.parameters()),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    loss_fn(model, x, y).backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.step()
    opt.zero_grad()  # fine once synchronized


def test_parameters_without_gradient_are_still_reduced(hvd):
    """Rank 0 never uses the second head: its gradient is zero there, and every rank
    still submits the same names, so nothing hangs and the average counts rank 0."""
    torch.manual_seed(3)
    trunk, head_a, head_b = (torch.nn.Linear(4, 4).double(), torch.nn.Linear(4, 1).double(),
                             torch.nn.Linear(4, 1).double())
    params = list(trunk.parameters()) + list(head_a.parameters()) + list(head_b.parameters())
    named = [(f"p{i}", p) for i, p in enumerate(params)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named)
    x = torch.ones(2, 4, dtype=torch.float64)
    out = head_a(trunk(x)).sum()
    if hvd.rank() != 0:
        out = out + head_b(trunk(x)).sum()
    before = head_b.weight.detach().clone()
    out.backward()
    # On the ranks that use it, head_b.weight's gradient is trunk(x) summed over rows;
    # rank 0 contributes zeros, and the average divides by every rank.
    local = trunk(x).detach().sum(0)
    opt.step()
    expected = before - local * (hvd.size() - 1) / hvd.size()
    assert torch.allclose(head_b.weight.detach(), expected.unsqueeze(0), atol=1e-12)


def test_process_set_optimizer(hvd, process_sets):
    for ps in process_sets:
        if not ps.included():
            continue
        params, _ = train(hvd, "adam", process_set=ps)
        assert_same_on_every_rank(hvd, params, ps)
        assert_close(params, reference("adam", ranks=ps.size()), 1e-10)


def test_argument_checks(hvd):
    model = make_model()
    opt = make_optimizer("sgd", model.parameters())
    with pytest.raises(ValueError, match="predivide"):
        hvd.DistributedOptimizer(opt, op=hvd.Adasum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="predivide"):
        hvd.DistributedOptimizer(opt, op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(opt, backward_passes_per_step=0)
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(opt, named_parameters=[("a", p) for _, p in named])
    with pytest.raises(ValueError, match="not in it"):
        hvd.DistributedOptimizer(opt, named_parameters=named[:2])


def test_horovods_attributes(hvd):
    """What Horovod's wrapper exposes and scripts (and Horovod's tests) read."""
    model = make_model()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters()}],
                        lr=0.1),
        backward_passes_per_step=2, gradient_predivide_factor=2.0)
    names = opt._parameter_names  # parameter -> name, as Horovod's
    assert sorted(id(p) for p in names) == sorted(id(p) for p in params)
    assert len(set(names.values())) == len(params)
    assert hvd.allgather_object(sorted(names.values())) == [sorted(names.values())] * hvd.size()
    assert opt.backward_passes_per_step == 2
    assert [opt._allreduce_delay[p] for p in params] == [2] * len(params)
    assert opt.op == hvd.Average and opt.gradient_predivide_factor == 2.0
    assert opt.sparse_as_dense is False and opt.process_set is hvd.global_process_set
    assert opt._synchronized is False and opt._should_synchronize is True
    assert opt._handles == {} and opt._groups is None
    assert opt._p_to_group == {} and opt._group_counts == {}
    assert isinstance(opt._grad_accs, list) and isinstance(opt._compression, type)
    if hvd.size() > 1:
        assert sorted(id(p) for p in opt._requires_update) == sorted(id(p) for p in params)
    named = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                     named_parameters=model.named_parameters())
    assert {name: id(p) for p, name in named._parameter_names.items()} == \
        {name: id(p) for name, p in model.named_parameters()}


def test_wrapped_optimizer_keeps_its_class_and_state(hvd):
    model = make_model()
    base = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD"
    assert opt.param_groups is base.param_groups
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = global_batch(0, hvd.size())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "step() before lr_scheduler.step()" warning
        loss_fn(model, x, y).backward()
        opt.step()
        scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.25 and base.param_groups[0]["lr"] == 0.25
    assert len(opt.state) == 4  # momentum buffers, in the state both objects share


def scheduled_training(hvd, wrap, steps=3):
    """SGD with a StepLR made for it before it is wrapped (if ``wrap``), stepped in the
    right order: optimizer, then scheduler. Returns the parameters and the last lr."""
    ranks, me = (hvd.size(), hvd.rank()) if wrap else (1, 0)
    model = make_model()
    base = make_optimizer("sgd", model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters()) \
        if wrap else base
    for step in range(steps):
        x, y = global_batch(step, hvd.size())
        opt.zero_grad()
        loss_fn(model, my_rows(x, me, wrap), my_rows(y, me, wrap)).backward()
        opt.step()
        scheduler.step()
    return [p.detach().clone() for p in model.parameters()], base.param_groups[0]["lr"]


def test_scheduler_made_before_wrapping_counts_the_wrapped_steps(hvd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
        params, lr = scheduled_training(hvd, wrap=True)
    assert lr == 0.1 * 0.5 ** 3
    assert_same_on_every_rank(hvd, params)
    expected, _ = scheduled_training(hvd, wrap=False)  # one process, the whole batch
    assert_close(params, expected, 1e-10)


def test_scheduler_stepped_before_the_optimizer_still_warns(hvd):
    model = make_model()
    base = make_optimizer("sgd", model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=0.5)
    hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    with pytest.warns(UserWarning, match=r"lr_scheduler.step\(\)` before `optimizer.step\(\)"):
        scheduler.step()


def step_raises_for_an_unreduced_gradient(opt, loss, match):
    loss.backward()
    before = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
    with pytest.raises(ValueError, match=match):
        opt.step()
    after = [p.detach() for g in opt.param_groups for p in g["params"]]
    assert all(torch.equal(b, a) for b, a in zip(before, after)), "stepped anyway"


def test_parameter_group_added_after_wrapping_raises(hvd):
    """Its parameters have no hook: their gradients would stay local, and the ranks
    drift apart (each rank's rows differ here)."""
    model, extra = make_model(), torch.nn.Linear(3, 2).double()
    opt = hvd.DistributedOptimizer(make_optimizer("sgd", model.parameters()),
                                   named_parameters=model.named_parameters())
    opt.add_param_group({"params": list(extra.parameters())})
    x, y = global_batch(0, hvd.size())
    rows = my_rows(x, hvd.rank(), hvd.size())
    loss = extra(model(rows)).pow(2).mean()
    if hvd.size() > 1:
        step_raises_for_an_unreduced_gradient(
            opt, loss, r"parameter param_groups\[1\]\['params'\]\[0\] \(shape \[2, 3\]\) has a "
                       r"gradient but no allreduce hook")
    else:
        loss.backward()
        opt.step()  # one rank: nothing to reduce, nothing to check


def test_requires_grad_switched_on_after_wrapping_raises(hvd):
    model = make_model()
    model[2].bias.requires_grad_(False)
    opt = hvd.DistributedOptimizer(make_optimizer("sgd", model.parameters()),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    x, y = my_rows(x, hvd.rank(), hvd.size()), my_rows(y, hvd.rank(), hvd.size())
    opt.zero_grad()
    loss_fn(model, x, y).backward()
    opt.step()  # frozen, without a gradient: fine
    model[2].bias.requires_grad_(True)
    opt.zero_grad()
    if hvd.size() > 1:
        step_raises_for_an_unreduced_gradient(
            opt, loss_fn(model, x, y),
            r"parameter '2.bias' \(param_groups\[0\]\['params'\]\[3\]; shape \[3\]\)")


def test_load_state_dict_keeps_the_objects_the_original_shares(hvd):
    """A checkpoint loaded into the wrapped optimizer reaches the original's param
    groups and state too, which a scheduler made for the original drives."""
    model = make_model()
    saved = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.5)
    for p in model.parameters():
        p.grad = torch.full_like(p, 2.0)
    saved.step()  # momentum buffers: 2.0 everywhere
    base = make_optimizer("sgd", model.parameters())
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    opt.load_state_dict(saved.state_dict())
    assert opt.param_groups is base.param_groups and opt.state is base.state
    assert (base.param_groups[0]["lr"], base.param_groups[0]["momentum"]) == (0.3, 0.5)
    buffers = [base.state[p]["momentum_buffer"] for p in model.parameters()]
    assert all(torch.equal(b, torch.full_like(b, 2.0)) for b in buffers)

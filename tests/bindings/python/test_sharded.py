"""ShardedOptimizer (stages 1 and 2): after 20 steps the parameters equal
DistributedOptimizer's on the same data, with every kind of optimizer, precision and
parameter, and what cannot be sharded is refused on every rank (the state per rank and
checkpoints: test_sharded_state.py)."""

import pytest
import torch

from accord.torch import sharded
from sharded_common import (Net, assert_close, batch, make_model, make_optimizer, needs_gpu,
                            needs_two_ranks_for_the_reference, params, reference,
                            state_tensors, this_ranks_gpu, train, wrap)


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_same_parameters_as_distributed_optimizer(hvd, kind, stage, monkeypatch):
    # Sum and Average of two ranks add the same two numbers in any order: bitwise. With
    # three ranks the reduce-scatter and the allreduce may add in different orders.
    # Stage 2 steps and gathers the parameters in rounds of one or two each.
    if stage == 2:
        monkeypatch.setattr(sharded, "_ROUND_BYTES", 64)
    model, _ = train(hvd, kind, stage)
    assert_close(params(model), reference(hvd, kind), exact=hvd.size() == 2)
    frozen = make_model().frozen
    assert torch.equal(model.frozen.weight, frozen.weight)


@pytest.mark.parametrize("stage", [1, 2])
def test_sum_and_accumulated_passes(hvd, stage):
    model, _ = train(hvd, "adam", stage, steps=6, op=hvd.Sum, passes=2)
    assert_close(params(model), reference(hvd, "adam", steps=6, op=hvd.Sum, passes=2),
                 exact=hvd.size() == 2)


@pytest.mark.parametrize("option", ["fp16", "predivide"])
def test_compression_and_predivide_as_distributed_optimizer(hvd, option):
    kwargs = ({"compression": hvd.Compression.fp16} if option == "fp16"
              else {"gradient_predivide_factor": 2.0})
    model, _ = train(hvd, "adam", 2, steps=4, **kwargs)
    expected = reference(hvd, "adam", steps=4, **kwargs)
    if hvd.size() == 2 or option == "predivide":
        assert_close(params(model), expected, exact=hvd.size() == 2)
    else:  # three fp16 gradients summed in another order: fp16's rounding, after Adam
        for name, p in params(model).items():
            torch.testing.assert_close(p, expected[name], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("stage", [1, 2])
def test_clip_by_global_norm(hvd, stage):
    model, _ = train(hvd, "sgd", stage, steps=6, clip=0.05)
    assert_close(params(model), reference(hvd, "sgd", steps=6, clip=0.05), exact=False)


@pytest.mark.parametrize("kind", ["Adadelta", "Adagrad", "Adamax", "ASGD", "NAdam", "RAdam",
                                  "RMSprop", "Rprop"])
def test_other_element_wise_optimizers(hvd, kind):
    if not hasattr(torch.optim, kind):
        pytest.skip(f"this PyTorch has no torch.optim.{kind}")
    model, _ = train(hvd, kind, 2, steps=5)
    assert_close(params(model), reference(hvd, kind, steps=5), exact=False)


@pytest.mark.parametrize("kind", ["adamw-forloop", "adamw-fused", "sgd-fused"])
def test_implementations_of_the_update(hvd, kind):
    """torch's for-loop update is the foreach one element by element: bitwise on two
    ranks. Its fused CPU kernels (PyTorch 2.4+) round an element differently by where it
    falls in a vector, so a part cut out of a parameter may differ by an ulp."""
    try:
        make_optimizer(kind, make_model())
    except (RuntimeError, TypeError, ValueError) as e:
        pytest.skip(f"this PyTorch has no {kind} on the CPU: {e}")
    for stage in (1, 2):
        model, _ = train(hvd, kind, stage, steps=5)
        assert_close(params(model), reference(hvd, kind, steps=5),
                     exact=hvd.size() == 2 and not kind.endswith("fused"))


def test_step_with_closure(hvd):
    model = make_model()
    opt = wrap(hvd, make_optimizer("adam", model), model, 2)
    losses = []
    for step in range(4):
        x, y = batch(step, process_set=hvd.global_process_set)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x, step), y)
            loss.backward()
            return loss
        losses.append(opt.step(closure))
    assert all(isinstance(loss, torch.Tensor) for loss in losses)
    reference_model, _ = train(hvd, "adam", 2, steps=4)
    # The scheduler in train() first halves the LR after 7 steps: none here.
    assert_close(params(model), params(reference_model), exact=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_parameters_fp32_state(hvd, dtype):
    try:
        torch.nn.functional.linear(torch.ones(1, 1, dtype=dtype), torch.ones(1, 1, dtype=dtype))
    except RuntimeError:
        pytest.skip(f"this PyTorch has no CPU matrix product in {dtype}")
    model, opt = train(hvd, "adam", 2, steps=8, dtype=dtype)
    assert all(p.dtype == dtype for p in model.parameters())
    states = [v for s in opt.state.values() for v in s.values()
              if isinstance(v, torch.Tensor) and v.dim() > 0]
    assert states and all(v.dtype == torch.float32 for v in states)
    expected = reference(hvd, "adam", steps=8)
    for name, p in params(model).items():
        torch.testing.assert_close(p.float(), expected[name], rtol=0.02, atol=0.02)


def test_master_copies_follow_changes_from_outside(hvd):
    # fp32 masters of bf16 parameters: a parameter set after wrapping (a broadcast, a
    # loaded model) is what the next step starts from.
    model = make_model(torch.bfloat16)
    opt = hvd.ShardedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                               named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)  # hyperparameters only, no error
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.5)
    model(torch.ones(2, 7, dtype=torch.bfloat16), 0).float().sum().backward()
    opt.step()
    assert all(torch.equal(p, torch.full_like(p, 0.5)) for p in model.parameters())


@pytest.mark.parametrize("how", ["broadcast_parameters", "allreduce_"])
def test_master_copies_follow_collectives_into_parameters(hvd, how):
    # bf16 parameters that differ between ranks, set by a collective after wrapping:
    # the runtime writes them outside autograd, and the next step (lr 0) must start from
    # what it wrote, not from each rank's own values kept in its fp32 masters.
    torch.manual_seed(11 + hvd.rank())
    model = Net().to(torch.bfloat16)
    opt = hvd.ShardedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                               named_parameters=model.named_parameters())
    if how == "broadcast_parameters":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    else:
        with torch.no_grad():
            for name, p in model.named_parameters():
                hvd.allreduce_(p, op=hvd.Max, name=f"max.{name}")
    expected = {name: p.detach().clone() for name, p in model.named_parameters()}
    model(torch.ones(2, 7, dtype=torch.bfloat16), 0).float().sum().backward()
    opt.step()
    for name, p in model.named_parameters():
        assert torch.equal(p, expected[name]), name


def test_masters_loaded_from_a_checkpoint_survive_broadcast_parameters(hvd):
    # The resume recipe: a model with the saved bf16 weights, wrapped, the state loaded
    # with its fp32 masters, then broadcast_parameters of those same weights. The
    # weights are the masters' rounding, so the masters keep their exact values; a step
    # with lr 0 shows what the next update starts from.
    model, opt = train(hvd, "adam", 2, steps=3, dtype=torch.bfloat16)
    opt.consolidate_state_dict(to=0)
    saved = hvd.broadcast_object(opt.state_dict() if hvd.rank() == 0 else None, root_rank=0)
    resumed = make_model(torch.bfloat16)
    resumed.load_state_dict(model.state_dict())
    opt = wrap(hvd, make_optimizer("adam", resumed), resumed, 2)
    opt.load_state_dict(saved)
    hvd.broadcast_parameters(resumed.state_dict(), root_rank=0)
    for group in opt.param_groups:
        group["lr"] = 0.0
    x, y = batch(3, torch.bfloat16, hvd.global_process_set)
    torch.nn.functional.mse_loss(resumed(x, 3).float(), y.float()).backward()
    opt.step()
    for s in opt._shards:
        master = saved["accord_master_params"][s.index].reshape(-1)[s.offset:s.offset + s.count]
        assert torch.equal(s.piece, master), s.name


def test_wrapping_an_optimizer_with_state(hvd):
    # A resumed optimizer: its state is cut to this rank's part.
    trained, replicated = train(hvd, "sgd", 0, steps=3)
    model = make_model()
    model.load_state_dict(trained.state_dict())
    plain = make_optimizer("sgd", model)
    plain.load_state_dict(replicated.state_dict())
    opt = wrap(hvd, plain, model, 2)
    assert not plain.state  # the whole state is let go of
    train(hvd, "sgd", 2, steps=3, model=model, opt=opt, first_step=3)
    assert_close(params(model), reference(hvd, "sgd", steps=6), exact=hvd.size() == 2)


def _train_adding_a_group(hvd, stage, steps=12, added_at=5):
    """AdamW on everything but the branch, which a group added at step ``added_at``
    brings in with an LR of its own. Stage 0: a plain optimizer stepping the
    allreduced gradients (zeros where a rank has none, as both wrappers send)."""
    model = make_model()
    groups = [{"params": [*model.first.parameters(), *model.frozen.parameters(), model.scale]},
              {"params": [*model.last.parameters()], "lr": 0.02}]
    opt = torch.optim.AdamW(groups, lr=0.01, weight_decay=0.05)
    if stage:
        opt = wrap(hvd, opt, model, stage)
    for step in range(steps):
        if step == added_at:
            opt.add_param_group({"params": list(model.branch.parameters()), "lr": 0.03})
        model.zero_grad()
        x, y = batch(step, process_set=hvd.global_process_set)
        torch.nn.functional.mse_loss(model(x, step), y).backward()
        if not stage:
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        grad = p.grad if p.grad is not None else torch.zeros_like(p)
                        p.grad = hvd.allreduce(grad, op=hvd.Average)
        opt.step()
    return model, opt


@pytest.mark.parametrize("stage", [1, 2])
def test_a_group_added_after_wrapping(hvd, stage):
    model, opt = _train_adding_a_group(hvd, stage)
    expected, _ = _train_adding_a_group(hvd, 0)
    assert_close(params(model), params(expected), exact=hvd.size() == 2)
    assert len(opt.param_groups) == 3 and opt.param_groups[2]["lr"] == 0.03
    branch = {id(p) for p in model.branch.parameters()}
    assert sum(1 for s in opt._shards if id(s.param) in branch) == 2
    assert [p for p in opt.param_groups[2]["params"]] == list(model.branch.parameters())


def test_a_group_that_differs_between_ranks_is_an_error(hvd):
    model = make_model()
    opt = wrap(hvd, torch.optim.SGD(model.first.parameters(), lr=0.1), model, 2)
    added = [model.last.weight] if hvd.rank() == 0 else [model.last.bias]
    with pytest.raises(hvd.MismatchError, match="'last.weight'.*differs between ranks"):
        opt.add_param_group({"params": added})
    assert len(opt.param_groups) == 1  # as before the call
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [model.first.weight]})  # torch's own check


def test_a_layer_unfrozen_after_wrapping_is_an_error(hvd):
    # Its gradient would be dropped: no rank holds a part of it.
    model = make_model()
    opt = wrap(hvd, make_optimizer("adam", model), model, 2)
    model.frozen.requires_grad_(True)
    x, y = batch(0, process_set=hvd.global_process_set)
    torch.nn.functional.mse_loss(model(x, 0), y).backward()
    with pytest.raises(ValueError, match="'frozen.weight'.*frozen.*when the optimizer was"):
        opt.step()


@pytest.mark.parametrize("stage", [1, 2])
def test_parameters_given_new_data_after_wrapping(hvd, stage):
    # model.to(device) after making the optimizer sets p.data, as this does: before
    # the first step, and again with state, the training goes on as if nothing happened.
    def move(model):
        for p in model.parameters():
            p.data = p.data.clone()

    model = make_model()
    opt = wrap(hvd, make_optimizer("adamw", model), model, stage)
    move(model)
    train(hvd, "adamw", stage, steps=3, model=model, opt=opt)
    move(model)
    train(hvd, "adamw", stage, steps=3, model=model, opt=opt, first_step=3)
    assert_close(params(model), reference(hvd, "adamw", steps=6), exact=hvd.size() == 2)
    # Each part is cut from the parameter's new memory, not stepped in the old one (kept
    # alive beside it) and copied over.
    def memory(t):  # untyped_storage: torch >= 2.0
        return getattr(t, "untyped_storage", t.storage)().data_ptr()

    assert all(memory(s.piece) == memory(s.param) for s in opt._shards)


@pytest.mark.parametrize("stage", [1, 2])
def test_channels_last_parameters(hvd, stage):
    # Convolution weights in channels_last are not one flat vector in memory: each is
    # cut in its logical order, stepped in a copy, gathered into a flat tensor of the
    # known size and written back in its own layout.
    def run(stage):
        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.ReLU(),
                                    torch.nn.Conv2d(5, 4, 2)).to(memory_format=torch.channels_last)
        opt = wrap(hvd, torch.optim.AdamW(model.parameters(), lr=0.01), model, stage)
        for step in range(5):
            g = torch.Generator().manual_seed(10 * step + hvd.rank())
            x = torch.randn(2, 3, 7, 7, generator=g).to(memory_format=torch.channels_last)
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        return model

    model, expected = run(stage), run(0)
    for conv in (model[0], model[2]):
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        assert not conv.weight.is_contiguous()
    assert_close(params(model), params(expected), exact=hvd.size() == 2)


# ---- what is refused ---------------------------------------------------------------------
@pytest.mark.parametrize("difference", ["shape", "count"])
def test_different_parameters_are_an_error_on_every_rank(hvd, difference):
    torch.manual_seed(0)
    if difference == "shape":
        model = torch.nn.Sequential(torch.nn.Linear(4, 3 if hvd.rank() == 0 else 2))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=hvd.rank() != 0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(hvd.MismatchError) as raised:
        hvd.ShardedOptimizer(opt, named_parameters=model.named_parameters())
    message = str(raised.value)
    if difference == "shape":
        assert "'0.weight'" in message and "[3, 4]" in message and "[2, 4]" in message
    else:
        assert "'0.bias'" in message and "rank 0 has no such parameter" in message


def test_optimizer_without_per_parameter_state_is_refused(hvd):
    model = torch.nn.Linear(4, 3)
    with pytest.raises(TypeError, match="LBFGS cannot be sharded"):
        hvd.ShardedOptimizer(torch.optim.LBFGS(model.parameters()))
    if hasattr(torch.optim, "Adafactor"):
        with pytest.raises(TypeError, match="Adafactor cannot be sharded"):
            hvd.ShardedOptimizer(torch.optim.Adafactor(model.parameters()))

    class WholeState(torch.optim.SGD):
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    self.state[p]["seen"] = torch.zeros(p.numel() + 1)
            return super().step(closure)

    opt = hvd.ShardedOptimizer(WholeState(model.parameters(), lr=0.1))
    model(torch.ones(2, 4)).sum().backward()
    with pytest.raises(TypeError, match="not per element.*'seen'"):
        opt.step()


@needs_gpu
@pytest.mark.parametrize("stage", [1, 2])
def test_on_the_gpu_as_on_the_cpu(hvd, stage):
    # The runtime's GPU path: reduce-scatter and allgather of CUDA tensors.
    needs_two_ranks_for_the_reference(hvd)
    device = this_ranks_gpu(hvd)
    model, opt = train(hvd, "adamw", stage, steps=6, device=device)
    assert all(p.device == device for p in model.parameters())
    assert all(v.device == device for v in state_tensors(opt))
    for name, p in params(model).items():
        torch.testing.assert_close(p, reference(hvd, "adamw", steps=6)[name], rtol=1e-4,
                                   atol=1e-5)

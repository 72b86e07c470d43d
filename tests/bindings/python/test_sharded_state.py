"""ShardedOptimizer's state: each rank holds 1/N of the optimizer state (and in stage 2
of the gradients), the consolidated state is torch's format, and checkpoints move
between rank counts and devices."""

import pytest
import torch

from sharded_common import (Net, assert_close, batch, make_model, make_optimizer, needs_gpu,
                            params, state_tensors, this_ranks_gpu, train, wrap)


# ---- memory: 1/N of the state, and in stage 2 of the gradients ----------------------
def _bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("stage", [1, 2])
def test_state_and_gradients_per_rank(hvd, stage):
    torch.manual_seed(1)
    layers = [torch.nn.Linear(101, 37), torch.nn.Linear(37, 13), torch.nn.Linear(13, 1)]

    def run(wrapper_stage):
        model = torch.nn.Sequential(*[torch.nn.Linear(l.in_features, l.out_features)
                                      for l in layers])
        model.load_state_dict(torch.nn.Sequential(*layers).state_dict())
        opt = wrap(hvd, torch.optim.Adam(model.parameters(), lr=0.01), model, wrapper_stage)
        for step in range(2):
            opt.zero_grad()
            model(torch.randn(4, 101)).sum().backward()
            opt.step()
        return model, opt

    _, replicated = run(0)
    model, sharded = run(stage)
    n = hvd.size()
    largest = max(_bytes([p]) for p in model.parameters())
    full, mine = _bytes(state_tensors(replicated)), _bytes(state_tensors(sharded))
    assert abs(mine - full / n) <= largest, (mine, full)
    total = hvd.allreduce(torch.tensor([mine]), op=hvd.Sum).item()
    assert total == full  # every element's state on exactly one rank
    grads = _bytes([p.grad for p in model.parameters() if p.grad is not None])
    pieces = _bytes([s.piece.grad for s in sharded._shards if s.piece.grad is not None])
    weights = _bytes(list(model.parameters()))
    if stage == 2:
        assert grads == 0
        assert abs(pieces - weights / n) <= largest
        assert hvd.allreduce(torch.tensor([pieces]), op=hvd.Sum).item() == weights
    else:
        assert grads == weights
    sharded.zero_grad()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    assert all(s.piece.grad is None for s in sharded._shards)


# ---- checkpoints ---------------------------------------------------------------------
def test_consolidated_state_is_torch_format(hvd):
    _, replicated = train(hvd, "adamw", 0, steps=5)
    model, sharded = train(hvd, "adamw", 2, steps=5)
    with pytest.raises(RuntimeError, match="consolidate_state_dict"):
        sharded.state_dict()
    sharded.consolidate_state_dict(to=hvd.size() - 1)
    if hvd.rank() != hvd.size() - 1:
        with pytest.raises(RuntimeError):
            sharded.state_dict()
        return
    mine, theirs = sharded.state_dict(), replicated.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert sorted(mine["state"]) == sorted(theirs["state"])
    for index, values in theirs["state"].items():
        assert sorted(mine["state"][index]) == sorted(values)
        for key, value in values.items():
            torch.testing.assert_close(mine["state"][index][key], value, rtol=1e-5, atol=1e-7)
    plain = torch.optim.AdamW(make_optimizer("adamw", model).param_groups)
    plain.load_state_dict(mine)  # a plain optimizer takes it
    mine["state"][0]["exp_avg"] = mine["state"][0]["exp_avg"][:, :3]  # another model's
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 'first.weight' .*\[5, 3\]"):
        sharded.load_state_dict(mine)


def _save(hvd, opt, form, process_set):
    """The checkpoint as every rank of the job then has it (a file read by all)."""
    if form == "consolidated":
        opt.consolidate_state_dict(to=0)
        return opt.state_dict() if process_set.rank() == 0 else None
    return hvd.allgather_object(opt.sharded_state_dict(), process_set=process_set)


@pytest.mark.parametrize("form", ["consolidated", "shards"])
@pytest.mark.parametrize("direction", ["to_fewer", "to_more"])
def test_checkpoint_on_another_rank_count(hvd, process_sets, form, direction):
    # With 3 ranks: saved on 3 and loaded on 2 (ranks 0 and 2), or the other way; with 2
    # ranks, between 2 and 1.
    subset, whole = process_sets[0], hvd.global_process_set
    before, after = (whole, subset) if direction == "to_fewer" else (subset, whole)
    dtype = torch.float64
    expected = params(train(hvd, "adamw", 2, steps=6, dtype=dtype)[0])
    saved, weights = None, None
    if before.included():
        model, opt = train(hvd, "adamw", 2 if form == "shards" else 1, steps=3, dtype=dtype,
                           process_set=before)
        saved, weights = _save(hvd, opt, form, before), model.state_dict()
    saved, weights = hvd.broadcast_object((saved, weights), root_rank=0)
    if after.included():
        model = make_model(dtype)
        model.load_state_dict(weights)
        opt = wrap(hvd, make_optimizer("adamw", model), model, 2, process_set=after)
        if form == "shards":
            opt.load_sharded_state_dict(saved)
        else:
            opt.load_state_dict(saved)
        train(hvd, "adamw", 2, steps=3, dtype=dtype, process_set=after, model=model, opt=opt,
              first_step=3)
        assert_close(params(model), expected, exact=False)


@needs_gpu
def test_checkpoint_on_the_gpu(hvd):
    # bf16 parameters on the GPU that differ by rank until broadcast_parameters (after
    # wrapping: the masters follow), trained with Adam, then consolidated: the whole
    # state comes to rank 0 in host memory (Net's one-element parameter has no part on
    # some ranks), and loads back onto the GPU, Adam's step staying on the CPU.
    device = this_ranks_gpu(hvd)
    torch.manual_seed(11 + hvd.rank())
    model = Net().to(device, torch.bfloat16)
    opt = hvd.ShardedOptimizer(torch.optim.Adam(model.parameters(), lr=0.0),
                               named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    root = {n: p.detach().clone() for n, p in model.named_parameters()}

    def step(k):
        x, y = (t.to(device, torch.bfloat16)
                for t in batch(k, process_set=hvd.global_process_set))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x, k).float(), y.float()).backward()
        opt.step()

    step(0)  # lr 0: still root's parameters
    assert all(torch.equal(p, root[n]) for n, p in model.named_parameters())
    for group in opt.param_groups:
        group["lr"] = 0.01
    for k in range(1, 4):
        step(k)
    opt.consolidate_state_dict(to=0)
    whole = opt.state_dict() if hvd.rank() == 0 else None
    if hvd.rank() == 0:
        tensors = [v for s in whole["state"].values() for v in s.values()
                   if isinstance(v, torch.Tensor)]
        assert tensors and all(v.device.type == "cpu" for v in tensors)
    opt.load_state_dict(hvd.broadcast_object(whole, root_rank=0))
    for values in opt.state.values():
        assert values["step"].device.type == "cpu"
        assert values["exp_avg"].device == device and values["exp_avg"].dtype == torch.float32
    step(4)
    every = hvd.allgather_object({n: p.float().cpu() for n, p in model.named_parameters()})
    assert all(torch.equal(other[n], every[0][n]) for other in every for n in every[0])


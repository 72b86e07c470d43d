"""Loss scaling with the sharded optimizer (ShardedGradScaler): the same steps taken and
skipped, the same scale on every rank, as torch's GradScaler with DistributedOptimizer;
torch's own scaler refused."""

import pytest
import torch

from sharded_common import (assert_close, batch, make_model, make_optimizer, needs_gpu,
                            needs_two_ranks_for_the_reference, params, this_ranks_gpu, wrap)


needs_cpu_scaler = pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"),
                                      reason="this PyTorch has no GradScaler for the CPU")


@needs_cpu_scaler
def test_torch_grad_scaler_is_refused(hvd):
    # It would check and unscale p.grad: this rank's local gradient, or nothing.
    scaler = torch.amp.GradScaler("cpu")
    model = make_model()
    opt = wrap(hvd, make_optimizer("adam", model), model, 1)
    before = params(model)
    x, y = batch(0, process_set=hvd.global_process_set)
    scaler.scale(torch.nn.functional.mse_loss(model(x, 0), y)).backward()
    with pytest.raises(TypeError, match="needs accord.torch.ShardedGradScaler"):
        scaler.step(opt)
    assert_close(params(model), before, exact=True)  # nothing stepped


def torch_grad_scaler():
    """torch.amp.GradScaler (PyTorch 2.3 on, any device), or torch.cuda.amp's."""
    return getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler


def _scaler(cls, device, **kwargs):
    # PyTorch 1.13's GradScaler (and so ShardedGradScaler there) scales on CUDA only and
    # takes no device.
    return cls(device, **kwargs) if hasattr(torch.amp, "GradScaler") else cls(**kwargs)


INF_STEP = 4  # the step in which the last rank's gradient of first.weight[0, 0] is inf


def train_scaled(hvd, stage, steps=10, clip=None, device="cpu", dtype=torch.float32):
    """Loss scaling, as torch's recipes have it, with DistributedOptimizer (stage 0,
    torch's GradScaler) and ShardedOptimizer (ShardedGradScaler). In step INF_STEP the
    last rank's gradient gets an inf in one element, which the reduction carries into the
    first rank's part only: every rank must skip that step. Returns (model, scaler)."""
    model = make_model(dtype).to(device)
    opt = wrap(hvd, make_optimizer("adamw", model), model, stage)
    scaler = _scaler(torch_grad_scaler() if stage == 0 else hvd.ShardedGradScaler,
                     torch.device(device).type, init_scale=2.0 ** 10, growth_interval=3)
    poisoned = hvd.rank() == hvd.size() - 1

    def poison(g):
        g = g.clone()
        g[0, 0] = float("inf")
        return g

    for step in range(steps):
        opt.zero_grad()
        hook = (model.first.weight.register_hook(poison)
                if poisoned and step == INF_STEP else None)
        x, y = (t.to(device) for t in batch(step, dtype, process_set=hvd.global_process_set))
        loss = torch.nn.functional.mse_loss(model(x, step).float(), y.float())
        scaler.scale(loss).backward()
        if hook is not None:
            hook.remove()
        if stage == 0:
            opt.synchronize()
            scaler.unscale_(opt)
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                scaler.step(opt)
        else:
            if clip is not None:
                scaler.unscale_(opt)
                opt.clip_grad_norm_(clip)
            scaler.step(opt)
        scaler.update()
    return model, scaler


@pytest.mark.parametrize("clip", [None, 0.05])
@pytest.mark.parametrize("stage", [1, 2])
@needs_cpu_scaler
def test_grad_scaler_as_distributed_optimizer(hvd, stage, clip):
    expected_model, expected_scaler = train_scaled(hvd, 0, clip=clip)
    model, scaler = train_scaled(hvd, stage, clip=clip)
    # The inf step was skipped on every rank: the scale doubled after 3 clean steps (0-2),
    # halved at step 4, doubled after 5-7; and every rank holds the same scale.
    assert scaler.get_scale() == expected_scaler.get_scale() == 2.0 ** 10 * 2 / 2 * 2
    assert set(hvd.allgather_object(scaler.get_scale())) == {scaler.get_scale()}
    assert_close(params(model), params(expected_model), exact=False)


@needs_cpu_scaler
def test_grad_scaler_with_fp16_parameters(hvd):
    # torch's scaler refuses fp16 gradients; here the reduced fp16 gradients are
    # unscaled in the fp32 master copies' gradients, and the same steps are skipped.
    try:
        torch.nn.functional.linear(torch.ones(1, 1).half(), torch.ones(1, 1).half())
    except RuntimeError:
        pytest.skip("this PyTorch has no CPU matrix product in float16")
    expected_model, expected_scaler = train_scaled(hvd, 1)
    model, scaler = train_scaled(hvd, 2, dtype=torch.float16)
    assert all(p.dtype == torch.float16 for p in model.parameters())
    assert scaler.get_scale() == expected_scaler.get_scale()
    for name, p in params(model).items():
        torch.testing.assert_close(p.float(), params(expected_model)[name], rtol=0.02,
                                   atol=0.02)


@needs_gpu
@pytest.mark.parametrize("stage", [1, 2])
def test_grad_scaler_on_the_gpu(hvd, stage):
    needs_two_ranks_for_the_reference(hvd)
    device = this_ranks_gpu(hvd)
    expected_model, expected_scaler = train_scaled(hvd, 0, device=device)
    model, scaler = train_scaled(hvd, stage, device=device)
    assert scaler.get_scale() == expected_scaler.get_scale()
    assert_close(params(model), params(expected_model), exact=False)

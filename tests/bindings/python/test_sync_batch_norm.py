"""SyncBatchNorm on each rank's share of a batch equals BatchNorm on the whole batch:
outputs, running statistics, input gradients, and weight gradients summed over ranks."""

import pytest
import torch


def batch(n, rows=3):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n * rows, 4, 5, 3, generator=g, dtype=torch.float64) * 2 + 0.5
    w = torch.randn(n * rows, 4, 5, 3, generator=g, dtype=torch.float64)  # upstream grads
    return x, w


@pytest.mark.parametrize("steps", [1, 3])
def test_sync_batch_norm_equals_batch_norm_on_the_whole_batch(hvd, steps):
    me, n, rows = hvd.rank(), hvd.size(), 3
    torch.manual_seed(0)
    full_bn = torch.nn.BatchNorm2d(4).double()
    sync_bn = hvd.SyncBatchNorm(4).double()
    with torch.no_grad():
        for bn in (full_bn, sync_bn):
            bn.weight.copy_(torch.linspace(0.5, 2.0, 4))
            bn.bias.copy_(torch.linspace(-1.0, 1.0, 4))
    x_all, w_all = batch(n, rows)
    mine = slice(me * rows, (me + 1) * rows)
    for _ in range(steps):
        x_full = x_all.clone().requires_grad_()
        x_mine = x_all[mine].clone().requires_grad_()
        y_full = full_bn(x_full)
        y_mine = sync_bn(x_mine)
        assert torch.allclose(y_mine, y_full[mine], atol=1e-12)
        (y_full * w_all).sum().backward()
        (y_mine * w_all[mine]).sum().backward()
        assert torch.allclose(x_mine.grad, x_full.grad[mine], atol=1e-12)
    assert torch.allclose(sync_bn.running_mean, full_bn.running_mean, atol=1e-12)
    assert torch.allclose(sync_bn.running_var, full_bn.running_var, atol=1e-12)
    # Weight and bias gradients are local: summed over ranks they are the whole batch's.
    for p_sync, p_full in ((sync_bn.weight, full_bn.weight), (sync_bn.bias, full_bn.bias)):
        total = hvd.allreduce(p_sync.grad, op=hvd.Sum)
        assert torch.allclose(total, p_full.grad, atol=1e-10)
    # And it differs from normalizing this rank's rows alone (the test can tell).
    if n > 1:
        local = torch.nn.BatchNorm2d(4).double()
        assert not torch.allclose(local(x_all[mine]), y_mine, atol=1e-3)


def test_sync_batch_norm_eval_uses_running_statistics(hvd):
    sync_bn = hvd.SyncBatchNorm(3).double()
    with torch.no_grad():
        sync_bn.running_mean.fill_(1.0)
        sync_bn.running_var.fill_(4.0)
    sync_bn.eval()
    x = torch.full((2, 3), 5.0, dtype=torch.float64)
    assert torch.allclose(sync_bn(x), torch.full((2, 3), 2.0, dtype=torch.float64), atol=1e-5)

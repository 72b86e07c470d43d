"""Gradients through the collectives, as Horovod defines them, checked against values
each rank computes for itself from what every rank did."""

import pytest
import torch


def weights(rank, shape):
    """The upstream gradient rank ``rank`` feeds back: loss = (y * weights).sum()."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64) * 0.25 + rank + 1).reshape(shape)


@pytest.mark.parametrize("op_name", ["sum", "average"])
def test_allreduce_gradient_is_an_allreduce(hvd, op_name):
    op = {"sum": hvd.Sum, "average": hvd.Average}[op_name]
    me, n = hvd.rank(), hvd.size()
    x = torch.ones(3, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x, op=op, name=f"grad.ar.{op_name}", prescale_factor=2.0)
    (y * weights(me, (3, 2))).sum().backward()
    expected = sum(weights(r, (3, 2)) for r in range(n)) * 2.0
    if op == hvd.Average:
        expected = expected / n
    assert torch.allclose(x.grad, expected)


def test_grouped_allreduce_gradient(hvd):
    me, n = hvd.rank(), hvd.size()
    xs = [torch.ones(s, dtype=torch.float64, requires_grad=True) for s in (2, 5)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grad.gar")
    sum((y * weights(me, y.shape)).sum() for y in ys).backward()
    for x in xs:
        assert torch.allclose(x.grad, sum(weights(r, x.shape) for r in range(n)))


def test_allgather_gradient(hvd):
    """Horovod's: the Average allreduce of the output gradient, cut to this rank's rows."""
    me, n = hvd.rank(), hvd.size()
    total = sum(r + 1 for r in range(n))
    x = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name="grad.ag")
    assert y.shape == (total, 2)
    (y * weights(me, (total, 2))).sum().backward()
    mean = sum(weights(r, (total, 2)) for r in range(n)) / n
    start = sum(r + 1 for r in range(me))
    assert torch.allclose(x.grad, mean[start:start + me + 1])


def test_grouped_allgather_gradient(hvd):
    me, n = hvd.rank(), hvd.size()
    x = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    (y,) = hvd.grouped_allgather([x], name="grad.gag")
    total = y.shape[0]
    (y * weights(me, (total, 2))).sum().backward()
    mean = sum(weights(r, (total, 2)) for r in range(n)) / n
    start = sum(r + 1 for r in range(me))
    assert torch.allclose(x.grad, mean[start:start + me + 1])


def test_broadcast_gradient(hvd):
    """Horovod's: on the root the Average allreduce of the gradient, zero elsewhere."""
    me, n = hvd.rank(), hvd.size()
    root = n - 1
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    y = hvd.broadcast(x, root, name="grad.bc")
    (y * weights(me, (4,))).sum().backward()
    mean = sum(weights(r, (4,)) for r in range(n)) / n
    assert torch.allclose(x.grad, mean if me == root else torch.zeros(4, dtype=torch.float64))


def test_alltoall_gradient_sends_rows_back(hvd):
    """Exact: each row's gradient is the weight its receiver applied to it."""
    me, n = hvd.rank(), hvd.size()
    splits = lambda s: [1 + (s + d) % 2 for d in range(n)]  # noqa: E731
    x = torch.ones(sum(splits(me)), 3, dtype=torch.float64, requires_grad=True)
    y, received = hvd.alltoall(x, splits=splits(me), name="grad.a2a")
    (y * weights(me, tuple(y.shape))).sum().backward()
    expected = []
    for d in range(n):  # rows this rank sent to d sit in d's output after lower senders
        recv = [splits(s)[d] for s in range(n)]
        w = weights(d, (sum(recv), 3))
        start = sum(recv[:me])
        expected.append(w[start:start + splits(me)[d]])
    assert torch.allclose(x.grad, torch.cat(expected))


@pytest.mark.parametrize("op_name", ["sum", "average"])
def test_reducescatter_gradient(hvd, op_name):
    """Horovod's: the allgather of the output gradient, times the set size for Sum."""
    op = {"sum": hvd.Sum, "average": hvd.Average}[op_name]
    me, n = hvd.rank(), hvd.size()
    x = torch.ones(2 * n, 3, dtype=torch.float64, requires_grad=True)
    y = hvd.reducescatter(x, op=op, name=f"grad.rs.{op_name}")
    assert y.shape == (2, 3)
    (y * weights(me, (2, 3))).sum().backward()
    expected = torch.cat([weights(r, (2, 3)) for r in range(n)])
    if op == hvd.Sum:
        expected = expected * n
    assert torch.allclose(x.grad, expected)


def test_grouped_reducescatter_gradient(hvd):
    me, n = hvd.rank(), hvd.size()
    x = torch.ones(n, 2, dtype=torch.float64, requires_grad=True)
    (y,) = hvd.grouped_reducescatter([x], op=hvd.Average, name="grad.grs")
    (y * weights(me, (1, 2))).sum().backward()
    assert torch.allclose(x.grad, torch.cat([weights(r, (1, 2)) for r in range(n)]))


def test_compressed_allreduce_keeps_dtype_and_gradient(hvd):
    me, n = hvd.rank(), hvd.size()
    x = torch.full((8,), 0.5, dtype=torch.float32, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="grad.fp16")
    assert y.dtype == torch.float32 and torch.all(y == 0.5 * n)
    y.sum().backward()
    assert torch.all(x.grad == n)

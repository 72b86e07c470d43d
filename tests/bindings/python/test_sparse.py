"""Sparse gradients: sparse_allreduce_async, and DistributedOptimizer with a sparse
embedding, reduced sparse or as dense."""

import time

import pytest
import torch


def test_sparse_allreduce_async(hvd):
    me, n = hvd.rank(), hvd.size()
    dense = torch.zeros(6, 2, dtype=torch.float64)
    dense[me] = me + 1.0
    dense[5] = 1.0
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse.t", op=hvd.Average)
    assert hvd.poll(handle) in (True, False)
    out = handle()  # Horovod's way: call the handle
    assert out.is_sparse
    expected = torch.zeros(6, 2, dtype=torch.float64)
    for r in range(n):
        expected[r] += (r + 1.0) / n
    expected[5] = 1.0
    assert torch.allclose(out.to_dense(), expected)


def test_unnamed_sparse_allreduces_in_flight_together(hvd):
    """Unnamed, each is named by count as other unnamed collectives are: two may be in
    flight at once."""
    me, n = hvd.rank(), hvd.size()
    first, second = torch.zeros(2, n + 1, dtype=torch.float64)
    first[me] = 1.0
    second[n] = me + 1.0
    first, second = first.to_sparse(), second.to_sparse()
    handles = [hvd.sparse_allreduce_async(t, None, hvd.Sum) for t in (first, second)]
    out = [h().to_dense().tolist() for h in handles]
    assert out[0] == [1.0] * n + [0.0]
    assert out[1] == [0.0] * n + [n * (n + 1) / 2]


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_optimizer_with_a_sparse_embedding(hvd, sparse_as_dense):
    me, n = hvd.rank(), hvd.size()
    torch.manual_seed(1)
    emb = torch.nn.Embedding(8, 3, sparse=True).double()
    start = emb.weight.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    emb(torch.tensor([me, me, 7])).sum().backward()  # row me twice, row 7 once
    opt.step()
    expected = start.clone()
    for r in range(n):
        expected[r] -= 2.0 / n
    expected[7] -= 1.0
    assert torch.allclose(emb.weight.detach(), expected)


def _embedding_optimizer(hvd, name):
    torch.manual_seed(2)
    emb = torch.nn.Embedding(6, 2, sparse=True).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=[(name, emb.weight)])
    return emb, opt


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_rank_without_a_sparse_gradient_sends_an_empty_one(hvd, set_to_none):
    """Once every rank has had the embedding's gradient sparse, a rank that has none in a
    step (None, or cleared by zero_grad) sends one without entries, and the step
    averages over every rank."""
    me, n = hvd.rank(), hvd.size()
    emb, opt = _embedding_optimizer(hvd, f"emb.empty.{set_to_none}")
    expected = emb.weight.detach().clone()
    for step in range(3):
        opt.zero_grad(set_to_none=set_to_none)
        if step == 0 or me != 0:  # rank 0 uses the embedding in the first step only
            emb(torch.tensor([step])).sum().backward()
        opt.step()
        users = n if step == 0 else n - 1
        expected[step] -= users / n
        assert emb.weight.grad.is_sparse
        assert torch.equal(emb.weight.detach(), expected), f"step {step}"


def test_a_dense_and_a_sparse_gradient_fail_at_once(hvd):
    """The first step: rank 0 has a sparse gradient, the others none, so they send dense
    zeros. Both sides fail at once, long before the stall bound, saying why."""
    if hvd.size() == 1:
        pytest.skip("needs another rank")
    me = hvd.rank()
    emb, opt = _embedding_optimizer(hvd, "emb.first")
    if me == 0:
        emb(torch.tensor([1, 2])).sum().backward()
    start = time.monotonic()
    side = "is sparse on this rank" if me == 0 else "had no gradient on this rank"
    with pytest.raises(hvd.MismatchError, match=f"'emb.first'.* {side}.*sparse_as_dense=True"):
        opt.step()
    assert time.monotonic() - start < 10  # the stall bound in the tests is 30 s

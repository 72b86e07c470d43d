"""Sparse gradients: sparse_allreduce_async, and DistributedOptimizer with a sparse
embedding, reduced sparse or as dense."""

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

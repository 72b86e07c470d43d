"""Allreduce of sparse COO tensors (embedding gradients): every rank's indices and
values are gathered, so the result holds each rank's entries side by side, duplicates
included; coalesce() or the optimizer sums them."""

import torch

from accord import _core
from accord.basics import Average, global_process_set, register_combined, resolve_op, synchronize
from accord.torch.gather import allgather_async


class SparseHandle:
    """What sparse_allreduce_async returns: call it (Horovod's way) or pass it to
    synchronize() for the reduced sparse tensor; poll() works on it too."""

    def __init__(self, handle):
        self.handle = handle

    def __call__(self):
        return synchronize(self.handle)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing the sparse COO ``tensor`` (Average or Sum) over the ranks of
    ``process_set``; returns a SparseHandle."""
    op = resolve_op(op, None, "sparse_allreduce_async")
    if op not in (Average, _core.reduce_ops["sum"]):
        raise ValueError("sparse_allreduce_async: only Average and Sum apply to sparse tensors")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    base = name or "sparse"
    indices = allgather_async(t.indices().t().contiguous(), name=f"{base}.indices",
                              process_set=process_set)
    values = allgather_async(t.values().contiguous(), name=f"{base}.values",
                             process_set=process_set)
    n = process_set.size()

    def finish():
        gathered = synchronize(values)
        idx = synchronize(indices)
        if op == Average:
            gathered = gathered / n
        try:  # indices from other ranks: checked where torch can (2.x)
            return torch.sparse_coo_tensor(idx.t(), gathered, t.size(), check_invariants=True)
        except TypeError:
            return torch.sparse_coo_tensor(idx.t(), gathered, t.size())

    return SparseHandle(register_combined([indices, values], (t,), finish))

"""Allreduce of sparse COO tensors (embedding gradients): every rank's indices and
values are gathered, so the result holds each rank's entries side by side, duplicates
included; coalesce() or the optimizer sums them. And DistributedOptimizer's reduction of
a sparse gradient (SparseGradient), which must meet the other ranks' even where this
rank has none."""

import torch

from accord import _core
from accord.basics import (Average, Sum, global_process_set, register_combined, resolve_op,
                           synchronize)
from accord.errors import MismatchError
from accord.torch.allreduce import allreduce_async
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
    # Unnamed: both allgathers unnamed too, so that the runtime numbers them as every
    # unnamed collective (the same on every rank that calls in the same order), and two
    # such calls may be in flight at once.
    indices = allgather_async(t.indices().t().contiguous(),
                              name=f"{name}.indices" if name else None, process_set=process_set)
    values = allgather_async(t.values().contiguous(), name=f"{name}.values" if name else None,
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


# ---- DistributedOptimizer's sparse gradients -----------------------------------------
def empty_gradient(p, sparse_dim):
    """A sparse gradient of ``p`` without entries, laid out as the others' (``sparse_dim``
    sparse dimensions): what a rank without a gradient sends where they are sparse."""
    empty = torch.empty(p.shape, dtype=p.dtype, device=p.device, layout=torch.sparse_coo)
    return empty.sparse_resize_and_clear_(p.shape, sparse_dim, p.dim() - sparse_dim)


def in_layout(p, grad, sparse_dim):
    """``grad`` with ``sparse_dim`` sparse dimensions, as the other ranks send it: PyTorch
    1.13's zero_() (zero_grad(set_to_none=False)) lays a sparse gradient it clears out
    with every dimension sparse, which the allgather of its indices would refuse."""
    if grad.sparse_dim() == sparse_dim or grad._nnz() > 0:
        return grad
    return empty_gradient(p, sparse_dim)


class SparseGradient:
    """The reduction of one parameter's sparse gradient; wait() returns it.

    A rank that has no gradient for a parameter sends zeros, dense, unless it has seen
    the gradient sparse before; so at first it may send a dense allreduce where the
    others gather entries, and each side would wait for the other until the stall
    bound. Until the parameter's sparse gradient has been reduced once (``checked``),
    its reduction therefore starts with a one-element int64 allreduce under the
    parameter's own name, the dense allreduce's: a rank that sent the dense one meets
    it, and the runtime fails both at once (their dtypes differ); the allgathers start
    once it has passed. After one reduction every rank has seen the gradient sparse,
    and the check is left out."""

    def __init__(self, grad, name, op, process_set, checked):
        self._args = (grad, name, op, process_set)
        self._check = None
        self._handle = None
        if checked:
            self._handle = sparse_allreduce_async(*self._args)
        else:
            self._check = allreduce_async(torch.ones(1, dtype=torch.int64), name=name, op=Sum,
                                          process_set=process_set)

    def wait(self):
        if self._check is not None:
            try:
                synchronize(self._check)
            except MismatchError as e:
                raise MismatchError(
                    f"DistributedOptimizer: the gradient of '{self._args[1]}' is sparse on this "
                    f"rank, and another rank sent a dense one ({e}); {_FIRST_STEP}") from e
            self._check = None
            self._handle = sparse_allreduce_async(*self._args)
        return synchronize(self._handle)


def zeros_met_sparse(name, error):
    """``error``, the failure of the dense zeros this rank sent for a parameter that had
    no gradient here, explained for the case that the others' gradient is sparse."""
    return MismatchError(
        f"DistributedOptimizer: '{name}' had no gradient on this rank, which sent zeros as a "
        f"dense gradient, and another rank's request differs ({error}). If that rank's "
        f"gradient is sparse (nn.Embedding(sparse=True)): {_FIRST_STEP}")


_FIRST_STEP = (
    "a rank without a gradient for a parameter sends zeros, and cannot know that the others' "
    "gradient is sparse before it has had one itself: in the first step in which some rank "
    "has a sparse gradient for it, every rank must have one (a batch that uses the "
    "embedding), or pass sparse_as_dense=True")

"""How ShardedOptimizer cuts the parameters among the ranks, and the check that every
rank cuts the same ones.

Each trainable parameter, as a flat vector, is cut into one contiguous part per rank by
the reduce-scatter's own row rule, asked of the runtime (the first ``numel % size`` ranks
get one element more): a rank's part of every gradient is exactly what the
reduce-scatter gives it, every rank knows every rank's part from the parameter list
alone, and each holds 1/N of every parameter's bytes to within one element.
"""

import torch

from accord import _core
from accord.errors import MismatchError
from accord.torch.functions import allgather_object

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def shard_extent(numel, rank, size):
    """(offset, count): the elements of a flat parameter of ``numel`` elements that
    ``rank`` of ``size`` holds; the reduce-scatter's row rule, asked of the runtime."""
    offset = sum(_core.reducescatter_rows(numel, r, size) for r in range(rank))
    return offset, _core.reducescatter_rows(numel, rank, size)


class Shard:
    """One trainable parameter and this rank's part of it."""

    def __init__(self, param, name, index, group, rank, size):
        self.param, self.name, self.index, self.group = param, name, index, group
        self.offset, self.count = shard_extent(param.numel(), rank, size)
        self._bind()

    def _bind(self):
        param = self.param
        flat = param.detach().reshape(-1)[self.offset:self.offset + self.count]
        self.master = param.dtype in _LOW_PRECISION or not param.is_contiguous()
        if self.master:
            dtype = torch.float32 if param.dtype in _LOW_PRECISION else param.dtype
            self.piece = flat.to(dtype, copy=True)
        else:
            self.piece = flat  # a view: stepping it updates the parameter itself
        self.version = param._version  # a later change from outside reseeds the master
        # The parameter as the flat vector its allgather writes straight into (this rank's
        # part of it may be the piece itself: an in-place allgather), None where it is
        # not contiguous and is written back from a gathered copy.
        self.gathered = param.detach().view(-1) if param.is_contiguous() else None
        self._reduced = None
        self._bound_to = self._data()

    def _data(self):
        return self.param.data_ptr(), self.param.dtype, self.param.device

    def moved(self):
        """True once the parameter's data was replaced since it was cut (``model.to()``,
        ``p.data = ...``): the piece and the gathered view still point at the old."""
        return self._data() != self._bound_to

    def rebind(self):
        """Cuts the parameter's new data (which holds its current values); returns the
        old piece, whose optimizer state the caller moves to the new one."""
        old = self.piece
        self._bind()
        return old

    def reduced_into(self, grad):
        """Where this rank's part of the reduced ``grad`` (flat) goes: one buffer kept
        from step to step, so that no step allocates (and faults in) fresh memory for
        it; None (the runtime allocates) for a compressed gradient of another dtype."""
        if grad.dtype != self.param.dtype or grad.device != self.param.device:
            return None
        if self._reduced is None or (self._reduced.device, self._reduced.dtype) != (
                grad.device, grad.dtype):  # the model moved or was cast since the last step
            self._reduced = torch.empty(self.count, dtype=grad.dtype, device=grad.device)
        return self._reduced

    def reseed_if_changed(self):
        """A parameter written since the last step (a broadcast, a loaded model): its
        fp32 copy takes the elements whose value changed. Those that still equal the
        copy's rounding keep the copy's exact value, so that masters loaded from a
        checkpoint survive broadcast_parameters of the same values."""
        if not self.master or self.param._version == self.version:
            return
        with torch.no_grad():
            now = self.param.detach().reshape(-1)[self.offset:self.offset + self.count]
            changed = now != self.piece.to(now.dtype)
            if changed.any():
                self.piece[changed] = now[changed].to(self.piece.dtype)
        self.version = self.param._version

    def describe(self):
        return f"parameter '{self.name}' (shape {list(self.param.shape)})"


def check_same_parameters(param_groups, names, process_set):
    """Every rank must cut the same parameters: a difference is an error on every rank
    that names the first parameter concerned."""
    mine = [(g, names[p], tuple(p.shape), str(p.dtype), p.requires_grad)
            for g, group in enumerate(param_groups) for p in group["params"]]
    if process_set.size() == 1:
        return
    every = allgather_object(mine, name="sharded.parameters", process_set=process_set)
    for r, theirs in enumerate(every):
        if theirs == every[0]:
            continue
        at = next((i for i, (a, b) in enumerate(zip(every[0], theirs)) if a != b),
                  min(len(every[0]), len(theirs)))
        rank0 = every[0][at] if at < len(every[0]) else None
        other = theirs[at] if at < len(theirs) else None
        name = (rank0 or other)[1]
        raise MismatchError(
            f"ShardedOptimizer: parameter '{name}' (number {at} of the param groups) differs "
            f"between ranks: rank 0 has {_described(rank0)}, rank {r} has {_described(other)}."
            " Every rank must wrap the same parameters, in the same order and groups")


def _described(entry):
    if entry is None:
        return "no such parameter"
    g, name, shape, dtype, trainable = entry
    return (f"'{name}' in group {g}, shape {list(shape)}, {dtype.replace('torch.', '')}"
            f"{'' if trainable else ', frozen'}")

"""DistributedOptimizer's ``groups=`` (Horovod's): which parameters' gradients go out
together, each group as one grouped allreduce that the runtime negotiates, fuses and
completes as a unit.

The groups are worked out from the parameters in param_groups order, which is the same
on every rank, so every rank forms the same groups under the same names.
"""

import torch


def parameter_groups(groups, order):
    """The groups, as tuples of parameters of ``order`` (the parameters that train, in
    param_groups order): ``groups`` an int, that many groups of consecutive parameters
    (their sizes differing by one at most), or lists of parameters, each list a group
    (parameters in no list, one group each; those not in ``order`` left out)."""
    if groups is None:
        return []
    if isinstance(groups, list):
        chunks = _listed(groups, order)
    else:
        n = max(1, min(int(groups), len(order)))
        size, extra = divmod(len(order), n)
        chunks, start = [], 0
        for i in range(n):
            end = start + size + (1 if i < extra else 0)
            chunks.append(order[start:end])
            start = end
    return [tuple(chunk) for chunk in chunks if chunk]


def _listed(groups, order):
    member = {id(p) for p in order}  # by id: tensors compare element-wise
    seen = set()
    chunks = []
    for group in groups:
        chunk = []
        for p in group:
            if not isinstance(p, torch.Tensor):
                raise ValueError("DistributedOptimizer: groups must hold tensors")
            if id(p) in seen:
                raise ValueError("DistributedOptimizer: a parameter can appear in only one group")
            seen.add(id(p))
            if id(p) in member:
                chunk.append(p)
        chunks.append(chunk)
    return chunks + [[p] for p in order if id(p) not in seen]

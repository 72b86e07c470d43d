"""Broadcast in Horovod's four forms. Roots are global ranks, also with a process set,
as in Horovod. The out-of-place blocking form is an autograd function with Horovod's
gradient: the Average allreduce of the gradient on the root, zero elsewhere."""

import torch

from accord import _core
from accord.basics import Average, global_process_set, rank, register, synchronize
from accord.torch._tensor import contiguous_copy, copies_back, in_place_target, placement
from accord.torch.allreduce import allreduce


def _submit(work, code, root_rank, name, process_set):
    set_id = process_set._id("broadcast")
    root = process_set.set_rank_of(root_rank, "broadcast")
    device, stream = placement(work)
    return _core.broadcast_async(work.data_ptr(), code, work.shape, device, name or "", root,
                                 set_id, stream)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root's ``tensor`` into a new tensor on every rank."""
    output, code = contiguous_copy(tensor, "broadcast", name)
    core = _submit(output, code, root_rank, name, process_set)
    return register([core], output, lambda: output)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting ``tensor`` on every rank with root's."""
    work, code, finish = in_place_target(tensor, "broadcast", name)
    core = _submit(work, code, root_rank, name, process_set)
    return register([core], (tensor, work), finish, copies_back([finish]))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = torch.zeros_like(grad)
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root's ``tensor`` on every rank, differentiable."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)

"""Allreduce in Horovod's four forms (out-of-place or in-place, blocking or async) and
its grouped form; sparse tensors go through accord.torch.sparse. The out-of-place
blocking forms are autograd functions: the gradient of an allreduce is the same
allreduce of the gradient."""

import torch

from accord import _core
from accord.basics import Average, global_process_set, register, resolve_op, synchronize
from accord.errors import InvalidCollectiveError
from accord.torch._tensor import (
    contiguous_copy, copies_back, in_place_target, needs_grad, placement)
from accord.torch.compression import Compression


def _submit(work, code, name, op, prescale_factor, postscale_factor, process_set):
    device, stream = placement(work)
    return _core.allreduce_async(work.data_ptr(), code, work.shape, device, name or "", op,
                                 float(prescale_factor), float(postscale_factor),
                                 process_set._id("allreduce"), stream)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` over the ranks into a new tensor; returns a handle for
    poll() / synchronize(). The input is not modified. ``op`` defaults to Average."""
    op = resolve_op(op, average, "allreduce")
    output, code = contiguous_copy(tensor, "allreduce", name)
    core = _submit(output, code, name, op, prescale_factor, postscale_factor, process_set)
    return register([core], output, lambda: output)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, reducing ``tensor`` in place."""
    op = resolve_op(op, average, "allreduce")
    work, code, finish = in_place_target(tensor, "allreduce", name)
    core = _submit(work, code, name, op, prescale_factor, postscale_factor, process_set)
    return register([core], (tensor, work), finish, copies_back([finish]))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, process_set = ctx.args
        grad = allreduce(grad_output, op=op, prescale_factor=pre, postscale_factor=post,
                         process_set=process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns ``tensor`` reduced over the ranks (Average unless ``op`` says otherwise),
    differentiable; ``compression`` casts it for the wire."""
    op = resolve_op(op, average, "allreduce")
    compressed, ctx = compression.compress(tensor)
    if needs_grad(compressed):
        reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                   process_set)
    else:
        reduced = synchronize(allreduce_async(compressed, None, name, op, prescale_factor,
                                              postscale_factor, process_set))
    return compression.decompress(reduced, ctx)


# ---- grouped: negotiated, fused and completed as one unit ---------------------------
def _one_device(tensors, name):
    """Refuses a group spread over several devices as Horovod does, with an error its
    scripts catch as RuntimeError (and Accord's as ValueError)."""
    devices = sorted({str(t.device) for t in tensors if isinstance(t, torch.Tensor)})
    if len(devices) > 1:
        raise InvalidCollectiveError(
            f"grouped_allreduce{f' {name!r}' if name else ''}: tensors on {', '.join(devices)}; "
            "a group is reduced as one buffer on one device")


def _submit_group(works, codes, name, op, prescale_factor, postscale_factor, process_set):
    places = [placement(w) for w in works]
    args = [(w.data_ptr(), code, w.shape, device)
            for w, code, (device, _) in zip(works, codes, places)]
    # One stream for the group: the current one of the first GPU tensor's device (the
    # runtime refuses a group spread over several devices).
    stream = next((s for d, s in places if d >= 0), 0)
    return _core.grouped_allreduce_async(args, name or "", op, float(prescale_factor),
                                         float(postscale_factor),
                                         process_set._id("grouped_allreduce"), stream)


def _submit_groups(works, codes, name, op, prescale_factor, postscale_factor, process_set):
    """The group's collectives: one, or where the tensors have several dtypes (which
    Horovod fuses by dtype within a group) one group per dtype, in the order of their
    first tensors and named <name>.<dtype> where the group is named, completed together
    under the caller's one handle."""
    by_code = {}
    for i, code in enumerate(codes):
        by_code.setdefault(code, []).append(i)
    if len(by_code) == 1:
        return [_submit_group(works, codes, name, op, prescale_factor, postscale_factor,
                              process_set)]
    cores = []
    for code, members in by_code.items():
        dtype = str(works[members[0]].dtype).replace("torch.", "")
        cores.append(_submit_group([works[i] for i in members], [code] * len(members),
                                   f"{name}.{dtype}" if name else None, op, prescale_factor,
                                   postscale_factor, process_set))
    return cores


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one unit into new tensors."""
    op = resolve_op(op, average, "grouped_allreduce")
    _one_device(tensors, name)
    copies = [contiguous_copy(t, "grouped_allreduce", name) for t in tensors]
    outputs = [c for c, _ in copies]
    cores = _submit_groups(outputs, [code for _, code in copies], name, op, prescale_factor,
                           postscale_factor, process_set)
    return register(cores, outputs, lambda: outputs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """As grouped_allreduce_async, in place."""
    op = resolve_op(op, average, "grouped_allreduce")
    _one_device(tensors, name)
    targets = [in_place_target(t, "grouped_allreduce", name) for t in tensors]
    works = [w for w, _, _ in targets]
    cores = _submit_groups(works, [code for _, code, _ in targets], name, op, prescale_factor,
                           postscale_factor, process_set)
    return register(cores, (list(tensors), works), lambda: [f() for _, _, f in targets],
                    copies_back([f for _, _, f in targets]))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), None, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, process_set = ctx.args
        reduced = grouped_allreduce(list(grads), op=op, prescale_factor=pre,
                                    postscale_factor=post, process_set=process_set)
        return (None, None, None, None, None, *reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Returns the list of ``tensors`` reduced as one unit, differentiable."""
    op = resolve_op(op, average, "grouped_allreduce")
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *[t for t, _ in compressed])
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, compressed)]

"""Collectives whose output Accord allocates once the other ranks' shapes are known:
allgather, alltoall and reducescatter, with their grouped forms (several tensors under
one handle). The output arrives from the runtime's memory without a copy. The blocking
forms are autograd functions with Horovod's gradients.

For a CUDA tensor, PyTorch allocates the output on its GPU, so its shape must be known
at submission: reducescatter works it out locally; allgather and alltoall first
exchange the row counts among the ranks (a small host collective, waited for at
submission), then start the collective itself into that output."""

import operator

import torch

from accord import _core
from accord.basics import Average, Sum, global_process_set, register, resolve_op, synchronize
from accord.torch._tensor import contiguous_input, from_buffer, placement
from accord.torch.allreduce import allreduce, grouped_allreduce
from accord.torch.compression import Compression


# ---- allgather -----------------------------------------------------------------------
def _suffixed(name, suffix):
    return f"{name}.{suffix}" if name else ""


def _device_output(work, rows):
    """An uninitialised tensor for a GPU collective's output, beside its input."""
    return torch.empty((rows, *work.shape[1:]), dtype=work.dtype, device=work.device)


def _exchanged_rows(values, name, what, process_set):
    """Host collective of row counts ahead of a GPU collective: allgather of this
    rank's count (``what`` "rows") or alltoall of its splits ("splits")."""
    counts = torch.tensor(values, dtype=torch.int64)
    if what == "rows":
        op = _core.allgather_async(counts.data_ptr(), _core.int64, [len(values)], -1,
                                   _suffixed(name, what), process_set._id("allgather"))
        op.wait()
        return from_buffer(op.output()).tolist()
    op = _core.alltoall_async(counts.data_ptr(), _core.int64, [len(values)], -1, [],
                              _suffixed(name, what), process_set._id("alltoall"))
    op.wait()
    return from_buffer(op.output()).tolist()


def _submit_allgather(tensor, name, process_set, out=None):
    """(core op, what to keep alive, the output). ``out``: a contiguous tensor of the
    caller's, on the input's device, of the gathered shape (which the caller knows), to
    gather into; the runtime checks it against the negotiated shape. It may hold the
    input itself at this rank's place (an in-place allgather), and spares a CUDA
    allgather the exchange of row counts."""
    work, code = contiguous_input(tensor, "allgather", name)
    device, stream = placement(work)
    if out is None and device >= 0 and work.dim() > 0:
        out = _device_output(work, sum(_exchanged_rows([work.shape[0]], name, "rows",
                                                        process_set)))
    core = _core.allgather_async(work.data_ptr(), code, work.shape, device, name or "",
                                 process_set._id("allgather"), stream,
                                 None if out is None else (out.data_ptr(), out.shape))
    if out is None:
        return core, work, lambda: from_buffer(core.output())
    return core, (work, out), lambda: out


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's ``tensor`` along the first dimension (which
    may differ per rank). A CUDA tensor's row counts are exchanged before this returns:
    every rank must start its CUDA allgathers and alltoalls in the same order."""
    core, keep, output = _submit_allgather(tensor, name, process_set)
    return register([core], keep, output)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts gathering a list of tensors as one unit (one handle that gives the list):
    the runtime negotiates the group's tensors together and fuses them into one
    collective, however they arrive."""
    return grouped_allgather_into(tensors, [None] * len(tensors), name, process_set)


def grouped_allgather_into(tensors, outputs, name=None, process_set=global_process_set):
    """grouped_allgather_async with the caller's outputs where not None (for Accord's
    own callers, which know the gathered shapes: _submit_allgather)."""
    works = [contiguous_input(t, "grouped_allgather", name) for t in tensors]
    return _grouped(works, outputs, name, lambda ws, outs, n: _submit_grouped_allgather(
        ws, outs, n, process_set))


def _grouped(works, outputs, name, submit):
    """One group per dtype and device (a group is fused into one buffer, as
    _submit_groups does for grouped_allreduce), under one handle whose result is the
    outputs in the tensors' order. submit(works, outputs, name) -> (core op, outputs)."""
    kinds = {}
    for i, (work, code) in enumerate(works):
        kinds.setdefault((code, str(work.device)), []).append(i)
    cores, keep, finish = [], [], [None] * len(works)
    for k, members in enumerate(kinds.values()):
        group_name = name if len(kinds) == 1 or not name else f"{name}.{k}"
        core, outs = submit([works[i] for i in members], [outputs[i] for i in members],
                            group_name)
        cores.append(core)
        keep.append(([works[i][0] for i in members], outs))
        for j, i in enumerate(members):
            finish[i] = (lambda o=outs[j], c=core, j=j:
                         o if o is not None else from_buffer(c.output(j)))
    return register(cores, keep, lambda: [f() for f in finish])


def _submit_grouped_allgather(works, outputs, name, process_set):
    """(core op, outputs) for tensors of one dtype and device. On a GPU, where the caller
    gave no output, the row counts of all of them are exchanged in one host collective."""
    device, stream = placement(works[0][0])
    missing = [i for i, (w, _) in enumerate(works)
               if outputs[i] is None and device >= 0 and w.dim() > 0]
    if missing:
        counts = _exchanged_rows([works[i][0].shape[0] for i in missing], name, "rows",
                                 process_set)
        outputs = list(outputs)
        for j, i in enumerate(missing):
            outputs[i] = _device_output(works[i][0], sum(counts[j::len(missing)]))
    core = _core.grouped_allgather_async(
        [(w.data_ptr(), code, w.shape, device) for w, code in works],
        [None if o is None else (o.data_ptr(), o.shape) for o in outputs], name or "",
        process_set._id("allgather"), stream)
    return core, outputs


def _own_rows(grad, rows, process_set):
    """The rows of ``grad`` that came from this rank: Horovod's allgather gradient is
    the Average allreduce of the output gradient, cut to this rank's part."""
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=process_set)
    offset = int(counts[:process_set.rank()].sum())
    return grad.narrow(0, offset, rows)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 0
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        return _own_rows(reduced, ctx.rows, ctx.process_set), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's ``tensor`` concatenated along the first dimension."""
    return _Allgather.apply(tensor, name, process_set)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), op=Average, process_set=ctx.process_set)
        return (None, None, *[_own_rows(g, rows, ctx.process_set)
                              for g, rows in zip(reduced, ctx.rows)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# ---- alltoall ------------------------------------------------------------------------
def _split_list(splits):
    """The rows for each rank as ints; ValueError (as Horovod raises) for splits that
    are not integers, such as a float tensor."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError(f"alltoall: splits must be integers (an int32 tensor or a list of "
                             f"ints), got a tensor of {splits.dtype}")
        return [int(s) for s in splits.tolist()]
    try:
        return [operator.index(s) for s in splits]
    except TypeError:
        raise ValueError(f"alltoall: splits must be integers (an int32 tensor or a list of ints), "
                         f"got {list(splits)!r}") from None


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending ``splits[r]`` rows of ``tensor`` to rank r (equal parts if None).
    synchronize() gives (output, received_splits), received_splits[r] being the rows
    that came from rank r: a tensor of the dtype and on the device of ``splits`` where
    that is a tensor, as in Horovod, else an int32 tensor. A CUDA tensor's splits are exchanged before
    this returns: every rank must start its CUDA allgathers and alltoalls in the same
    order."""
    work, code = contiguous_input(tensor, "alltoall", name)
    device, stream = placement(work)
    split_list = _split_list(splits)
    out = None
    if device >= 0 and work.dim() > 0:
        # Rows to each rank: the given splits, else equal parts (the runtime checks that
        # they add up and divide evenly, and fails the collective itself if not).
        ranks = process_set.size()
        sent = split_list or [work.shape[0] // ranks] * ranks
        if len(sent) == ranks:
            out = _device_output(work, sum(_exchanged_rows(sent, name, "splits",
                                                           process_set)))
    core = _core.alltoall_async(work.data_ptr(), code, work.shape, device, split_list,
                                name or "", process_set._id("alltoall"), stream,
                                None if out is None else (out.data_ptr(), out.shape))

    def finish():
        received = torch.tensor(core.received_splits(), dtype=torch.int32)
        if isinstance(splits, torch.Tensor):  # as Horovod: splits' dtype and device
            received = received.to(device=splits.device, dtype=splits.dtype)
        return (from_buffer(core.output()) if out is None else out), received

    return register([core], (work, out), finish)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _received_grad):
        # Sending every row back where it came from is the exact gradient.
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received,
                           process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Returns the rows every rank sent here; with ``splits`` given, also the int32
    tensor of rows received from each rank, as Horovod does."""
    output, received = _Alltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


# ---- reducescatter -------------------------------------------------------------------
def _submit_reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor,
                          out=None):
    """(core op, what to keep alive, the output); ``out`` as for _submit_allgather."""
    work, code = contiguous_input(tensor, "reducescatter", name)
    device, stream = placement(work)
    if out is None and device >= 0 and work.dim() > 0 and process_set.included():
        rows = _core.reducescatter_rows(work.shape[0], process_set.rank(), process_set.size())
        out = _device_output(work, rows)
    core = _core.reducescatter_async(work.data_ptr(), code, work.shape, device, name or "", op,
                                     float(prescale_factor), float(postscale_factor),
                                     process_set._id("reducescatter"), stream,
                                     None if out is None else (out.data_ptr(), out.shape))
    if out is None:
        return core, work, lambda: from_buffer(core.output())
    return core, (work, out), lambda: out


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0, output=None):
    """Starts reducing ``tensor`` (same shape on every rank) and giving each rank its
    block of rows; the first ranks get a row more when the rows do not divide evenly.
    ``output`` (for Accord's own callers, which know the shape): a tensor of this rank's
    block's shape to reduce into, rather than one Accord allocates."""
    op = resolve_op(op, None, "reducescatter", adasum=False)
    core, keep, output = _submit_reducescatter(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor, output)
    return register([core], keep, output)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing and scattering a list of tensors as one unit, as
    grouped_allgather_async gathers them."""
    op = resolve_op(op, None, "grouped_reducescatter", adasum=False)
    works = [contiguous_input(t, "grouped_reducescatter", name) for t in tensors]

    def submit(group, outputs, group_name):
        device, stream = placement(group[0][0])
        if device >= 0 and process_set.included():  # outputs of the shapes known here
            outputs = [_device_output(w, _core.reducescatter_rows(
                w.shape[0], process_set.rank(), process_set.size())) if w.dim() > 0 else None
                for w, _ in group]
        core = _core.grouped_reducescatter_async(
            [(w.data_ptr(), code, w.shape, device) for w, code in group],
            [None if o is None else (o.data_ptr(), o.shape) for o in outputs],
            group_name or "", op, float(prescale_factor), float(postscale_factor),
            process_set._id("reducescatter"), stream)
        return core, outputs

    return _grouped(works, [None] * len(works), name, submit)


def _reducescatter_grad(grad, op, process_set, pre, post):
    # Horovod's definition: the allgather of the output gradient, times the set size
    # for Sum, times both scale factors.
    factor = (process_set.size() if op == Sum else 1) * pre * post
    return grad * factor if factor != 1 else grad


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        op, process_set, pre, post = ctx.args
        grad = _reducescatter_grad(grad_output, op, process_set, pre, post)
        return allgather(grad, process_set=process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's block of ``tensor`` reduced over the ranks, differentiable."""
    op = resolve_op(op, None, "reducescatter", adasum=False)
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                   postscale_factor)
    return compression.decompress(reduced, ctx)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        op, process_set, pre, post = ctx.args
        scaled = [_reducescatter_grad(g, op, process_set, pre, post) for g in grads]
        return (None, None, None, None, None,
                *grouped_allgather(scaled, process_set=process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    op = resolve_op(op, None, "grouped_reducescatter", adasum=False)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                          postscale_factor, *[t for t, _ in compressed])
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, compressed)]

"""How a torch tensor crosses into Accord: its data pointer, dtype code, shape and
device, read from the tensor itself (no build against PyTorch's C++ ABI, so one build
serves every torch version). Outputs that Accord allocates come back through DLPack,
without a copy.

CUDA tensors (in a build with the GPU path, ``_core.built["cuda"]``) also carry
PyTorch's current stream on their GPU: the runtime starts its work on them after
whatever the caller queued there, as PyTorch's own collectives do. Their outputs of
unknown size (allgather, alltoall, reducescatter) are allocated by PyTorch on that GPU
once the shape is known, never in host memory."""

import torch
import torch.utils.dlpack

from accord import _core

_DTYPES = {
    torch.uint8: _core.uint8,
    torch.int8: _core.int8,
    torch.int16: _core.int16,
    torch.int32: _core.int32,
    torch.int64: _core.int64,
    torch.float16: _core.float16,
    torch.bfloat16: _core.bfloat16,
    torch.float32: _core.float32,
    torch.float64: _core.float64,
    torch.bool: _core.bool,
}
if hasattr(torch, "uint16"):  # PyTorch >= 2.3
    _DTYPES[torch.uint16] = _core.uint16
_SUPPORTED = ", ".join(str(d).replace("torch.", "") for d in _DTYPES)


def describe(what, name):
    return f"{what} '{name}'" if name else what


_DEVICES = ("cpu", "cuda") if _core.built["cuda"] else ("cpu",)


def dtype_code(tensor, what, name):
    """The runtime's dtype code for a tensor Accord takes; refuses any other."""
    code = _DTYPES.get(getattr(tensor, "dtype", None))
    if code is not None and tensor.device.type in _DEVICES and tensor.layout == torch.strided:
        return code
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{describe(what, name)}: expected a torch.Tensor, got "
                         f"{type(tensor).__name__}")
    if tensor.device.type == "cuda":
        raise NotImplementedError(
            f"{describe(what, name)}: the tensor is on {tensor.device}, but this build of "
            "Accord has no GPU path (it was built without the CUDA toolkit; "
            "accord.torch.cuda_built() is False): move it with tensor.cpu(), or build "
            "Accord where the CUDA toolkit is installed")
    if tensor.device.type not in _DEVICES:
        raise NotImplementedError(
            f"{describe(what, name)}: the tensor is on {tensor.device}, but Accord takes "
            f"tensors on {' and '.join(_DEVICES)} only")
    if tensor.layout != torch.strided:
        raise ValueError(f"{describe(what, name)}: {tensor.layout} tensors are not supported "
                         "(sparse gradients go through sparse_allreduce_async)")
    raise ValueError(f"{describe(what, name)}: dtype {tensor.dtype} is not supported by "
                     f"Accord (supported: {_SUPPORTED})")


def placement(tensor):
    """(device, stream) as the runtime takes them: (-1, 0) for a CPU tensor; for a CUDA
    tensor its GPU and PyTorch's current stream there (a cudaStream_t as an int)."""
    if tensor.device.type != "cuda":
        return -1, 0
    return tensor.device.index, torch.cuda.current_stream(tensor.device).cuda_stream


def contiguous_copy(tensor, what, name):
    """(copy, dtype code): a fresh contiguous copy, outside autograd, that an
    out-of-place collective works in."""
    code = dtype_code(tensor, what, name)
    return tensor.detach().clone(memory_format=torch.contiguous_format), code


def contiguous_input(tensor, what, name):
    """(tensor, dtype code): the tensor itself when contiguous, else a contiguous copy;
    outside autograd."""
    code = dtype_code(tensor, what, name)
    return tensor.detach().contiguous(), code


class _CopyBack:
    """An in-place result's way from ``work``, the contiguous buffer the runtime wrote
    into, to ``tensor``, which was not contiguous: copied once, by the call's finish on
    the current stream (synchronize), or earlier on a stream wait_on_stream was given,
    after which every other user waits on that stream for it instead."""

    def __init__(self, tensor, work):
        self.tensor, self.work = tensor, work
        self.copied = None  # the event after the copy queued by queue()

    def __call__(self):
        if self.copied is None:
            with torch.no_grad():
                self.tensor.copy_(self.work)
        else:
            torch.cuda.current_stream(self.tensor.device).wait_event(self.copied)
        return self.tensor

    def queue(self, stream):
        if self.copied is not None:
            stream.wait_event(self.copied)
            return
        with torch.cuda.stream(stream), torch.no_grad():
            self.tensor.copy_(self.work)
        # Both are used on `stream` now: the caching allocator must not hand their
        # memory out again before it has run.
        self.work.record_stream(stream)
        self.tensor.record_stream(stream)
        self.copied = torch.cuda.Event()
        self.copied.record(stream)


def in_place_target(tensor, what, name):
    """(work, dtype code, finish) for an in-place collective: the contiguous buffer the
    runtime writes into, and a function that makes ``tensor`` hold the result. The
    runtime writes through the data pointer, outside autograd, as Horovod does; the
    finish then counts the write in the tensor's version, as any in-place torch op
    does, so that what watches it sees the new values (ShardedOptimizer's fp32 copies
    of fp16/bf16 parameters, after broadcast_parameters)."""
    code = dtype_code(tensor, what, name)
    if tensor.is_contiguous():
        def finish():
            bump_version(tensor)
            return tensor
        return tensor, code, finish
    work = tensor.detach().contiguous()
    return work, code, _CopyBack(tensor, work)


def bump_version(tensor):
    """Marks ``tensor`` as modified in place (its _version), without touching its data."""
    if tensor.is_inference():  # no version counter to keep
        return
    increment = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
    if increment is not None:  # PyTorch >= 2.1
        increment(tensor)
    else:
        with torch.no_grad():
            tensor.detach().reshape(-1)[:0].zero_()


def copies_back(finishes):
    """The GPU work of in-place ``finishes`` (in_place_target's), as one function that
    queues it on a stream (wait_on_stream): the copies into tensors that were not
    contiguous, each made once. None where there is none."""
    backs = [f for f in finishes if isinstance(f, _CopyBack)]
    if not backs:
        return None

    def queue(stream):
        for back in backs:
            back.queue(stream)

    return queue


def cuda_device(keep):
    """The GPU of the first CUDA tensor in ``keep`` (tensors in nested lists and tuples),
    or None."""
    if isinstance(keep, torch.Tensor):
        return keep.device if keep.is_cuda else None
    if isinstance(keep, (list, tuple)):
        for item in keep:
            device = cuda_device(item)
            if device is not None:
                return device
    return None


def needs_grad(tensor):
    """Whether a differentiable collective must go through autograd for ``tensor``:
    skipping the autograd function otherwise saves most of the Python layer's cost."""
    return getattr(tensor, "requires_grad", False) and torch.is_grad_enabled()


def from_buffer(buffer):
    """A tensor over memory Accord allocated, without a copy."""
    tensor = torch.utils.dlpack.from_dlpack(buffer.dlpack())
    # DLPack 0.x has no bool: the bytes come as uint8 (bindings/src/dlpack.cc).
    return tensor.view(torch.bool) if buffer.dtype == _core.bool else tensor

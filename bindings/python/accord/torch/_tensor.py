"""How a torch tensor crosses into Accord: its data pointer, dtype code, shape and
device, read from the tensor itself (no build against PyTorch's C++ ABI, so one build
serves every torch version). Outputs that Accord allocates come back through DLPack,
without a copy."""

import torch
import torch.utils.dlpack

from accord import _core

_DTYPES = {
    torch.uint8: _core.uint8,
    torch.int8: _core.int8,
    torch.int32: _core.int32,
    torch.int64: _core.int64,
    torch.float16: _core.float16,
    torch.bfloat16: _core.bfloat16,
    torch.float32: _core.float32,
    torch.float64: _core.float64,
}
_SUPPORTED = ", ".join(str(d).replace("torch.", "") for d in _DTYPES)


def describe(what, name):
    return f"{what} '{name}'" if name else what


def dtype_code(tensor, what, name):
    """The runtime's dtype code for a CPU tensor; refuses what Accord cannot take."""
    code = _DTYPES.get(getattr(tensor, "dtype", None))
    if code is not None and tensor.device.type == "cpu" and tensor.layout == torch.strided:
        return code
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{describe(what, name)}: expected a torch.Tensor, got "
                         f"{type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise NotImplementedError(
            f"{describe(what, name)}: the tensor is on {tensor.device}, but Accord takes CPU "
            "tensors only for now (its GPU path is not there yet): move it with tensor.cpu()")
    if tensor.layout != torch.strided:
        raise ValueError(f"{describe(what, name)}: {tensor.layout} tensors are not supported "
                         "(sparse gradients go through sparse_allreduce_async)")
    raise ValueError(f"{describe(what, name)}: dtype {tensor.dtype} is not supported by "
                     f"Accord (supported: {_SUPPORTED})")


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


def in_place_target(tensor, what, name):
    """(work, dtype code, finish) for an in-place collective: the contiguous buffer the
    runtime writes into, and a function that makes ``tensor`` hold the result."""
    code = dtype_code(tensor, what, name)
    work = tensor.detach()
    if work.is_contiguous():
        return work, code, lambda: tensor
    work = work.contiguous()

    def copy_back():
        with torch.no_grad():
            tensor.copy_(work)
        return tensor

    return work, code, copy_back


def from_buffer(buffer):
    """A tensor over memory Accord allocated, without a copy."""
    return torch.utils.dlpack.from_dlpack(buffer.dlpack())

"""Gradient compression for the wire: Horovod's Compression.none and .fp16, and .bf16
(which Horovod lacks). A compressor casts floating-point tensors to a 16-bit type
before the collective and back afterwards; other dtypes pass through unchanged."""

import torch


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _cast_compressor(wire_dtype, name):
    class _Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != wire_dtype:
                return tensor.to(wire_dtype), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.to(ctx)

    _Cast.__name__ = _Cast.__qualname__ = name
    _Cast.__doc__ = f"Sends floating-point tensors as {wire_dtype}."
    return _Cast


FP16Compressor = _cast_compressor(torch.float16, "FP16Compressor")
BF16Compressor = _cast_compressor(torch.bfloat16, "BF16Compressor")


class Compression:
    """The compressors to pass as ``compression=``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

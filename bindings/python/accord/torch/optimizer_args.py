"""The checks of the arguments DistributedOptimizer and ShardedOptimizer share: each
refusal names the argument, the value given and what it must be."""

import math

from accord.basics import Average, as_integer, op_name


def checked_passes(passes, what):
    """backward_passes_per_step as an int of at least 1."""
    expected = f"{what}: backward_passes_per_step must be a positive integer"
    n = as_integer(passes, expected)
    if n < 1:
        raise ValueError(f"{expected}, got {passes!r}")
    return n


def checked_predivide(factor, op, what):
    """gradient_predivide_factor as a positive, finite float; other than 1 only with
    op=Average (it divides before the sum and by size / factor after)."""
    expected = f"{what}: gradient_predivide_factor must be a positive number"
    try:
        value = float(factor)
    except (TypeError, ValueError):
        raise ValueError(f"{expected}, got {factor!r}") from None
    if isinstance(factor, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{expected}, got {factor!r}")
    if value != 1.0 and op != Average:
        raise ValueError(f"{what}: gradient_predivide_factor {factor!r} is supported with "
                         f"op=Average only, got op={op_name(op)}")
    return value

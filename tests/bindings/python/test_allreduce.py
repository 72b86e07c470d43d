"""allreduce in all four forms, grouped, with scale factors and process sets: every
dtype and op, values checked against an independent reduction."""

import pytest
import torch

from helpers import DTYPES, FLOAT_DTYPES, OPS, assert_equal, dtype_id, reduced, sent

SHAPE = (3, 17)


@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_allreduce_every_form(hvd, dtype, op_name):
    op = OPS[op_name]
    me, ranks = hvd.rank(), list(range(hvd.size()))
    expected = reduced(ranks, SHAPE, dtype, op)
    base = f"ar.{dtype_id(dtype)}.{op_name}"

    x = sent(me, SHAPE, dtype, op)
    out = hvd.allreduce(x, name=base + ".sync", op=op)
    assert_equal(out, expected, "allreduce")
    assert_equal(x, sent(me, SHAPE, dtype, op), "allreduce leaves its input")

    y = sent(me, SHAPE, dtype, op)
    assert hvd.allreduce_(y, name=base + ".inplace", op=op) is y
    assert_equal(y, expected, "allreduce_")

    z = sent(me, SHAPE, dtype, op)
    h_out = hvd.allreduce_async(z, name=base + ".async", op=op)
    h_in = hvd.allreduce_async_(z, name=base + ".async_", op=op)
    assert_equal(hvd.synchronize(h_out), expected, "allreduce_async")
    assert hvd.synchronize(h_in) is z
    assert_equal(z, expected, "allreduce_async_")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op_name", ["sum", "average"])
def test_allreduce_scale_factors(hvd, dtype, op_name):
    op = OPS[op_name]
    ranks = list(range(hvd.size()))
    out = hvd.allreduce(sent(hvd.rank(), SHAPE, dtype), name=f"ar.scaled.{dtype_id(dtype)}.{op_name}",
                        op=op, prescale_factor=0.5, postscale_factor=4.0)
    assert_equal(out, reduced(ranks, SHAPE, dtype, op, 0.5, 4.0))


def test_average_is_the_default_and_average_flag_still_works(hvd):
    ranks = list(range(hvd.size()))
    x = sent(hvd.rank(), SHAPE, torch.float64)
    assert_equal(hvd.allreduce(x, name="ar.default"), reduced(ranks, SHAPE, torch.float64, hvd.Average))
    with pytest.warns(DeprecationWarning):
        out = hvd.allreduce(x, average=False, name="ar.average_false")
    assert_equal(out, reduced(ranks, SHAPE, torch.float64, hvd.Sum))


def test_unnamed_and_scalar_and_empty(hvd):
    n = hvd.size()
    assert hvd.allreduce(torch.tensor(2.0), op=hvd.Sum).item() == 2.0 * n
    assert hvd.allreduce(torch.zeros(0, 4), op=hvd.Sum).shape == (0, 4)
    big = torch.full((300_000,), float(hvd.rank() + 1))  # above the fusion threshold
    assert torch.all(hvd.allreduce(big, op=hvd.Sum) == n * (n + 1) / 2)


def test_non_contiguous_in_place(hvd):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) * (hvd.rank() + 1)
    view = base.t()  # not contiguous
    assert not view.is_contiguous()
    expected = view * 0 + torch.arange(24, dtype=torch.float32).reshape(4, 6).t() * \
        sum(r + 1 for r in range(hvd.size()))
    hvd.allreduce_(view, op=hvd.Sum, name="ar.noncontig")
    assert torch.equal(view, expected)
    assert torch.equal(base.t(), expected)  # written through to the viewed storage


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_grouped_allreduce(hvd, dtype):
    me, ranks = hvd.rank(), list(range(hvd.size()))
    shapes = [(5,), (2, 3), (40, 2)]
    tensors = [sent(me + i, s, dtype) for i, s in enumerate(shapes)]
    expected = [reduced([r + i for r in ranks], s, dtype, hvd.Sum) for i, s in enumerate(shapes)]
    name = f"gar.{dtype_id(dtype)}"
    for out, e in zip(hvd.grouped_allreduce(tensors, name=name, op=hvd.Sum), expected):
        assert_equal(out, e, "grouped_allreduce")
    h = hvd.grouped_allreduce_async(tensors, name=name + ".async", op=hvd.Sum)
    for out, e in zip(hvd.synchronize(h), expected):
        assert_equal(out, e, "grouped_allreduce_async")
    copies = [t.clone() for t in tensors]
    h = hvd.grouped_allreduce_async_(copies, name=name + ".async_", op=hvd.Sum)
    assert all(a is b for a, b in zip(hvd.synchronize(h), copies))
    hvd.grouped_allreduce_(tensors, name=name + ".inplace", op=hvd.Sum)
    for t, c, e in zip(tensors, copies, expected):
        assert_equal(t, e, "grouped_allreduce_")
        assert_equal(c, e, "grouped_allreduce_async_")


@pytest.mark.parametrize("named", [True, False])
def test_grouped_allreduce_of_several_dtypes(hvd, named):
    """Horovod fuses a group by dtype; Accord's runtime needs one dtype per group, so a
    group of several was refused: it now runs as one group per dtype under one handle,
    each tensor keeping its dtype (the optimizer's groups= on a model of mixed dtypes,
    Compression.fp16 on float and integer tensors)."""
    me, ranks = hvd.rank(), list(range(hvd.size()))
    dtypes = [torch.float32, torch.float64, torch.int32, torch.float32, torch.bfloat16]
    shapes = [(5,), (2, 3), (4,), (1,), (3,)]
    tensors = [sent(me + i, s, d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    expected = [reduced([r + i for r in ranks], s, d, hvd.Sum)
                for i, (s, d) in enumerate(zip(shapes, dtypes))]
    name = "gar.mixed" if named else None
    outs = hvd.grouped_allreduce(tensors, name=name, op=hvd.Sum)
    copies = [t.clone() for t in tensors]
    handle = hvd.grouped_allreduce_async_(copies, name=name and name + ".async_", op=hvd.Sum)
    assert all(a is b for a, b in zip(hvd.synchronize(handle), copies))
    for out, copy, e in zip(outs, copies, expected):
        assert out.dtype == e.dtype
        assert_equal(out, e, "grouped_allreduce")
        assert_equal(copy, e, "grouped_allreduce_async_")
    half = hvd.grouped_allreduce([torch.ones(2), torch.ones(2, dtype=torch.int64)],
                                 compression=hvd.Compression.fp16, op=hvd.Sum)
    assert [h.dtype for h in half] == [torch.float32, torch.int64]
    assert all(h.tolist() == [hvd.size()] * 2 for h in half)


@pytest.mark.parametrize("op_name", list(OPS))
def test_allreduce_on_process_sets(hvd, op_name, process_sets):
    op = OPS[op_name]
    me = hvd.rank()
    for ps in process_sets:
        name = f"ar.ps{ps.process_set_id}.{op_name}"
        if not ps.included():
            with pytest.raises(ValueError):
                hvd.allreduce(sent(me, SHAPE, torch.float32, op), name=name, op=op,
                              process_set=ps)
            continue
        for dtype in DTYPES:
            x = sent(me, SHAPE, dtype, op)
            out = hvd.allreduce(x, name=f"{name}.{dtype_id(dtype)}", op=op, process_set=ps)
            assert_equal(out, reduced(ps.ranks, SHAPE, dtype, op), f"set {ps.ranks}")
            h = hvd.allreduce_async_(x, name=f"{name}.{dtype_id(dtype)}.async_", op=op,
                                     process_set=ps)
            hvd.synchronize(h)
            assert_equal(x, reduced(ps.ranks, SHAPE, dtype, op), f"set {ps.ranks} in place")


# ---- integers and 16-bit floats are scaled as Horovod scales them ----------------------
def _horovod_scaled(x, factor):
    """x * factor as Horovod's CPU kernels compute it: integers in float64 and truncated
    toward zero, float16 in float32, the others in their own type (the factor rounded
    to it first)."""
    if not x.dtype.is_floating_point:
        return (x.to(torch.float64) * factor).to(x.dtype)  # the conversion truncates
    compute = torch.float32 if x.dtype == torch.float16 else x.dtype
    return (x.to(compute) * torch.tensor(factor, dtype=compute)).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64],
                         ids=dtype_id)
def test_integer_average_truncates_toward_zero(hvd, dtype):
    """[1, 2, 3] and [2, 4, 6] average to [1, 3, 4] over two ranks, as in Horovod, and
    negative averages truncate toward zero too (-4.5 -> -4), for every set size."""
    me, n = hvd.rank(), hvd.size()
    # Sums 3n(n + 1)/2 + j for j = -(n - 1) .. n - 1: every fraction of 1 / n.
    offsets = torch.arange(-(n - 1), n, dtype=torch.int64)
    x = (offsets if me == 0 else torch.zeros_like(offsets)) + 3 * (me + 1)
    total = offsets + sum(3 * (r + 1) for r in range(n))
    expected = torch.div(total, n, rounding_mode="trunc").to(dtype)
    out = hvd.allreduce(x.to(dtype), op=hvd.Average, name=f"ar.trunc.{dtype_id(dtype)}")
    assert torch.equal(out, expected), f"{out.tolist()} != {expected.tolist()}"
    negative = hvd.allreduce(-x.to(dtype), op=hvd.Average, name=f"ar.trunc.neg.{dtype_id(dtype)}")
    assert torch.equal(negative, -expected), f"{negative.tolist()} != {(-expected).tolist()}"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.float32],
                         ids=dtype_id)
def test_scale_factors_are_horovods(hvd, dtype):
    """Prescale and postscale in float64, truncated toward zero, for integers; in
    float32 for float16 and float32, the factor rounded to float32 (Horovod's CPU
    arithmetic, which its tests compare against exactly)."""
    me, n = hvd.rank(), hvd.size()
    factor = 0.3710  # its products with these integers are never whole numbers
    # Integers differ per rank; floats are the same everywhere, so that their sums are
    # rounded once whatever order the ranks add in.
    values = lambda r: torch.arange(-40, 41, dtype=torch.float64) * (  # noqa: E731
        1 if dtype.is_floating_point else r + 1)
    x = values(me).to(dtype)
    pre = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor, name=f"ar.pre.{dtype_id(dtype)}")
    expected = sum(_horovod_scaled(values(r).to(dtype), factor).to(torch.float64)
                   for r in range(n)).to(dtype)
    assert torch.equal(pre, expected), (pre.to(torch.float64) - expected.to(torch.float64)).abs().max()
    total = sum(values(r) for r in range(n)).to(dtype)  # exact in every dtype here
    post = hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor, name=f"ar.post.{dtype_id(dtype)}")
    assert torch.equal(post, _horovod_scaled(total, factor))
    rs = hvd.reducescatter(x.reshape(1, -1).expand(n, -1).contiguous(), op=hvd.Sum,
                           postscale_factor=factor, name=f"rs.post.{dtype_id(dtype)}")
    assert torch.equal(rs[0], _horovod_scaled(total, factor))

"""op=Adasum: the allreduce against a reference tree computed here in float64, and
DistributedOptimizer(op=Adasum), which steps each rank on its own gradients and
combines the steps. Adasum needs a power-of-two number of ranks: on 3 ranks the
collectives run over a set of ranks 0 and 1 (and are refused over all 3)."""

import copy

import numpy as np
import pytest
import torch

import accord.torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# The dtype's rounding, per tree level, relative to the result's largest element.
ROUNDING = {torch.float32: 1e-6, torch.float64: 1e-13, torch.float16: 1e-3,
            torch.bfloat16: 8e-3}


def combine(a, b):
    ab, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    wa = 1 - ab / (2 * aa) if aa > 0 else 1.0
    wb = 1 - ab / (2 * bb) if bb > 0 else 1.0
    return wa * a + wb * b


def reference(inputs):
    """Adasum's binary tree over the ranks' tensors (float64, flattened)."""
    level = [t.double().flatten() for t in inputs]
    while len(level) > 1:
        level = [combine(level[k], level[k + 1]) for k in range(0, len(level), 2)]
    return level[0]


@pytest.fixture(scope="module")
def pair(accord_runtime):
    """The ranks Adasum runs over: every rank on 2 (a power of two), ranks 0 and 1 on 3."""
    hvd = accord_runtime
    if hvd.size() & (hvd.size() - 1) == 0:
        yield hvd.global_process_set
        return
    ps = hvd.add_process_set([0, 1])
    yield ps
    hvd.remove_process_set(ps)


def inputs_for(kind, n, size, dtype):
    """Every rank's input (each rank computes all of them, for the reference)."""
    out = []
    for r in range(size):
        if kind == "orthogonal":
            t = torch.zeros(n, dtype=torch.float64)
            t[r::size] = 1.0 + torch.arange(n, dtype=torch.float64)[r::size] % 5
        elif kind == "parallel":
            t = (r + 1) * (1.0 + torch.arange(n, dtype=torch.float64) % 3)
        else:
            t = torch.randn(n, generator=torch.Generator().manual_seed(100 + r),
                            dtype=torch.float64)
        out.append(t.to(dtype))
    return out


def assert_same_on_every_rank(hvd, tensors, process_set):
    flat = torch.cat([t.reshape(-1).double() for t in tensors])
    gathered = hvd.allgather(flat.unsqueeze(0), process_set=process_set)
    for r in range(gathered.shape[0]):
        assert torch.equal(gathered[r], flat), f"rank {r}'s values differ from this rank's"


def check(result, expected, tolerance):
    err = (result.double().flatten() - expected).abs().max().item() if result.numel() else 0.0
    scale = expected.abs().max().item() if expected.numel() else 0.0
    assert err <= tolerance * scale, f"off by {err} (largest value {scale})"


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_orthogonal_add_parallel_average_others_as_the_tree(hvd, pair, dtype):
    if not pair.included():
        return
    size, me = pair.size(), pair.rank()
    for n in (1, 5, 1000, 70001):
        for kind, tol in (("orthogonal", 0.0), ("parallel", 2 * ROUNDING[dtype]),
                          ("general", 4 * ROUNDING[dtype])):
            inputs = inputs_for(kind, n, size, dtype)
            out = hvd.allreduce(inputs[me], op=hvd.Adasum, name=f"ad.{kind}.{n}.{dtype}",
                                process_set=pair)
            assert out.dtype == dtype and out.shape == (n,)
            check(out, reference(inputs), tol)
            assert_same_on_every_rank(hvd, [out.double()], pair)


def test_fused_and_grouped_tensors_keep_their_own_weights(hvd, pair):
    if not pair.included():
        return
    size, me = pair.size(), pair.rank()
    ortho = inputs_for("orthogonal", 30, size, torch.float32)
    para = inputs_for("parallel", 20, size, torch.float32)
    # Submitted together: fused into one buffer, each combined on its own.
    h1 = hvd.allreduce_async(ortho[me], op=hvd.Adasum, name="ad.fused.o", process_set=pair)
    h2 = hvd.allreduce_async(para[me], op=hvd.Adasum, name="ad.fused.p", process_set=pair)
    check(hvd.synchronize(h1), reference(ortho), 0.0)
    check(hvd.synchronize(h2), reference(para), 2e-6)
    outs = hvd.grouped_allreduce([ortho[me], para[me]], op=hvd.Adasum, name="ad.group",
                                 process_set=pair)
    check(outs[0], reference(ortho), 0.0)
    check(outs[1], reference(para), 2e-6)
    # In place, with scaling: orthogonal tensors give prescale * postscale * their sum.
    t = ortho[me].clone()
    hvd.allreduce_(t, op=hvd.Adasum, name="ad.inplace", prescale_factor=2.0,
                   postscale_factor=0.25, process_set=pair)
    check(t, reference(ortho) * 0.5, 0.0)


def test_numpy_adasum(hvd, pair):
    import accord.numpy as acc
    if not pair.included():
        return
    size, me = pair.size(), pair.rank()
    para = inputs_for("parallel", 9, size, torch.float64)
    out = acc.allreduce(para[me].numpy(), op=acc.Adasum, name="ad.numpy", process_set=pair)
    np.testing.assert_allclose(out, reference(para).numpy(), rtol=1e-13)


def test_refusals(hvd):
    with pytest.raises(ValueError, match="Adasum needs a floating-point tensor.*int32"):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum, name="ad.int")
    # As Horovod refuses it: an error scripts catch as RuntimeError.
    with pytest.raises(RuntimeError, match="Adasum applies to allreduce only"):
        hvd.reducescatter(torch.ones(4, 2), op=hvd.Adasum, name="ad.rs")
    with pytest.raises(ValueError, match="Adasum applies to allreduce only"):
        hvd.grouped_reducescatter([torch.ones(4, 2)], op=hvd.Adasum, name="ad.grs")
    if hvd.size() & (hvd.size() - 1):
        with pytest.raises(ValueError, match="power-of-two number of ranks, and the process "
                                             f"set has {hvd.size()}"):
            hvd.allreduce(torch.ones(2), op=hvd.Adasum, name="ad.three")
        model = torch.nn.Linear(2, 2)
        with pytest.raises(ValueError, match=f"power-of-two.*has {hvd.size()}"):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)


def check_step(hvd, pair, model, local, start, name, tolerance, wire=torch.float32):
    """After one step: each parameter of `model` is its start plus the reference tree
    over every rank's own step (`local`'s change, sent as `wire`), the same on every
    rank; then `local` continues from the combined parameters."""
    deltas = torch.cat([(q.detach() - s).flatten() for q, s in zip(local.parameters(), start)])
    gathered = hvd.allgather(deltas.to(wire).unsqueeze(0), name=name, process_set=pair)
    at = 0
    for p, s in zip(model.parameters(), start):
        n = p.numel()
        expected = s.double().flatten() + reference([gathered[r, at:at + n]
                                                     for r in range(pair.size())])
        check(p.detach(), expected, tolerance)
        at += n
    assert_same_on_every_rank(hvd, [p.detach() for p in model.parameters()], pair)
    with torch.no_grad():
        for q, p in zip(local.parameters(), model.parameters()):
            q.copy_(p)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_distributed_optimizer_combines_the_ranks_steps(hvd, pair, kind):
    """Each step: every rank's own step from the same parameters (a plain optimizer on
    a copy, with the same state), the steps combined by the reference tree, added to
    the parameters: what DistributedOptimizer(op=Adasum) must hold on every rank."""
    if not pair.included():
        return
    me = pair.rank()

    def make_opt(params):
        if kind == "sgd":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
        return torch.optim.Adam(params, lr=0.01)

    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   process_set=pair)
    local = copy.deepcopy(model)
    local_opt = make_opt(local.parameters())
    for step in range(4):
        x, y = batch(me, step)
        start = [p.detach().clone() for p in model.parameters()]
        local_opt.zero_grad()
        torch.nn.functional.mse_loss(local(x), y).backward()
        local_opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        check_step(hvd, pair, model, local, start, f"ad.deltas.{kind}.{step}", 1e-5)


def test_fp16_deltas_and_accumulated_gradients(hvd, pair):
    """compression=fp16 sends the deltas as float16 (the reference rounds them alike);
    backward_passes_per_step=2 steps once on two passes' gradients."""
    if not pair.included():
        return
    me = pair.rank()
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   compression=hvd.Compression.fp16, backward_passes_per_step=2,
                                   process_set=pair)
    local = copy.deepcopy(model)
    local_opt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.5)
    for step in range(2):
        start = [p.detach().clone() for p in model.parameters()]
        for m in (model, local):
            for k in range(2):
                x, y = batch(me, 10 * step + k)
                torch.nn.functional.mse_loss(m(x), y).backward()
        local_opt.step()
        local_opt.zero_grad()
        opt.step()
        opt.zero_grad()
        check_step(hvd, pair, model, local, start, f"ad.half.{step}", 2e-3, torch.float16)


def test_optimizer_calls_and_attributes(hvd, pair):
    if not pair.included():
        return
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   process_set=pair)
    assert opt.op == hvd.Adasum
    assert sorted(opt._parameter_names.values()) == sorted(n for n, _ in model.named_parameters())
    assert isinstance(opt, torch.optim.SGD)
    opt.synchronize()  # nothing to wait for
    with pytest.raises(AssertionError, match="skip_synchronize"):
        with opt.skip_synchronize():
            pass
    with pytest.raises(ValueError, match="already distributed"):
        hvd.DistributedOptimizer(opt, op=hvd.Adasum, process_set=pair)
    # A closure's loss comes back; a parameter without a gradient anywhere stays put.
    x, y = batch(pair.rank(), 9)
    frozen_before = model[2].bias.detach().clone()
    model[2].bias.grad = None

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        model[2].bias.grad = None
        return loss

    loss = opt.step(closure)
    assert torch.is_tensor(loss)
    assert torch.equal(model[2].bias.detach(), frozen_before)


def test_a_failed_step_leaves_the_parameters_as_they_were(hvd, pair):
    """A tensor whose shape differs between the ranks fails its allreduce on every rank:
    the step raises there, and no parameter keeps a half-applied step."""
    if not pair.included():
        return
    width = 3 + pair.rank()  # differs between the ranks
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, width))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   process_set=pair)
    torch.nn.functional.mse_loss(model(torch.ones(2, 4)), torch.zeros(2, width)).backward()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        opt.step()
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach(), b)


def test_a_set_of_one_rank_steps_locally(hvd):
    ps = hvd.add_process_set([0])
    try:
        if not ps.included():
            return
        model = make_model()
        local = copy.deepcopy(model)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       op=hvd.Adasum, process_set=ps)
        local_opt = torch.optim.SGD(local.parameters(), lr=0.1)
        x, y = batch(0, 0)
        for m, o in ((model, opt), (local, local_opt)):
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
        for p, q in zip(model.parameters(), local.parameters()):
            assert torch.equal(p, q)
    finally:
        hvd.remove_process_set(ps)


@pytest.mark.skipif(not (torch.cuda.is_available() and accord.torch.cuda_built()),
                    reason="needs a GPU and a build with the GPU path")
def test_cuda_tensors_as_on_the_cpu(hvd, pair):
    if not pair.included():
        return
    size, me = pair.size(), pair.rank()
    for dtype in FLOATS:
        inputs = inputs_for("general", 5000, size, dtype)
        on_cpu = hvd.allreduce(inputs[me], op=hvd.Adasum, name=f"ad.cpu.{dtype}",
                               process_set=pair)
        on_gpu = hvd.allreduce(inputs[me].cuda(), op=hvd.Adasum, name=f"ad.gpu.{dtype}",
                               process_set=pair)
        assert on_gpu.is_cuda
        assert torch.equal(on_gpu.cpu(), on_cpu)


def test_a_joined_rank_contributes_zeros(hvd, pair):
    """adasum(a, 0) = a: what rank 0 submits while every other rank has joined comes
    back unchanged. (Over the global set: a joined rank stands in for that set's
    collectives only, so on 3 ranks there is nothing to run.)"""
    if hvd.size() & (hvd.size() - 1):
        return
    if hvd.rank() == 0:
        for dtype in (torch.float32, torch.bfloat16):
            t = torch.tensor([1.0, -2.0, 3.5], dtype=dtype)
            out = hvd.allreduce(t, op=hvd.Adasum, name=f"ad.joined.{dtype}")
            assert torch.equal(out, t)
    assert hvd.join() == 0  # rank 0 joins last

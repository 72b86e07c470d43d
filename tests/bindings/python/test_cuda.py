"""CUDA tensors through accord.torch: every collective on the GPU gives what it gives on
the CPU, its output stays on the GPU, and the runtime starts after the work the caller
queued on its current stream; a CPU tensor against a GPU one is a mismatch. Skipped
where PyTorch sees no GPU or the build has no GPU path (run ci/device-python.sh on a GPU
machine)."""

import pytest
import torch

import accord.torch as hvd_module
from helpers import sent

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and hvd_module.cuda_built()),
    reason="needs a GPU and a build with the GPU path")


@pytest.fixture
def device(hvd):
    d = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(d)
    return d


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("op", ["sum", "average", "max"])
def test_allreduce_on_the_gpu_equals_the_cpu(hvd, device, dtype, op):
    if op == "average" and dtype == torch.int32:
        pytest.skip("average of integers: covered on the CPU")
    ops = {"sum": hvd.Sum, "average": hvd.Average, "max": hvd.Max}
    host = sent(hvd.rank(), (3, 1000), dtype)
    on_gpu = hvd.allreduce(host.to(device), op=ops[op], name=f"cuda.ar.{dtype}.{op}")
    on_cpu = hvd.allreduce(host, op=ops[op], name=f"cpu.ar.{dtype}.{op}")
    assert on_gpu.device == device
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-2, atol=1e-2)


def test_in_place_grouped_and_scaled(hvd, device):
    n = hvd.size()
    t = torch.full((1 << 20,), float(hvd.rank() + 1), device=device)
    hvd.allreduce_(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name="cuda.inplace")
    assert torch.all(t == n * (n + 1) / 2).item()
    # Values of rank + 1: on one rank too, an output never written would show.
    group = [torch.full((k + 1,), float(hvd.rank() + 1), device=device) for k in range(5)]
    out = hvd.grouped_allreduce(group, op=hvd.Sum, name="cuda.grouped")
    for k, o in enumerate(out):
        assert o.device == device and o.shape == (k + 1,)
        assert torch.all(o == n * (n + 1) / 2).item()


def test_broadcast_allgather_alltoall_reducescatter(hvd, device):
    n, r = hvd.size(), hvd.rank()
    b = torch.full((4, 5), float(r + 1), device=device)
    hvd.broadcast_(b, root_rank=n - 1, name="cuda.bcast")
    assert torch.all(b == n).item()

    # Different first dimensions per rank.
    mine = torch.full((r + 1, 3), float(r + 1), device=device)
    gathered = hvd.allgather(mine, name="cuda.gather")
    expected = torch.cat([torch.full((q + 1, 3), float(q + 1)) for q in range(n)])
    assert gathered.device == device
    torch.testing.assert_close(gathered.cpu(), expected)

    # Rank r sends q+1 rows of value 100r+q to rank q.
    splits = [q + 1 for q in range(n)]
    rows = torch.cat([torch.full((q + 1, 2), float(100 * r + q)) for q in range(n)])
    out, received = hvd.alltoall(rows.to(device), splits=splits, name="cuda.a2a")
    assert out.device == device and received.tolist() == [r + 1] * n
    expected = torch.cat([torch.full((r + 1, 2), float(100 * q + r)) for q in range(n)])
    torch.testing.assert_close(out.cpu(), expected)

    x = torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) * (r + 1)
    scattered = hvd.reducescatter(x.to(device), op=hvd.Sum, name="cuda.rs")
    total = torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) * (n * (n + 1) / 2)
    assert scattered.device == device
    torch.testing.assert_close(scattered.cpu(), total[2 * r:2 * r + 2])


def test_the_runtime_waits_for_the_callers_stream(hvd, device):
    # A side stream holds a long kernel, then writes the tensor: the allreduce submitted
    # right after must see the written values, not the ones before. The prescale makes
    # the runtime run a kernel of its own even on one rank, where an unscaled lone
    # allreduce leaves the tensor as it is.
    side = torch.cuda.Stream(device)
    t = torch.zeros(1 << 22, device=device)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # some 100 ms of GPU time
        t.fill_(float(hvd.rank() + 1))
        handle = hvd.allreduce_async_(t, op=hvd.Sum, prescale_factor=3.0, name="cuda.stream")
    hvd.synchronize(handle)
    n = hvd.size()
    assert torch.all(t == 3 * n * (n + 1) / 2).item()


@pytest.mark.parametrize("contiguous", [True, False])
def test_a_stream_waits_for_the_collective_without_the_host(hvd, device, contiguous):
    # The collective runs behind some 100 ms of GPU time on a side stream; a copy queued
    # on a third stream after wait_on_stream must see the reduced values, not the zeros
    # or the values before the reduction. A tensor that is not contiguous is reduced in
    # a copy, which wait_on_stream copies back on that stream too.
    side, reader = torch.cuda.Stream(device), torch.cuda.Stream(device)
    t = torch.zeros(1 << 22, device=device)
    if not contiguous:
        t = torch.zeros(1 << 21, 2, device=device)[:, 0]
    torch.cuda.synchronize(device)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        t.fill_(float(hvd.rank() + 1))
        handle = hvd.allreduce_async_(t, op=hvd.Sum, prescale_factor=3.0,
                                      name=f"cuda.wait_on_stream.{contiguous}")
    assert hvd.wait_on_stream(handle, reader) is True
    with torch.cuda.stream(reader):
        copy = t.clone()
    reader.synchronize()
    n = hvd.size()
    assert torch.all(copy == 3 * n * (n + 1) / 2).item()
    assert hvd.synchronize(handle) is t  # still valid after the stream waited


def test_distributed_optimizer_on_the_gpu(hvd, device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    gen = torch.Generator().manual_seed(hvd.rank())
    for _ in range(3):
        x = torch.randn(8, 16, generator=gen).to(device)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0), name="cuda.opt.params")
    for q in range(hvd.size()):
        torch.testing.assert_close(everyone[q], flat)


def test_a_cpu_tensor_against_a_gpu_one_is_a_mismatch_on_every_rank(hvd, device):
    # The last rank submits the name's tensor on the GPU, the others on the CPU: every
    # rank fails naming both devices, and the runtime goes on.
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    t = torch.ones(64)
    if hvd.rank() == hvd.size() - 1:
        t = t.to(device)
    with pytest.raises(hvd.MismatchError) as error:
        hvd.allreduce(t, op=hvd.Sum, name="cuda.mixed")
    message = str(error.value)
    assert "'cuda.mixed'" in message and "device cpu" in message, message
    assert "device cuda:" in message, message
    after = hvd.allreduce(torch.ones(1, device=device), op=hvd.Sum, name="cuda.after.mixed")
    assert after.device == device and after.item() == hvd.size()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8, torch.bool])
def test_integers_and_bool_on_the_gpu_equal_the_cpu(hvd, device, dtype):
    """Host and device scale integers alike (truncated toward zero, as Horovod does):
    the same values on both paths. int16 and bool, which NCCL lacks, reduce through
    host memory and move as bytes."""
    me = hvd.rank()
    if dtype == torch.bool:
        x = torch.tensor([me % 2 == 0, True, False, me == 0])
        cases = [("sum", hvd.Sum, {}), ("min", hvd.Min, {})]
    else:
        x = (torch.arange(-50, 50) * (me + 1) + me).to(dtype)
        cases = [("average", hvd.Average, {}), ("max", hvd.Max, {}),
                 ("pre", hvd.Sum, {"prescale_factor": 0.371}),
                 ("post", hvd.Sum, {"postscale_factor": 0.371})]
    for tag, op, scale in cases:
        on_gpu = hvd.allreduce(x.to(device), op=op, name=f"cuda.int.{dtype}.{tag}", **scale)
        on_cpu = hvd.allreduce(x, op=op, name=f"cpu.int.{dtype}.{tag}", **scale)
        assert on_gpu.device == device and on_gpu.dtype == dtype
        assert torch.equal(on_gpu.cpu(), on_cpu), (tag, on_gpu.cpu(), on_cpu)
    rows = x.reshape(1, -1)
    on_gpu = hvd.allgather(rows.to(device), name=f"cuda.int.{dtype}.ag")
    assert on_gpu.device == device
    assert torch.equal(on_gpu.cpu(), hvd.allgather(rows, name=f"cpu.int.{dtype}.ag"))
    assert torch.equal(hvd.broadcast(x.to(device), 0, name=f"cuda.int.{dtype}.bc").cpu(),
                       hvd.broadcast(x, 0, name=f"cpu.int.{dtype}.bc"))


def test_alltoall_received_splits_follow_the_splits(hvd, device):
    """As in Horovod: received splits take the splits tensor's dtype and device."""
    n = hvd.size()
    for tensor_device in (device, torch.device("cpu")):
        for dtype in (torch.int32, torch.int64):
            splits = torch.ones(n, dtype=dtype, device=device)
            out, received = hvd.alltoall(torch.arange(n, dtype=torch.float32, device=tensor_device),
                                         splits=splits, name=f"cuda.a2a.{tensor_device.type}.{dtype}")
            assert out.device == tensor_device
            assert received.device == device and received.dtype == dtype
            assert received.tolist() == [1] * n


def test_a_group_over_cpu_and_gpu_tensors_is_refused_as_horovod_refuses_it(hvd, device):
    """Horovod's test_horovod_grouped_allreduce_cpu_gpu_error catches RuntimeError."""
    tensors = [torch.ones(10) if i % 2 else torch.ones(10, device=device) for i in range(5)]
    for call in (hvd.grouped_allreduce, hvd.grouped_allreduce_, hvd.grouped_allreduce_async):
        with pytest.raises(RuntimeError, match="a group is reduced as one buffer on one device"):
            call(tensors, op=hvd.Sum)
    with pytest.raises(ValueError):
        hvd.grouped_allreduce(tensors)


def test_sync_batch_norm_on_the_gpu_equals_the_cpu(hvd, device):
    # The per-channel count travels with the sums: it must be made on the input's device.
    torch.manual_seed(3)
    x = torch.randn(2 * hvd.size(), 4, 5, dtype=torch.float64)
    mine = x[2 * hvd.rank():2 * hvd.rank() + 2]
    outs = []
    for where in ("cpu", device):
        bn = hvd.SyncBatchNorm(4).double().to(where)
        xi = mine.clone().to(where).requires_grad_()
        y = bn(xi)
        (y * y).sum().backward()
        outs.append((y.detach().cpu(), xi.grad.cpu(), bn.running_var.cpu()))
    for cpu, gpu in zip(outs[0], outs[1]):
        assert torch.allclose(cpu, gpu, atol=1e-12)


def test_optimizer_state_broadcast_on_the_gpu(hvd, device):
    # Root alone has state (a resumed checkpoint): its CUDA tensors arrive on every
    # rank's own GPU as tensors, not pickled to root's device.
    torch.manual_seed(4)
    model = torch.nn.Linear(4, 3).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    if hvd.rank() == 0:
        model(torch.ones(2, 4, device=device)).sum().backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    state = [opt.state[p] for p in model.parameters()]
    assert all(s["exp_avg"].device == device and s["exp_avg_sq"].device == device
               for s in state)
    mine = [s["exp_avg"].cpu() for s in state]
    roots = hvd.broadcast_object(mine, root_rank=0)
    assert all(torch.equal(a, b) for a, b in zip(mine, roots))
    assert all(torch.any(a != 0) for a in mine)


def test_join_on_a_gpu_of_this_process(hvd, device):
    # The joined rank's part of the others' CUDA allreduce goes on the GPU it names; a
    # GPU the process does not see is refused, naming it.
    with pytest.raises(ValueError, match=r"join: device cuda:99, but this process sees CUDA"):
        hvd.join(device=99)
    n, me = hvd.size(), hvd.rank()
    if me == 0:
        last = hvd.join(device=device.index)
    else:
        out = hvd.allreduce(torch.full((5,), float(me), device=device), op=hvd.Sum,
                            name="cuda.join.sum")
        assert out.device == device
        assert torch.all(out.cpu() == sum(range(1, n))).item()
        last = hvd.join(device=device.index)
    assert hvd.allgather_object(last) == [last] * n
    assert last != 0 or n == 1  # rank 0 joined first

"""Failures: every kind of mismatch raises on every rank (never hangs), names in
flight twice and bad arguments raise ValueError at once, on the calling rank only."""

import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch

import accord.torch as hvd_module


def on_rank0(me, a, b):
    return a if me == 0 else b


MISMATCHES = {
    "dtype": lambda me: hvd_module.allreduce_async(
        torch.ones(4, dtype=on_rank0(me, torch.float32, torch.float64)), name="mm.dtype"),
    "shape": lambda me: hvd_module.allreduce_async(torch.ones(on_rank0(me, 4, 5)),
                                                   name="mm.shape"),
    "op": lambda me: hvd_module.allreduce_async(
        torch.ones(4), name="mm.op", op=on_rank0(me, hvd_module.Sum, hvd_module.Max)),
    "prescale": lambda me: hvd_module.allreduce_async(
        torch.ones(4), name="mm.prescale", prescale_factor=on_rank0(me, 1.0, 2.0)),
    "postscale": lambda me: hvd_module.allreduce_async(
        torch.ones(4), name="mm.postscale", postscale_factor=on_rank0(me, 1.0, 0.5)),
    "root": lambda me: hvd_module.broadcast_async(torch.ones(4), on_rank0(me, 0, 1),
                                                  name="mm.root"),
    "allgather trailing shape": lambda me: hvd_module.allgather_async(
        torch.ones(2, on_rank0(me, 3, 4)), name="mm.allgather"),
    "reducescatter shape": lambda me: hvd_module.reducescatter_async(
        torch.ones(on_rank0(me, 4, 6), 2), name="mm.reducescatter"),
    "alltoall trailing shape": lambda me: hvd_module.alltoall_async(
        torch.ones(hvd_module.size(), on_rank0(me, 1, 2)), name="mm.alltoall"),
}
# One name for different collectives on different ranks (an allreduce against an
# allgather, a grouped allreduce against a single one) is no mismatch here: as in
# Horovod, each operation has names of its own, and both sides wait until the stall
# bound; diverged_names.py checks what that reports, in a job of its own.


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_mismatch_raises_on_every_rank(hvd, kind):
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    handle = MISMATCHES[kind](hvd.rank())
    with pytest.raises(hvd.HorovodInternalError) as error:
        hvd.synchronize(handle)
    assert isinstance(error.value, hvd.MismatchError)
    assert isinstance(error.value, RuntimeError)
    message = str(error.value)
    assert "'mm." in message and "rank 0" in message, message
    # The runtime goes on: the next collective works.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"after.{kind}").item() == hvd.size()


def test_error_classes_are_catchable_as_horovods(hvd):
    """Every failure of a submitted collective is a HorovodInternalError (a RuntimeError),
    as Horovod raises it; one the ranks submitted in a form that cannot run is also a
    ValueError (test_join.py raises it)."""
    for cls in (hvd.MismatchError, hvd.CommError, hvd.StallError, hvd.ShutDownError,
                hvd.InvalidCollectiveError):
        assert issubclass(cls, hvd.HorovodInternalError) and issubclass(cls, RuntimeError)
    assert issubclass(hvd.InvalidCollectiveError, ValueError)
    assert issubclass(hvd.NotInitializedError, ValueError)


def test_name_in_flight_twice_is_a_value_error_at_once(hvd):
    """Each rank in turn submits a name the others have not submitted yet (so it
    cannot complete), then submits it again: refused at once on that rank only."""
    me, n = hvd.rank(), hvd.size()
    if n == 1:
        pytest.skip("needs two ranks: alone, a rank's first submission completes at once")
    for turn in range(n):
        name = f"dup.{turn}"
        handle = None
        if me == turn:
            handle = hvd.allreduce_async(torch.ones(3), name=name, op=hvd.Sum)
            with pytest.raises(ValueError, match="already in flight"):
                hvd.allreduce_async(torch.ones(3), name=name, op=hvd.Sum)
        hvd.barrier()
        if me != turn:
            handle = hvd.allreduce_async(torch.ones(3), name=name, op=hvd.Sum)
        assert torch.all(hvd.synchronize(handle) == n)


def test_one_name_for_different_collectives_at_once(hvd):
    """As in Horovod, a name belongs to one operation: an allreduce, a broadcast, an
    allgather, a grouped allreduce and a reducescatter all called "shared" run at once,
    each with its own result; the same operation's name twice is still refused."""
    me, n = hvd.rank(), hvd.size()

    def submit():
        return [
            hvd.allreduce_async(torch.full((3,), me + 1.0), name="shared", op=hvd.Sum),
            hvd.broadcast_async(torch.full((2,), 10.0 * me), root_rank=n - 1, name="shared"),
            hvd.allgather_async(torch.full((1, 2), float(me)), name="shared"),
            hvd.grouped_allreduce_async([torch.ones(2), torch.ones(1)], name="shared",
                                        op=hvd.Sum),
            hvd.reducescatter_async(torch.ones(2 * n), name="shared", op=hvd.Sum),
        ]

    # Rank 0 submits only after the others checked the repeat: until then their
    # broadcast cannot complete, however fast the machine (alone, it may: no check).
    handles = submit() if me != 0 or n == 1 else None
    if me != 0:
        with pytest.raises(ValueError, match="already in flight"):
            hvd.broadcast_async(torch.ones(2), root_rank=0, name="shared")
    hvd.barrier()
    if handles is None:
        handles = submit()
    summed, sent, gathered, grouped, scattered = [hvd.synchronize(h) for h in handles]
    assert summed.tolist() == [n * (n + 1) / 2] * 3
    assert sent.tolist() == [10.0 * (n - 1)] * 2
    assert gathered.tolist() == [[float(r)] * 2 for r in range(n)]
    assert [g.tolist() for g in grouped] == [[n, n], [n]]
    assert scattered.tolist() == [n, n]


def test_bad_arguments_are_value_errors(hvd):
    for dtype in (torch.complex64, torch.complex128):
        with pytest.raises(ValueError, match="not supported"):
            hvd.allreduce(torch.zeros(2, dtype=dtype))
    with pytest.raises(ValueError, match="torch.Tensor"):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="root rank"):
        hvd.broadcast(torch.ones(2), root_rank=hvd.size())
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(torch.ones(3, 2), splits=[4] + [0] * (hvd.size() - 1))
    # Splits that are not integers, as in Horovod's test_horovod_alltoall_splits_type_error
    # (whose float32 splits are uninitialized memory, any value at all).
    for splits in (torch.full((hvd.size(),), -1.5e38), torch.ones(hvd.size()), [1.5] * hvd.size()):
        with pytest.raises(ValueError, match="splits must be integers"):
            hvd.alltoall(torch.ones(hvd.size()), splits=splits)
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match="not both"):
        hvd.allreduce(torch.ones(1), average=True, op=hvd.Sum)
    with pytest.raises(ValueError, match="op"):
        hvd.allreduce(torch.ones(1), op=77)
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(torch.ones(2, 2).to_sparse())


def test_integer_arguments_take_numpy_integers_and_refuse_others(hvd, request):
    """Roots, ranks of process sets and join's device take what operator.index takes (a
    NumPy integer too); a float or a bool is refused at once, on the calling rank, with
    the value and what was expected, rather than pybind11's list of signatures. The
    process sets' part needs two ranks (alone, the only set is the global one)."""
    me, last = hvd.rank(), hvd.size() - 1
    sets = request.getfixturevalue("process_sets") if hvd.size() > 1 else None
    for root in (0.0, 1.0, True, "0", None):
        with pytest.raises(ValueError, match=r"broadcast: root_rank must be an integer, the "
                                             r"global rank of the root, got " + repr(root)):
            hvd.broadcast(torch.ones(1), root)
        if sets:
            with pytest.raises(ValueError, match="root_rank must be an integer"):
                hvd.broadcast_(torch.ones(1), root, process_set=sets[0])
    got = hvd.broadcast(torch.full((1,), float(me)), np.int64(last), name="int.root")
    assert got.tolist() == [float(last)]
    if sets:
        ps = sets[1]
        got = hvd.broadcast_(torch.full((1,), float(me)), np.int32(ps.ranks[0]),
                             process_set=ps) if ps.included() else None
        assert got is None or got.tolist() == [float(ps.ranks[0])]
    ranks = hvd.ProcessSet(np.array([1, 0])).ranks
    assert ranks == [0, 1] and all(type(r) is int for r in ranks)
    assert hvd.ProcessSet(ranks_or_comm=[1, 0]).ranks == [0, 1]  # Horovod's keyword
    for bad in ([0.0, 1.0], [False, True]):
        with pytest.raises(ValueError, match=r"ProcessSet: ranks must be integers .*got "):
            hvd.ProcessSet(bad)
    assert hvd.join(device=np.int64(-1)) in range(hvd.size())


@pytest.mark.parametrize("wrapper", ["DistributedOptimizer", "ShardedOptimizer"])
def test_optimizer_arguments_are_refused_with_their_values(hvd, wrapper):
    """A value the wrapper cannot use is refused when wrapping, naming the argument, the
    value and what it must be: a float or a string of backward passes used to run as
    something else (1.5 never reached a reduction in the hooks), a predivide factor of 0
    failed at the first step with a bare ZeroDivisionError, stage=True ran stage 1."""
    model = torch.nn.Linear(4, 3)
    wrap = getattr(hvd, wrapper)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)

    def refused(pattern, **kwargs):
        with pytest.raises(ValueError, match=pattern):
            wrap(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)

    for passes in (0, -1, "2", 1.5, True):
        refused(rf"{wrapper}: backward_passes_per_step must be a positive integer, got "
                rf"{passes!r}", backward_passes_per_step=passes)
    for factor in (0.0, -1.0, float("nan"), "x", None):
        refused(rf"{wrapper}: gradient_predivide_factor must be a positive number, got "
                rf"{factor!r}", gradient_predivide_factor=factor)
    refused(rf"{wrapper}: gradient_predivide_factor 2.0 is supported with op=Average only, "
            r"got op=Sum", gradient_predivide_factor=2.0, op=hvd.Sum)
    if wrapper == "ShardedOptimizer":
        for stage in (True, 2.0, "2", 3, 0):
            refused(rf"ShardedOptimizer: stage must be 1 or 2, got {stage!r}", stage=stage)
        refused(r"ShardedOptimizer: op must be Average or Sum, got Max", op=hvd.Max)
        other = torch.nn.Linear(4, 3)  # its own hooks: not the model's below
        assert wrap(torch.optim.SGD(other.parameters(), lr=0.1), stage=np.int64(1)).stage == 1

    opt = wrap(sgd, backward_passes_per_step=np.int64(2), gradient_predivide_factor=1)
    assert opt.backward_passes_per_step == 2 and type(opt.backward_passes_per_step) is int
    for passes in (0, 2.5):
        with pytest.raises(ValueError, match=rf"set_backward_passes_per_step: "
                                             rf"backward_passes_per_step must be a positive "
                                             rf"integer, got {passes!r}"):
            opt.set_backward_passes_per_step(passes)
    assert opt.backward_passes_per_step == 2  # a refused value changes nothing
    opt.set_backward_passes_per_step(1)
    model(torch.ones(2, 4)).sum().backward()
    opt.step()  # one pass is now a whole step


@pytest.mark.parametrize("first,second", [("DistributedOptimizer", "DistributedOptimizer"),
                                          ("ShardedOptimizer", "ShardedOptimizer"),
                                          ("DistributedOptimizer", "ShardedOptimizer"),
                                          ("ShardedOptimizer", "DistributedOptimizer")])
def test_parameters_wrapped_again_are_taken_over(hvd, first, second):
    """A notebook cell run again wraps the same model's parameters a second time: both
    wrappers' hooks fired, each submitting the gradient under the parameter's name, and
    backward failed ("already in flight"). The later wrapper takes them over: it trains
    as if it were the only one, the earlier one's step names what it lost, and the
    earlier one is no longer kept alive by its hooks."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    reference = torch.nn.Linear(4, 3)
    reference.load_state_dict(model.state_dict())
    wrap = {"first": getattr(hvd, first), "second": getattr(hvd, second)}
    old = wrap["first"](torch.optim.SGD(model.parameters(), lr=0.1),
                        named_parameters=model.named_parameters())
    new = wrap["second"](torch.optim.SGD(model.parameters(), lr=0.1),
                         named_parameters=model.named_parameters())
    plain = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.full((2, 4), float(hvd.rank() + 1))
    for step in range(3):
        new.zero_grad()
        model(x).sum().backward()
        new.step()
        plain.zero_grad()
        reference(x).sum().backward()
        for name, p in reference.named_parameters():
            p.grad = hvd.allreduce(p.grad, name=f"again.{name}.{step}")
        plain.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    with pytest.raises(RuntimeError, match=rf"{first}: parameter '(weight|bias)' and 1 "
                                           rf"more was wrapped again by a later {second}"):
        old.step()
    gone = weakref.ref(new)
    wrap["first"](torch.optim.SGD(model.parameters(), lr=0.1),
                  named_parameters=model.named_parameters())
    del new
    gc.collect()
    assert gone() is None, "a wrapper taken over is kept alive by its hooks"


def test_a_wrapper_that_reduces_nothing_is_taken_over_too(hvd, process_sets):
    """DistributedOptimizer over a set of one rank (with 2 ranks) or on a rank outside
    its set (rank 1 of 3) reduces nothing and hooks nothing: a later wrapper took its
    parameters without marking it, and stepping it updated them a second time with the
    local gradient. It claims them as any wrapper does, and its step names them."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    old = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   process_set=process_sets[0])
    new = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    new.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    new.step()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match=r"DistributedOptimizer: parameter '(weight|bias)' "
                                           r"and 1 more was wrapped again by a later "
                                           r"DistributedOptimizer"):
        old.step()
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_adasum_refusals_are_catchable_as_horovod_scripts_catch_them(hvd):
    # Horovod's test_horovod_reducescatter_adasum catches RuntimeError.
    with pytest.raises(hvd.HorovodInternalError, match="Adasum applies to allreduce only"):
        hvd.reducescatter(torch.ones(2 * hvd.size()), op=hvd.Adasum)
    with pytest.raises(ValueError, match="Adasum needs a floating-point tensor"):
        hvd.grouped_allreduce_async([torch.ones(2, dtype=torch.int64)], op=hvd.Adasum)


def test_tensors_on_other_devices_name_the_devices_accord_takes(hvd):
    t = torch.ones(2, device="meta")
    taken = "cpu and cuda" if hvd.cuda_built() else "cpu"
    for call in (lambda: hvd.allreduce(t), lambda: hvd.allgather(t),
                 lambda: hvd.broadcast_(t, 0), lambda: hvd.alltoall(t)):
        with pytest.raises(NotImplementedError, match=f"meta.*takes tensors on {taken} only"):
            call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")
def test_gpu_tensors_without_the_gpu_path_say_so(hvd):
    if hvd.cuda_built():
        pytest.skip("this build has the GPU path (test_cuda.py)")
    t = torch.ones(2, device="cuda")
    with pytest.raises(NotImplementedError, match="no GPU path"):
        hvd.allreduce(t)


def test_build_and_topology_queries(hvd):
    assert hvd.mpi_built() and hvd.mpi_enabled() and hvd.is_initialized()
    # What CMake found, passed on by the test's environment (tests/bindings/python/CMakeLists.txt).
    expected = os.environ.get("ACCORD_TEST_BUILT_CUDA_NCCL")
    if expected is not None:
        cuda, nccl = (flag == "1" for flag in expected.split(","))
        assert (hvd.cuda_built(), bool(hvd.nccl_built())) == (cuda, nccl)
    assert hvd.cuda_built() or not hvd.nccl_built()
    # As Horovod's: NCCL's version code (2.7.0 is 2700; from 2.9, 20900 and up), else 0.
    assert hvd.nccl_built() == 0 or hvd.nccl_built() >= 2700
    assert not (hvd.rocm_built() or hvd.gloo_built() or hvd.gloo_enabled() or hvd.ccl_built()
                or hvd.ddl_built())
    assert hvd.mpi_threads_supported() in (True, False)
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert hvd.cross_size() * hvd.local_size() == hvd.size()  # one host in the tests
    assert hvd.cross_rank() == 0 and hvd.local_rank() == hvd.rank()
    assert hvd.is_homogeneous()


def test_elastic_has_horovods_names(hvd):
    # Elastic training itself is tested in tests/elastic (restarts need a launcher).
    from accord.torch.elastic import TorchState  # noqa: F401
    for name in ("run", "State", "ObjectState", "TorchState", "ElasticSampler",
                 "HostsUpdatedInterrupt", "HorovodInternalError"):
        assert hasattr(hvd.elastic, name), name
    assert issubclass(hvd.CommError, hvd.elastic.HorovodInternalError)


BEFORE_INIT = """
import accord.{module} as acc
from accord.errors import NotInitializedError
try:
    acc.{call}
except NotInitializedError as e:
    print(e)
"""


TORCH_INIT = "call hvd.init() (accord.torch.init()) first"


@pytest.mark.parametrize("module,call,init", [
    ("torch", "allreduce(__import__('torch').ones(2))", TORCH_INIT),
    ("torch", "rank()", TORCH_INIT),
    ("torch", "mpi_threads_supported()", TORCH_INIT),  # a message of the bindings' own
    ("numpy", "size()", "call accord.numpy.init() first")])
def test_calls_before_init_name_the_python_init(hvd, module, call, init):
    """In a process of its own, which never calls init()."""
    if hvd.rank() != 0:
        return
    p = subprocess.run([sys.executable, "-c", BEFORE_INIT.format(module=module, call=call)],
                       capture_output=True, text=True, timeout=60)
    name = call.split("(")[0]
    assert p.stdout.strip() == f"{name}: Accord is not initialized; {init}", p.stdout + p.stderr

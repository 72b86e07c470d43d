"""What the sharded optimizer's tests share: a model with uneven, frozen and sometimes
unused parameters, its data, its optimizers, and training it with DistributedOptimizer
(stage 0) or ShardedOptimizer (stages 1 and 2)."""

import pytest
import torch

import accord.torch as hvd_module

STEPS = 20
ROWS = 6  # per step, over all ranks: divides by 1, 2 and 3


class Net(torch.nn.Module):
    """Parameters whose sizes do not divide by 2 or 3 (one has a single element, which
    some ranks hold none of), a frozen layer, and a branch used on some steps only."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(7, 5)
        self.frozen = torch.nn.Linear(5, 5)
        self.frozen.requires_grad_(False)
        self.last = torch.nn.Linear(5, 3)
        self.branch = torch.nn.Linear(7, 3)
        self.scale = torch.nn.Parameter(torch.tensor([1.5]))

    def forward(self, x, step):
        h = torch.tanh(self.frozen(torch.tanh(self.first(x))))
        out = self.last(h) * self.scale
        if step % 3 == 0:
            out = out + self.branch(x)
        return out


needs_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and hvd_module.cuda_built()),
                               reason="needs a GPU and a build with the GPU path")


def needs_two_ranks_for_the_reference(hvd):
    """The reference, DistributedOptimizer, is a plain optimizer on one rank: it leaves a
    parameter without a gradient alone, where ShardedOptimizer steps it on zeros, as
    both do on two or more ranks (so that a checkpoint continues on any number)."""
    if hvd.size() == 1:
        pytest.skip("alone, the reference leaves the unused branch alone")


def this_ranks_gpu(hvd):
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def make_model(dtype=torch.float32):
    torch.manual_seed(3)
    return Net().to(dtype)


def batch(step, dtype=torch.float32, process_set=None, hvd=None):
    """This rank's rows of step ``step``'s global batch."""
    g = torch.Generator().manual_seed(500 + step)
    x = torch.randn(ROWS, 7, generator=g, dtype=torch.float64).to(dtype)
    y = torch.randn(ROWS, 3, generator=g, dtype=torch.float64).to(dtype)
    n, me = process_set.size(), process_set.rank()
    rows = ROWS // n
    return x[me * rows:(me + 1) * rows], y[me * rows:(me + 1) * rows]


def make_optimizer(kind, model):
    groups = [{"params": [*model.first.parameters(), *model.frozen.parameters(),
                          model.scale]},
              {"params": [*model.last.parameters(), *model.branch.parameters()], "lr": 0.02}]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.01)
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=0.01, weight_decay=0.05)
    if kind in ("adamw-fused", "adamw-forloop"):
        flag = {"fused": True} if kind == "adamw-fused" else {"foreach": False}
        return torch.optim.AdamW(groups, lr=0.01, weight_decay=0.05, **flag)
    if kind == "sgd-fused":
        return torch.optim.SGD(groups, lr=0.05, momentum=0.9, weight_decay=0.01, fused=True)
    return getattr(torch.optim, kind)(groups, lr=0.01)


def wrap(hvd, opt, model, stage, process_set=None, **kwargs):
    process_set = process_set or hvd.global_process_set
    if stage == 0:
        return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                        process_set=process_set, **kwargs)
    return hvd.ShardedOptimizer(opt, named_parameters=model.named_parameters(), stage=stage,
                                process_set=process_set, **kwargs)


def train(hvd, kind, stage, steps=STEPS, dtype=torch.float32, process_set=None, model=None,
          opt=None, first_step=0, clip=None, passes=1, device="cpu", **kwargs):
    """Stage 0 is DistributedOptimizer. Returns (model, optimizer)."""
    process_set = process_set or hvd.global_process_set
    if model is None:
        model = make_model(dtype).to(device)
        opt = wrap(hvd, make_optimizer(kind, model), model, stage, process_set,
                   backward_passes_per_step=passes, **kwargs)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.5)
    for step in range(first_step, first_step + steps):
        opt.zero_grad()
        for k in range(passes):
            x, y = (t.to(device) for t in batch(step * passes + k, dtype, process_set))
            torch.nn.functional.mse_loss(model(x, step).float(), y.float()).backward()
        if clip is not None:
            if stage == 0:
                opt.synchronize()
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            else:
                opt.clip_grad_norm_(clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        sched.step()
    return model, opt


def params(model):
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters()}


def assert_close(actual, expected, exact):
    for name, e in expected.items():
        a = actual[name]
        if exact:
            assert torch.equal(a, e), f"{name}: max difference {(a - e).abs().max().item()}"
        else:
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


_REFERENCE = {}


def reference(hvd, kind, **kwargs):
    key = (kind, tuple(sorted(kwargs.items())))
    if key not in _REFERENCE:
        _REFERENCE[key] = params(train(hvd, kind, 0, **kwargs)[0])
    return _REFERENCE[key]


def state_tensors(opt):
    """The optimizer state's tensors that are per element (not Adam's step count)."""
    return [v for s in opt.state.values() for v in s.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0]

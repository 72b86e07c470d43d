"""ShardedOptimizer: the optimizer state sharded over the ranks (ZeRO stage 1), and
with stage 2 the gradients too, behind DistributedOptimizer's interface.

Every trainable parameter is cut, as a flat vector, into one contiguous part per rank by
the reduce-scatter's own rule (the first ``numel % size`` ranks get one element more),
so the cut follows from the parameter list alone: every rank knows every rank's part
without asking, and each rank holds 1/N of every parameter's bytes to within one element.
The wrapped optimizer steps only this rank's parts ("pieces"): a view into the
parameter itself, or an fp32 master copy for fp16/bf16 parameters. That is exact for
optimizers that update each element from that element's own state (SGD, Adam, AdamW,
RMSprop, ... every torch.optim optimizer but LBFGS, SparseAdam and Adafactor, which are
refused).

A step: each gradient is reduce-scattered the moment backward finalises it (a hook, as
DistributedOptimizer starts its allreduces; the runtime fuses them into buffers), each
rank steps its pieces with its part of the reduced gradient, in rounds, and each
round's allgather brings every rank that round's updated parameters while the next
round is stepped. Stage 1 leaves ``p.grad`` (this rank's local
gradient) in place; stage 2 lets go of it once its reduce-scatter has started, so after
backward a rank holds only its part of the reduced gradients.

The gradients' side (the hooks, synchronize(), clip_grad_norm_) is in sharded_reduce.py;
the cut and the check that every rank cuts the same parameters in sharded_cut.py;
checkpoints (state_dict in torch's own format, or one shard per rank, loadable on any
number of ranks) in sharded_state.py.
"""

from collections import defaultdict

import torch

from accord.basics import (Adasum, Average, Sum, as_integer, global_process_set, op_name,
                           resolve_op, synchronize)
from accord.torch import sharded_state
from accord.torch.compression import Compression
from accord.torch.functions import broadcast_object
from accord.torch.gather import grouped_allgather_into
from accord.torch.grad_hooks import check_not_taken_over, on_grad_ready
from accord.torch.optimizer_args import checked_passes, checked_predivide
from accord.torch.param_names import names_of as _names_of
from accord.torch.sharded_cut import Shard, check_same_parameters
from accord.torch.sharded_reduce import _ReduceScatterMixin


def _refused_types():
    """Optimizers whose update of an element depends on more than that element: LBFGS
    keeps one state for all parameters together, SparseAdam needs sparse gradients,
    Adafactor factors each matrix's second moment by rows and columns."""
    names = ("LBFGS", "SparseAdam", "Adafactor")
    return tuple(getattr(torch.optim, n) for n in names if hasattr(torch.optim, n))


class _ShardedMixin(_ReduceScatterMixin):
    """Placed before the optimizer's class in the wrapped object's MRO."""

    # torch's GradScaler.step() then hands the step to step() (setting grad_scale and
    # found_inf, or passing grad_scaler=) instead of unscaling p.grad itself, which here
    # is this rank's local gradient (stage 1) or None (stage 2), not the reduced one:
    # step() refuses it. ShardedGradScaler (sharded_scaler.py) steps through
    # _synchronize_once(), _reduced_parts() and _skip_step() instead.
    _step_supports_amp_scaling = True

    def _sharded_setup(self, original, named_parameters, stage, compression,
                       backward_passes_per_step, op, gradient_predivide_factor, process_set):
        self.stage = stage
        self._original = original
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        self.process_set = process_set
        params = [p for group in self.param_groups for p in group["params"]]
        if len({id(p) for p in params}) != len(params):
            raise ValueError("ShardedOptimizer: a parameter appears twice in param_groups")
        self._parameter_names = _names_of(named_parameters, self.param_groups, params)
        size, rank = process_set.size(), process_set.rank()
        check_same_parameters(self.param_groups, self._parameter_names, process_set)
        self._shards, index = [], 0
        for g, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.requires_grad:
                    self._shards.append(Shard(p, self._parameter_names[p], index, g, rank,
                                               size))
                index += 1
        self._inner = self._make_inner(original)
        self._rounds = _rounds(self._shards)
        self.state = self._inner.state  # this rank's pieces' state only
        self._handles = {}  # shard -> (handle, compression context)
        self._reduced = {}  # shard -> its part of the reduced gradient, or the failure
        self._delay = {s: backward_passes_per_step for s in self._shards}
        self._grad_accs = [on_grad_ready(s.param, self._make_hook(s), self, "ShardedOptimizer")
                           for s in self._shards]
        self._synchronized = False
        self._should_synchronize = True
        self._state_checked = False
        self._consolidated = None
        self._unsharded = self._frozen_at_wrapping()

    def _make_inner(self, original):
        """The optimizer that steps this rank's pieces: a shallow copy of the wrapped one
        (its class, defaults and hooks) with groups of pieces and a state of its own."""
        inner = type(original).__new__(type(original))
        inner.__dict__.update({k: v for k, v in vars(original).items()
                               if k not in ("step", "zero_grad", "state", "param_groups")})
        inner.param_groups = [
            {**{k: v for k, v in group.items() if k != "params"},
             "params": [s.piece for s in self._shards if s.group == g and s.count]}
            for g, group in enumerate(self.param_groups)]
        inner.state = defaultdict(dict)
        return inner

    # ---- the step ----------------------------------------------------------------------
    def step(self, closure=None, **kwargs):
        unknown = sorted(set(kwargs) - {"grad_scaler"})  # PyTorch 1.13's GradScaler
        if unknown:
            raise TypeError(f"ShardedOptimizer.step() got unexpected keyword arguments "
                            f"{unknown}")
        check_not_taken_over(self, "ShardedOptimizer")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._should_synchronize and not self._synchronized:
            self.synchronize()
        elif not self._synchronized:
            raise AssertionError("ShardedOptimizer: step() inside skip_synchronize() needs "
                                 "synchronize() or clip_grad_norm_() first")
        self._synchronized = False
        self._consolidated = None  # it would no longer be this step's
        if kwargs or hasattr(self, "grad_scale") or hasattr(self, "found_inf"):
            raise TypeError(
                "ShardedOptimizer needs accord.torch.ShardedGradScaler in place of torch's "
                "GradScaler (it takes the same arguments): torch's checks and unscales "
                "p.grad, but no rank holds the whole reduced gradient there, and an inf on "
                "one rank must skip the step on all of them")
        self._check_frozen_stay_frozen()
        for s in self._shards:
            s.reseed_if_changed()
        for group, inner in zip(self.param_groups, self._inner.param_groups):
            inner.update({k: v for k, v in group.items() if k != "params"})
        self._step_and_gather()
        if not self._state_checked:
            self._check_state_per_element()
        self._count_for_scheduler()
        return loss

    def _count_for_scheduler(self):
        """An LR scheduler made for the optimizer before it was wrapped replaced its
        step with one that counts the steps, and warns about the call order from that
        count. Calling it would step the whole parameters with this rank's gradients,
        so the step is counted as it counts it (PyTorch 2: _opt_called; 1.13:
        _step_count)."""
        counting = vars(self._original).get("step")
        if getattr(counting, "_wrapped_by_lr_sched", False):
            self._original._opt_called = True
        if getattr(counting, "_with_counter", False):
            self._original._step_count += 1

    def _check_state_per_element(self):
        pieces = {id(s.piece): s for s in self._shards}
        for key, values in self._inner.state.items():
            s = pieces.get(id(key))
            bad = [k for k, v in values.items() if isinstance(v, torch.Tensor) and v.dim() > 0
                   and s is not None and tuple(v.shape) != tuple(s.piece.shape)]
            if s is None or bad:
                raise TypeError(
                    f"ShardedOptimizer: {type(self._inner).__name__} keeps state that is not "
                    f"per element of each parameter ({'key ' + str(bad) if bad else 'a key'} "
                    "that no parameter's part matches), so it cannot be sharded; use "
                    "DistributedOptimizer")
        self._state_checked = True

    def _step_and_gather(self):
        """Steps this rank's pieces round by round, starting each round's allgather as
        soon as it is stepped, so that the background thread gathers one round while
        this thread steps the next; then writes the gathered parameters."""
        groups = self._inner.param_groups
        everything = [group["params"] for group in groups]
        gathers = []
        try:
            for r, shards in enumerate(self._rounds):
                for g, group in enumerate(groups):
                    group["params"] = [s.piece for s in shards if s.group == g and s.count]
                self._inner.step()
                parts = [s.piece.detach().to(s.param.dtype) for s in shards]
                if self.process_set.size() > 1:
                    # A parameter that is not contiguous (channels_last) is gathered
                    # into a flat copy of known size, written back below.
                    outputs = [s.gathered if s.gathered is not None else
                               torch.empty(s.param.numel(), dtype=s.param.dtype,
                                           device=s.param.device) for s in shards]
                    parts = grouped_allgather_into(parts, outputs, name=f"sharded.params.{r}",
                                                   process_set=self.process_set)
                gathers.append((shards, parts))
        except BaseException:
            for _, parts in gathers:  # let go of the rounds already started
                if not isinstance(parts, list):
                    try:
                        synchronize(parts)
                    except Exception:  # the first failure is the one to raise
                        pass
            raise
        finally:
            for group, params in zip(groups, everything):
                group["params"] = params
        with torch.no_grad():
            for shards, parts in gathers:
                full = parts if isinstance(parts, list) else synchronize(parts)
                for s, flat in zip(shards, full):
                    if flat.data_ptr() != s.param.data_ptr():  # not gathered in place
                        s.param.copy_(flat.view(s.param.shape))
                    s.version = s.param._version

    def zero_grad(self, *args, **kwargs):
        if self._handles or self._reduced:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the pending reduce-scatters "
                "still read the gradients")
        for s in self._shards:
            s.piece.grad = None
        return super().zero_grad(*args, **kwargs)

    def add_param_group(self, param_group):
        """Adds a group as torch's optimizers do (an LR scheduler or an unfrozen layer
        in fine-tuning): a collective, called on every rank of the process set with the
        same parameters, which are checked, cut and hooked as the first ones were."""
        if self._handles or self._reduced:
            raise AssertionError(
                "ShardedOptimizer.add_param_group() was called between loss.backward() and "
                "optimizer.step(): add groups before backward or after the step")
        super().add_param_group(param_group)  # torch checks it and fills in the defaults
        g = len(self.param_groups) - 1
        group = self.param_groups[g]
        for j, p in enumerate(group["params"]):
            self._parameter_names.setdefault(p, f"sharded.noname.{g}.{j}")
        try:
            check_same_parameters(self.param_groups, self._parameter_names, self.process_set)
        except Exception:
            self.param_groups.pop()  # as it was: the ranks disagree on the new group
            raise
        index = sum(len(x["params"]) for x in self.param_groups[:g])
        rank, size = self.process_set.rank(), self.process_set.size()
        new = [Shard(p, self._parameter_names[p], index + j, g, rank, size)
               for j, p in enumerate(group["params"]) if p.requires_grad]
        self._shards.extend(new)
        self._inner.param_groups.append(
            {**{k: v for k, v in group.items() if k != "params"},
             "params": [s.piece for s in new if s.count]})
        self._rounds = _rounds(self._shards)
        for s in new:
            self._delay[s] = self.backward_passes_per_step
            self._grad_accs.append(on_grad_ready(s.param, self._make_hook(s), self,
                                                 "ShardedOptimizer"))
        self._unsharded = self._frozen_at_wrapping()
        self._state_checked = False

    def _frozen_at_wrapping(self):
        sharded = {id(s.param) for s in self._shards}
        return [p for group in self.param_groups for p in group["params"]
                if id(p) not in sharded]

    def _check_frozen_stay_frozen(self):
        """A parameter frozen when it was wrapped has no part on any rank: a gradient it
        got since (requires_grad set later) would be dropped without a word."""
        for p in self._unsharded:
            if p.requires_grad and p.grad is not None:
                name = self._parameter_names.get(p, "a parameter")
                raise ValueError(
                    f"ShardedOptimizer: parameter '{name}' (shape {list(p.shape)}) has a "
                    "gradient, but it was frozen (requires_grad=False) when the optimizer was "
                    "wrapped, so no rank holds a part of it and the step would ignore it: set "
                    "requires_grad before wrapping, or add unfrozen parameters in a new group "
                    "with optimizer.add_param_group()")

    def set_backward_passes_per_step(self, passes):
        passes = checked_passes(passes, "set_backward_passes_per_step")
        self.backward_passes_per_step = passes
        for s in self._delay:
            self._delay[s] = passes

    # ---- checkpoints (sharded_state.py) -------------------------------------------------
    def broadcast_state(self, root_rank):
        """What broadcast_optimizer_state does for a sharded optimizer: root's
        hyperparameters to every rank. Each rank's state is its own part, so it is not
        sent: a checkpoint is loaded on every rank (load_state_dict keeps each rank's
        part of the whole)."""
        hyper = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        hyper = broadcast_object(hyper, root_rank, name="sharded.hyperparameters",
                                 process_set=self.process_set)
        for group, values in zip(self.param_groups, hyper):
            group.update(values)

    def consolidate_state_dict(self, to=0):
        """Collective: gathers the whole optimizer state, in torch's own format, to rank
        ``to`` of the process set, where state_dict() then returns it."""
        self._consolidated = sharded_state.consolidate(self, to)

    def state_dict(self):
        """The state consolidate_state_dict() gathered to this rank (torch's format: a
        plain optimizer of the same class loads it, as does a ShardedOptimizer on any
        number of ranks). Not a collective, so that rank 0 alone may save it."""
        if self._consolidated is None:
            raise RuntimeError(
                "ShardedOptimizer.state_dict(): no rank holds the whole state; call "
                "optimizer.consolidate_state_dict(to=r) on every rank first, then "
                "state_dict() on rank r (or save optimizer.sharded_state_dict() on each rank)")
        return self._consolidated

    def sharded_state_dict(self):
        """This rank's part of the state, with the cut it was taken with: save one per
        rank; load_sharded_state_dict() takes all of them, on any number of ranks."""
        return sharded_state.local_shard(self)

    def load_state_dict(self, state_dict):
        """Loads a state in torch's format (from state_dict(), or from a plain or
        DistributedOptimizer of the same class); every rank keeps its own part."""
        sharded_state.load_full(self, state_dict)

    def load_sharded_state_dict(self, shards):
        """Loads the list of every rank's sharded_state_dict(), taken on any number of
        ranks; every rank keeps its own part."""
        sharded_state.load_shards(self, shards)


# Pieces are stepped and gathered in rounds of about this many bytes (of this rank's
# parts), a few per model: small enough that gathering one round overlaps stepping the
# next, large enough that each allgather still fuses into big buffers.
_ROUND_BYTES = 16 << 20


def _rounds(shards):
    rounds, current, size = [], [], 0
    for s in shards:
        current.append(s)
        size += s.count * s.piece.element_size()
        if size >= _ROUND_BYTES:
            rounds.append(current)
            current, size = [], 0
    return rounds + [current] if current else rounds


def ShardedOptimizer(optimizer, named_parameters=None, stage=2, compression=Compression.none,
                     backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                     process_set=global_process_set):
    """Returns ``optimizer`` wrapped so that each rank of ``process_set`` keeps the state
    of its part of every parameter only (stage 1), and with ``stage=2`` only its part of
    the reduced gradients too. Gradients are reduced with ``op`` (Average or Sum); the
    other arguments are DistributedOptimizer's."""
    given = stage
    stage = as_integer(stage, "ShardedOptimizer: stage must be 1 or 2")
    if stage not in (1, 2):
        raise ValueError(f"ShardedOptimizer: stage must be 1 or 2, got {given!r}")
    if op == Adasum:
        raise NotImplementedError("ShardedOptimizer: Adasum cannot be reduce-scattered; use "
                                  "op=Average or Sum")
    op = resolve_op(op, None, "ShardedOptimizer")
    if op not in (Average, Sum):
        raise ValueError(f"ShardedOptimizer: op must be Average or Sum, got {op_name(op)}")
    gradient_predivide_factor = checked_predivide(gradient_predivide_factor, op,
                                                  "ShardedOptimizer")
    backward_passes_per_step = checked_passes(backward_passes_per_step, "ShardedOptimizer")
    if isinstance(optimizer, _ShardedMixin):
        raise ValueError("ShardedOptimizer: the optimizer is already sharded")
    if getattr(optimizer, "_accord_wrapper", False):
        raise ValueError("ShardedOptimizer: wrap the plain torch optimizer, not a "
                         "DistributedOptimizer")
    if isinstance(optimizer, _refused_types()):
        raise TypeError(
            f"ShardedOptimizer: {type(optimizer).__name__} cannot be sharded: its update of "
            "each element depends on more than that element's own state (LBFGS keeps one "
            "state for all parameters, SparseAdam needs sparse gradients, Adafactor factors "
            "whole matrices); use DistributedOptimizer")
    if not process_set.included():
        raise ValueError("ShardedOptimizer: this rank is not in the process set")
    base = type(optimizer)
    cls = type(base.__name__, (_ShardedMixin, base), {"__module__": base.__module__})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update({k: v for k, v in optimizer.__dict__.items()
                             if k not in ("step", "zero_grad", "state")})
    wrapped.state = optimizer.state
    existing = optimizer.state_dict() if len(optimizer.state) else None
    wrapped._sharded_setup(optimizer, named_parameters, stage, compression,
                           backward_passes_per_step, op, gradient_predivide_factor, process_set)
    if existing is not None:  # a resumed optimizer: keep only this rank's part
        wrapped.load_state_dict(existing)
        optimizer.state.clear()
    return wrapped

"""DistributedOptimizer: wraps a torch optimizer so that every gradient is averaged
over the ranks before the step, Horovod's way.

A hook on each parameter starts that parameter's asynchronous allreduce the moment its
gradient is final, so communication overlaps the rest of backward; step() first waits
for them all. The wrapped object is an instance of a subclass of the optimizer's own
class (same name, same behaviour) sharing the optimizer's state, param groups and
hyperparameters: the objects themselves, which loading a state dict updates in place
rather than replaces, so that an LR scheduler made for either object drives both.
"""

import warnings
from contextlib import contextmanager

import torch

from accord.basics import Adasum, Average, global_process_set, resolve_op, synchronize
from accord.errors import MismatchError
from accord.torch.adasum import adasum_optimizer
from accord.torch.allreduce import allreduce_async_, grouped_allreduce_async_
from accord.torch.compression import Compression
from accord.torch.functions import load_state_dict_in_place
from accord.torch.grad_groups import parameter_groups
from accord.torch.grad_hooks import check_not_taken_over, claim, on_grad_ready, take_over
from accord.torch.optimizer_args import checked_passes, checked_predivide
from accord.torch.param_names import names_of as _names_of
from accord.torch.sparse import SparseGradient, empty_gradient, in_layout, zeros_met_sparse


class _DistributedMixin:
    """Placed before the optimizer's class in the wrapped object's MRO."""

    _accord_wrapper = True  # as on adasum.py's mixin: already distributed

    def _accord_setup(self, original, named_parameters, compression, backward_passes_per_step,
                      op, gradient_predivide_factor, groups, sparse_as_dense, process_set):
        # Attributes under the names Horovod's wrapper gives them, which scripts (and
        # Horovod's own tests) read: op, gradient_predivide_factor, sparse_as_dense,
        # process_set, backward_passes_per_step, _parameter_names (parameter -> name),
        # _allreduce_delay (parameter -> backward passes left before its allreduce),
        # _handles, _grad_accs, _requires_update, _synchronized, _should_synchronize,
        # _groups, _p_to_group and _group_counts.
        self._original = original
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names = _names_of(named_parameters, self.param_groups, params)
        self._allreduce_delay = {p: backward_passes_per_step for p in params}
        self._handles = {}  # parameter, or tuple of a group's parameters -> (handle, ctx)
        self._grad_accs = []
        self._requires_update = []
        self._groups = groups
        self._p_to_group = {}  # parameter -> the tuple of its group's parameters
        self._group_counts = {}  # group -> parameters whose gradient is ready
        self._group_ready = {}  # group -> how many it waits for in this step
        self._sparse_dims = {}  # parameter -> sparse dimensions, once seen sparse here
        self._sparse_checked = set()  # parameters whose sparse gradient was reduced once
        self._sent_zeros = set()  # parameters without a gradient here in this step
        self._synchronized = False
        self._should_synchronize = True
        self._distributed = bool(process_set.included()) and process_set.size() > 1
        if self._distributed:
            self._requires_update = [p for p in params if p.requires_grad]
            for group in parameter_groups(groups, self._requires_update):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0
            for p in self._requires_update:
                self._grad_accs.append(on_grad_ready(p, self._make_hook(p), self,
                                                     "DistributedOptimizer"))
        else:
            for p in params:
                if p.requires_grad:
                    claim(p, self, "DistributedOptimizer")
                else:
                    take_over(p, self, "DistributedOptimizer")
        # Parameters without a hook: frozen ones, and any added to param_groups later
        # (listed again when the groups' sizes change, as add_param_group does).
        self._hooked = set(self._requires_update)
        self._group_sizes = [len(g["params"]) for g in self.param_groups]
        self._unhooked = [p for p in params if p not in self._hooked]

    # ---- submission -------------------------------------------------------------------
    def _scale_factors(self):
        if self.op == Average:
            # The runtime divides by the set size after the sum; predividing splits it.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # No gradient on this rank (an unused branch): the others may have one, and
            # every rank must submit the same collectives under the same names: an empty
            # sparse gradient where this rank has had it sparse, else zeros.
            sparse_dim = self._sparse_dims.get(p)
            p.grad = torch.zeros_like(p) if sparse_dim is None else empty_gradient(p, sparse_dim)
            self._sent_zeros.add(p)
        name = self._parameter_names[p]
        grad = p.grad
        if grad.is_sparse:
            grad = in_layout(p, grad, self._sparse_dims.setdefault(p, grad.sparse_dim()))
            if not self.sparse_as_dense:
                return SparseGradient(grad, name, self.op, self.process_set,
                                      p in self._sparse_checked), None
            grad = grad.to_dense()
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, (compressed, ctx)

    def _grouped_allreduce_grad_async(self, group):
        members = [p for p in group if not _frozen(p)]
        for p in members:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        compressed = [(p, *self._compression.compress(p.grad)) for p in members]
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_([c for _, c, _ in compressed],
                                          name=self._parameter_names[group[0]],
                                          op=self.op, prescale_factor=pre,
                                          postscale_factor=post, process_set=self.process_set)
        return handle, compressed

    def _make_hook(self, p):
        def hook(*_):
            last = _count_pass(self._allreduce_delay, p)
            group = self._p_to_group.get(p)
            if not last:
                # Accumulating locally. Pending for zero_grad(), and for synchronize()
                # if no later pass finishes it: a grouped parameter under its group's
                # key, which synchronize() submits, not its own.
                self._handles.setdefault(p if group is None else group, (None, None))
                return
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p)
                return
            self._group_counts[group] += 1
            if self._group_counts[group] == 1:
                # Members frozen now have no gradient to wait for (one holding a
                # gradient tensor still goes with the group, from synchronize()).
                self._group_ready[group] = sum(q.requires_grad for q in group)
            if self._group_counts[group] == self._group_ready[group]:
                self._handles[group] = self._grouped_allreduce_grad_async(group)
        return hook

    # ---- synchronization --------------------------------------------------------------
    def synchronize(self):
        """Waits for every gradient's allreduce, starting those that have not started
        (parameters without a gradient on this rank get zeros, but those frozen since
        wrapping, requires_grad=False, keep None), and writes the averaged gradients into
        ``p.grad``."""
        check_not_taken_over(self, "DistributedOptimizer")
        if not self._distributed:
            self._synchronized = True
            return
        for key in self._unsubmitted():
            submit = self._grouped_allreduce_grad_async if isinstance(key, tuple) \
                else self._allreduce_grad_async
            self._handles[key] = submit(key)
        error = None
        for key, (handle, ctx) in self._handles.items():
            try:
                self._finish(key, handle, ctx)
            except Exception as e:  # the other handles must still complete
                error = error or e
        self._handles.clear()
        self._sent_zeros.clear()
        for group in self._group_counts:
            self._group_counts[group] = 0
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        if error is not None:
            raise error
        self._check_no_unreduced_gradient()
        self._synchronized = True

    def _check_no_unreduced_gradient(self):
        """Raises if a parameter has a gradient that no hook reduced (it was added with
        add_param_group, or got requires_grad, after wrapping): stepping with it would
        make the ranks drift apart. Per step: the groups' sizes, and the gradient of
        each parameter that has no hook (none in most models)."""
        sizes = [len(g["params"]) for g in self.param_groups]
        if sizes != self._group_sizes:
            self._group_sizes = sizes
            self._unhooked = [p for g in self.param_groups for p in g["params"]
                              if p not in self._hooked]
        for p in self._unhooked:
            if p.grad is not None:
                raise ValueError(
                    f"DistributedOptimizer: {self._describe(p)} has a gradient but no allreduce "
                    "hook (it was added with add_param_group, or got requires_grad=True, after "
                    "the optimizer was wrapped), so its gradient differs between ranks. Wrap "
                    "the optimizer once its parameter groups and requires_grad are final")

    def _describe(self, p):
        where = next(f"param_groups[{i}]['params'][{j}]"
                     for i, g in enumerate(self.param_groups) for j, q in enumerate(g["params"])
                     if q is p)
        name = self._parameter_names.get(p)
        if name is None:
            return f"parameter {where} (shape {list(p.shape)})"
        return f"parameter '{name}' ({where}; shape {list(p.shape)})"

    def _unsubmitted(self):
        keys, seen = [], set()  # by id: tensors compare element-wise, not as keys
        for p in self._requires_update:
            group = self._p_to_group.get(p)
            key = p if group is None else group
            if id(key) in seen:
                continue
            seen.add(id(key))
            if self._handles.get(key, (None,))[0] is None and \
                    not all(_frozen(q) for q in group or (p,)):
                keys.append(key)
        return keys

    def _finish(self, key, handle, ctx):
        if ctx is None:  # sparse
            key.grad = handle.wait().coalesce()
            self._sparse_checked.add(key)
            return
        try:
            output = synchronize(handle)
        except MismatchError as e:
            if key in self._sent_zeros:
                raise zeros_met_sparse(self._parameter_names[key], e) from e
            raise
        if isinstance(key, tuple):
            for (p, _, c), reduced in zip(ctx, output):
                _write_grad(p, self._compression.decompress(reduced, c))
            return
        _write_grad(key, self._compression.decompress(output, ctx[1]), self.sparse_as_dense)

    @contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize: call synchronize() yourself before
        (for gradient clipping, or AMP's unscale_)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Steps on the averaged gradients. Those of a backward pass before step() are
        synchronized first; a ``closure`` is wrapped so that the gradients of each of
        its evaluations are synchronized before the optimizer reads them (LBFGS
        evaluates it several times). The loss it returns is this rank's own: for LBFGS,
        whose number of evaluations depends on the loss, return one averaged over the
        ranks (``hvd.allreduce(loss)``) so that every rank evaluates as often."""
        check_not_taken_over(self, "DistributedOptimizer")
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(): the gradients are reduced twice")
            if closure is None or self._handles:
                self.synchronize()
        if closure is not None:
            closure = self._synchronizing(closure)
        try:
            counting = vars(self._original).get("step")
            if counting is not None:
                # An LR scheduler made for the original optimizer replaced its step with
                # one that counts the steps (torch warns about the call order from that
                # count): stepping through it counts this one. It steps the original,
                # which holds the same param groups and state as this object.
                return counting(closure)
            return super().step(closure)
        finally:
            self._synchronized = False

    def _synchronizing(self, closure):
        """``closure``, followed by the synchronization of the gradients its backward
        pass computed: without it their allreduces would still be writing into
        ``p.grad`` while the optimizer reads it."""
        def evaluate():
            loss = closure()
            self.synchronize()
            return loss
        return evaluate

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the pending allreduces still "
                "write into the gradients")
        return super().zero_grad(*args, **kwargs)

    def load_state_dict(self, state_dict):
        """Loads as torch does, into the objects the original optimizer shares."""
        self._handles.clear()
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        load_state_dict_in_place(self, state_dict, super().load_state_dict)

    def set_backward_passes_per_step(self, passes):
        passes = checked_passes(passes, "set_backward_passes_per_step")
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes


def _frozen(p):
    """Frozen after wrapping (requires_grad=False) and without a gradient on this rank:
    not reduced, and left without one, so that the optimizer skips it as torch's do.
    Every rank must agree on it; where they do not, the others' allreduce stalls and the
    runtime's report names the parameter."""
    return not p.requires_grad and p.grad is None


def _write_grad(p, reduced, to_sparse=False):
    if to_sparse and p.grad.is_sparse:
        p.grad = reduced.to_sparse()
    elif reduced.data_ptr() != p.grad.data_ptr():
        p.grad.copy_(reduced)


def _count_pass(delays, key):
    """One more backward pass for ``key``: True once it is the last of
    backward_passes_per_step (the gradient then goes to be reduced). A pass beyond them
    is an error."""
    if delays[key] <= 0:
        raise AssertionError(
            "Gradients were computed more than backward_passes_per_step times before "
            "step(): increase backward_passes_per_step to accumulate them locally")
    delays[key] -= 1
    return delays[key] == 0



def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Returns ``optimizer`` wrapped so that step() uses gradients averaged (``op``) over
    the ranks of ``process_set``. Arguments as in Horovod:

    named_parameters: (name, parameter) pairs naming each allreduce (else generated).
    compression: Compression.none, .fp16 or .bf16 for the wire.
    backward_passes_per_step: backward passes accumulated locally per step().
    gradient_predivide_factor: with Average, divide by it before the sum and by
        size / factor after.
    groups: an int (that many grouped allreduces) or lists of parameters to reduce as
        one unit; num_groups is its deprecated name.
    sparse_as_dense: reduce sparse gradients as dense tensors.
    """
    op = resolve_op(op, None, "DistributedOptimizer")
    gradient_predivide_factor = checked_predivide(gradient_predivide_factor, op,
                                                  "DistributedOptimizer")
    if num_groups != 0:
        warnings.warn("num_groups is deprecated: use groups", DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if groups is not None and not isinstance(groups, list) and groups <= 0:
        raise ValueError("groups should be a positive integer or a list of lists of tensors")
    backward_passes_per_step = checked_passes(backward_passes_per_step, "DistributedOptimizer")
    if getattr(optimizer, "_accord_wrapper", False):
        raise ValueError("DistributedOptimizer: the optimizer is already distributed")
    if op == Adasum and process_set.included() and process_set.size() > 1:
        # Horovod's way: each rank steps on its own gradients and the steps are combined
        return adasum_optimizer(optimizer, named_parameters, compression,
                                backward_passes_per_step, process_set)
    base = type(optimizer)
    cls = type(base.__name__, (_DistributedMixin, base), {"__module__": base.__module__})
    wrapped = cls.__new__(cls)
    # The same state, param groups and hyperparameters: a scheduler made for the
    # original optimizer still drives the wrapped one. A step patched onto the instance
    # (by an early LR scheduler) would bypass synchronize(): leave it behind (step()
    # calls it after synchronizing).
    wrapped.__dict__.update({k: v for k, v in optimizer.__dict__.items()
                             if k not in ("step", "zero_grad")})
    wrapped._accord_setup(optimizer, named_parameters, compression, backward_passes_per_step,
                          op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return wrapped

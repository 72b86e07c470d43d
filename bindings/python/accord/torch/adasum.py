"""DistributedOptimizer(op=Adasum): each rank steps on its own gradients, and the steps
are combined with Adasum.

Adasum combines vectors, not gradients through an update rule: combining the gradients
and stepping once would lose what it is for, since momentum and Adam's scaling change
a gradient's direction and size. So, as Horovod does, every rank applies the wrapped
optimizer to its own gradients, takes the change it made to each parameter (the delta),
and the deltas are reduced with Adasum; every parameter then becomes its value before
the step plus the combined delta, the same on every rank.

Unlike Horovod's version, which steps each parameter in its gradient hook, during
backward, this one steps all of them in step(), once backward is over: one call of the
optimizer over every parameter (its foreach or fused path) rather than one per
parameter, and no parameter changes while autograd may still read it (a weight that
another layer shares, or saved through ``detach()``). The deltas' allreduces then go
out together and are fused like gradients.
"""

from contextlib import contextmanager

import torch

from accord.basics import Adasum, synchronize
from accord.torch.allreduce import allreduce_async_
from accord.torch.functions import load_state_dict_in_place
from accord.torch.param_names import names_of as _names_of


class _AdasumMixin:
    """Placed before the optimizer's class in the wrapped object's MRO."""

    _accord_wrapper = True

    def _accord_setup(self, original, named_parameters, compression, backward_passes_per_step,
                      process_set):
        # Horovod's attribute names where it has them: op, process_set,
        # backward_passes_per_step, _parameter_names, _requires_update, _starting_models.
        self._original = original
        self._compression = compression
        self.op = Adasum
        self.process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names = _names_of(named_parameters, self.param_groups, params)
        self._requires_update = [p for p in params if p.requires_grad]
        self._starting_models = {}  # parameter -> its value before the local step

    def synchronize(self):
        """Nothing to wait for: the deltas are reduced within step()."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("skip_synchronize() does not apply to DistributedOptimizer with "
                             "op=Adasum: it reduces the steps' deltas within step(), not the "
                             "gradients before it")
        yield  # unreached: makes this a generator, as contextmanager needs

    def _name(self, i, j, p):
        name = self._parameter_names.get(p)
        return name if name is not None else f"allreduce.noname.{i}.{j}"

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Every parameter that can train, in param_groups order (the same on every rank,
        # so the allreduces pair by name); one without a gradient here has a zero delta.
        params = [(self._name(i, j, p), p) for i, group in enumerate(self.param_groups)
                  for j, p in enumerate(group["params"]) if p.requires_grad]
        with torch.no_grad():
            starts = []
            for _, p in params:
                start = self._starting_models.get(p)
                if start is None or start.shape != p.shape or start.dtype != p.dtype:
                    start = self._starting_models[p] = torch.empty_like(p)
                start.copy_(p)
                starts.append(start)
            self._local_step()
            pending = []
            try:
                for (name, p), start in zip(params, starts):
                    p.sub_(start)  # p now holds this rank's delta
                    compressed, ctx = self._compression.compress(p)
                    handle = allreduce_async_(compressed, name=name, op=Adasum,
                                              process_set=self.process_set)
                    pending.append((p, start, handle, compressed, ctx))
            finally:
                error = self._finish(params, starts, pending)
            if error is not None:
                raise error
        return loss

    def _local_step(self):
        # Through the original's step where an LR scheduler replaced it with one that
        # counts steps (as _DistributedMixin.step does).
        counting = vars(self._original).get("step")
        if counting is not None:
            counting()
        else:
            super().step()

    def _finish(self, params, starts, pending):
        """Waits for every delta. On success each parameter is start + combined delta;
        if any allreduce failed, every parameter is put back as it was before the step
        (the step is lost on every rank alike, none is half applied) and the first error
        is returned."""
        error = None
        results = []
        for p, start, handle, compressed, ctx in pending:
            try:
                results.append((p, start, self._compression.decompress(
                    synchronize(handle), ctx)))
            except Exception as e:  # the other handles must still complete
                error = error or e
        if error is None and len(pending) == len(params):
            for p, start, delta in results:
                p.copy_(start.add_(delta.to(start.dtype)))
            return None
        for (_, p), start in zip(params, starts):
            p.copy_(start)
        return error

    def load_state_dict(self, state_dict):
        """Loads as torch does, into the objects the original optimizer shares."""
        load_state_dict_in_place(self, state_dict, super().load_state_dict)


def adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                     process_set):
    """DistributedOptimizer's Adasum branch (over a set of more than one rank)."""
    size = process_set.size()
    if size & (size - 1):
        raise ValueError(f"DistributedOptimizer(op=Adasum): Adasum needs a power-of-two number "
                         f"of ranks, and the process set has {size}; use op=Average, or a "
                         "process set of 2, 4, 8... ranks")
    base = type(optimizer)
    cls = type(base.__name__, (_AdasumMixin, base), {"__module__": base.__module__})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update({k: v for k, v in optimizer.__dict__.items()
                             if k not in ("step", "zero_grad")})
    wrapped._accord_setup(optimizer, named_parameters, compression, backward_passes_per_step,
                          process_set)
    return wrapped

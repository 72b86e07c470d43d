"""ShardedOptimizer's gradient side (sharded.py has the rest): a reduce-scatter per
parameter, started by a hook the moment backward finalises its gradient (as
DistributedOptimizer starts its allreduces; the runtime fuses them into buffers), and
synchronize(), which gives each piece (this rank's part of a parameter, sharded_cut.py)
its part of the reduced gradient. Stage 2 lets go of each local gradient once its
reduce-scatter has started, and takes finished results during backward, so that a
rank holds only the gradients still in flight; the norm of the reduced gradients, which
no rank holds whole, is combined across the ranks for clipping.
"""

from contextlib import contextmanager

import torch

from accord.basics import Average, Max, Sum, poll, synchronize
from accord.torch.allreduce import allreduce
from accord.torch.gather import reducescatter_async
from accord.torch.grad_hooks import check_not_taken_over
from accord.torch.optimizer import _count_pass


class _ReduceScatterMixin:
    """The gradients of a _ShardedMixin (its _shards, _handles, _reduced, _delay,
    _compression, op, process_set, stage, ...)."""
    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _make_hook(self, s):
        def hook(*_):
            if _count_pass(self._delay, s):
                self._submit(s)
        return hook

    def _submit(self, s):
        p = s.param
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        if grad.is_sparse:
            raise ValueError(f"ShardedOptimizer: {s.describe()} has a sparse gradient; shard "
                             "only dense gradients (or use DistributedOptimizer)")
        compressed, ctx = self._compression.compress(grad.detach().reshape(-1))
        pre, post = self._scale_factors()
        handle = reducescatter_async(compressed, name=f"shard.{s.name}", op=self.op,
                                     process_set=self.process_set, prescale_factor=pre,
                                     postscale_factor=post, output=s.reduced_into(compressed))
        self._handles[s] = (handle, ctx)
        if self.stage == 2:
            p.grad = None  # the handle keeps the flat gradient until it is reduced
            self._collect_finished()

    def _collect_finished(self):
        """Stage 2: takes the results of the reduce-scatters that have finished, in the
        order they were started, so that their flat gradients are let go of during
        backward: a rank then holds only the gradients still in flight, not all of
        them until step()."""
        while self._handles:
            s, (handle, ctx) = next(iter(self._handles.items()))  # the oldest
            if not poll(handle):
                return
            del self._handles[s]
            self._reduced[s] = self._result(s, handle, ctx)

    def _result(self, s, handle, ctx):
        try:
            return self._compression.decompress(synchronize(handle), ctx)
        except Exception as e:  # raised by synchronize(), after the others complete
            return e

    def synchronize(self):
        """Waits for every gradient's reduce-scatter, starting those not started
        (parameters without a gradient on this rank send zeros, as DistributedOptimizer
        does on two or more ranks, and as this does on any number: a run continued
        from a checkpoint on another number of ranks, one included, is the same run),
        and gives each piece its part of the reduced gradient. A parameter frozen since
        wrapping (requires_grad=False) without a gradient sends nothing, and its piece
        gets none: the step skips it, and the allgather brings it back unchanged."""
        check_not_taken_over(self, "ShardedOptimizer")
        for s in self._shards:
            if s in self._handles or s in self._reduced:
                continue
            if s.param.requires_grad or s.param.grad is not None:
                self._submit(s)
            else:  # the ranks must agree; else the others' stall report names it
                s.piece.grad = None
        for s, (handle, ctx) in self._handles.items():
            self._reduced[s] = self._result(s, handle, ctx)
        self._handles.clear()
        self._follow_moved_parameters()
        error = None
        for s, part in self._reduced.items():
            if isinstance(part, Exception):
                error = error or part
            else:
                s.piece.grad = part.to(s.piece.dtype) if s.count else None
        self._reduced.clear()
        for s in self._delay:
            self._delay[s] = self.backward_passes_per_step
        if error is not None:
            raise error
        self._synchronized = True

    def _follow_moved_parameters(self):
        """A parameter whose data was replaced after wrapping (``model.to(device)``, or
        ``p.data = ...``, as plain torch optimizers allow) is cut again, and its part's
        state moves with it; otherwise the step would update, and the allgather write
        into, memory the parameter no longer uses."""
        for s in self._shards:
            if not s.moved():
                continue
            old = s.rebind()
            state = self._inner.state.pop(old, None)
            if state is not None:
                self._inner.state[s.piece] = {
                    k: v.to(s.piece.device) if isinstance(v, torch.Tensor) and v.dim() > 0
                    else v for k, v in state.items()}
            for group in self._inner.param_groups:
                group["params"] = [s.piece if q is old else q for q in group["params"]]

    def _synchronize_once(self):
        if not self._synchronized:
            self.synchronize()

    def _reduced_parts(self):
        """This rank's parts of the reduced gradients (after synchronize())."""
        return [s.piece.grad for s in self._shards if s.piece.grad is not None]

    def _skip_step(self):
        """ShardedGradScaler found an inf or a NaN on some rank: every rank leaves its
        parameters and state as they are, and the next step reduces afresh."""
        self._synchronized = False

    @contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize: call synchronize() (or
        clip_grad_norm_) yourself before."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """torch.nn.utils.clip_grad_norm_ over the reduced gradients, which no rank
        holds whole: the norm of every piece's gradient is combined across the ranks.
        Synchronizes first if step() has not; returns the total norm."""
        self._synchronize_once()
        norm_type = float(norm_type)
        grads = self._reduced_parts()
        # On the parameters' device, also on a rank that holds no part of any of them:
        # every rank's contribution must be on the same kind of device.
        device = self._shards[0].piece.device if self._shards else torch.device("cpu")
        zero = torch.zeros((), dtype=torch.float64, device=device)
        if norm_type == float("inf"):
            local = max((g.detach().abs().max().double() for g in grads),
                        default=zero).reshape(1)
            total = allreduce(local, op=Max, process_set=self.process_set)[0]
        else:
            local = sum((g.detach().double().norm(norm_type) ** norm_type for g in grads),
                        zero).reshape(1)
            total = allreduce(local, op=Sum, process_set=self.process_set)[0] ** (1 / norm_type)
        coef = float(max_norm) / (float(total) + 1e-6)
        if coef < 1:
            for g in grads:
                g.mul_(coef)
        return total.float()

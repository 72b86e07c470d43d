"""ShardedGradScaler: loss scaling for a ShardedOptimizer.

torch's GradScaler checks and unscales ``p.grad`` of every parameter in the optimizer's
groups. A ShardedOptimizer's reduced gradients are not there: each rank holds its part
of them, beside its part of the parameters. So the check must be made on those parts
and agreed on by every rank: an inf in one rank's part has to skip the step on all of
them, or the ranks would step different parameters, and their scales would drift apart
with every later update(). ShardedGradScaler does that and is otherwise torch's
GradScaler (it takes the same arguments, keeps the same state_dict, and behaves as
torch's for any other optimizer).
"""

import importlib

import torch

from accord.basics import Max
from accord.torch.allreduce import allreduce
from accord.torch.sharded import _ShardedMixin

# PyTorch 2.3 and later scale on any device (torch.amp.GradScaler("cuda" or "cpu"));
# earlier ones on CUDA only (torch.cuda.amp.GradScaler), as does this class then.
_GradScaler = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler
_OptState = importlib.import_module(_GradScaler.__module__).OptState


class ShardedGradScaler(_GradScaler):
    """torch's GradScaler for a ShardedOptimizer: unscales each rank's part of the
    reduced gradients, and skips the step on every rank of the optimizer's process set
    when any rank's part holds an inf or a NaN (one small allreduce per step). Use it as
    torch's::

        scaler = hvd.ShardedGradScaler("cuda")
        scaler.scale(loss).backward()
        scaler.unscale_(opt)           # optional: then opt.clip_grad_norm_(max_norm)
        scaler.step(opt)
        scaler.update()
    """

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        if not isinstance(optimizer, _ShardedMixin):
            return super()._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)
        return {found_inf.device: _unscale_parts(optimizer, inv_scale, found_inf)}

    def step(self, optimizer, *args, **kwargs):
        if not isinstance(optimizer, _ShardedMixin) or not self._enabled:
            return super().step(optimizer, *args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("ShardedGradScaler.step(): a closure cannot be used with "
                               "loss scaling (nor can it with torch's GradScaler)")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is _OptState.STEPPED:
            raise RuntimeError("ShardedGradScaler.step() was already called since the last "
                               "update()")
        if state["stage"] is _OptState.READY:
            self.unscale_(optimizer)
        result = None
        if any(found.item() for found in state["found_inf_per_device"].values()):
            optimizer._skip_step()  # on every rank: they agreed on found_inf
        else:
            result = optimizer.step(*args, **kwargs)
        state["stage"] = _OptState.STEPPED
        return result


def _unscale_parts(optimizer, inv_scale, found_inf):
    """Reduces the gradients (if step() has not), multiplies this rank's parts by
    ``inv_scale`` and sets ``found_inf`` to 1 on every rank of the process set if any
    rank's part holds an inf or a NaN, else to 0. Returns ``found_inf``."""
    optimizer._synchronize_once()
    by_kind = {}
    for g in optimizer._reduced_parts():
        by_kind.setdefault((g.device, g.dtype), []).append(g)
    local = 0.0
    with torch.no_grad():
        for (device, _), grads in by_kind.items():
            found = torch.zeros((), dtype=torch.float32, device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found,
                                                              inv_scale.to(device))
            local += found.item()
    flag = torch.tensor([1.0 if local else 0.0])
    agreed = allreduce(flag, op=Max, name="sharded.found_inf",
                       process_set=optimizer.process_set)
    return found_inf.fill_(agreed.item())

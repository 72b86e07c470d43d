"""SyncBatchNorm: batch normalization whose statistics span the batch of every rank
in the process set, as Horovod's (and PyTorch's) SyncBatchNorm.

In training, each rank sums its inputs and their squares per channel; one allreduce
gives the statistics of the whole batch. Backward allreduces the two per-channel sums
the input gradient needs; the weight and bias gradients stay local, to be averaged
with the other gradients (DistributedOptimizer). In eval mode, or on a set of one rank,
it is plain batch normalization.
"""

import torch
import torch.nn.functional as F

from accord.basics import Sum, global_process_set, synchronize
from accord.torch.allreduce import allreduce_async_


def _sum_over_ranks(tensor, process_set):
    return synchronize(allreduce_async_(tensor, op=Sum, process_set=process_set))


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, channels] + [1] * (x.dim() - 2)
        x64 = x.detach().to(torch.float64)
        # Sums in float64: the variance is a difference of two of them.
        stats = torch.cat([x64.sum(dims), (x64 * x64).sum(dims),
                           torch.tensor([x.numel() // max(channels, 1)], dtype=torch.float64,
                                        device=x.device)])
        stats = _sum_over_ranks(stats, process_set)
        count = stats[-1].item()
        if count <= 1:
            raise ValueError(f"SyncBatchNorm: expected more than 1 value per channel over all "
                             f"ranks, got {int(count)}")
        mean = stats[:channels] / count
        var = (stats[channels:2 * channels] / count - mean * mean).clamp(min=0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                unbiased = var * count / (count - 1)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        xhat = (x64 - mean.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.detach().to(torch.float64).view(shape)
        if bias is not None:
            y = y + bias.detach().to(torch.float64).view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.meta = (count, dims, shape, process_set, x.dtype, bias is not None)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        count, dims, shape, process_set, dtype, has_bias = ctx.meta
        g = grad_output.to(torch.float64)
        sum_g = g.sum(dims)
        sum_g_xhat = (g * xhat).sum(dims)
        channels = sum_g.numel()
        both = _sum_over_ranks(torch.cat([sum_g, sum_g_xhat]), process_set)
        scale = invstd if weight is None else invstd * weight.detach().to(torch.float64)
        grad_x = scale.view(shape) * (g - (both[:channels] / count).view(shape)
                                      - xhat * (both[channels:] / count).view(shape))
        grad_weight = sum_g_xhat.to(weight.dtype) if weight is not None else None
        grad_bias = sum_g.to(weight.dtype if weight is not None else dtype) if has_bias else None
        return grad_x.to(dtype), grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Batch normalization over the inputs of every rank in ``process_set`` (any input
    of 2 to 5 dimensions, channels second). Arguments as torch.nn.BatchNorm*d."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected an input of 2 or more dimensions, got "
                             f"{input.dim()}")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        batch_stats = self.training or not self.track_running_stats
        if not batch_stats or self.process_set.size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, batch_stats, factor, self.eps)
        tracked = self.training and self.track_running_stats
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if tracked else None,
                                    self.running_var if tracked else None, self.eps, factor,
                                    self.process_set)

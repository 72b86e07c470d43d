"""``horovod.torch.elastic.state``'s name for the PyTorch state, for scripts that import
it from there."""

from accord.elastic import TorchState  # noqa: F401

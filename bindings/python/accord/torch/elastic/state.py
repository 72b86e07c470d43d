"""``horovod.torch.elastic.state``'s names, for scripts that import them from there: the
PyTorch state, and the handler registry with Horovod's handler classes
(accord/elastic/handlers.py)."""

from accord.elastic import TorchState  # noqa: F401
from accord.elastic.handlers import (  # noqa: F401
    ModelStateHandler, OptimizerStateHandler, SamplerStateHandler, StateHandler,
    get_handler_registry, set_handler_registry)

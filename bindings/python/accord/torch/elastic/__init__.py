"""Horovod's ``hvd.elastic`` for PyTorch: ``run``, ``State``, ``ObjectState``,
``TorchState``, ``ElasticSampler``, ``HostsUpdatedInterrupt`` and
``HorovodInternalError``, and Horovod's submodules ``sampler`` and ``state`` (with the
state-handler registry). Launch with accordrun's elastic flags (docs/elastic.md)."""

from accord.elastic import (  # noqa: F401
    ElasticSampler, HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State,
    TorchState, run)
from accord.basics import init, shutdown  # noqa: F401,E402  (as Horovod's module has)
from accord.torch.elastic import sampler, state  # noqa: F401,E402

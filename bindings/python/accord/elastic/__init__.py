"""Elastic training on Accord, with Horovod's API (``hvd.elastic``).

The design is restart-based: accordrun's elastic driver (tools/accord_elastic.py) starts
the job with the cluster's launcher (mpirun) on the healthy hosts, and starts it again
when a host fails or the host set changes; the new processes resume from the last
commit, which every host keeps on its own disk. This package is the job's half: the
State classes, the ElasticSampler, and run(). docs/elastic.md has the whole picture.
"""

from accord.errors import HorovodInternalError  # noqa: F401
from accord.elastic.handlers import (  # noqa: F401
    ModelStateHandler, OptimizerStateHandler, SamplerStateHandler, StateHandler,
    get_handler_registry, set_handler_registry)
from accord.elastic.runner import run  # noqa: F401
from accord.elastic.sampler import ElasticSampler  # noqa: F401
from accord.elastic.state import HostsUpdatedInterrupt, ObjectState, State  # noqa: F401
from accord.elastic.torch_state import TorchState  # noqa: F401

"""Horovod's PyTorch API on Accord: ``import accord.torch as hvd`` runs a Horovod
training script unchanged.

CPU tensors of dtype uint8, int8, int16, uint16 (PyTorch >= 2.3), int32, int64, float16,
bfloat16, float32, float64 and bool cross into the runtime without a copy. What differs from Horovod is listed in
bindings/README.md.
"""

from accord.torch import elastic  # noqa: F401  (hvd.elastic, docs/elastic.md)
from accord.torch.mpi_ops import *  # noqa: F401,F403
from accord.torch.mpi_ops import barrier, join  # noqa: F401
from accord.torch.compression import Compression  # noqa: F401
from accord.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from accord.torch.optimizer import DistributedOptimizer  # noqa: F401
from accord.torch.sharded import ShardedOptimizer  # noqa: F401
from accord.torch.sharded_scaler import ShardedGradScaler  # noqa: F401
from accord.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from accord.errors import (  # noqa: F401
    CommError, HorovodInternalError, InvalidCollectiveError, MismatchError, NotInitializedError,
    ShutDownError, StallError)

"""After shutdown: pending collectives fail with ShutDownError, later calls with a
clear error. Runs after every other test (the runtime cannot start again: it
finalized MPI)."""

import pytest
import torch


@pytest.mark.shuts_down
def test_shutdown_fails_pending_and_later_calls(hvd):
    handle = None
    if hvd.rank() == 0:  # submitted on rank 0 only: still pending at shutdown
        handle = hvd.allreduce_async(torch.ones(2), name="never.paired")
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    if handle is not None:
        with pytest.raises(hvd.ShutDownError, match="never.paired"):
            hvd.synchronize(handle)
    with pytest.raises(ValueError, match="shut down"):
        hvd.allreduce(torch.ones(2))
    with pytest.raises(hvd.NotInitializedError, match="not initialized") as e:
        hvd.rank()
    # Not "call hvd.init() first": here that init() would fail (Accord finalized MPI).
    assert "call hvd.init()" not in str(e.value), str(e.value)
    assert "shut down in this process by shutdown(), and init() starts it again only where " \
           "the application initialized MPI itself" in str(e.value), str(e.value)
    hvd.shutdown()  # again: harmless

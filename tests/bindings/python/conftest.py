"""Runs the suite on every rank of an mpirun job: one Accord runtime per process for
the whole session, the same tests in the same order everywhere, full output from rank 0
and failures only from the others."""

import os

import pytest

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))


def pytest_configure(config):
    if RANK != 0:
        config.option.verbose = -1
        config.option.reportchars = "fE"


def pytest_collection_modifyitems(config, items):
    # Tests that shut Accord down go last; the order is otherwise kept (it must be the
    # same on every rank, and pytest's is).
    items.sort(key=lambda item: item.get_closest_marker("shuts_down") is not None)


@pytest.fixture(scope="session", autouse=True)
def accord_runtime():
    import accord.torch as hvd
    hvd.init()
    yield hvd
    # The first rank to shut down ends the runtime everywhere: wait until every rank is
    # done (a rank may still be running collectives on a set the others are not in).
    if hvd.is_initialized():
        hvd.barrier()
    hvd.shutdown()


@pytest.fixture
def hvd(accord_runtime):
    return accord_runtime


@pytest.fixture(scope="session")
def process_sets(accord_runtime):
    """Two sets registered on every rank: the even ranks, and every rank but 0 (with 2
    ranks: {0} and {1}; with 3: {0,2} and {1,2}). Each test uses both, so every rank is
    a member of one and an outsider of another somewhere."""
    hvd = accord_runtime
    n = hvd.size()
    sets = [hvd.add_process_set(list(range(0, n, 2))),
            hvd.add_process_set(list(range(1, n)) or [0])]
    yield sets

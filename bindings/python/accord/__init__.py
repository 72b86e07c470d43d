"""Accord: collective communication for data-parallel deep learning.

``accord.torch`` is Horovod's PyTorch API on Accord (``import accord.torch as hvd``);
``accord.numpy`` runs the same collectives on NumPy arrays. Both share one runtime per
process, started by either one's ``init()``. ``accord.run(func, num_proc=...)`` runs a
function on every rank of a new job and returns what each returned (``horovod.run``).
"""



def __getattr__(name):
    # The version is the C++ library's (accord._core), read only when asked for, so
    # that `import accord` stays free of native libraries until they are needed.
    if name == "__version__":
        from accord import _core
        return _core.__version__
    # accord.run, as horovod.run: a function on every rank of a new job (accord/runner.py).
    if name == "run":
        from accord.runner import run
        return run
    raise AttributeError(f"module 'accord' has no attribute {name!r}")


def _load_pytorchs_nccl_first():
    """PyTorch's wheels bring their own libnccl.so.2, which may be newer than the one
    Accord's extension is linked with. One soname serves the whole process, and the
    first loaded wins: if Accord's came first (``import accord.numpy``, then ``import
    torch``), PyTorch would fail to load for the symbols only its own has. Loading
    PyTorch's first, as ``import torch`` before Accord does, serves both."""
    import ctypes
    import importlib.util
    import os
    try:
        if importlib.util.find_spec("torch") is None:
            return
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return
    for folder in (spec.submodule_search_locations or []) if spec else []:
        library = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(library):
            try:
                ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # then the system's serves, as without PyTorch
            return


_load_pytorchs_nccl_first()

"""One rank of a job accord.run started (accord/runner.py): loads the function from the
run's folder, calls it, and leaves its return value or exception there as
``result.<start>.<rank>.pkl`` (<start>: the elastic driver's restarts), written whole or
not at all.

    python -c "...; from accord._run_task import main; main()" <folder>
"""

import importlib.util
import json
import os
import pickle
import socket
import sys
import traceback

from accord.runner import TASK_VARIABLE

# The launcher's variables for this process's place in the job.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def _from_launcher(names):
    for name in names:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    sys.exit(f"accord.run: none of {', '.join(names)} is set: this process was not started by "
             "mpirun or srun")


def _load_main(path):
    """The launching script as the module __main__ names, without its __main__ part:
    loaded under another name, as multiprocessing does."""
    spec = importlib.util.spec_from_file_location("__accord_main__", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["__accord_main__"] = module
    spec.loader.exec_module(module)
    sys.modules["__main__"] = module


def _call(folder):
    with open(os.path.join(folder, "task.json")) as f:
        task = json.load(f)
    sys.path.extend(p for p in task["path"] if p not in sys.path)
    if task["main"]:
        _load_main(task["main"])
    with open(os.path.join(folder, "task.pkl"), "rb") as f:
        func, args, kwargs = pickle.load(f)
    return func(*args, **kwargs)


def _failure(rank, size, error, text):
    try:
        exception = pickle.dumps(error)
    except Exception:  # noqa: BLE001 (one that does not pickle goes back as its text)
        exception = None
    return {"rank": rank, "size": size, "value": None, "error": f"{type(error).__name__}: {error}",
            "traceback": text, "exception": exception}


def main():
    folder = sys.argv[1]
    rank, size = _from_launcher(RANK_VARIABLES), _from_launcher(SIZE_VARIABLES)
    if not os.path.isfile(os.path.join(folder, "task.pkl")):
        sys.exit(f"accord.run: rank {rank} on {socket.gethostname()} does not see {folder}: give "
                 "run(..., workdir=...) a folder every host shares")
    os.environ[TASK_VARIABLE] = "1"
    try:
        value = _call(folder)
    except BaseException as e:  # SystemExit and KeyboardInterrupt are the function's too
        result = _failure(rank, size, e, traceback.format_exc())
    else:
        try:
            result = {"rank": rank, "size": size, "value": pickle.dumps(value), "error": None}
        except Exception as e:  # noqa: BLE001
            result = _failure(rank, size, TypeError(f"its return value cannot be sent back: {e}"), "")
    # Whole or not at all: the launcher reads what is there once the job has ended, from
    # the elastic driver's last start of the job where it restarted it.
    name = f"result.{os.environ.get('ACCORDRUN_ELASTIC_RESET', '0')}.{rank}.pkl"
    with open(os.path.join(folder, "." + name), "wb") as f:
        pickle.dump(result, f)
    os.replace(os.path.join(folder, "." + name), os.path.join(folder, name))
    if result["error"] is None:
        sys.exit(0)
    # A failed rank leaves at once, without the runtime's shutdown and MPI_Finalize (a
    # fence with ranks that may be busy for long): its exit status makes mpirun end the
    # others, and accord.run reports this rank's exception.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)

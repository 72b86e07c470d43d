"""``accord.run``: a function run on every rank of a job started from Python (a notebook,
a script), with each rank's return value brought back; Horovod's ``horovod.run``.

    results = accord.run(train, args=(config,), num_proc=4, hosts="node1:2,node2:2")

The job starts as any other Accord job: accordrun (which takes horovodrun's flags, so
that run()'s arguments map one to one) runs mpirun, or srun inside a SLURM allocation,
and each rank runs ``accord._run_task``. The function and its arguments travel as a
pickle in a folder that every rank reads and writes: the system's temporary folder
where every rank runs on this host, the current folder otherwise (a shared file system,
as the job's code needs anyway), or ``workdir``. Each rank leaves its return value, or
its exception, there; run() reads them once the job has ended, and removes the folder.
The ranks' output passes through to ``sys.stdout`` (a notebook's cell, too).

Functions travel by reference (a module's function, imported again on the ranks)
unless cloudpickle is installed, which sends them by value. A script's own functions
are found by loading the script on the ranks under another name than ``__main__``, so
its ``if __name__ == "__main__":`` part does not run there: call run() from inside such
a guard, as with multiprocessing.
"""

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import warnings

TASK_VARIABLE = "ACCORDRUN_TASK"  # set on the ranks: run() there is a mistake (not ACCORD_:
# the runtime warns of ACCORD_ names it does not know)


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None,
        ssh_identity_file=None, disable_cache=None, output_filename=None, verbose=None,
        use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None,
        workdir=None):
    """Runs ``func(*args, **kwargs)`` on each rank of a new job and returns the values,
    a list indexed by rank (its first ``min_num_proc`` with elastic training, as
    Horovod). The arguments are horovod.run's; ``workdir`` is a folder every host sees,
    for the function and the results. Raises RuntimeError naming the rank when one
    raised (the original exception chained, where it could be sent back), or when ranks
    ended without a result."""
    if os.environ.get(TASK_VARIABLE):
        raise RuntimeError("accord.run was called on a rank of a job accord.run started: call it "
                           "from the launching process only (in a script, inside "
                           "`if __name__ == \"__main__\":`)")
    for old, new, value in (("np", "num_proc", np), ("min_np", "min_num_proc", min_np),
                            ("max_np", "max_num_proc", max_np)):
        if value is not None:
            warnings.warn(f"{old} is deprecated, use {new} instead", DeprecationWarning, stacklevel=2)
    num_proc = np if np is not None else num_proc
    min_num_proc = min_np if min_np is not None else min_num_proc
    max_num_proc = max_np if max_np is not None else max_num_proc
    if network_interface:
        warnings.warn("network_interface is deprecated, use network_interfaces instead",
                      DeprecationWarning, stacklevel=2)
        network_interfaces = network_interface.split(",")
    if not callable(func):
        raise TypeError(f"accord.run: func must be callable, got {type(func).__name__}")
    if isinstance(hosts, (list, tuple)):  # ["node1:2", "node2:2"]
        hosts = ",".join(hosts)
    if hosts is not None and hostfile is not None:
        raise ValueError("accord.run: give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("accord.run: give use_gloo or use_mpi, not both")
    for name, value in (("num_proc", num_proc), ("min_num_proc", min_num_proc),
                        ("max_num_proc", max_num_proc)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"accord.run: {name}={value!r}: expected a whole number of processes, 1 or more")
    if isinstance(network_interfaces, str):
        network_interfaces = network_interfaces.split(",")
    launcher = _accordrun()
    payload, by_value = _dumps(func, (func, tuple(args), dict(kwargs or {})))

    # Inside a SLURM allocation without hosts, accordrun starts the ranks with srun on
    # the allocation's nodes. Elsewhere without hosts, as horovod.run: num_proc slots of
    # this host, whatever its cores.
    slurm = bool(os.environ.get("SLURM_JOB_ID")) and not (hosts or hostfile or host_discovery_script)
    if not (hosts or hostfile or host_discovery_script or slurm):
        hosts = f"localhost:{max(num_proc, max_num_proc or 0)}"
    local = not slurm and _all_local(hosts, hostfile, host_discovery_script)
    folder = tempfile.mkdtemp(prefix="accord-run-", dir=workdir or (None if local else os.getcwd()))
    try:
        with open(os.path.join(folder, "task.pkl"), "wb") as f:
            f.write(payload)
        main = sys.modules.get("__main__")
        with open(os.path.join(folder, "task.json"), "w") as f:
            json.dump({"path": [p for p in sys.path if p and os.path.isdir(p)],
                       "main": None if by_value or getattr(func, "__module__", None) != "__main__"
                       else os.path.abspath(main.__file__)}, f)
        flags = _flags(num_proc=num_proc, min_num_proc=min_num_proc, max_num_proc=max_num_proc,
                       slots=slots, reset_limit=reset_limit, cooldown_range=cooldown_range,
                       hosts=hosts, hostfile=hostfile, host_discovery_script=host_discovery_script,
                       start_timeout=start_timeout, ssh_port=ssh_port,
                       ssh_identity_file=ssh_identity_file, disable_cache=disable_cache,
                       output_filename=output_filename, verbose=verbose, use_gloo=use_gloo,
                       use_mpi=use_mpi, mpi_args=mpi_args, network_interfaces=network_interfaces)
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        bootstrap = (f"import sys; sys.path.insert(0, {package_parent!r}); "
                     "from accord._run_task import main; main()")
        command = [launcher] + flags + [executable or sys.executable, "-c", bootstrap, folder]
        status = _run_streaming(command)
        return _results(folder, status, min_num_proc, "srun" if slurm else "mpirun")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _accordrun():
    """accordrun: beside this Python (pip puts it there), on PATH, or in the build tree
    whose package this is (<build>/python/accord -> <build>/tools/accordrun)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(os.path.dirname(sys.executable), "accordrun"), shutil.which("accordrun"),
                      os.path.join(here, "..", "..", "tools", "accordrun")):
        if candidate and os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return os.path.abspath(candidate)
    raise FileNotFoundError("accord.run starts its job with accordrun, which is neither beside "
                            f"{sys.executable} nor on PATH: install Accord with pip (which puts it "
                            "there), or put a build's tools/ folder on PATH")


def _dumps(func, task):
    """(the task pickled, whether the function went by value)."""
    try:
        import cloudpickle
    except ImportError:
        cloudpickle = None
    if cloudpickle is not None:
        return cloudpickle.dumps(task), True
    main = sys.modules.get("__main__")
    name = getattr(func, "__qualname__", repr(func))
    if getattr(func, "__module__", None) == "__main__" and not getattr(main, "__file__", None):
        raise ValueError(f"accord.run: {name} is defined in an interactive session, which the ranks "
                         "cannot load it from: install cloudpickle (pip install cloudpickle) to send "
                         "it by value, or define it in a module")
    try:
        return pickle.dumps(task), False
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise ValueError(f"accord.run: {name} or its arguments cannot be sent to the ranks ({e}): "
                         "define the function at the top level of a module, or install cloudpickle "
                         "(pip install cloudpickle) to send it by value") from e


def _all_local(hosts, hostfile, host_discovery_script):
    """Whether every rank runs on this host, so that its temporary folder serves."""
    if host_discovery_script:
        return False
    names = []
    if hosts:
        names = [item.split(":")[0].strip() for item in hosts.split(",")]
    elif hostfile:
        try:
            with open(hostfile) as f:
                names = [line.split("#")[0].split()[0] for line in f if line.split("#")[0].strip()]
        except OSError:
            return False  # accordrun says what is wrong with it
    here = {"localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()}
    return all(name in here for name in names)


def _flags(*, num_proc, min_num_proc, max_num_proc, slots, reset_limit, cooldown_range, hosts,
           hostfile, host_discovery_script, start_timeout, ssh_port, ssh_identity_file,
           disable_cache, output_filename, verbose, use_gloo, use_mpi, mpi_args,
           network_interfaces):
    """horovod.run's arguments as accordrun's (horovodrun's) flags."""
    flags = ["-np", str(num_proc)]
    for flag, value in (("--min-np", min_num_proc), ("--max-np", max_num_proc),
                        ("--slots-per-host", slots), ("--reset-limit", reset_limit), ("-H", hosts),
                        ("--hostfile", hostfile), ("--host-discovery-script", host_discovery_script),
                        ("--start-timeout", start_timeout), ("--ssh-port", ssh_port),
                        ("--ssh-identity-file", ssh_identity_file), ("--output-filename", output_filename),
                        ("--mpi-args", mpi_args)):
        if value is not None:
            flags += [f"{flag}={value}"]
    if cooldown_range is not None:
        low, high = cooldown_range
        flags += ["--blacklist-cooldown-range", str(low), str(high)]
    if network_interfaces:
        flags += [f"--network-interfaces={','.join(network_interfaces)}"]
    for flag, on in (("--disable-cache", disable_cache), ("--verbose", verbose), ("--gloo", use_gloo),
                     ("--mpi", use_mpi)):
        if on:
            flags.append(flag)
    return flags


def _run_streaming(command):
    """Runs the job, its output line by line onto sys.stdout (which a notebook shows, where
    the output of a child process written to file descriptor 1 would be lost); its exit
    status. Interrupted, it stops the job first."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)

    def copy():
        for line in iter(process.stdout.readline, b""):
            sys.stdout.write(line.decode(errors="replace"))
            sys.stdout.flush()

    copier = threading.Thread(target=copy, name="accord-run-output", daemon=True)
    copier.start()
    try:
        status = process.wait()
    except BaseException:  # KeyboardInterrupt in a notebook: the job must not outlive it
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise
    finally:
        copier.join(timeout=30)
        process.stdout.close()
    return status


def _results(folder, status, min_num_proc, started_by):
    # result.<start>.<rank>.pkl: the last start's (the elastic driver restarts the job).
    found = [name.split(".")[1:3] for name in os.listdir(folder)
             if name.startswith("result.") and name.endswith(".pkl")]
    last = max((int(start) for start, _ in found), default=0)
    outcomes = {}
    for start, rank in found:
        if int(start) == last:
            with open(os.path.join(folder, f"result.{start}.{rank}.pkl"), "rb") as f:
                outcomes[int(rank)] = pickle.load(f)
    failed = sorted(r for r, o in outcomes.items() if o["error"] is not None)
    if failed:
        first = outcomes[failed[0]]
        others = f" (ranks {failed} raised)" if len(failed) > 1 else ""
        cause = None
        if first["exception"] is not None:
            try:
                cause = pickle.loads(first["exception"])
            except Exception:  # noqa: BLE001 (one that does not unpickle here: its text serves)
                cause = None
        traceback = f"\n\nIts traceback:\n{first['traceback']}" if first["traceback"] else ""
        raise RuntimeError(f"accord.run: {started_by} failed with exit code {status}: rank {failed[0]} "
                           f"raised {first['error']}{others}{traceback}") from cause
    size = max((o["size"] for o in outcomes.values()), default=0)
    missing = [r for r in range(size) if r not in outcomes]
    if not outcomes or missing:
        which = f"ranks {missing} left no result" if missing else "no rank left a result"
        ended = f"{started_by} failed with exit code {status}" if status else f"{started_by} ended"
        raise RuntimeError(f"accord.run: {ended}, and {which} (the job's output is above)")
    if status != 0:
        raise RuntimeError(f"accord.run: {started_by} failed with exit code {status} after every rank "
                           "returned (the job's output is above)")
    values = []
    for rank in range(size):
        try:
            values.append(pickle.loads(outcomes[rank]["value"]))
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"accord.run: rank {rank}'s return value cannot be loaded here: {e}") from e
    return values[:min_num_proc] if min_num_proc is not None else values

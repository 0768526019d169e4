"""Run a function on several gloo CPU processes, bounded in time and cleaned up.

``launch(target, world, tmp_path, timeout, *args)`` starts ``world`` Python processes,
each in a session of its own, that run ``target(rank, world, outdir, *args)`` (a function
``"module:function"`` importable with this repository and tests/ on the path) after
``torch.distributed.init_process_group("gloo")`` through a file store in ``tmp_path`` (no
port to race for).  Each rank's return value is pickled (torch.save) to
``outdir/rank<r>.pt`` and ``launch`` returns them in rank order; an exception in a rank
is returned as ``{"error": type name, "message": str}``.  Every process group is killed
in a ``finally``: a rank that fails or hangs leaves no orphan behind.  ``run_script``
runs a script that launches its own processes, under the same guard."""
import os
import signal
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)

_BOOT = r"""
import ast, datetime, importlib, os, sys, traceback
import torch, torch.distributed as dist
rank, world = int(sys.argv[1]), int(sys.argv[2])
store, outdir, target = sys.argv[3], sys.argv[4], sys.argv[5]
args = ast.literal_eval(sys.argv[6])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
mod, fn = target.split(":")
try:
    res = getattr(importlib.import_module(mod), fn)(rank, world, outdir, *args)
except Exception as e:
    traceback.print_exc()
    res = {"error": type(e).__name__, "message": str(e)}
torch.save(res, os.path.join(outdir, f"rank{rank}.pt"))
dist.destroy_process_group()
"""


def launch(target: str, world: int, tmp_path, timeout: float, *args, pids=None):
    """(See the module doc.)  ``pids``: a list that gets the processes' ids."""
    import torch

    outdir = str(tmp_path)
    store = os.path.join(outdir, "store")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_ROOT, _HERE] + [p for p in [env.get("PYTHONPATH")]
                                                          if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = []
    try:
        for r in range(world):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(r), str(world), store, outdir, target,
                 repr(args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True))
            if pids is not None:
                pids.append(procs[-1].pid)
        logs = []
        deadline = time.monotonic() + timeout
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            logs.append(out.decode(errors="replace"))
        for r, (p, log) in enumerate(zip(procs, logs)):
            if p.returncode != 0:
                raise AssertionError(f"rank {r} exited with {p.returncode}:\n{log[-4000:]}")
        return [torch.load(os.path.join(outdir, f"rank{r}.pt"), weights_only=False)
                for r in range(world)]
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def run_script(argv, timeout: float):
    """Run ``python argv...`` (a script that starts its own processes) in a session of its
    own: ``(returncode, output)``; the whole session is killed if it outlives ``timeout``."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    p = subprocess.Popen([sys.executable] + list(argv), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True, cwd=_ROOT)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)   # the script's children too, if any are left
        except ProcessLookupError:
            pass
        p.wait()

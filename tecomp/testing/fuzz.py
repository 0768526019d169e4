"""The long-run differential fuzzer.

    python -m tecomp.testing.fuzz --cases 2000              # 2 worker processes by default
    python -m tecomp.testing.fuzz --cases 500 --seed 10000 --jobs 1 --check-passes
    python -m tecomp.testing.fuzz --replay 1234              # the report + reproducer of one seed
    python -m tecomp.testing.fuzz --cases 500 --gpu-every 1 --gpu-target cuda   # on a GPU

Case ``k`` is drawn from ``random.Random(k)`` (a program, a legal schedule, dtypes, shapes,
a value of the symbolic extent); every ``--auto-every``-th case has the auto-scheduler's
schedule instead (its analytic one, or its rules with random knobs), a quarter of them a
GEMM: half of those one the GEMM template takes with an operand read through a view
(composed ``//`` and ``%`` indices), half a skinny float32 GEMM of 1 to 16 rows with odd
``N`` and ``K`` (``strategy.cpu.skinny``); every
``--tensorize-every``-th case is an int8 GEMM (8-bit inputs over their whole range) that
the auto-scheduler tensorizes with the target's u8 x s8 dot-product intrinsic where its
shape allows (random knobs: which intrinsic or none, the register block); every
``--store-root-every``-th case (of those that are not edge cases) is one of the
``store_root`` family (a stage computed inside a consumer's loop into its whole buffer,
read after the loop nest; illegal schedules among them must raise the documented
``ScheduleError``); every ``--gpu-every``-th case is a GPU-bound schedule run
in the CUDA emulation (needs g++; 0 disables), a quarter of them (with
``--tensorize-every``) int8 GEMMs whose reduction runs as CUDA's dp4a and a quarter
(with ``--auto-every``) the auto-scheduler's GPU schedule of a random program, and with
``--tensor-core-every k`` every k-th of another quarter a float16 / bfloat16 GEMM summed
in float32 (half of them of odd extents: boundary tiles), maybe with an epilogue, that
the GPU rules put on tensor cores (their
default tiling or random knobs: warps, fragments, k step, rings, wmma or mma).  With
``--gpu-target cuda`` the same GPU cases (the same programs, schedules and data) run on
the GPU through pycuda (device 0, kernels compiled by nvcc) and in the emulation too: the
GPU's outputs are compared with numpy, the interpreter (the emulation's tolerances) and
the emulation's outputs; a disagreement with the emulation is a mismatch whose report
leads with ``cuda vs cuda-emu``, counted apart in the summary, and the reproducer builds
for ``target="cuda"``.  Where pycuda, a GPU, nvcc or g++ is missing the run stops at the
start with exit status 2 and one line saying why.  Every
``--torch-every``-th CPU case also runs with torch tensors for its arrays, and every ``--aot-every``-th exported with
``export_library`` and loaded with ``tc.load_module``.  Every ``--threads-every``-th seed (default 100) is a
case of the ``threads`` family (:mod:`tecomp.testing.concurrency`: modules, pools, the
workspace cache and ``torch.compile`` used from several threads at once, while the thread
count changes, kernels are built and exported and the workspace released, or the process
forks; every result bit for bit against a serial run); ``--only threads`` runs it alone.
Every ``--args-every``-th seed (default 50) is a case of the ``nnargs`` family
(:mod:`tecomp.testing.nnargs`: one ``tecomp.nn`` call whose arguments a careless user or
an attacker wrote -- ``True``, ``1.5``, NaN, ``2**31``, ``300`` for an int8 bound,
``"SAMEE"`` --, refused with a TecompError naming the argument or computed as numpy and
PyTorch compute it); ``--only nnargs`` runs it alone.  Every ``--producers-every``-th seed
(default 50) is a case of the ``producers`` family (:mod:`tecomp.testing.producers`: a
templated operator meeting a producer it does not expect -- Winograd weights given
transformed, packed weights as a placeholder, a convolution of a ReLU / pad / cast, a
GEMM of a transpose or of one tensor twice, a pooling of a convolution, a softmax of a
matmul, attention of one tensor as q, k and v, an output read again -- auto-scheduled,
built and run against numpy); ``--only producers`` runs it alone.  Cases run in worker
subprocesses, so a
case that kills its process (a segfault in generated code) is recorded as a crash and the
worker restarts after it; a case that runs longer than ``--case-timeout`` seconds has its
worker killed and is recorded as a hang.  At the end it prints the cases run, the rejected schedules
(the target refused them for a documented resource limit -- a
:class:`~tecomp.errors.ResourceLimitError` such as a GPU tile over the 48 KiB of static
shared memory; counted apart and not failures), the mismatches and the crashes (any
other exception; grouped by their first line), and writes one report with a standalone
reproducer per failing seed into ``--out`` (default ``$TMPDIR/tecomp-fuzz-reports``).
The exit status is 1 when anything failed (2: ``--gpu-target cuda`` cannot run here).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from ..errors import RuntimeUnavailableError
from ..runtime.cuda import default_driver
from .diff import (draw_case, draw_gpu_int8_gemm_case, draw_int8_gemm_case,
                   draw_skinny_gemm_case, draw_tensor_core_case, draw_view_gemm_case,
                   run_case)
from .draw import RandomDraw
from .edges import EdgeCase, draw_edge_case, run_edge_case
from .ops import OpCase, draw_op_case, run_op_case
from .nnargs import ArgsCase, draw_nnargs_case, run_nnargs_case
from .producers import ProducerCase, draw_producer_case, run_producer_case
from .store_root import StoreRootCase, draw_store_root_case, run_store_root_case
from .concurrency import ThreadsCase, draw_threads_case, run_threads_case


GPU_TARGETS = ("cuda-emu", "cuda")


def _have_cxx() -> bool:
    """Whether the C++ compiler the CUDA emulation needs is there (without it, no case is
    a GPU case)."""
    return shutil.which(os.environ.get("CXX", "g++")) is not None


def case_for_seed(seed: int, gpu_every: int, auto_every: int = 0, cpu_target: str = "llvm",
                  tensorize_every: int = 0, gpu_target: str = "cuda-emu", edge_every: int = 0,
                  store_root_every: int = 0, tensor_core_every: int = 0, op_every: int = 0,
                  threads_every: int = 0, args_every: int = 0, producers_every: int = 0):
    """Case ``seed``.  Every ``edge_every``-th is an edge case (``edges.py``: the drawn
    case of the same seed, written or called the way a careless user or an attacker
    would); of the others, every ``store_root_every``-th is a case of the ``store_root``
    family (``store_root.py``, its own random stream: the seeds of the other families
    draw what they drew without it).  ``cpu_target``: the llvm target its CPU cases are built for (the
    same program and schedule as with ``"llvm"``; e.g. ``"llvm -mcpu=haswell"`` runs AVX2
    code built on this machine).  ``gpu_target``: the target its GPU cases are built for,
    ``"cuda-emu"`` (the emulation) or ``"cuda"`` (the GPU, and the emulation beside it; see
    ``run_case``): the same program and schedule either way.  Every ``op_every``-th seed
    (before all the others; 0: none) is a case of the ``ops`` family (``ops.py``: one
    ``tecomp.nn`` operator call with random parameters, its own random stream); after
    them, every ``threads_every``-th seed (``seed % threads_every ==
    threads_family_residue(threads_every)``; 0: none) is a case of the ``threads`` family
    (``concurrency.py``: kernels, pools and caches used from several threads at once);
    before those, every ``args_every``-th seed (``seed % args_every ==
    args_family_residue(args_every)``; 0: none; the defaults' residues never meet) is a
    case of the ``nnargs`` family
    (``nnargs.py``: one ``tecomp.nn`` call with arguments a careless user or an attacker
    wrote, which must be refused with a TecompError naming the argument or computed as
    numpy / PyTorch compute it); after the threads seeds, every ``producers_every``-th
    (``seed % producers_every == producers_family_residue(producers_every)``; 0: none) is
    a case of the ``producers`` family (``producers.py``: a templated operator whose
    inputs or consumers are not the ones its template expects, against numpy)."""
    import dataclasses


    if gpu_target not in GPU_TARGETS:
        raise ValueError(f"gpu_target must be one of {GPU_TARGETS}, not {gpu_target!r}")
    if op_every and seed % op_every == 0:
        return draw_op_case(seed, cpu_target)
    if args_every and seed % args_every == args_family_residue(args_every):
        return draw_nnargs_case(seed, cpu_target)
    if threads_every and seed % threads_every == threads_family_residue(threads_every):
        return draw_threads_case(seed)
    if producers_every and seed % producers_every == producers_family_residue(producers_every):
        return draw_producer_case(seed, cpu_target)
    if edge_every and seed % edge_every == 1 % edge_every:
        return draw_edge_case(seed)
    if store_root_every and seed % store_root_every == store_root_family_residue(store_root_every):
        return draw_store_root_case(seed, cpu_target)
    target = "llvm"
    if gpu_every and seed % gpu_every == gpu_every - 1 and _have_cxx():
        target = "cuda-emu"
    if target == "cuda-emu" and tensorize_every and (seed // gpu_every) % 4 == 3:
        case = draw_gpu_int8_gemm_case(RandomDraw(seed), name=f"fuzz seed {seed} (int8 GEMM, "
                                       f"{gpu_target}: dp4a)")
    elif target == "cuda-emu" and tensor_core_every and (seed // gpu_every) % 4 == 2 and \
            (seed // (4 * gpu_every)) % tensor_core_every == 0:
        case = draw_tensor_core_case(RandomDraw(seed), name=f"fuzz seed {seed} (tensor cores, "
                                     f"{gpu_target}: the GPU rules)")
    elif target == "cuda-emu" and auto_every and (seed // gpu_every) % 4 == 1:
        case = draw_case(RandomDraw(seed), target=target, auto=True,
                         name=f"fuzz seed {seed} (auto_schedule, {gpu_target})")
    elif target == "llvm" and tensorize_every and seed % tensorize_every == 3 % tensorize_every:
        case = draw_int8_gemm_case(RandomDraw(seed), name=f"fuzz seed {seed} (int8 GEMM, "
                                   "auto_schedule: tensorize)")
    elif target == "llvm" and auto_every and seed % auto_every == auto_every // 2 and \
            (seed // auto_every) % 4 == 3 and (seed // (4 * auto_every)) % 2 == 1:
        case = draw_skinny_gemm_case(RandomDraw(seed), name=f"fuzz seed {seed} (auto_schedule: "
                                     "a skinny GEMM)")
    elif target == "llvm" and auto_every and seed % auto_every == auto_every // 2 and \
            (seed // auto_every) % 4 == 3:
        case = draw_view_gemm_case(RandomDraw(seed), name=f"fuzz seed {seed} (auto_schedule: "
                                   "the GEMM template through a view)")
    elif target == "llvm" and auto_every and seed % auto_every == auto_every // 2:
        case = draw_case(RandomDraw(seed), name=f"fuzz seed {seed} (auto_schedule)", auto=True)
    else:
        case = draw_case(RandomDraw(seed), target=target, name=f"fuzz seed {seed}")
    if target == "cuda-emu":
        # drawn for the emulation whatever gpu_target is: only the target differs
        return case if gpu_target == "cuda-emu" else dataclasses.replace(case, target=gpu_target)
    if cpu_target == "llvm":
        return case
    return dataclasses.replace(case, target=cpu_target)


def store_root_family_residue(every: int) -> int:
    """The seeds of the ``store_root`` family are those ``seed % every ==`` this: with the
    defaults (``--store-root-every 20``, ``--edge-every 5``, ``--gpu-every 25``) 15, a
    residue no edge or GPU seed has (and 0 with ``--store-root-every 1``: every seed)."""
    return 3 * every // 4


def threads_family_residue(every: int) -> int:
    """The seeds of the ``threads`` family are those ``seed % every ==`` this: with the
    default ``--threads-every 100``, 9 (a seed that was a plain drawn case: no edge,
    auto-scheduler, int8, GPU or store_root seed changes family; and 0 with
    ``--threads-every 1``: every seed)."""
    return 9 % every


def args_family_residue(every: int) -> int:
    """The seeds of the ``nnargs`` family are those ``seed % every ==`` this: with the
    default ``--args-every 50``, 4 (seeds 4, 54, 104, ...: plain drawn cases before, no
    edge, auto-scheduler, int8, GPU, store_root or threads seed; and 0 with
    ``--args-every 1``: every seed)."""
    return 4 % every


def producers_family_residue(every: int) -> int:
    """The seeds of the ``producers`` family are those ``seed % every ==`` this: with the
    default ``--producers-every 50``, 10 (seeds 10, 60, 110, ...: plain drawn cases
    before, no edge, auto-scheduler, int8, GPU, store_root, threads or nnargs seed; and 0
    with ``--producers-every 1``: every seed)."""
    return 10 % every


def cuda_unavailable() -> "str | None":
    """Why ``--gpu-target cuda`` cannot run here (None when it can): its GPU cases run on
    device 0 through pycuda (compiled by nvcc) and in the CUDA emulation (a C++ compiler)."""
    if not _have_cxx():
        return (f"no C++ compiler ({os.environ.get('CXX', 'g++')}) for the CUDA emulation, "
                "which the GPU's outputs are compared with")
    try:
        default_driver()
    except RuntimeUnavailableError as e:
        return str(e)
    if shutil.which("nvcc") is None:
        return "nvcc is not on PATH (pycuda compiles the generated CUDA C with it)"
    return None


def also_for_seed(seed: int, args) -> tuple:
    """The extra ways case ``seed`` is run (CPU cases; see ``run_case``): with torch tensors
    every ``--torch-every``-th case (when torch is installed), exported and loaded every
    ``--aot-every``-th."""
    also = []
    if args.torch_every and seed % args.torch_every == 1 % args.torch_every and _has_torch():
        also.append("torch")
    if args.aot_every and seed % args.aot_every == 2 % args.aot_every:
        also.append("aot")
    return tuple(also)


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _signature(o) -> str:
    lines = [x for x in o.detail.strip().splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    if o.kind == "mismatch":
        last = lines[0].split(":")[0] if lines else ""
    return f"{o.kind} in {o.stage}: {last[:200]}"


def _test_hang():
    """``$TECOMP_FUZZ_TEST_HANG`` (the test hook of ``--case-timeout``): ``SEED`` or
    ``SEED:SECONDS``: the worker sleeps for an hour at that seed, and the driver's limit for
    that case alone is ``SECONDS`` (else ``--case-timeout``): (seed, seconds), Nones unset."""
    seed, _, secs = os.environ.get("TECOMP_FUZZ_TEST_HANG", "").partition(":")
    return (int(seed) if seed.strip() else None), (float(secs) if secs.strip() else None)


def _worker(args) -> int:
    """Run seeds start, start+step, ... (count of them); one JSON line per event."""
    os.makedirs(args.out, exist_ok=True)
    seed = args.start
    for _ in range(args.count):
        print(json.dumps({"start": seed}), flush=True)
        t0 = time.perf_counter()
        if _test_hang()[0] == seed:
            time.sleep(3600)   # the test of --case-timeout: a case that never ends
        try:
            case = case_for_seed(seed, args.gpu_every, args.auto_every, args.cpu_target,
                                 args.tensorize_every, args.gpu_target, args.edge_every,
                                 args.store_root_every, args.tensor_core_every, args.op_every,
                                 args.threads_every, args.args_every, args.producers_every)
            o = _run(case, seed, args)
        except Exception as e:  # noqa: BLE001 - a bug in the fuzzer itself
            print(json.dumps({"seed": seed, "kind": "crash", "target": "?",
                              "sig": f"fuzzer error: {type(e).__name__}: {e}"[:300]}), flush=True)
            seed += args.step
            continue
        rec = {"seed": seed, "kind": o.kind, "target": _target_label(case),
               "secs": round(time.perf_counter() - t0, 3)}
        if o.kind == "refused":
            rec["sig"] = f"{o.stage}: {o.detail.splitlines()[0] if o.detail else ''}"[:300]
        elif o.rejected:
            rec["sig"] = f"{o.stage}: {o.reason}"[:300]
        elif not o.ok:
            rec["sig"] = _signature(o)
            path = os.path.join(args.out, f"seed{seed}.txt")
            with open(path, "w") as f:
                f.write(o.report() + "\n")
            rec["report"] = path
        print(json.dumps(rec), flush=True)
        seed += args.step
    return 0


def _run(case, seed, args):
    """Run case ``seed`` with the runner its kind has."""
    if isinstance(case, EdgeCase):
        return run_edge_case(case)
    if isinstance(case, StoreRootCase):
        return run_store_root_case(case, check_passes=args.check_passes)
    if isinstance(case, OpCase):
        return run_op_case(case)
    if isinstance(case, ArgsCase):
        return run_nnargs_case(case)
    if isinstance(case, ThreadsCase):
        return run_threads_case(case)
    if isinstance(case, ProducerCase):
        return run_producer_case(case)
    return run_case(case, check_passes=args.check_passes, also=also_for_seed(seed, args))


def _target_label(case) -> str:
    """What the summary counts a case under: its target, ``edge:<family>``,
    ``store_root`` or ``ops:<kind>``."""
    if isinstance(case, OpCase):
        return f"ops:{case.spec['kind']}"
    if isinstance(case, ArgsCase):
        return f"nnargs:{case.spec['kind']}"
    if isinstance(case, ThreadsCase):
        return f"threads:{case.spec['scenario']}"
    if isinstance(case, ProducerCase):
        return f"producers:{case.spec['kind']}"
    if isinstance(case, StoreRootCase):
        return case.family
    family = getattr(case, "family", "")
    return f"edge:{family}" if family else case.target


def _spawn(args, start, count, step):
    cmd = [sys.executable, "-m", "tecomp.testing.fuzz", "--worker", "--start", str(start),
           "--count", str(count), "--step", str(step), "--gpu-every", str(args.gpu_every),
           "--auto-every", str(args.auto_every), "--cpu-target", args.cpu_target,
           "--torch-every", str(args.torch_every), "--aot-every", str(args.aot_every),
           "--tensorize-every", str(args.tensorize_every), "--gpu-target", args.gpu_target,
           "--edge-every", str(args.edge_every), "--store-root-every", str(args.store_root_every),
           "--tensor-core-every", str(args.tensor_core_every), "--op-every", str(args.op_every),
           "--threads-every", str(args.threads_every), "--args-every", str(args.args_every),
           "--producers-every", str(args.producers_every),
           "--out", args.out]
    if args.check_passes:
        cmd.append("--check-passes")
    env = dict(os.environ)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tecomp.testing.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=200, help="number of cases (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--gpu-every", type=int, default=25,
                    help="every k-th case is a GPU schedule in the CUDA emulation (0: none)")
    ap.add_argument("--gpu-target", choices=GPU_TARGETS, default="cuda-emu",
                    help="what the GPU cases run on: cuda-emu (default), the emulation; cuda, "
                         "the GPU through pycuda, compared with the interpreter and with the "
                         "emulation (exit status 2 at once where there is no GPU)")
    ap.add_argument("--auto-every", type=int, default=5,
                    help="every k-th case has the auto-scheduler's schedule (0: none)")
    ap.add_argument("--tensorize-every", type=int, default=10,
                    help="every k-th case is an int8 GEMM the auto-scheduler tensorizes with "
                         "the target's dot-product intrinsic (0: none)")
    ap.add_argument("--tensor-core-every", type=int, default=1,
                    help="of the GPU cases a quarter are candidates, and every k-th of those "
                         "is a float16/bfloat16 GEMM (maybe with an epilogue) on tensor cores "
                         "under the GPU rules (0: none)")
    ap.add_argument("--edge-every", type=int, default=5,
                    help="every k-th case is an edge case (tecomp.testing.edges: conditions "
                         "through == != | ~, split factors past 2**31, aliasing and stride-0 "
                         "arguments, torch's lazy bits, foreign CPU targets, tampered "
                         "libraries, gathers, second derivatives, quantization scales, "
                         "outputs autograd saved; 0: none)")
    ap.add_argument("--store-root-every", type=int, default=20,
                    help="every k-th case (of those that are not edge cases) is a case of the "
                         "store_root family (tecomp.testing.store_root: a stage computed at a "
                         "consumer's loop into its whole buffer and read after that loop nest; "
                         "legal schedules against numpy, illegal ones must raise the "
                         "documented ScheduleError; 0: none)")
    ap.add_argument("--op-every", type=int, default=0,
                    help="every k-th seed (those with seed %% k == 0) is a case of the ops "
                         "family (tecomp.testing.ops: one tecomp.nn pooling, reduction, "
                         "depthwise or grouped convolution call with random parameters, "
                         "NaN/inf/-0.0 inputs, views and misaligned outputs, against "
                         "PyTorch; 0, the default: none)")
    ap.add_argument("--threads-every", type=int, default=100,
                    help="every k-th seed (those with seed %% k == 9 %% k) is a case of the "
                         "threads family (tecomp.testing.concurrency: one module called from "
                         "several threads while the thread count changes, JIT-built and "
                         "loaded modules with and without a shared pool, builds, exports and "
                         "workspace releases during calls, torch.compile from two threads, "
                         "fork during a parallel region; every result bit for bit against a "
                         "serial run; 0: none).  Its long runs: python -m "
                         "tecomp.testing.concurrency --burners 2 --iterations 40")
    ap.add_argument("--args-every", type=int, default=50,
                    help="every k-th seed (those with seed %% k == 4 %% k) is a case of the "
                         "nnargs family (tecomp.testing.nnargs: one tecomp.nn call whose "
                         "stride, padding, axis, eps, clip bound, flag or shape a careless "
                         "user or an attacker wrote -- True, 1.5, NaN, 2**31, 300 for int8, "
                         "'SAMEE' --: a TecompError naming the argument, or numpy's / "
                         "PyTorch's answer; 0: none)")
    ap.add_argument("--producers-every", type=int, default=50,
                    help="every k-th seed (those with seed %% k == 10 %% k) is a case of the "
                         "producers family (tecomp.testing.producers: a templated operator "
                         "meeting a producer it does not expect -- Winograd weights given "
                         "transformed, packed weights as a placeholder, a convolution of a "
                         "computed input, a GEMM of a transpose or of one tensor twice, a "
                         "pooling of a convolution, a softmax of a matmul, attention of one "
                         "tensor as q, k and v, an output read again --, auto-scheduled and "
                         "run against numpy; 0: none)")
    ap.add_argument("--only", choices=("ops", "threads", "nnargs", "producers"), default=None,
                    help="run one family alone: 'ops' is --op-every 1, 'threads' "
                         "--threads-every 1, 'nnargs' --args-every 1, 'producers' "
                         "--producers-every 1")
    ap.add_argument("--check-passes", action="store_true",
                    help="also run the pass-by-pass checker on every case")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "tecomp-fuzz-reports"),
                    help="directory for the failure reports (default: $TMPDIR/tecomp-fuzz-reports)")
    ap.add_argument("--case-timeout", type=float, default=300.0,
                    help="seconds one case may take before its worker is killed and the case "
                         "is recorded as a hang (default 300)")
    ap.add_argument("--cpu-target", default="llvm",
                    help="the tc.Target the CPU cases are built for (default: this machine; "
                         "e.g. 'llvm -mcpu=haswell' for AVX2 code)")
    ap.add_argument("--torch-every", type=int, default=4,
                    help="every N-th CPU case also runs with torch tensors (0 disables)")
    ap.add_argument("--aot-every", type=int, default=20,
                    help="every N-th CPU case also runs exported and loaded (0 disables)")
    ap.add_argument("--replay", type=int, default=None, help="run one seed and print its report")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--step", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.only == "ops":
        args.op_every = 1
    elif args.only == "threads":
        args.threads_every, args.args_every = 1, 0
    elif args.only == "nnargs":
        args.args_every = 1
    elif args.only == "producers":
        args.producers_every, args.args_every, args.threads_every = 1, 0, 0

    if args.worker:
        return _worker(args)
    if args.gpu_target == "cuda":
        why = cuda_unavailable()
        if why is not None:
            print(f"{ap.prog}: --gpu-target cuda needs a CUDA GPU with pycuda and nvcc: "
                  f"{' '.join(why.split())}", file=sys.stderr)
            return 2
    if args.replay is not None:
        case = case_for_seed(args.replay, args.gpu_every, args.auto_every, args.cpu_target,
                             args.tensorize_every, args.gpu_target, args.edge_every,
                             args.store_root_every, args.tensor_core_every, args.op_every,
                             args.threads_every, args.args_every, args.producers_every)
        o = _run(case, args.replay, args)
        if o.kind == "refused":
            print(f"seed {args.replay}: refused as documented in {o.stage}: {o.detail}\n"
                  f"{case.source()}")
        elif o.rejected:
            print(f"seed {args.replay}: rejected in {o.stage} (a resource limit of the target, "
                  f"not a failure): {o.reason}\n{case.source()}")
        else:
            print(o.report() if not o.ok else f"seed {args.replay}: ok\n{case.source()}")
        return 0 if o.ok else 1

    t0 = time.time()
    jobs = max(1, min(args.jobs, args.cases))
    # worker j runs seeds seed+j, seed+j+jobs, ...
    todo = {j: list(range(args.seed + j, args.seed + args.cases, jobs)) for j in range(jobs)}
    results = {}
    kinds = Counter()
    sigs = defaultdict(list)
    rejects = defaultdict(list)  # reason -> seeds of the rejected schedules
    refusals = defaultdict(list)  # edge cases refused as documented: stage -> seeds
    targets = Counter()
    procs = {}

    def launch(j):
        seeds = todo[j]
        if seeds:
            procs[j] = _spawn(args, seeds[0], len(seeds), jobs)

    for j in range(jobs):
        launch(j)
    import selectors

    sel = selectors.DefaultSelector()
    for j, p in procs.items():
        sel.register(p.stdout, selectors.EVENT_READ, j)
    current = {}
    started = {}
    hung = set()   # workers killed for a hang: their EOF records the case as one
    limit = {}     # each worker's current case's time limit (seconds)
    hang_seed, hang_limit = _test_hang()
    pending = {}   # the bytes of each worker's unfinished last line

    def on_line(j, line):
        try:
            rec = json.loads(line)
        except ValueError:
            return
        if "start" in rec:
            current[j] = rec["start"]
            started[j] = time.time()
            limit[j] = (hang_limit if hang_limit is not None and rec["start"] == hang_seed
                        else args.case_timeout)
            return
        seed = rec["seed"]
        results[seed] = rec
        todo[j].remove(seed)
        current.pop(j, None)
        kinds[rec["kind"]] += 1
        targets[rec["target"]] += 1
        if rec["kind"] == "rejected":
            rejects[rec["sig"]].append(seed)
        elif rec["kind"] == "refused":
            refusals[rec["sig"].split(":")[0]].append(seed)
        elif rec["kind"] != "ok":
            sigs[rec["sig"]].append(seed)
            if not args.quiet:
                print(f"seed {seed}: {rec['sig']}", flush=True)
        done = len(results)
        if not args.quiet and done % 50 == 0:
            print(f"... {done}/{args.cases} cases, {kinds['mismatch']} mismatches, "
                  f"{kinds['crash']} crashes, {kinds['hang']} hangs, "
                  f"{time.time() - t0:.0f}s", flush=True)

    while procs:
        now = time.time()
        for j, seed in list(current.items()):
            if j not in hung and now - started[j] > limit[j]:
                hung.add(j)
                procs[j].kill()   # its EOF comes next
        for key, _ in sel.select(timeout=1.0):
            j = key.data
            p = procs[j]
            # the pipe's bytes as they come (a buffered readline could keep a line the
            # selector no longer reports, e.g. the start of a case that hangs)
            chunk = os.read(p.stdout.fileno(), 1 << 16)
            if chunk:
                *lines, pending[j] = (pending.get(j, b"") + chunk).split(b"\n")
                for line in lines:
                    on_line(j, line)
                continue
            # EOF: the worker ended
            pending.pop(j, None)
            sel.unregister(p.stdout)
            rc = p.wait()
            del procs[j]
            if j in current:  # died in the middle of a case
                seed = current.pop(j)
                kind = "hang" if j in hung else "crash"
                hung.discard(j)
                if kind == "hang":
                    sig = (f"hang: the case ran over {limit[j]:g}s (compile or run); "
                           f"its worker was killed")
                else:
                    sig = f"crash in process: the worker died (exit status {rc}) running the case"
                results[seed] = {"seed": seed, "kind": kind, "sig": sig, "target": "?"}
                todo[j].remove(seed)
                kinds[kind] += 1
                sigs[sig].append(seed)
                print(f"seed {seed}: {sig}", flush=True)
            if todo[j]:
                launch(j)
                if j in procs:
                    sel.register(procs[j].stdout, selectors.EVENT_READ, j)

    secs = time.time() - t0
    print(f"\ncases run: {len(results)} ({', '.join(f'{k}: {v}' for k, v in sorted(targets.items()))})"
          f" in {secs:.0f}s")
    print(f"rejected schedules (a documented resource limit of the target, not failures): "
          f"{kinds['rejected']}")
    for sig, seeds in sorted(rejects.items(), key=lambda x: -len(x[1])):
        print(f"  [{len(seeds)}x] {sig}  (seeds {', '.join(map(str, seeds[:8]))}"
              f"{', ...' if len(seeds) > 8 else ''})")
    if refusals:
        print(f"cases refused as documented (a TecompError where the case's family allows "
              f"one: an illegal call of ops/nnargs, a refusal a producers kind lists, an edge "
              f"or store_root case's): {kinds['refused']}")
        for sig, seeds in sorted(refusals.items(), key=lambda x: -len(x[1])):
            print(f"  [{len(seeds)}x] {sig}  (seeds {', '.join(map(str, seeds[:8]))}"
                  f"{', ...' if len(seeds) > 8 else ''})")
    print(f"mismatches: {kinds['mismatch']}")
    if args.gpu_target == "cuda":
        hw = sum(len(v) for k, v in sigs.items()
                 if k.startswith("mismatch in compare: cuda vs cuda-emu"))
        print(f"  of which the GPU and the emulation disagree (cuda vs cuda-emu): {hw}")
    print(f"crashes: {kinds['crash']}")
    print(f"hangs (over --case-timeout): {kinds['hang']}")
    for sig, seeds in sorted(sigs.items(), key=lambda x: -len(x[1])):
        print(f"  [{len(seeds)}x] {sig}  (seeds {', '.join(map(str, seeds[:8]))}"
              f"{', ...' if len(seeds) > 8 else ''})")
    if sigs:
        print(f"reports with reproducers: {args.out}/seed<N>.txt; "
              f"replay one with: python -m tecomp.testing.fuzz --replay <N>")
    return 1 if sigs else 0


if __name__ == "__main__":
    sys.exit(main())

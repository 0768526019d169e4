"""The differential runner: one case = a program, a schedule, a value of ``n`` and a seed.

:func:`run_case` lowers and builds the case, runs the reference interpreter on the
lowered IR, the compiled kernel (LLVM, or the CUDA emulation for GPU schedules) and the
numpy reference, and compares all three.  A case for target ``"cuda"`` runs on the GPU
and in the emulation, and the GPU's outputs are also compared with the emulation's.  It
never raises for a finding: it returns an :class:`Outcome` whose ``kind`` is ``ok``,
``rejected`` (the target refused the schedule for a documented resource limit: a
:class:`~tecomp.errors.ResourceLimitError`, e.g. a GPU tile over the 48 KiB of static
shared memory; not a failure), ``mismatch`` or ``crash`` (any other exception out of
tecomp for a legal program, including a ``ScheduleError`` for a sequence the docs call
legal) and whose :meth:`Outcome.report` prints a standalone reproducer.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple, Union

import numpy as np

import tecomp as tc
from ..strategy.cuda_rules import apply_cuda_rules
from ..strategy import Knobs, apply_rules
from ..ir import interp as _interp
from .. import target as _target  # cpu_model looked up at call time (tests patch it)
from .draw import HypothesisDraw, RandomDraw
from .gen import (DTYPES, GPU_DTYPES, gen_int8_gemm, gen_n, gen_program, gen_skinny_gemm,
                  gen_tensor_core_gemm, gen_view_gemm)
from . import qemu as _qemu
from .pass_check import check_passes as _check_passes
from .program import Program, is_float
from .sched import apply_steps, gen_gpu_int8_gemm_schedule, gen_gpu_schedule, gen_schedule, steps_source

# relative tolerance per dtype, against a float64 reference rounded at every stage
RTOL = {"float16": 3e-2, "bfloat16": 3e-2, "float32": 2e-4, "float64": 1e-9}


@dataclass
class Case:
    """One differential test case: a program, a schedule, a value of ``n`` and a seed
    (:func:`draw_case` makes them; ``case.source()`` is a standalone reproducer).

    Parameters
    ----------
    program : Program
        The random program.
    steps : list
        Its schedule's primitive calls.
    n : int, optional
        The value of the program's symbolic extent.
    seed : int, optional
        The seed of its input data.
    target : str, optional
        ``"llvm"``, ``"cuda"`` or ``"cuda-emu"``.
    name : str, optional
        The case's name.
    auto : int, optional
        The auto-scheduler writes the schedule instead of ``steps``: -1 its analytic
        schedule, k >= 0 its rules with every knob drawn from ``random.Random(k)``.
    """

    program: Program
    steps: list
    n: int = 5
    seed: int = 0
    target: str = "llvm"
    name: str = ""
    # the auto-scheduler writes the schedule instead of ``steps``: -1 its analytic
    # schedule, k >= 0 its rules with every knob drawn from random.Random(k)
    auto: Optional[int] = None

    def source(self) -> str:
        """A standalone Python reproducer of the case."""
        p = self.program
        ins = [i for i, s in enumerate(p.tensors) if s.is_placeholder]
        if self.auto is None:
            sched = ["s = tc.create_schedule(outs)", steps_source(self.steps)]
        elif _on_gpu(self.target):
            sched = ["import random", "from tecomp.strategy import Knobs",
                     "from tecomp.strategy.cuda_rules import apply_cuda_rules",
                     f"s = apply_cuda_rules(args, {{'n': {self.n}}}, "
                     f"knobs=Knobs(rng={_auto_rng_src(self.auto)}))"]
        else:
            sched = ["import random", "from tecomp.strategy import Knobs, apply_rules",
                     "from tecomp.strategy.cpu import cpu_model",
                     f"s = apply_rules(args, Knobs(rng={_auto_rng_src(self.auto)}), "
                     f"cpu_model({self.target!r}), "
                     f"{{'n': {self.n}}})"]
        bf16 = any(t.dtype == "bfloat16" for t in p.tensors)
        lines = ["import numpy as np", "import ml_dtypes  # noqa: F401" if bf16 else "",
                 "import tecomp as tc", "from tecomp.ir import interp", "",
                 p.source(), *sched,
                 f'f = tc.build(s, args, target="{self.target}")',
                 "print(tc.lower(s, args))", "rng = np.random.default_rng(0)"]
        n = self.n
        arrs, outs = [], []
        for i in p.arg_order():
            spec = p.tensors[i]
            shape = p.concrete_shape(i, n)
            if i in ins:
                if is_float(spec.dtype):
                    lines.append(f'a{i} = rng.uniform(-1, 1, size={shape}).astype("{spec.dtype}")')
                elif p.full_range and spec.dtype in ("uint8", "int8"):
                    lo, hi = (0, 256) if spec.dtype == "uint8" else (-128, 128)
                    lines.append(f'a{i} = rng.integers({lo}, {hi}, size={shape}).astype("{spec.dtype}")')
                else:
                    lo = 0 if spec.dtype == "uint8" else -8
                    lines.append(f'a{i} = rng.integers({lo}, 9, size={shape}).astype("{spec.dtype}")')
            else:
                lines.append(f'a{i} = np.zeros({shape}, "{spec.dtype}")')
                outs.append(f"a{i}")
            arrs.append(f"a{i}")
        arrs.extend(repr(v) for v in p.scalar_args(n))
        call = ", ".join(arrs)
        if _cross(self.target):   # another instruction set's code: under qemu-user
            lines.append("from tecomp.testing import qemu")
            lines.append('f.export_library("/tmp/tecomp_repro.so")')
            lines.append(f'qemu.run_library("/tmp/tecomp_repro.so", {call})')
        else:
            lines.append(f"f({call})")
        lines.append(f"got = [{', '.join(x + '.copy()' for x in outs)}]")
        lines.append(f"interp.run(tc.lower(s, args), {call})  # the reference interpreter")
        lines.append(f"for g, want in zip(got, [{', '.join(outs)}]):")
        lines.append("    print(np.max(np.abs(g.astype('float64') - want), initial=0))")
        if _on_device(self.target):
            # the fuzzer compares the GPU's outputs with the emulation's too
            lines.append('emu = tc.build(s, args, target="cuda-emu")  # the CUDA emulation')
            lines.append(f"emu({call})")
            lines.append(f"for g, want in zip(got, [{', '.join(outs)}]):")
            lines.append("    print(np.max(np.abs(g.astype('float64') - want), initial=0))")
        return "\n".join(x for x in lines if x)


@dataclass
class SpecCase:
    """A case of a family that draws a JSON-able ``spec`` (``ops``, ``nnargs``,
    ``threads``; each subclasses this with its ``family``): the spec, the seed of its
    data, the target, its name, the fuzz seed it was drawn from, and the fields the
    fuzz driver reads of every case (``n``, ``twist``)."""

    spec: dict
    seed: int = 0
    target: str = "llvm"
    name: str = ""
    fuzz_seed: int = 0
    family: str = ""
    n: int = 0
    twist: dict = field(default_factory=dict)

    def replay_lines(self, replay: str, module: str, runner: str,
                     target: bool = True) -> list:
        """The reproducer's last lines, shared by the families: how to replay the fuzz
        seed (``replay``: the command's arguments), then Python that rebuilds this case
        from its spec (``module``'s class of this case; ``target``: with its target)
        and runs it with ``runner``, printing the outcome."""
        tgt = f", target={self.target!r}" if target else ""
        return [f"# replay: python -m {replay} --replay {self.fuzz_seed}",
                f"from tecomp.testing.{module} import {type(self).__name__}, {runner}",
                f"case = {type(self).__name__}(spec={self.spec!r}, seed={self.seed}{tgt})",
                f"o = {runner}(case)",
                "print(o.kind, o.stage, o.detail)"]


@dataclass
class Outcome:
    """What :func:`run_case` found: ``kind`` is ``ok``, ``rejected`` (a documented resource
    limit), ``refused`` (an edge case's allowed error), ``mismatch`` or ``crash``;
    ``outcome.ok`` says nothing wrong was found, ``outcome.report()`` prints a
    reproducer.

    Parameters
    ----------
    kind : str
        The kind of outcome.
    case : Case
        The case.
    stage : str, optional
        Where it happened (build, lower, interp, llvm, compare, ...).
    detail : str, optional
        What happened.
    ir : str, optional
        The lowered IR.
    """

    kind: str  # ok | rejected | refused (edge cases: edges.py) | mismatch | crash
    case: Case
    stage: str = ""  # where: build/lower/interp/llvm/compare/...
    detail: str = ""
    ir: str = ""

    @property
    def ok(self) -> bool:
        """Nothing wrong was found: the case ran and matched, or it was rejected (or, an
        edge case, refused with the error its family allows)."""
        return self.kind in ("ok", "rejected", "refused")

    @property
    def rejected(self) -> bool:
        """The target refused the schedule for a documented resource limit (nothing ran)."""
        return self.kind == "rejected"

    @property
    def reason(self) -> str:
        """The last line of ``detail`` (the exception, for a rejection or a crash)."""
        lines = [x for x in self.detail.strip().splitlines() if x.strip()]
        return lines[-1] if lines else ""

    def report(self) -> str:
        out = [f"== {self.kind} in {self.stage}: {self.case.name} (n={self.case.n}, "
               f"seed={self.case.seed}, target={self.case.target})", self.detail.rstrip()]
        if self.ir:
            out += ["-- lowered IR --", self.ir]
        out += ["-- reproducer --", self.case.source()]
        return "\n".join(out)


def _cross(target: str) -> bool:
    """Whether ``target`` is a CPU target of another instruction set (its cases are
    exported and run under qemu-user)."""
    try:
        t = tc.Target(target)
    except tc.TargetError:
        return False
    return t.is_cpu and not t.is_native_isa


def _target_of(target: str):
    """``target`` as a :class:`tc.Target`, or None for a string ``tc.Target`` refuses (a
    reproducer is printed even for such a case)."""
    try:
        return tc.Target(target)
    except tc.TargetError:
        return None


def _on_gpu(target: str) -> bool:
    t = _target_of(target)
    return t is not None and t.is_gpu


def _is_host(target: str) -> bool:
    """This machine's CPU as it is (the torch and export/load runs are its)."""
    t = _target_of(target)
    return t is not None and t.is_cpu and t.is_host


def _on_device(target: str) -> bool:
    """The GPU itself (not its emulation)."""
    t = _target_of(target)
    return t is not None and t.is_gpu and not t.is_emulated


def _auto_rng_src(auto: int) -> str:
    return "None" if auto < 0 else f"random.Random({auto})"


def auto_schedule_case(case: Case, args):
    """The auto-scheduler's schedule of a case with ``case.auto`` set."""
    import random

    rng = None if case.auto < 0 else random.Random(case.auto)
    if _on_gpu(case.target):
        return apply_cuda_rules(args, {"n": case.n}, knobs=Knobs(rng=rng))
    return apply_rules(args, Knobs(rng=rng), _target.cpu_model(case.target), {"n": case.n})


def _fill(shape, dtype):
    if is_float(dtype):
        return np.full(shape, np.nan, dtype)
    if dtype == "bool":
        return np.zeros(shape, bool)
    return np.full(shape, np.iinfo(dtype).max // 3, dtype)


def _accumulation_factor(prog, n: int) -> float:
    """How much wider the tolerance against numpy is for 16-bit floats: a reduction of
    a bfloat16 or float16 tensor accumulates in its output buffer, rounded at every step
    (as in TVM and Halide; cast to float32 to accumulate in float32), where the numpy
    reference sums in float64 and rounds once; its error grows with the terms combined
    (half an ulp per step: a product of 11 bfloat16 terms was off by 5.7%, campaign seed
    6203552) and flows into the stages that read it, so the terms of every such
    reduction add up.  (LLVM and the interpreter, which round alike, are still compared
    with the plain tolerance.)"""
    widen = 1.0
    for t in prog.tensors:
        if t.reduce is not None and t.dtype in ("bfloat16", "float16"):
            pts = 1
            for e in t.reduce.extents:
                pts *= n if e == "n" else e
            widen += pts / 4
    return widen


def compare(got: np.ndarray, ref: np.ndarray, dtype: str, what: str,
            widen: float = 1.0) -> Optional[str]:
    """None when ``got`` matches ``ref`` (exactly for ints; within RTOL (times ``widen``)
    of the largest magnitude for floats, NaN and inf where the reference has them); else
    a description of the first differences."""
    if got.shape != ref.shape:
        return f"{what}: shape {got.shape} != {ref.shape}"
    if got.size == 0:
        return None
    if not is_float(dtype):
        bad = got != ref
    else:
        g = got.astype(np.float64)
        r = ref.astype(np.float64)
        if dtype == "float16":
            # near float16's overflow, per-step rounding decides between a large value
            # and inf: accept an inf of the same sign there
            big = np.isfinite(r) & (np.abs(r) > 16384)
            r = np.where(big & np.isinf(g), g, r)
        fin = np.isfinite(r)
        scale = max(1.0, float(np.max(np.abs(r[fin]))) if fin.any() else 1.0)
        tol = RTOL[dtype] * scale * widen
        with np.errstate(all="ignore"):
            close = np.abs(g - r) <= tol
        same_special = (np.isnan(g) & np.isnan(r)) | (np.isinf(r) & (g == r))
        bad = ~(np.where(fin, close & np.isfinite(g), same_special))
    if not bad.any():
        return None
    idx = np.argwhere(bad)
    lines = [f"{what}: {int(bad.sum())} of {bad.size} elements differ"]
    for ix in idx[:5]:
        t = tuple(int(x) for x in ix)
        lines.append(f"  at {t}: got {got[t]!r}, expected {ref[t]!r}")
    return "\n".join(lines)


def run_case(case: Case, *, interp: bool = True, check_passes: bool = False,
             also: Tuple[str, ...] = ()) -> Outcome:
    """Run ``case`` and compare the interpreter, the compiled kernel and numpy (see the
    module doc).  Never raises for a finding: the Outcome says it.

    Parameters
    ----------
    case : Case
        The case.
    interp : bool, optional
        Also run the reference interpreter on the lowered IR.
    check_passes : bool, optional
        Lower with :func:`check_passes` (every pass checked).
    also : tuple of str, optional
        For CPU cases that run here: ``"torch"`` calls the kernel once more with torch
        tensors sharing the arrays' memory, ``"aot"`` exports it with
        ``export_library``, loads it with ``tc.load_module`` and calls the loaded
        module; their outputs are compared like the others.

    Returns
    -------
    Outcome
        What was found.
    """
    prog = case.program
    stage = ["build program"]
    ir = ""
    try:
        s, args, func = schedule_case(case, stage)
        ir = str(func)
        if check_passes:
            stage = "check_passes"
            _check_passes(s, args, sizes={"n": case.n} if prog.symbolic else None, seed=case.seed,
                          target=tc.Target(case.target).kind)
        stage = "build"
        # (an llvm target for another CPU builds the same lowered function, cross-compiled;
        # one of another instruction set is exported and run under qemu-user)
        foreign = _cross(case.target)
        mod = tc.build(tc.lower(s, args, target=case.target) if _on_gpu(case.target) else func,
                       target=case.target)
        emu = None
        if _on_device(case.target):
            # the real GPU is compared with the emulation of the same schedule too
            stage = "build cuda-emu"
            emu = tc.build(tc.lower(s, args, target="cuda-emu"), target="cuda-emu")
    except tc.ResourceLimitError as e:  # a legal schedule the target cannot run: no finding
        return Outcome("rejected", case, _stage(stage), _exc_text(e), ir)
    except Exception as e:  # noqa: BLE001 - a crash is a finding
        return Outcome("crash", case, _stage(stage), _exc_text(e), ir)

    inputs = prog.random_inputs(case.n, np.random.default_rng(case.seed))
    order = prog.arg_order()
    try:
        ref, unknown = prog.numpy_reference(inputs, case.n)
    except Exception as e:  # noqa: BLE001 - the reference itself failed: a fuzzer bug
        return Outcome("crash", case, "numpy reference (fuzzer bug)", _exc_text(e), ir)

    def fresh():
        return case_arrays(case, inputs)

    results = {}
    stage = case.target
    try:
        arrs = fresh()
        if foreign:
            stage = f"{case.target} under qemu"
        call_built(mod, case.target, arrs)
        results[case.target] = arrs
        if emu is not None:
            stage = "cuda-emu"
            arrs = fresh()
            emu(*arrs)
            results["cuda-emu"] = arrs
        if _on_gpu(case.target):
            # deterministic thread order, last thread first: a missing barrier shows
            stage = "cuda-emu (mode=reverse)"
            arrs = fresh()
            (emu or mod)(*arrs, mode="reverse")
            results["cuda-emu reverse"] = arrs
        if _is_host(case.target) and "torch" in also:
            stage = "llvm with torch tensors"
            arrs = fresh()
            mod(*_as_tensors(arrs))  # the tensors share the arrays' memory
            results["llvm torch"] = arrs
        if _is_host(case.target) and "aot" in also:
            stage = "llvm exported and loaded"
            with tempfile.TemporaryDirectory(prefix="tecomp-fuzz-aot-") as d:
                path = os.path.join(d, "kernel.so")
                mod.export_library(path)
                loaded = tc.load_module(path)
                arrs = fresh()
                loaded(*arrs)
            results["llvm aot"] = arrs
        if interp:
            stage = "interp"
            arrs = fresh()
            _interp.run(func, *arrs)
            results["interp"] = arrs
    except tc.ResourceLimitError as e:
        # a limit only the device knows, checked at the launch (e.g. the threads per
        # block that the compiled kernel's registers allow): no finding
        return Outcome("rejected", case, stage, _exc_text(e), ir)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, stage, _exc_text(e), ir)

    # the compiled kernels compared with the interpreter: the case's target, and the
    # emulation of a case run on the GPU
    compiled = [case.target] + (["cuda-emu"] if emu is not None else [])
    problems = numpy_problems(case, inputs, ref, unknown, results)
    hw_vs_emu = []  # the GPU against the emulation: a finding of its own (listed first)
    for pos, i in enumerate(order):
        if i in inputs:
            continue
        spec = prog.tensors[i]
        for name in compiled if "interp" in results else ():
            a, b = results[name][pos], results["interp"][pos]
            msg = compare(a, b.astype(np.float64) if is_float(spec.dtype) else b, spec.dtype,
                          f"{name} vs interp, output {spec.name}")
            if msg:
                problems.append(msg)
        if emu is not None:
            a, b = results[case.target][pos], results["cuda-emu"][pos]
            msg = compare(a, b.astype(np.float64) if is_float(spec.dtype) else b, spec.dtype,
                          f"{case.target} vs cuda-emu, output {spec.name}")
            if msg:
                hw_vs_emu.append(msg)
    if hw_vs_emu or problems:
        return Outcome("mismatch", case, "compare", "\n".join(hw_vs_emu + problems), ir)
    return Outcome("ok", case, "", "", ir)


def call_built(mod, target: str, arrs: list) -> None:
    """Call the module built for ``target`` on ``arrs``: here, or (a CPU of another
    instruction set) exported and run under qemu-user."""
    if not _cross(target):
        mod(*arrs)
        return
    with tempfile.TemporaryDirectory(prefix="tecomp-fuzz-cross-") as d:
        path = os.path.join(d, "kernel.so")
        mod.export_library(path)
        _qemu.run_library(path, *arrs)


def numpy_problems(case: Case, inputs: dict, ref: dict, unknown: dict, results: dict) -> list:
    """What differs from the numpy reference (``ref, unknown = prog.numpy_reference(inputs,
    n)``) in ``results`` (a name -> the call's arguments after it): an input modified, an
    output off by more than the dtype's tolerance."""
    prog = case.program
    problems = []
    widen = _accumulation_factor(prog, case.n)
    for pos, i in enumerate(prog.arg_order()):
        if i in inputs:
            for name, arrs in results.items():
                if not np.array_equal(arrs[pos], inputs[i], equal_nan=True):
                    problems.append(f"{name} modified input {prog.tensors[i].name}")
            continue
        spec = prog.tensors[i]
        want, unk = ref[i], unknown.get(i)
        for name, arrs in results.items():
            # (where the reference cannot vouch for an element, the compiled kernels are
            # still compared with the interpreter)
            w = want if unk is None else np.where(unk, np.asarray(arrs[pos], want.dtype), want)
            msg = compare(arrs[pos], w, spec.dtype, f"{name} vs numpy, output {spec.name}",
                          widen if spec.dtype in ("bfloat16", "float16") else 1.0)
            if msg:
                problems.append(msg)
    return problems


def schedule_case(case: Case, stage: Optional[list] = None):
    """The case's schedule, argument list and lowered function: ``(s, args, func)``.
    Raises what tecomp raises; ``stage`` (a list) gets the name of each step as it
    starts, so a caller can say where an exception came from."""
    stage = [] if stage is None else stage
    prog = case.program
    stage.append("build program")
    built, nvar = prog.build()
    if case.auto is None:
        stage.append("schedule")
        r = apply_steps(prog, case.steps, built, nvar)
        s, args = r.s, r.args
    else:
        stage.append("auto_schedule")
        args = prog.args(built, nvar)
        s = auto_schedule_case(case, args)
    stage.append("lower")
    return s, args, tc.lower(s, args)


def _stage(stage) -> str:
    return stage[-1] if isinstance(stage, list) else stage


def case_arrays(case: Case, inputs: dict) -> list:
    """The call's arguments in order: copies of ``inputs`` (tensor index -> array), the
    outputs filled with a value no kernel computes by chance (NaN, a large int), then the
    scalar parameters."""
    prog = case.program
    out = []
    for i in prog.arg_order():
        if i in inputs:
            out.append(inputs[i].copy())
        else:
            out.append(_fill(prog.concrete_shape(i, case.n), prog.tensors[i].dtype))
    out.extend(prog.scalar_args(case.n))
    return out


def _as_tensors(arrs):
    """Each numpy array as a torch tensor over the same memory (arrays of a dtype torch
    lacks, and scalars, as they are)."""
    import torch

    out = []
    for a in arrs:
        if isinstance(a, np.ndarray):
            try:
                a = torch.from_numpy(a)
            except TypeError:  # a dtype torch has no tensors of
                pass
        out.append(a)
    return out


def _exc_text(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(tb[-6:])


# ---------------------------------------------------------------------------------
# drawing whole cases


def draw_int8_gemm_case(d, *, name: str = "", target: str = "llvm") -> Case:
    """An int8 GEMM (``gen.gen_int8_gemm``) with the auto-scheduler's schedule: its rules
    tensorize it with the target's dot-product intrinsic where the shape allows, with
    random knobs (which intrinsic or none, the block) three times in four."""
    prog = gen_int8_gemm(d)
    seed = d.int(0, 2**16)
    pick = d.int(0, 3)
    return Case(prog, [], 5, seed, target, name, auto=-1 if pick == 0 else d.int(0, 2**16))


def draw_tensor_core_case(d, *, name: str = "", target: str = "cuda-emu") -> Case:
    """A float16 / bfloat16 GEMM summed in float32 with maybe an epilogue
    (``gen.gen_tensor_core_gemm``) under the GPU rules, which put it on tensor cores: their
    default tiling, or (three times in four) random knobs (warps, fragments, k step,
    double buffering: tilings that divide the extents, or for odd extents tiles no larger
    than them rounded up to 16, padded at the edge)."""
    prog = gen_tensor_core_gemm(d)
    seed = d.int(0, 2**16)
    pick = d.int(0, 3)
    return Case(prog, [], 5, seed, target, name, auto=-1 if pick == 0 else d.int(0, 2**16))


def draw_view_gemm_case(d, *, name: str = "", target: str = "llvm") -> Case:
    """A GEMM the GEMM template takes, an operand read through a view
    (``gen.gen_view_gemm``), with the auto-scheduler's schedule (its defaults, or random
    knobs three times in four): whatever the template's padded panels, the schedule
    must build and compute the GEMM."""
    prog = gen_view_gemm(d)
    seed = d.int(0, 2**16)
    pick = d.int(0, 3)
    return Case(prog, [], 5, seed, target, name, auto=-1 if pick == 0 else d.int(0, 2**16))


def draw_skinny_gemm_case(d, *, name: str = "", target: str = "llvm") -> Case:
    """A skinny float32 GEMM (``gen.gen_skinny_gemm``: 1 to 16 rows, odd ``N`` and
    ``K``) with the auto-scheduler's schedule (its defaults, or random knobs three times
    in four: the skinny template's tiles, prefetches and rows in lanes)."""
    prog = gen_skinny_gemm(d)
    seed = d.int(0, 2**16)
    pick = d.int(0, 3)
    return Case(prog, [], 5, seed, target, name, auto=-1 if pick == 0 else d.int(0, 2**16))


def draw_gpu_int8_gemm_case(d, *, name: str = "") -> Case:
    """An int8 GEMM (``gen.gen_int8_gemm``) in the CUDA emulation, its reduction run as
    ``cuda.dp4a_u8s8s32`` where the layout allows (``sched.gen_gpu_int8_gemm_schedule``)."""
    prog = gen_int8_gemm(d)
    seed = d.int(0, 2**16)
    try:
        steps = gen_gpu_int8_gemm_schedule(d, prog)
    except Exception:  # noqa: BLE001 - replayed (and reported) by run_case
        steps = list(getattr(gen_gpu_int8_gemm_schedule, "last_steps", []))
    return Case(prog, steps, 5, seed, "cuda-emu", name)


def draw_case(d: Union[RandomDraw, HypothesisDraw], *, target: str = "llvm",
              max_stages: int = 4, max_steps: int = 6, dtypes: Optional[Sequence[str]] = None,
              name: str = "", auto: bool = False) -> Case:
    """A random program with a random legal schedule.

    If the schedule generator itself hits an error, the case keeps the steps drawn so
    far plus the failing one (replaying it shows the error).

    Parameters
    ----------
    d : RandomDraw or HypothesisDraw
        The source of random choices.
    target : str, optional
        ``"llvm"``, ``"cuda"`` or ``"cuda-emu"``.
    max_stages : int, optional
        The most computes in the program.
    max_steps : int, optional
        The most schedule primitives.
    dtypes : sequence of str, optional
        The dtypes drawn from (default: every one the target supports).
    name : str, optional
        The case's name.
    auto : bool, optional
        The schedule is the auto-scheduler's instead: its analytic one or (three times
        in four, on the CPU) its rules with random knobs; for a GPU target its GPU
        rules.

    Returns
    -------
    Case
        The case.

    Examples
    --------
    >>> from tecomp.testing import RandomDraw, draw_case, run_case
    >>> case = draw_case(RandomDraw(7))
    >>> run_case(case).ok
    True
    """
    gpu = _on_gpu(target)
    kw = {"dtypes": dtypes} if dtypes else {"dtypes": GPU_DTYPES if gpu else DTYPES}
    if not gpu:
        prog = gen_program(d, max_stages=max_stages, **kw)
    else:
        prog = gen_program(d, max_stages=min(max_stages, 2), max_depth=2, **kw)
    n = gen_n(d) if prog.symbolic else 5
    seed = d.int(0, 2**16)
    if prog.symbolic and seed % 3 == 0:
        # an int64 extent (bounded by 2**40 at call time: lowering's proofs use the bound),
        # chosen from the data seed so that the other draws stay the same
        prog = dataclasses.replace(prog, n_dtype="int64")
    if auto:
        if gpu:
            return Case(prog, [], n, seed, target, name, auto=-1)
        pick = d.int(0, 3)
        return Case(prog, [], n, seed, "llvm", name, auto=-1 if pick == 0 else d.int(0, 2**16))
    try:
        if not gpu:
            steps = gen_schedule(d, prog, max_steps=max_steps)
        else:
            steps = gen_gpu_schedule(d, prog)
    except Exception:  # noqa: BLE001 - replayed (and reported) by run_case
        fn = gen_gpu_schedule if gpu else gen_schedule
        steps = list(getattr(fn, "last_steps", []))
    return Case(prog, steps, n, seed, target, name)

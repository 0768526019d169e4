"""Tuned CPU schedules for the operators of :mod:`tecomp.nn.ops` (``target="llvm"``).

Every ``schedule_*(outs, target="llvm")`` takes the output tensor(s) of an operator (or a
list of them) and returns a :class:`~tecomp.schedule.schedule.Schedule`; the shapes decide
the blocking, and any shape is correct (tails are guarded, and loop partitioning gives
the full blocks guard-free code and the tail its own smaller unrolled kernel).

The machine model (:func:`cpu_info`) comes from the LLVM host: the SIMD width (16 float32
lanes with AVX-512, 8 with AVX2), the number of vector registers (32 / 16), and the
thread count of the runtime (``tc.set_num_threads``).

GEMM (``schedule_matmul``, ``schedule_dense``, the packed helpers)
    A register-blocked micro-kernel in the style of GotoBLAS/BLIS: an ``MR x NR`` block
    of C (``NR`` = two vectors) held in ``MR * NR / lanes`` vector accumulators over a
    ``KC``-long slice of the reduction: the ``k`` loop is innermost-but-two, the ``MR``
    rows are unrolled, the ``NR`` columns are one widened vector, so each ``k`` step is
    ``NR/lanes`` vector loads of B, ``MR`` broadcasts of A and ``MR*NR/lanes`` FMAs.  The
    C block is loaded before and stored after the ``k`` loop (LLVM's LICM promotes it to
    registers: the buffers are ``noalias``).  B is packed into ``KC x NR`` micro-panels
    (a compute stage, or a ``cache_read`` computed at the panel loop), so the micro-kernel
    reads B contiguously from L1.  Loops, outermost first::

        jc/ic (fused, parallel)   blocks of C columns (NC) x rows (MC), one task each
          pc                      KC slice of the reduction (pack B's slice here)
            jr                    NR-wide panel (B micro-panel stays in L1)
              ir                  MR rows
                k, i (unrolled), j (vector)

Convolutions (``schedule_conv2d_nchw`` / ``_nhwc``)
    The same idea: a block of outputs held in registers over the whole reduction
    (channels x kernel window), the padded input computed per output tile
    (``compute_at``), see each function.

Softmax, pooling, elementwise: one pass per row / tile, vectorized and parallel.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .. import te as _te
from ..errors import ScheduleError
from ..ir.expr import Const, Expr, ProducerLoad, Reduce
from ..schedule.schedule import Schedule, Stage, create_schedule
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor

__all__ = [
    "cpu_info", "CpuInfo", "schedule_matmul", "schedule_dense", "schedule_conv2d_nchw",
    "schedule_conv2d_nhwc", "schedule_softmax", "schedule_elementwise", "schedule_injective",
    "schedule_pool", "matmul_packed", "dense_packed", "softmax_fast", "gemm_params",
]


# ---------------------------------------------------------------------------------
# the machine


@dataclass(frozen=True)
class CpuInfo:
    """What the schedules adapt to."""

    lanes: int          # float32 lanes of one vector register
    vregs: int          # architectural vector registers
    threads: int        # threads of the parallel runtime
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024


def _host_features():
    try:
        from ..codegen import llvm_jit

        h = llvm_jit.host()
        return h.has_feature
    except Exception:  # noqa: BLE001 - no LLVM: assume a plain AVX2 machine
        return lambda name: name in ("avx2", "fma")


def _cache_size(level: int, default: int) -> int:
    """L1d / L2 size of cpu0 from sysfs (per core), or ``default``."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            p = os.path.join(base, d)
            with open(os.path.join(p, "level")) as f:
                lvl = int(f.read())
            with open(os.path.join(p, "type")) as f:
                typ = f.read().strip()
            if lvl == level and typ in ("Data", "Unified"):
                with open(os.path.join(p, "size")) as f:
                    txt = f.read().strip()
                mult = {"K": 1024, "M": 1024 * 1024}.get(txt[-1], 1)
                return int(txt.rstrip("KM")) * mult
    except (OSError, ValueError):
        pass
    return default


def cpu_info(target: str = "llvm") -> CpuInfo:
    """The vector width, register count and thread count the schedules use.

    ``TECOMP_VECTOR_LANES`` (8 or 16) overrides the detected width (e.g. to produce the
    AVX2 schedules on an AVX-512 machine)."""
    if not isinstance(target, str) or target.split()[0] != "llvm":
        raise ScheduleError(f"the tecomp.nn CPU schedules are for target='llvm', got {target!r}")
    has = _host_features()
    lanes = 16 if has("avx512f") else 8 if has("avx") else 4
    env = os.environ.get("TECOMP_VECTOR_LANES")
    if env:
        lanes = int(env)
    vregs = 32 if lanes == 16 else 16
    try:
        from ..codegen.llvm_runtime import get_num_threads

        threads = max(1, int(get_num_threads()))
    except Exception:  # noqa: BLE001
        threads = os.cpu_count() or 1
    return CpuInfo(lanes, vregs, threads, _cache_size(1, 32 * 1024), _cache_size(2, 512 * 1024))


# ---------------------------------------------------------------------------------
# small helpers


def _outs(outs) -> List[Tensor]:
    if isinstance(outs, Tensor):
        return [outs]
    if isinstance(outs, (list, tuple)) and outs and all(isinstance(t, Tensor) for t in outs):
        return list(outs)
    raise ScheduleError(f"a schedule_* function takes an output tensor or a list of them, "
                        f"got {outs!r}")


def _cint(e) -> Optional[int]:
    """The value of a constant extent, or None when symbolic."""
    return int(e.value) if isinstance(e, Const) else None


def _walk(outs: Sequence[Tensor]) -> List[ComputeOp]:
    """Every compute op reachable from ``outs``, producers first."""
    seen, order = set(), []

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        if isinstance(op, ComputeOp):
            order.append(op)

    for t in outs:
        visit(t.op)
    return order


def _find(outs, pred) -> List[ComputeOp]:
    return [op for op in _walk(outs) if pred(op)]


def _has_tag(op, *tags) -> bool:
    mine = set(t.strip() for t in (op.tag or "").split(","))
    return any(t in mine for t in tags)


def _is_injective(op) -> bool:
    return isinstance(op, ComputeOp) and not op.reduce_axis


def _inline_injective(s: Schedule, ops, keep=()):
    """Inline every injective (reduction-free) stage of ``ops`` that is not an output
    and not in ``keep``."""
    for op in ops:
        if op in keep or not _is_injective(op):
            continue
        st = s[op]
        if st.is_output or st.attach_type != "root":
            continue
        st.compute_inline()


def _loads(expr, tensor) -> List[ProducerLoad]:
    from ..ir.functor import collect

    return [n for n in collect(expr, lambda n: isinstance(n, ProducerLoad))
            if n.producer is tensor]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def _vector_split(s: Stage, axis, extent: Optional[int], lanes: int):
    """Split ``axis`` so that the inner part is one vector (whole extent when it fits)
    and vectorize it; return the outer axis (or None when the axis is all vector)."""
    if extent is not None and extent <= lanes:
        s.vectorize(axis)
        return None
    o, i = s.split(axis, factor=lanes)
    s.vectorize(i)
    return o


def _parallel_outer(s: Stage, axes: Sequence, extents: Sequence[Optional[int]], threads: int,
                    min_tasks: int = 1):
    """Fuse the leading ``axes`` until there are enough iterations for the threads and
    make the result parallel.  Returns the parallel axis (or None)."""
    if threads <= 1 or not axes:
        return None
    take, total = [], 1
    for ax, ext in zip(axes, extents):
        take.append(ax)
        if ext is None:
            total = None
            break
        total *= ext
        if total >= max(threads * 4, min_tasks):
            break
    if total is not None and total < 2:
        return None
    ax = take[0] if len(take) == 1 else s.fuse(*take)
    s.parallel(ax)
    return ax


# ---------------------------------------------------------------------------------
# GEMM


@dataclass(frozen=True)
class GemmParams:
    mr: int      # rows of the register block (unrolled)
    nr: int      # columns of the register block (one widened vector)
    kc: int      # reduction slice (a B micro-panel is kc x nr: L1)
    mc: int      # rows per task block (an A block mc x kc: L2)
    nc: int      # columns per task block
    lanes: int


def gemm_params(M: Optional[int], N: Optional[int], K: Optional[int],
                info: Optional[CpuInfo] = None) -> GemmParams:
    """The blocking of an ``M x N x K`` GEMM on this machine (extents may be None when
    symbolic)."""
    info = info or cpu_info()
    L = info.lanes
    # NR: two vectors (one when N is small), never much wider than N
    if N is not None and N <= L:
        nr = N
    elif N is not None and N <= 2 * L:
        nr = L
    else:
        nr = 2 * L
    nvec = max(1, -(-nr // L))
    # MR: as many rows as the accumulators allow (leave room for B and a broadcast)
    budget = (info.vregs - nvec - 2) // nvec
    mr = max(1, min(budget, 6 if L <= 8 else 8))
    if M is not None and M < mr:
        mr = M
    kc = 256
    if K is not None and K <= 384:
        kc = K
    elif K is not None:
        nk = -(-K // 256)
        kc = -(-K // nk)  # balanced slices, no tiny tail
    # task blocks: enough column blocks for the threads, rows split when N is narrow
    T = info.threads
    panels = _ceil(N, nr) if N is not None else 64
    col_blocks = min(panels, T)
    nc = nr * _ceil(panels, col_blocks)
    row_panels = _ceil(M, mr) if M is not None else 64
    row_blocks = min(row_panels, _ceil(T, col_blocks))
    # an A block of mc x kc should fit in half of L2 (B's micro-panels take the rest)
    a_rows_l2 = max(mr, (info.l2_bytes // 2) // (4 * kc))
    row_blocks = max(row_blocks, _ceil(row_panels * mr, a_rows_l2))
    mc = mr * _ceil(row_panels, row_blocks)
    return GemmParams(mr, nr, kc, mc, nc, L)


def _gemm_operands(op: ComputeOp):
    """For ``C[i, j] = sum_k X[.., ..] * Y[.., ..]``: (a, a_kfirst, b, b_kfirst) where
    ``a`` is the operand indexed by ``i`` and ``b`` the one indexed by ``j``; ``*_kfirst``
    says whether the reduction index comes first (``B[k, j]``) or last (``W[j, k]``)."""
    body = op.body
    if not isinstance(body, Reduce) or len(op.axis) != 2 or len(op.reduce_axis) != 1:
        raise ScheduleError(f"{op.name} is not a 2-d GEMM (C[i, j] = sum_k ...)")
    i, j = (iv.var for iv in op.axis)
    k = op.reduce_axis[0].var
    a = b = None
    for t in op.input_tensors:
        for ld in _loads(body.source, t):
            idx = ld.indices
            if len(idx) != 2:
                continue
            if idx[0] is i and idx[1] is k:
                a = (t, False)
            elif idx[0] is k and idx[1] is j:
                b = (t, True)
            elif idx[0] is j and idx[1] is k:
                b = (t, False)
    return a, b


def _schedule_gemm_stage(s: Schedule, C: Tensor, info: CpuInfo, packed: Optional[Tensor] = None):
    """The register-blocked GEMM schedule of stage ``C`` (see the module docstring).

    ``packed``: a compute stage ``P[jo, k, ji]`` holding B in ``NR``-wide panels (from
    :func:`matmul_packed`); it is computed per (column block, k slice).  Without it, B
    (read as ``B[k, j]``) is copied into a ``KC x NR`` micro-panel at the panel loop."""
    op = C.op
    M, N = (_cint(e) for e in op.shape)
    K = _cint(op.reduce_axis[0].dom.extent)
    st = s[C]
    if packed is not None:
        nr = int(op.attrs.get("nr", 0)) or _cint(packed.shape[2])
        p = gemm_params(M, N, K, info)
        p = GemmParams(p.mr if nr >= info.lanes else max(1, min(p.mr * 2, 12)), nr, p.kc,
                       p.mc, max(nr, (p.nc // nr) * nr) if p.nc >= nr else nr, p.lanes)
    else:
        p = gemm_params(M, N, K, info)
    i, j = op.axis
    k = op.reduce_axis[0]
    ic, ir_ = st.split(i, factor=p.mc)
    jc, jr_ = st.split(j, factor=p.nc)
    jr, ji = st.split(jr_, factor=p.nr)
    ir, ii = st.split(ir_, factor=p.mr)
    pc, ki = st.split(k, factor=p.kc)
    st.reorder(ic, jc, pc, jr, ir, ki, ii, ji)
    st.unroll(ii)
    st.vectorize(ji)
    par = None
    if info.threads > 1:
        nic = -(-M // p.mc) if M is not None else None
        njc = -(-N // p.nc) if N is not None else None
        if nic == 1:
            par = jc
        elif njc == 1:
            par = ic
        else:
            par = st.fuse(ic, jc)
        st.parallel(par)
    if packed is not None:
        ps = s[packed]
        ps.compute_at(st, pc)
        pjo, pk, pji = ps.op.axis
        ps.vectorize(pji)
    else:
        bt, kfirst = _gemm_operands(op)[1]
        if kfirst:
            bb = s.cache_read(bt, "local", [st])
            s[bb].compute_at(st, jr)
            _vector_split(s[bb], s[bb].op.axis[1], p.nr, p.nr)
        # B read as W[j, k] (dense): read in place (vector over j is a strided gather)
    return p


def matmul_packed(A: Tensor, B: Tensor, nr: Optional[int] = None, name: str = "matmul"):
    """``A[M, K] @ B[K, N]`` with B packed into ``NR``-column panels by a compute stage
    ``<name>.packB[N/NR, K, NR] = B[k, jo*NR + ji]`` (zero beyond N), the array packing of
    the GEMM tutorials: each ``KC x NR`` micro-panel is contiguous.  Same result as
    ``tecomp.nn.matmul``; schedule it with :func:`schedule_matmul`."""
    if A.ndim != 2 or B.ndim != 2:
        raise ScheduleError(f"matmul_packed {name}: needs 2-d tensors")
    N = _cint(B.shape[1])
    if nr is None:
        nr = gemm_params(None, N, None).nr
    K = B.shape[0]
    nb = (B.shape[1] + (nr - 1)) // nr
    Nn = B.shape[1]
    if N is not None and N % nr == 0:
        pb = _te.compute((nb, K, nr), lambda jo, k, ji: B[k, jo * nr + ji],
                         name=f"{name}.packB", tag="gemm_pack")
    else:
        pb = _te.compute((nb, K, nr), lambda jo, k, ji: _te.if_then_else(
            jo * nr + ji < Nn, B[k, _te.minimum(jo * nr + ji, Nn - 1)], _te.const(0.0, B.dtype)),
            name=f"{name}.packB", tag="gemm_pack")
    k = _te.reduce_axis(A.shape[1], name="k")
    return _te.compute((A.shape[0], B.shape[1]),
                       lambda i, j: _te.sum(A[i, k] * pb[j // nr, k, j % nr], axis=k),
                       name=name, tag="matmul,matmul_packed", attrs={"nr": nr})


def dense_packed(X: Tensor, W: Tensor, bias: Optional[Tensor] = None, nr: Optional[int] = None,
                 name: str = "dense"):
    """``X[B, I] @ W[O, I]^T (+ bias)`` (``tecomp.nn.dense``) with W transposed into
    ``NR``-wide panels by a compute stage ``<name>.packW[O/NR, I, NR]``."""
    O = _cint(W.shape[0])
    if nr is None:
        nr = gemm_params(None, O, None).nr
    nb = (W.shape[0] + (nr - 1)) // nr
    On = W.shape[0]
    if O is not None and O % nr == 0:
        pw = _te.compute((nb, W.shape[1], nr), lambda jo, k, ji: W[jo * nr + ji, k],
                         name=f"{name}.packW", tag="gemm_pack")
    else:
        pw = _te.compute((nb, W.shape[1], nr), lambda jo, k, ji: _te.if_then_else(
            jo * nr + ji < On, W[_te.minimum(jo * nr + ji, On - 1), k], _te.const(0.0, W.dtype)),
            name=f"{name}.packW", tag="gemm_pack")
    k = _te.reduce_axis(X.shape[1], name="k")
    mm = _te.compute((X.shape[0], W.shape[0]),
                     lambda b, o: _te.sum(X[b, k] * pw[o // nr, k, o % nr], axis=k),
                     name=name if bias is None else f"{name}.matmul",
                     tag="dense,matmul_packed", attrs={"nr": nr})
    if bias is None:
        return mm
    return _te.compute(mm.shape, lambda b, o: mm[b, o] + bias[o], name=name, tag="bias_add")


def _schedule_gemm_like(outs, target, tags) -> Schedule:
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    gemms = _find(outs, lambda op: _has_tag(op, *tags) and op.reduce_axis)
    if not gemms:
        raise ScheduleError(f"no {'/'.join(tags)} stage found under the outputs "
                            f"{', '.join(t.name for t in outs)}")
    packs = {id(op): op for op in _find(outs, lambda op: _has_tag(op, "gemm_pack"))}
    for g in gemms:
        C = g.output(0)
        packed = None
        for t in g.input_tensors:
            if id(t.op) in packs:
                packed = t
        _schedule_gemm_stage(s, C, info, packed)
        if not s[C].is_output:
            s[C].compute_root()
    # epilogues (bias, activation): inline the injective chain into the output and
    # schedule the output as an elementwise loop
    keep = set(id(g) for g in gemms) | set(packs)
    _inline_injective(s, [op for op in _walk(outs) if id(op) not in keep])
    for t in outs:
        if id(t.op) not in keep and _is_injective(t.op):
            _schedule_elementwise_stage(s, t, info)
    return s


def schedule_matmul(outs, target: str = "llvm") -> Schedule:
    """The tuned GEMM schedule for ``tecomp.nn.matmul`` (B read in place and copied into
    micro-panels) and :func:`matmul_packed` (B packed by its own stage), plus any
    elementwise epilogue on top."""
    return _schedule_gemm_like(outs, target, ("matmul", "matmul_packed"))


def schedule_dense(outs, target: str = "llvm") -> Schedule:
    """The tuned schedule of ``tecomp.nn.dense`` (with or without bias) and of
    :func:`dense_packed`.  Plain ``dense`` reads ``W[O, I]`` across the vector (a strided
    gather): use :func:`dense_packed` for speed."""
    return _schedule_gemm_like(outs, target, ("dense", "matmul_packed"))


# ---------------------------------------------------------------------------------
# elementwise / injective


def _schedule_elementwise_stage(s: Schedule, t: Tensor, info: CpuInfo):
    st = s[t]
    axes = list(st.op.axis)
    exts = [_cint(e) for e in t.shape]
    L = info.lanes
    inner = axes[-1]
    inner_ext = exts[-1]
    # vector over the last axis: one vector per iteration, or a few when it is long
    vec_outer = None
    if inner_ext is not None and inner_ext <= L:
        st.vectorize(inner)
    else:
        vec_outer, vi = st.split(inner, factor=L)
        st.vectorize(vi)
    outer_axes = axes[:-1] + ([vec_outer] if vec_outer is not None else [])
    outer_exts = exts[:-1] + ([-(-inner_ext // L)] if vec_outer is not None and inner_ext
                              is not None else ([None] if vec_outer is not None else []))
    if info.threads > 1 and outer_axes:
        total = 1
        for e in outer_exts:
            total = None if (e is None or total is None) else total * e
        if total is None or total >= 2:
            ax = st.fuse(*outer_axes) if len(outer_axes) > 1 else outer_axes[0]
            st.parallel(ax)


def schedule_elementwise(outs, target: str = "llvm") -> Schedule:
    """Elementwise / injective operators (relu, bias_add, pad, ...): every injective
    producer is inlined, the output is one parallel loop over its outer axes with the
    last axis vectorized."""
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    _inline_injective(s, _walk(outs))
    for t in outs:
        _schedule_elementwise_stage(s, t, info)
    return s


schedule_injective = schedule_elementwise

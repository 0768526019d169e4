"""The GEMM micro-kernel, shared by every template that multiplies blocks of matrices.

A register block of ``MR x NR`` outputs (``MR`` rows unrolled, ``NR`` columns as one
widened vector, or ``NR / L`` unrolled vectors beyond two registers) is accumulated in a
local buffer (``cache_write``: constant indices after unrolling, so LLVM keeps it in
registers) over the whole reduction, zeroed there and copied out once.  At a right edge
that ``NR`` does not divide, the block is computed whole over zero-padded operands
(``align_bounds``) and only its copy out is masked: one micro-kernel in the code.

Used by the GEMM template (:mod:`.gemm`: ``C[i, j] += A[i, k] * B[k, j]``) and the
NHWC weight gradient over panels (:mod:`.conv2d_grad`: ``dW[c, o] += X[n, c] * dY[n, o]``
per window tap).  Measurements behind the choices: benchmarks/DECISIONS.md, "GEMM".
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ...schedule.schedule import Schedule, Stage
from ...te.tensor import Tensor


def vector_columns(st: Stage, ji, nr: int, lanes: int):
    """Vectorize the ``NR`` columns of the micro-kernel: one widened vector when ``NR``
    is one or two registers, else ``NR/L`` unrolled vectors of ``L`` lanes (LLVM
    legalizes a 48-lane accumulator carried around the ``k`` loop through the stack).
    Returns the loop over those vectors, or None."""
    if nr > 2 * lanes and nr % lanes == 0:
        jv, jl = st.split(ji, factor=lanes)
        st.unroll(jv)
        st.vectorize(jl)
        return jv
    st.vectorize(ji)
    return None


def copy_out(st: Stage, ii, ji, nr: int, lanes: int):
    """The copy of a register block out of its local buffer, in ``st``'s loops ``ii``
    (rows, unrolled) and ``ji`` (columns) in the same vectors as the micro-kernel's
    accumulators: a 48-wide vector over 3 x 16-lane accumulators kept LLVM from promoting
    the buffer to registers, many times slower (benchmarks/DECISIONS.md, "GEMM: copy-out
    vectors").  Returns the loop over the column vectors, or None."""
    st.unroll(ii)
    return vector_columns(st, ji, nr, lanes)


def accumulate_block(cs: Stage, rows, cols, reduce: Sequence, *, mr: int, nr: int,
                     lanes: int, lead: Sequence = (), pad_cols=None,
                     pragmas: Sequence[Tuple[str, object]] = (("fp_contract", None),)):
    """The micro-kernel in the local buffer ``cs`` (computed at the block's loop of its
    consumer): its axes ``rows`` and ``cols`` split into ``MR x NR`` blocks (a constant
    size also at the edges of the output, where the block is guarded and loop
    partitioning peels the edge blocks off), the loops ordered ``lead, rows.outer,
    cols.outer, reduce..., rows.inner (unrolled), cols.inner (vector)``, and ``pragmas``
    on the innermost reduction loop (``fp_contract``: ``c + a*b`` is one FMA, see
    docs/numerics.md).  ``pad_cols``: the buffer's column axis when the last block is
    computed whole over zero-padded operands (``align_bounds`` to ``NR``; the caller
    keeps its consumer's loops around the block from being partitioned).  Returns
    (rows.inner, cols.inner)."""
    ro, ri = cs.split(rows, factor=mr)
    co, ci = cs.split(cols, factor=nr)
    cs.reorder(*lead, ro, co, *reduce, ri, ci)
    if pad_cols is not None:
        cs.align_bounds(pad_cols, nr)
    cs.unroll(ri)
    vector_columns(cs, ci, nr, lanes)
    for name, value in pragmas:
        cs.pragma(reduce[-1], name, value)
    return ri, ci


def lane_vectors(s: Schedule, C: Tensor, L: int):
    """``C[i, j] = sum_k ...`` with its reduction in vectors of ``L`` lanes along ``k``:
    ``C.rf[i, j, kl]`` (rfactor of ``k``'s inner ``L``; its stage accumulates the
    vectors), and the stages that sum their lanes as a tree: ``L/2 + L/2``, then ``L/4
    + L/4``, ... (one rfactor per level: each a vector add of two halves of a
    register) instead of ``L - 1`` scalar adds in a row with a shuffle each: faster at
    every batch and thread count measured
    (measurements: benchmarks/DECISIONS.md, "Dense: lane sums as a tree").  Returns
    ``(rf, halves)``; ``C``'s stage sums the last two lanes.  Batch axes before ``i,
    j`` are kept in front."""
    st = s[C]
    last = len(C.op.axis)    # (batch axes before i, j: the lanes' axis after them)
    _, kl = st.split(C.op.reduce_axis[0], factor=L)
    rf = s.rfactor(C, kl, factor_axis=last)
    halves = []
    w = L
    while w > 2:
        w //= 2
        _, kq = s[C].split(s[C].op.reduce_axis[0], factor=w)
        halves.append(s.rfactor(C, kq, factor_axis=last))
    return rf, halves


def accumulate_lanes(s: Schedule, rf: Tensor, st: Stage, at, rows: int, cols: int,
                     kblock: Optional[int] = None):
    """The vector accumulation ``C.rf[i, j, kl]`` of :func:`lane_vectors` computed at
    ``st``'s loop ``at``, in register tiles of ``rows x cols`` accumulators (unrolled;
    the vectors along ``k``, ``fp_contract``: FMAs).  ``kblock``: the reduction in
    blocks of that many vectors, outermost, each over every tile (``cols`` outer).
    Returns the loops over the reduction's blocks (None without ``kblock``), over the
    tiles' columns and over the reduction's vectors inside a tile."""
    rs = s[rf]
    rs.compute_at(st, at)
    *_, fb, fo, fk = rs.op.axis
    rko, = rs.op.reduce_axis
    fbo, fbi = rs.split(fb, factor=rows)
    foo, foi = rs.split(fo, factor=cols)
    kbo = None
    if kblock is None:
        rs.reorder(fbo, foo, rko, fbi, foi, fk)
    else:
        kbo, rko = rs.split(rko, factor=kblock)
        rs.reorder(kbo, foo, fbo, rko, fbi, foi, fk)
    rs.unroll(fbi)
    rs.unroll(foi)
    rs.vectorize(fk)
    rs.pragma(rko, "fp_contract")
    rs.pragma(rko, "unroll_count", 2)
    return kbo, foo, rko

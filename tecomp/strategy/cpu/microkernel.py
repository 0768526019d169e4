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

from typing import Sequence, Tuple

from ...schedule.schedule import Stage


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

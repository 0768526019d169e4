"""The auto-scheduler's tensorize rule: an int8 GEMM written in plain TE,
``C[.., i, j] = sum(int32(X[.., i, k]) * int32(W[.., k, j]), k)`` with ``X`` uint8 and ``W``
int8 (any order of ``W``'s indices), runs on the target's u8 x s8 -> s32 dot-product
intrinsic (:mod:`tecomp.te.intrin_x86`: VNNI where the CPU has it, else AVX2;
:mod:`tecomp.te.intrin_aarch64`: ``usdot`` with i8mm, else widened NEON).  Where the
target has an intrinsic of 2-D blocks of ``C`` (AArch64's i8mm: ``usmmla``, and
``smmla``/``ummla`` for int8 x int8 and uint8 x uint8 GEMMs) and the rows divide into
them, that one is the default (the most multiply-adds per instruction:
:func:`_tensorize_blocks`).

The schedule: ``W`` is copied into panels of ``L`` columns by 4 rows
(``cache_read(..., blocks=)``, the layout the intrinsic reads; from ``W[k, j]`` each 4 x
``L`` block interleaved in registers, ``x86.interleave_s8_4xL``); ``C`` is computed in
blocks of ``mr`` rows by ``nv`` vectors of ``L`` columns, the reduction in steps of 4, one
intrinsic per row and vector (both loops unrolled, so that LLVM keeps the accumulators in
registers across the reduction), blocks in parallel.  ``X`` must run along ``k`` in
memory (its last index); the extents of ``j`` and ``k`` must divide by ``L`` and 4 (no
guard inside an intrinsic).  Every choice is a knob (``tensorize.<name>``, ``.mr``,
``.nv``), so the search can turn it off or reshape it.
"""
from __future__ import annotations

from typing import Optional

from ..ir.expr import Cast, Mul, ProducerLoad, Reduce, Var
from ..te.tensor_intrin import tensor_intrins_for


def _operand(e) -> Optional[ProducerLoad]:
    if isinstance(e, Cast) and e.dtype == "int32" and isinstance(e.value, ProducerLoad):
        ld = e.value
        if all(isinstance(i, Var) for i in ld.indices) and len(set(ld.indices)) == len(ld.indices):
            return ld
    return None


def int8_gemm_form(op):
    """(x_load, w_load) when ``op`` is the int8 GEMM above (``X`` and ``W`` uint8 or int8;
    ``X`` the uint8 one where they differ), else None."""
    body = op.bodies[0] if len(op.bodies) == 1 else None
    if not isinstance(body, Reduce) or body.combiner.name != "sum" or body.dtype != "int32" \
            or len(body.axis) != 1 or not op.axis or not (
                getattr(body.condition, "value", None) is True):
        return None
    src = body.source
    if not isinstance(src, Mul):
        return None
    a, b = _operand(src.a), _operand(src.b)
    if a is None or b is None or {a.dtype, b.dtype} - {"uint8", "int8"}:
        return None
    if a.dtype != b.dtype:
        pairs = [(a, b) if a.dtype == "uint8" else (b, a)]
    else:
        pairs = [(a, b), (b, a)]
    k, v = body.axis[0].var, op.axis[-1].var
    for x, w in pairs:
        if x.indices and x.indices[-1] is k and v not in x.indices \
                and k in w.indices and v in w.indices:
            return x, w
    return None


def _macs(t) -> int:
    """Multiply-adds of one call of the intrinsic ``t``."""
    n = int(t.op.reduce_axis[0].dom.extent.value)
    for e in t.output.shape:
        n *= int(e.value)
    return n


def _fits(t, x, w, u_iv, ev, ek, eu) -> bool:
    """Whether the int8 intrinsic ``t`` computes blocks of this GEMM with no guard: its
    operand types, the reduction in whole groups, the columns (and for a 2-D block the
    rows, which ``x`` must index and ``w`` not) in whole blocks."""
    if not t.reduce or t.output.dtype != "int32" or len(t.inputs) != 2 \
            or (t.inputs[0].dtype, t.inputs[1].dtype) != (x.dtype, w.dtype) \
            or ek % int(t.op.reduce_axis[0].dom.extent.value):
        return False
    shape = [int(e.value) for e in t.output.shape]
    if ev % shape[-1]:
        return False
    if len(shape) == 1:
        return True
    return (len(shape) == 2 and u_iv is not None and eu is not None and eu % shape[0] == 0
            and u_iv.var in x.indices and u_iv.var not in w.indices)


def tensorize_reduction(rules, st) -> bool:
    """Apply the rule to stage ``st`` when it fits; True when it did."""
    op = st.op
    form = int8_gemm_form(op)
    if form is None:
        return False
    x, w = form
    k_iv, v_iv = op.reduce_axis[0], op.axis[-1]
    u_iv = op.axis[-2] if len(op.axis) >= 2 else None
    ev, ek = rules.ext(v_iv.dom.extent), rules.ext(k_iv.dom.extent)
    eu = rules.ext(u_iv.dom.extent) if u_iv is not None else 1
    if ev is None or ek is None:
        return False
    # the most multiply-adds per call first (i8mm's 2 x 2 blocks before its dot products)
    fits = sorted((t for t in tensor_intrins_for(rules.info.target)
                   if _fits(t, x, w, u_iv, ev, ek, eu)), key=lambda t: -_macs(t))
    if not fits:
        return False
    name = f"tensorize.{op.name}"
    choice = rules.k.choose(name, [t.name for t in fits] + ["none"], fits[0].name)
    if choice == "none":
        return False
    intrin = next(t for t in fits if t.name == choice)
    if len(intrin.output.shape) == 2:
        _tensorize_blocks(rules, st, x, w, intrin, name)
        return True
    L = int(intrin.output.shape[0].value)
    s = rules.s
    # the block: mr rows (the axis before j) by nv vectors; registers: AVX2's 16 hold
    # 8 accumulators and the widened operands, AVX-512's 32 hold 24
    wide = rules.info.vregs >= 32
    nv_max = max(1, min(ev // L, 4))
    nv = rules.k.choose(f"{name}.nv", [n for n in (1, 2, 3, 4) if n <= nv_max],
                        min(nv_max, 4 if wide else 2))
    while (ev // L) % nv:
        nv -= 1
    packed = _pack_w(rules, st, w, v_iv, k_iv, L, nv, name)
    rules.done.add(id(packed.op))
    # AVX-512: 6 rows x 4 vectors = 24 accumulators (DECISIONS.md, "Tensorize rule")
    mr = rules.k.choose(f"{name}.mr", [1, 2, 3, 4, 6], 6 if wide and nv == 4 else 4)
    if eu is not None:
        mr = max(1, min(mr, eu))
    lead = list(op.axis[:-2])
    if u_iv is not None and rules.k.choose(f"{name}.local", [True, False], True):
        _dot_block_in_registers(rules, st, intrin, L, nv, mr, eu, ev, x.producer)
        return True
    vo, vi = st.split(v_iv, factor=L * nv)
    vio, vii = st.split(vi, factor=L)
    ko, ki = st.split(k_iv, factor=4)
    if u_iv is not None:
        uo, ui = st.split(u_iv, factor=mr)
        st.reorder(*lead, uo, vo, ko, ui, vio, vii, ki)
        st.unroll(ui)
        outer = lead + [uo, vo]
        exts = [rules.ext(a.dom.extent) for a in lead] + [
            None if eu is None else -(-eu // mr), ev // (L * nv)]
    else:
        st.reorder(*lead, vo, ko, vio, vii, ki)
        outer = lead + [vo]
        exts = [rules.ext(a.dom.extent) for a in lead] + [ev // (L * nv)]
    st.unroll(vio)
    st.tensorize(vii, intrin)
    rules.parallel(st, outer, exts)
    return True


def cols_outer_default(info, ek: int, ev: int, panel: int) -> bool:
    """Whether the blocks of ``C`` go column panel by column panel (each panel of the
    packed ``W``, ``ek x panel`` bytes, read by every block of rows while it stays in
    L2; ``X``'s rows read again for each panel) rather than row block by row block
    (a block's rows of ``X`` stay in L1; the whole packed ``W``, ``ek x ev`` bytes, read
    again for each block of rows): where the whole ``W`` does not fit the machine
    model's share of L2 (``dot_w_l2_share``: half where unmeasured) and one panel fits
    half of L2.  1024^3 on Zen 5 (1 MiB L2), one thread, CPU time under load:
    2.15-2.19 ms against 2.25-2.28 row block by row block (benchmarks/DECISIONS.md,
    "Tensorize rule: W in panels, columns outer"); on Zen 4 (share 1.0) row block by
    row block 2.5-4.8% faster (DECISIONS.md, "Tensorize rule: rows outer on Zen 4, X and
    C prefetched").
    The knob ``tensorize.<name>.cols_outer``."""
    half = info.l2_bytes // 2
    return ek * ev > info.l2_bytes * info.dot_w_l2_share and ek * panel <= half


def _dot_block_in_registers(rules, st, intrin, L: int, nv: int, mr: int, eu, ev: int,
                            xt) -> None:
    """The rule's ``mr`` x ``nv L`` blocks of ``C`` summed in a local block
    (``cache_write``, computed at each block of ``C``, then copied out in vectors): the
    accumulators are a block of their own, which LLVM keeps in registers across the
    reduction wherever the kernel runs.  (Summed in ``C`` itself, LLVM once kept them
    in registers only in a parallel task's body, not in the serial kernel of one thread,
    which stored every accumulator at every step, 2.7x slower on one thread of Zen 5:
    benchmarks/DECISIONS.md, "Tensorize rule: the accumulators in a local block"; the
    loads of the packed ``W`` in the workspace now carry alias scopes disjoint from
    ``C``'s, :mod:`tecomp.codegen.llvm.alias`.)"""
    op = st.op
    s = rules.s
    k_iv, v_iv, u_iv = op.reduce_axis[0], op.axis[-1], op.axis[-2]
    acc = s.cache_write(op.output(0), "local")
    cs = s[acc]
    rules.done.add(id(acc.op))
    lead = list(op.axis[:-2])
    uo, ui = st.split(u_iv, factor=mr)
    vo, vi = st.split(v_iv, factor=L * nv)
    eo = [None if eu is None else -(-eu // mr), ev // (L * nv)]
    outer = [uo, vo]
    ek = rules.ext(k_iv.dom.extent)
    cols_outer = rules.k.choose(f"tensorize.{op.name}.cols_outer", [False, True],
                                cols_outer_default(rules.info, ek, ev, L * nv))
    if cols_outer:
        outer, eo = outer[::-1], eo[::-1]
    st.reorder(*lead, *outer, ui, vi)
    vio, vii = st.split(vi, factor=L)
    st.unroll(vio)
    st.vectorize(vii)
    row = rules.parallel(st, lead + outer, [rules.ext(a.dom.extent) for a in lead] + eo)
    block = outer[-1]     # the loop over blocks (of rows, or of columns with cols_outer)
    cs.compute_at(st, block if row is None or block in st.leaf_iter_vars else row)
    ahead = block in st.leaf_iter_vars      # the blocks' loop itself (not fused)
    if ahead and rules.k.choose(f"tensorize.{op.name}.prefetch_c", [True, False], PREFETCH_C):
        st.prefetch(op.output(0), block, 1)
    # rows split by mr again: a constant extent also in the last block of rows (guarded
    # there, and peeled off by loop partitioning), as the GEMM's micro-kernel
    cuo, cu = cs.split(cs.op.axis[-2], factor=mr)
    cvo, cvi = cs.split(cs.op.axis[-1], factor=L)
    ko, ki = cs.split(cs.op.reduce_axis[0], factor=4)
    cs.reorder(*cs.op.axis[:-2], cuo, ko, cu, cvo, cvi, ki)
    cs.unroll(cu)
    cs.unroll(cvo)
    cs.tensorize(cvi, intrin)
    if ahead and cols_outer and rules.k.choose(f"tensorize.{op.name}.prefetch_x",
                                               [True, False], PREFETCH_X):
        cs.prefetch(xt, ko, 1, along=block, level=2)


def _tensorize_blocks(rules, st, x, w, intrin, name: str) -> None:
    """The rule with an intrinsic of ``R x L`` blocks of ``C`` over groups of ``G`` of the
    reduction (i8mm's ``smmla``: 2 x 2 over 8, :mod:`tecomp.te.intrin_aarch64`).  ``W`` is
    copied into panels of ``L`` columns by ``G`` rows and ``X`` into panels of ``R`` rows
    by ``G`` (each operand of a call one contiguous load).  The sums go to a local block
    of ``mr`` rows by ``L`` columns (``cache_write``, computed at each block of ``C``):
    its ``R x L`` blocks are contiguous, one register each, which LLVM keeps in registers
    across the reduction (blocks of ``C`` itself lie on two rows, which would cost a
    combine and a split around every call); ``mr / R`` accumulators (8 by default) share each load
    of ``W``, the reduction in steps of ``G``."""
    op = st.op
    k_iv, v_iv, u_iv = op.reduce_axis[0], op.axis[-1], op.axis[-2]
    R, L = (int(e.value) for e in intrin.output.shape)
    G = int(intrin.op.reduce_axis[0].dom.extent.value)
    ev, eu = rules.ext(v_iv.dom.extent), rules.ext(u_iv.dom.extent)
    s = rules.s
    for ld, d_out, bf in ((w, v_iv, L), (x, u_iv, R)):
        if ld is x and not rules.k.choose(f"{name}.pack_x", [True, False], True):
            continue
        dims = list(ld.indices)
        packed = s.cache_read(ld.producer, "global", [st], blocks=[
            (dims.index(d_out.var), bf), (dims.index(k_iv.var), G)])
        ps = s[packed]
        nd = len(ld.producer.shape)
        pax = list(ps.op.axis)
        # W: each panel's groups one after another; X: the row pairs of one group (a
        # block's mr / R operands of a step: one after another, paired loads)
        do, dk = dims.index(d_out.var), dims.index(k_iv.var)
        ps.storage_order([a for d, a in enumerate(pax[:nd]) if d not in (do, dk)]
                         + ([pax[do], pax[dk]] if ld is w else [pax[dk], pax[do]]) + pax[nd:])
        rules.parallel(ps, pax[:nd], [rules.ext(a.dom.extent) for a in pax[:nd]])
        rules.done.add(id(packed.op))
    mr = rules.k.choose(f"{name}.mr", [R * m for m in (1, 2, 4, 8) if R * m <= eu],
                        min(eu, 8 * R))
    while eu % mr:
        mr -= R
    acc = s.cache_write(op.output(0), "local")
    cs = s[acc]
    rules.done.add(id(acc.op))
    # the copy out: blocks of mr x L in parallel
    lead = list(op.axis[:-2])
    uo, ui = st.split(u_iv, factor=mr)
    vo, vi = st.split(v_iv, factor=L)
    st.reorder(*lead, uo, vo, ui, vi)
    st.unroll(vi)
    row = rules.parallel(st, lead + [uo, vo],
                         [rules.ext(a.dom.extent) for a in lead] + [eu // mr, ev // L])
    cs.compute_at(st, vo if row is None or vo in st.leaf_iter_vars else row)
    # the sums of one block: the reduction outside, the mr / R calls unrolled inside
    cu, cv = cs.op.axis[-2], cs.op.axis[-1]
    uio, uii = cs.split(cu, factor=R)
    ko, ki = cs.split(cs.op.reduce_axis[0], factor=G)
    cs.reorder(*cs.op.axis[:-2], ko, uio, uii, cv, ki)
    cs.unroll(uio)
    cs.tensorize(uii, intrin)


#: Each block of ``C`` announces, at its start, the writes of the next block's lines of
#: ``C`` (``prefetch`` one block ahead: a ``prefetchw`` per line), so that their reads for
#: ownership overlap the block's reduction; 1024^3 on Zen 4, 1 thread, CPU time, under
#: load: 0.1-1.7% faster in 11 interleaved runs, either order (benchmarks/DECISIONS.md,
#: "Tensorize rule: rows outer on Zen 4, X and C prefetched"); the knob
#: ``tensorize.<name>.prefetch_c``
PREFETCH_C = True

#: Column panel by column panel, each block of rows also brings the next block's rows of
#: ``X`` into L2 during its reduction (``prefetch(X, k, along=the blocks' loop)``: at
#: each step of 4 the same bytes of the next block's rows; ``mr`` rows ``ek`` bytes
#: apart, which the hardware prefetchers follow as ``mr`` streams): 1024^3 columns
#: outer on Zen 4, 1 thread, CPU time: 1.5-2.4% faster in 4 runs under load 11-14, mixed
#: (-1.7% to +2.2%) in 4 at 15-16 (same entry); the knob ``tensorize.<name>.prefetch_x``
PREFETCH_X = True


#: W packed in panels of the block's ``nv L`` columns, each panel's groups of 4 rows one
#: after another (``[j / nv L, k / 4, nv L, 4]``: a block reads one sequential stream of
#: ``nv`` vectors a step), rather than in ``[k / 4, j / L, L, 4]`` (a block's step ``nv``
#: vectors of a row of panels, the next step a whole row of panels further: one new page
#: per step, which the prefetchers do not follow); the knob ``tensorize.<name>.panels``
PANELS = True


def _pack_w(rules, st, w, v_iv, k_iv, L: int, nv: int, name: str):
    """Copy ``W`` into the intrinsic's blocks of ``L`` columns by 4 rows
    (``cache_read(..., blocks=)``), in panels of ``nv L`` columns (:data:`PANELS`), the
    copy in parallel over the panels; returns the copy."""
    s = rules.s
    wt = w.producer
    dv = list(w.indices).index(v_iv.var)
    dk = list(w.indices).index(k_iv.var)
    panel = L * nv if rules.k.choose(f"{name}.panels", [True, False], PANELS) else L
    packed = s.cache_read(wt, "global", [st], blocks=[(dv, panel), (dk, 4)])
    ps = s[packed]
    pax = list(ps.op.axis)
    nd = len(wt.shape)
    outer = pax[:nd]
    if panel > L and dk < dv:
        # each panel's groups of rows one after another; the copy writes them in order
        outer = [a for d, a in enumerate(pax[:nd]) if d not in (dv, dk)] + [pax[dv], pax[dk]]
        ps.storage_order(*outer, *pax[nd:])
        ps.reorder(*outer, *pax[nd:])
    rules.parallel(ps, outer, [rules.ext(a.dom.extent) for a in outer])
    _interleave_pack(rules, ps, pax, wt, dv, L, panel, name)
    return packed


def _interleave_pack(rules, ps, pax, wt, dv: int, L: int, panel: int, name: str) -> None:
    """The packing of ``W[.., k, j]`` (``j`` last: rows of ``L`` bytes) as one
    ``x86.interleave_s8_4xL`` per block of a panel (4 row loads, shuffles, one store)
    instead of ``4 L`` one-byte copies (DECISIONS.md, "Tensorize rule")."""
    if dv != len(wt.shape) - 1:
        return   # W[.., j, k]: the copy moves 4 contiguous bytes at a time already
    intrin = rules.target_intrin(f"x86.interleave_s8_4x{L}")
    if intrin is None or not rules.k.choose(f"{name}.pack_interleave", [True, False], True):
        return
    col = pax[-2]
    if panel > L:
        _, col = ps.split(col, factor=L)
    ps.tensorize(col, intrin)

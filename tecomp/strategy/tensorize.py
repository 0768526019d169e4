"""The auto-scheduler's tensorize rule: an int8 GEMM written in plain TE,
``C[.., i, j] = sum(int32(X[.., i, k]) * int32(W[.., k, j]), k)`` with ``X`` uint8 and ``W``
int8 (any order of ``W``'s indices), runs on the target's u8 x s8 -> s32 dot-product
intrinsic (:mod:`tecomp.te.intrin_x86`: VNNI where the CPU has it, else AVX2).

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
    """(x_load, w_load) when ``op`` is the int8 GEMM above, else None."""
    body = op.bodies[0] if len(op.bodies) == 1 else None
    if not isinstance(body, Reduce) or body.combiner.name != "sum" or body.dtype != "int32" \
            or len(body.axis) != 1 or not op.axis or not (
                getattr(body.condition, "value", None) is True):
        return None
    src = body.source
    if not isinstance(src, Mul):
        return None
    a, b = _operand(src.a), _operand(src.b)
    if a is None or b is None:
        return None
    if a.dtype == "int8" and b.dtype == "uint8":
        a, b = b, a
    if a.dtype != "uint8" or b.dtype != "int8":
        return None
    k, v = body.axis[0].var, op.axis[-1].var
    if not a.indices or a.indices[-1] is not k or v in a.indices:
        return None
    if k not in b.indices or v not in b.indices:
        return None
    return a, b


def tensorize_reduction(rules, st) -> bool:
    """Apply the rule to stage ``st`` when it fits; True when it did."""
    op = st.op
    form = int8_gemm_form(op)
    if form is None:
        return False
    x, w = form
    k_iv, v_iv = op.reduce_axis[0], op.axis[-1]
    ev, ek = rules.ext(v_iv.dom.extent), rules.ext(k_iv.dom.extent)
    if ev is None or ek is None or ek % 4:
        return False
    fits = [t for t in tensor_intrins_for(rules.info.target)
            if t.reduce and t.output.dtype == "int32" and ev % int(t.output.shape[0].value) == 0]
    if not fits:
        return False
    name = f"tensorize.{op.name}"
    choice = rules.k.choose(name, [t.name for t in fits] + ["none"], fits[0].name)
    if choice == "none":
        return False
    intrin = next(t for t in fits if t.name == choice)
    L = int(intrin.output.shape[0].value)
    s = rules.s
    wt = w.producer
    dv = list(w.indices).index(v_iv.var)
    dk = list(w.indices).index(k_iv.var)
    packed = s.cache_read(wt, "global", [st], blocks=[(dv, L), (dk, 4)])
    ps = s[packed]
    pax = list(ps.op.axis)
    nd = len(wt.shape)
    rules.parallel(ps, pax[:nd], [rules.ext(a.dom.extent) for a in pax[:nd]])
    _interleave_pack(rules, ps, pax, wt, dv, L, name)
    rules.done.add(id(packed.op))
    # the block: mr rows (the axis before j) by nv vectors; registers: AVX2's 16 hold
    # 8 accumulators and the widened operands, AVX-512's 32 hold 24
    wide = rules.info.vregs >= 32
    u_iv = op.axis[-2] if len(op.axis) >= 2 else None
    eu = rules.ext(u_iv.dom.extent) if u_iv is not None else 1
    nv_max = max(1, min(ev // L, 4))
    nv = rules.k.choose(f"{name}.nv", [n for n in (1, 2, 3, 4) if n <= nv_max],
                        min(nv_max, 4 if wide else 2))
    while (ev // L) % nv:
        nv -= 1
    # AVX-512: 6 rows x 4 vectors = 24 accumulators (DECISIONS.md, "Tensorize rule")
    mr = rules.k.choose(f"{name}.mr", [1, 2, 3, 4, 6], 6 if wide and nv == 4 else 4)
    if eu is not None:
        mr = max(1, min(mr, eu))
    vo, vi = st.split(v_iv, factor=L * nv)
    vio, vii = st.split(vi, factor=L)
    ko, ki = st.split(k_iv, factor=4)
    lead = list(op.axis[:-2])
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


def _interleave_pack(rules, ps, pax, wt, dv: int, L: int, name: str) -> None:
    """The packing of ``W[.., k, j]`` (``j`` last: rows of ``L`` bytes) as one
    ``x86.interleave_s8_4xL`` per panel block (4 row loads, shuffles, one store) instead
    of ``4 L`` one-byte copies (DECISIONS.md, "Tensorize rule")."""
    if dv != len(wt.shape) - 1:
        return   # W[.., j, k]: the copy moves 4 contiguous bytes at a time already
    intrin = rules.target_intrin(f"x86.interleave_s8_4x{L}")
    if intrin is None or not rules.k.choose(f"{name}.pack_interleave", [True, False], True):
        return
    ps.tensorize(pax[-2], intrin)

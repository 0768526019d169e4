"""Attention (``schedule_attention``): every stage of ``scaled_dot_product_attention``
computed per block of query rows inside one parallel task, FlashAttention's way: a
``rows x Lk`` scratch, never ``Lq x Lk``."""
from __future__ import annotations

from typing import Optional

from ...errors import InternalError, ScheduleError
from ...ir import dtype as _dt
from ...ir import op as _op
from ...ir.expr import Const as _Const
from ...schedule.schedule import Schedule, Stage
from ...te.tensor import ComputeOp, Tensor
from .._common import _cint, _has_tag
from ..rules import Knobs
from .common import _NoTemplate, _template_or_rules, _vector_split, config_fields
from ...target import CpuModel


def _attention_parts(out: Tensor) -> dict:
    """The stages of ``tecomp.nn.scaled_dot_product_attention`` under its output ``out``
    (found by their tags and the way they read each other), or ``_NoTemplate``."""
    if not isinstance(out.op, ComputeOp) or not _has_tag(out.op, "sdpa"):
        raise _NoTemplate(f"{out.name} is not a scaled_dot_product_attention output")
    def tagged(ts, tag):
        return next((t for t in ts if isinstance(t.op, ComputeOp) and _has_tag(t.op, tag)),
                    None)

    ins = out.op.input_tensors
    pv = tagged(ins, "sdpa_pv")
    rc = next((t for t in ins if t is not pv), None)
    if pv is None or rc is None or not isinstance(rc.op, ComputeOp):
        raise _NoTemplate(f"{out.name}: not the stages scaled_dot_product_attention makes")
    ex = pv.op.input_tensors[0]
    sm = rc.op.input_tensors[0]
    sc = tagged(ex.op.input_tensors, "sdpa_scores")
    if sc is None:
        raise _NoTemplate(f"{out.name}: no sdpa_scores stage under {ex.name}")
    mx = next(t for t in ex.op.input_tensors if t.op.name.endswith(".max"))
    if len(sc.op.input_tensors) < 2:
        # one tensor read as both the query and the key (attention of x with itself):
        # the template packs the two apart; the generic rules schedule it
        raise _NoTemplate(f"{out.name}: the query is the key")
    q, k = sc.op.input_tensors[:2]
    v = next(t for t in pv.op.input_tensors if t is not ex)
    rest = [t for t in ex.op.input_tensors if t is not sc and t is not mx]
    return dict(q=q, k=k, v=v, scores=sc, max=mx, exp=ex, sum=sm, rcp=rc, pv=pv,
                mask=rest[0] if rest else None)


def attention_params(out: Tensor, info: CpuModel, knobs=None) -> dict:
    """The blocking of :func:`schedule_attention` for the target ``info``: ``rows``, the
    query rows of one task as a number of vectors (the scratch holds ``rows * lanes``
    score rows); ``keys``, the keys of a register block of the scores (``rows x keys``
    vector accumulators, one broadcast of ``k`` per key and step of the dot product);
    ``values``, the same for the ``exp @ v`` stage (columns of ``v`` per block);
    ``chunk``, the keys that stage walks for every block of columns before the next
    chunk (its slices of ``exp`` and ``v`` stay in L1).  ``knobs`` (the
    auto-scheduler's) may choose others."""
    knobs = knobs or Knobs()
    L = _attention_lanes(out, info)
    Lq = _cint(out.shape[2])
    Dv = _cint(out.shape[3])
    # two vectors of rows: with a register of broadcast and the row vectors, the
    # accumulators take the rest of the registers (6 keys x 2 rows of 8 lanes with
    # AVX2's 16 registers, 12 x 2 of 16 with AVX-512's 32); fewer when the query is short
    rows = 2 if Lq is None else max(1, min(2, -(-Lq // L)))
    rows = knobs.choose("sdpa.rows", [1, 2, 3], rows)
    keys = max(1, min(12, (info.vregs - rows - 2) // rows))
    keys = knobs.choose("sdpa.keys", sorted({keys, 4, 6, 8, 12}), keys)
    values = knobs.choose("sdpa.values", sorted({keys, 4, 6, 8, 12}), keys)
    itemsize = _dt.bits(out.dtype) // 8
    # half of L1 for a chunk of exp (rows x chunk) and of v (chunk x Dv)
    per_key = itemsize * (rows * L + (Dv if Dv is not None else 64))
    chunk = max(16, (info.l1_bytes // 2) // per_key // 16 * 16)
    chunk = knobs.choose("sdpa.chunk", sorted({chunk, 32, 64, 128, 256}), chunk)
    return dict(rows=rows, keys=keys, values=values, chunk=chunk, lanes=L)


def _attention_lanes(out: Tensor, info: CpuModel) -> int:
    """The lanes of one vector register of the dtype the stages compute in (8 float64
    with AVX-512; float32 for a float16 or bfloat16 attention, whose stages are
    float32: only its output is rounded to 16 bits)."""
    ins = out.op.input_tensors if isinstance(out.op, ComputeOp) else ()
    dt = next((t.dtype for t in ins if isinstance(t.op, ComputeOp) and
               _has_tag(t.op, "sdpa_pv")), out.dtype)
    return max(1, info.lanes * 32 // _dt.bits(dt))


#: the fields of :func:`attention_params` a config may set
ATTENTION_KNOBS = ("rows", "keys", "values", "chunk")


def schedule_attention(outs, target: str = "llvm", config: Optional[dict] = None) -> Schedule:
    """``tecomp.nn.scaled_dot_product_attention``, fused in the manner of FlashAttention:
    one task per (batch, head, block of query rows), parallel, and every stage of the op
    computed for that block inside the task (``compute_at``): the block's scores, their
    maximum, exp and sum over all keys, and ``exp @ v``.  Only a ``rows x Lk`` scratch
    of scores and one of exps exist per task (``rows`` = :func:`attention_params`'
    ``rows * lanes``, 16 with AVX2), never the ``Lq x Lk`` matrix.

    The vectors run along the query rows, which the task's buffers store innermost
    (``storage_order``): the scores are ``k[j, :] . q[i, :]`` for a block of keys (a
    broadcast of ``k`` per key and step) x the block's rows (q copied transposed per
    task), the row maximum and sum over the keys are vector operations with no
    horizontal step, and ``exp @ v`` is a broadcast of ``v[j, e]`` times a vector of
    exps, in register blocks of ``rows`` vectors x ``keys`` (or ``values``) columns.  A
    block at the end of the query is computed whole (``align_bounds``) over a copy of q
    (and of a mask that varies along the rows) padded past the edge, and only its rows
    inside are written.  The vector width, registers and L1 come from the target.

    A symbolic query length gives tasks of (batch, head) with the blocks a loop inside;
    a symbolic number of keys, stages over the block's rows one by one (``exp @ v``
    vectorized), and with both symbolic the scores' scratch is not bounded to the block
    (lowering's bounds of the clipped block are not simplified): give one a constant.

    ``config``: a dict of some of :func:`attention_params`' ``rows``, ``keys``, ``values``,
    ``chunk`` (each one of the choices the auto-scheduler has for it); by default the
    heuristic's."""
    knobs = None
    if config is not None:
        config = config_fields(config, "schedule_attention", ATTENTION_KNOBS)
        knobs = _Checked({f"sdpa.{k}": v for k, v in config.items()})
    return _template_or_rules(lambda s, o, info: _attention_into(s, o, info, knobs), outs,
                              target)


class _Checked:
    """Knobs that take the values given and refuse one that is not among the choices."""

    def __init__(self, values: dict):
        self.knobs = Knobs(values)

    def choose(self, name, choices, default):
        v = self.knobs.choose(name, choices, default)
        given = self.knobs.given.get(name)
        if name in self.knobs.given and v != given:
            raise ScheduleError(f"schedule_attention: {name[5:]} cannot be {given!r:.40}; its "
                                f"choices here: {', '.join(map(repr, self.knobs.space[name]))}")
        return v


def _attention_into(s: Schedule, outs, info: CpuModel, knobs=None, lse=()):
    """The template's schedule of the attention ``outs[0]``; ``lse``, the stages of its
    logsumexp (``backward="flash"``'s ``sdpa_lse``, outputs of a training forward),
    written by the tasks too (see :func:`_lse_in_tasks`)."""
    if len(outs) != 1:
        raise _NoTemplate("one attention output")
    out = outs[0]
    parts = _attention_parts(out)
    p = attention_params(out, info, knobs)
    L, rows = p["lanes"], p["rows"]
    T = rows * L
    st = s[out]
    b, h, i, e = st.op.axis
    io, ii = st.split(i, factor=T)
    if _cint(out.shape[2]) is not None:
        task = par = st.fuse(b, h, io)
    else:
        # a symbolic query length: tasks of (batch, head), the blocks of rows a loop
        # inside (the bounds of a block of a fused index over a symbolic number of
        # blocks are not simplified to the block: the scratch would be the whole query)
        par, task = st.fuse(b, h), io
    if lse:
        _lse_in_tasks(s, st, task, lse, T)
    if info.threads > 1:
        st.parallel(par)
    st.pragma(par, "fp_contract")
    _vector_split(st, e, _cint(out.shape[3]), L)
    q, mask = parts["q"], parts["mask"]
    sc, mx, ex, sm, rc, pv = (parts[n] for n in ("scores", "max", "exp", "sum", "rcp", "pv"))
    if _cint(parts["k"].shape[2]) is None:
        # a symbolic number of keys: lowering cannot prove that the reads of k stay
        # inside k past the query's end, so the last block is clipped, and its vectors
        # along the rows would make the scratch's bounds unknown (the whole query):
        # the stages run over the task's rows one by one, ``exp @ v`` vectorized
        for t in (sc, mx, ex, sm, rc, pv):
            s[t].compute_at(st, task)
        ps = s[pv]
        ps.reorder(ps.op.axis[2], ps.op.reduce_axis[0], ps.op.axis[3])
        _vector_split(ps, ps.op.axis[3], _cint(pv.shape[3]), L)
        return
    # q's rows of the task, transposed ([d][i]: a vector of rows per step of the dot
    # product), zero past the query's end, where the last block is computed whole
    # (align_bounds: constant loops, the row vectors unrolled)
    qc = s.cache_read(q, "global", [sc], pad=0.0)
    copies = [(qc, 2)]
    if mask is not None and mask.ndim >= 2 and _cint(mask.shape[-2]) != 1:
        # a mask that varies along the rows: the task's rows, transposed the same way
        mc = s.cache_read(mask, "global", [mx, ex], pad=1 if mask.dtype == "bool" else 0.0)
        copies.append((mc, mask.ndim - 2))
    for t, row_dim in copies:
        cs = s[t]
        cs.compute_at(st, task)
        ax = list(cs.op.axis)
        cs.storage_order(*(ax[:row_dim] + ax[row_dim + 1:] + [ax[row_dim]]))
        cs.align_bounds(ax[row_dim], T)

    def at_task(t: Tensor, transposed: bool):
        """Compute ``t`` (a row stage) at the task, its rows aligned to the block and
        split into vectors; stored column-major when ``transposed``."""
        ts = s[t]
        ts.compute_at(st, task)
        ax = ts.op.axis
        ts.align_bounds(ax[2], T)
        if transposed:
            ts.storage_order(ax[0], ax[1], ax[3], ax[2])
        ro, rv = ts.split(ax[2], factor=L)
        return ts, ro, rv

    def vector_rows(ts: Stage, ro, rv):
        ts.unroll(ro)
        ts.vectorize(rv)

    # scores^T[j][i] = sum_d k[j, d] * q^T[d][i]: keys x rows in registers
    ts, ro, rv = at_task(sc, True)
    d, = ts.op.reduce_axis
    jo, ji = ts.split(ts.op.axis[3], factor=p["keys"])
    ts.reorder(jo, d, ji, ro, rv)
    ts.unroll(ji)
    vector_rows(ts, ro, rv)
    # the row maximum and sum: one vector accumulator per vector of rows, over the keys
    for t in (mx, sm):
        ts, ro, rv = at_task(t, False)
        ts.reorder(ts.op.reduce_axis[0], ro, rv)
        vector_rows(ts, ro, rv)
    ts, ro, rv = at_task(ex, True)
    ts.reorder(ts.op.axis[3], ro, rv)
    vector_rows(ts, ro, rv)
    ts, ro, rv = at_task(rc, False)
    ts.vectorize(rv)
    # pv^T[e][i] = sum_j v[j, e] * exp^T[j][i]: columns x rows in registers, the keys in
    # chunks whose exps and rows of v stay in L1 across the blocks of columns
    ts, ro, rv = at_task(pv, True)
    j, = ts.op.reduce_axis
    eo, ei = ts.split(ts.op.axis[3], factor=p["values"])
    jo, ji = ts.split(j, factor=p["chunk"])
    ts.reorder(jo, eo, ji, ei, ro, rv)
    ts.unroll(ei)
    vector_rows(ts, ro, rv)


def _lse_in_tasks(s: Schedule, st: Stage, task, lse, T: int) -> None:
    """The logsumexp stages ``lse`` computed at the output ``st``'s loop ``task``, the
    fused (batch, head, block of ``T`` query rows), after the other stages there (the row
    maximum and sum it reads are the task's): each task writes its block's rows (clipped
    at the query's end) into the whole buffer, an output of the training forward
    (``Stage._written_at``).  Constant shapes (``backward="flash"`` takes no others)."""
    H, Lq = (_cint(x) for x in st.op.output(0).shape[1:3])
    if H is None or Lq is None or task is not st.leaf_iter_vars[0]:
        raise InternalError("schedule_attention: the logsumexp of an attention with a "
                            "symbolic shape (a tecomp bug: backward=\"flash\" takes constant "
                            "shapes)")
    nb = -(-Lq // T)   # (the blocks of a head)
    dt = task.var.dtype
    x, c = task.var, (lambda n: _Const(n, dt))
    region = [(_op.floordiv(x, c(H * nb)), 1), (_op.floormod(_op.floordiv(x, c(nb)), c(H)), 1),
              (_op.mul(_op.floormod(x, c(nb)), c(T)), T)]
    for t in lse:
        ls = s[t]
        s.stages.remove(ls)
        s.stages.insert(s.stages.index(st), ls)
        ls._written_at(st, task, region)


def _lse_stages(s: Schedule, parts: dict) -> list:
    """The ``sdpa_lse`` stages (``backward="flash"``'s logsumexp) that read the row
    maximum or sum of the attention ``parts``."""
    inner = {id(parts[n].op) for n in ("max", "sum")}
    return [st.op.output(0) for st in s.stages if isinstance(st.op, ComputeOp) and
            _has_tag(st.op, "sdpa_lse") and st.attach_type == "root" and
            any(id(t.op) in inner for t in st.op.input_tensors)]


def _attention_part(s: Schedule, out: Tensor, knobs, info: CpuModel):
    """The attention template for an attention inside a larger DAG: the ids of the
    operations it scheduled (its own stages and the copies it made), or None."""
    try:
        parts = _attention_parts(out)
    except _NoTemplate:
        return None
    if any(s[parts[n]].is_output for n in ("scores", "max", "exp", "sum", "rcp", "pv")):
        return None   # (a training forward keeps them for the backward: in memory, whole)
    # (backward="flash": its logsumexp reads the row statistics, which the template
    # computes per task: the tasks write it too)
    lse = _lse_stages(s, parts)
    if lse and any(_cint(x) is None for x in (*out.shape[1:3], parts["k"].shape[2])):
        return None   # (backward="flash" takes constant shapes only)
    before = {id(st.op) for st in s.stages}
    _attention_into(s, [out], info, knobs, lse)
    mine = {id(s[parts[n]].op) for n in ("scores", "max", "exp", "sum", "rcp", "pv")}
    mine |= {id(s[t].op) for t in lse}
    return mine | {id(s[out].op)} | {id(st.op) for st in s.stages if id(st.op) not in before}

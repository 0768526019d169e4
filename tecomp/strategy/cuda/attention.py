"""FlashAttention's forward on tensor cores (``tecomp.nn.flash_attention`` on ``cuda``
targets): a schedule of its computes, every tile a schedule decision (the backward:
:func:`schedule_flash_attention_backward`).

One kernel carries the work, FlashAttention-2's single pass over the keys, and writes
the output and the rows' logsumexp (what the backward reads):

* one CUDA block per (batch x head, ``block_q`` queries), ``warps`` warps of 32 query
  rows each (``block_q = 32 * warps``); the block's query tile is copied to shared
  memory once;
* per tile of ``block_kv`` keys (the loop of ``p v``'s reduction, ``ko``): the key tile
  to shared memory; the ``block_q x block_kv`` scores on the tensor cores (``ldmatrix``
  + ``mma.sync.m16n8k16``, :mod:`tecomp.te.intrin_mma`; each warp its 32 rows, stored to
  a float32 tile in shared memory, its rows padded by one float); every thread folds
  its row of the tile into the row's running maximum ``m`` and sum ``l`` (the online
  softmax's reducer, ``tecomp.nn.attention._online_softmax``, run in step with ``ko``:
  ``Stage._lockstep``) and stores the row's factor ``exp(lse_old - lse_new)``
  (``lse = m + log l``); ``p = exp(s - lse)`` into a 16-bit tile in shared memory (the
  threads of the block, one element each); the value tile; each warp's ``p v``
  accumulators (registers) are multiplied by their rows' factors
  (``cuda.mma_scale_rows_f32``) and the tile's ``p v`` added (tensor cores);
* at the end each warp converts its accumulators to q's dtype into a 16-bit tile in
  shared memory (``cuda.mma_store_f16``/``_bf16``), copied to the output 16 bytes a
  thread.

With ``FlashConfig(form="registers")`` each warp keeps its scores in its accumulators
at the key loop and computes ``p`` there (:func:`_p_in_registers`: one tensor intrinsic
per 16 x 16 tile, the scale, the keys' vector (the padding mask, ``-inf`` past ``Lk``), with
``causal`` the rows' and keys' positions, the guarded ``exp``), converted into the A
operand of ``p v`` (``cuda.mma_acc_to_a_*``): no ``p`` tile; the scores' float32 tile
stays in shared memory, which the rows' statistics read.

With ``FlashConfig(form="fragments")`` the rows' statistics are in each warp's registers
too: the masked, scaled scores ``x`` a 16 x 16 tensor intrinsic per tile
(``cuda.mma_flash_x_*``, the masks as above), the rows' ``m`` and ``l`` row tiles (each
row's value in its 16 columns, two registers a lane per 16 rows) carried across the key
loop, updated per step by :data:`FRAGMENT_STEP`'s intrinsics (``Stage._lockstep`` with
``fragments``: the row maximum and sum across each quad of lanes, the factor
``exp(lse_old - lse_new)`` as a row tile), the accumulators multiplied by it
(``cuda.mma_mul_f32``), ``p = exp(x - lse)`` as the step's ``exp(x - m)`` times its ``1 /
l`` (:data:`P_FROM_STEP`: one exp an element); ``m`` and ``l`` are stored to global
memory once, after the loop, for the logsumexp.  No scores tile, no
statistics in memory inside the loop: three barriers a key tile (one with a ring).
``FlashConfig(whole=True)`` gives a causal one the whole tiles' loop too, whose ``x``
is the intrinsic without the mask (``Stage._tensorize_unmasked``: elsewhere each 16 x 16
tile whose last key comes before its first query skips the mask); ``ftz=True`` takes
the step's exps as ``ex2.approx.ftz`` (:data:`FRAGMENT_STEP_FTZ`); ``exp2=True`` in base
2, ``log2(e)`` folded into ``x``'s scale (``x`` and ``m`` in base-2 units, each exp
``ex2.approx`` of a difference: :func:`fragment_step`), the logsumexp converted back
once per row (:func:`_lse_of_fragments`).

With ``FlashConfig(stages=2)`` (or more) the key and value tiles are copied together at
the top of each step, with ``cp.async`` into rings of ``stages`` tiles, ``stages - 1``
steps ahead (:meth:`~tecomp.schedule.schedule.Stage.double_buffer`): the copies are in
flight through the step's barriers instead of stalling it twice.

Since ``p`` is normalised by the running ``lse``, the accumulator is at every step the
attention over the keys seen so far: no division at the end, and the two GEMMs of
FlashAttention-2 (``q k^T`` and ``p v``) per tile.  The rows' ``m`` and ``l`` stay in
global memory (``b * h * Lq`` floats each, no ``Lq x Lk`` buffer); once the key tiles are
done, each thread writes its row's logsumexp ``m + log l`` (``Stage._written_at``: the
logsumexp is no reader of the output).  Causal attention skips the key tiles past a block's last query
(:meth:`_Kernels.skip_causal`) and masks the diagonal ones; where the registers allow
(:data:`WHOLE_TILES_MAX_ACCUMULATORS`; ``FlashConfig.whole``), the tiles before the
block's first query run in a loop of their own that does not test the mask.

:class:`FlashConfig` holds the tiling; :func:`flash_config` picks it from the head
dimension and the shared memory of the target (:func:`shared_bytes`).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Optional

from ...errors import ScheduleError
from ...ir import dtype as _dt
from ...ir import op as _op
from ...ir.expr import Const as _Const, Mul, ProducerLoad
from ...ir.functor import collect, substitute
from ...errors import TecompError
from ...nn.attention import (FLASH_DTYPES, FLASH_MAX_DIM, _flash_forward, _key_mask,
                              _online_softmax)
from ...schedule.relations import _with_body
from ...schedule.schedule import Schedule, Stage, create_schedule
from ... import te as _te
from ...te.tensor import PlaceholderOp, Tensor, compute_ops
from ...te.intrin_cuda import TC_DTYPES
from ...te.intrin_mma import (flash_p as _flash_p, flash_p_value as _flash_p_value,
                               flash_x as _flash_x, flash_x_value as _flash_x_value)
from ...te.tensor_intrin import decl_tensor_intrin, tensor_intrin
from .._common import _cint, _has_tag
from ..cpu.attention import _attention_parts
from ..cpu.common import _NoTemplate
from .common import (_bind, _check_target, _cooperative_copy, blocks_per_sm_by_shared,
                     max_shared_bytes, sm_arch)
from .tensorcore import FRAG, WARP, family_intrinsics

def _stacked(t) -> int:
    """The extent of the stacking axis of a 5-d operand of the backward's ``dk`` and
    ``dv`` kernel (``[b, h, 2, rows, cols]``), 1 for the others."""
    return _cint(t.shape[2]) if len(t.shape) == 5 else 1


def _tagged(op, tag: str) -> bool:
    """Whether ``op`` is a compute with ``tag`` (placeholders have none)."""
    return getattr(op, "tag", None) is not None and _has_tag(op, tag)


#: the float32 elements a row of a float32 shared tile is padded by (16 bytes)
F32_PAD = 4


@dataclass(frozen=True)
class FlashConfig:
    """The tiling of :func:`schedule_flash_attention`: ``warps`` warps per block, each
    ``warp_rows`` query rows (32; 16 for the backward only: a ScheduleError in the
    forward, and :func:`schedule_flash_attention_backward` gives a forward it schedules
    too :func:`flash_config`'s tiling; ``block_q = warp_rows * warps`` rows a block);
    ``block_kv`` keys per step (a multiple of 16 that divides 128,
    ``tecomp.nn.attention.FLASH_PAD``).  The backward's blocks are of keys for ``dk``
    and ``dv``, of queries for ``dq`` where ``dq`` is ``"recompute"`` (with
    ``"atomic"``, the forward ignores it, ``dq`` is added from the ``dk``/``dv``
    kernel)."""

    warps: int = 4
    block_kv: int = 64
    warp_rows: int = WARP
    #: the backward's ``dq``: ``"atomic"``, FlashAttention-2's five GEMMs (``ds k`` of
    #: each step added into a float32 ``dq`` with atomics from the ``dk``/``dv`` kernel),
    #: or ``"recompute"``, a second pass over the keys recomputing the scores and ``dout
    #: v^T`` (seven GEMMs, no atomics: deterministic)
    dq: str = "atomic"
    #: the forward's key and value tiles: 1, copied by the block's threads where the step
    #: reads them (the key tile at the step's start, the value tile before ``p v``); 2 or
    #: more, both copied at the step's start with ``cp.async`` into a ring of ``stages``
    #: tiles (:meth:`~tecomp.schedule.schedule.Stage.double_buffer`), the copies of the
    #: ``stages - 1`` steps ahead in flight while the block computes (the backward
    #: ignores it)
    stages: int = 1
    #: the forward's ``p``: ``"shared"``, computed by the block's threads into a 16-bit
    #: tile in shared memory from the float32 scores tile, an element a thread; or
    #: ``"registers"``, each warp's scores kept in its registers
    #: (``mma.accumulator``) and ``p`` computed there, masked by data (a vector of the
    #: keys, ``-inf`` past them; with ``causal``, the rows' and keys' positions) and
    #: converted into the A operand of ``p v`` (``cuda.mma_acc_to_a_*``): no ``p`` tile
    #: (the scores tile stays, which the rows' statistics read; a padding mask is read as
    #: the keys' vector); or ``"fragments"``, ``"registers"`` with the rows' statistics
    #: ``m`` and ``l`` in each warp's registers too (:data:`FRAGMENT_STEP`: no scores
    #: tile).  The backward ignores it
    form: str = "shared"
    #: causal only: whether the key tiles before each block's first query (the mask
    #: leaves them whole) run in a loop of their own that does not apply the mask
    #: (``pragma causal_tiles ... whole``: the loop's body twice in the kernel).  None:
    #: where the accumulators allow (:data:`WHOLE_TILES_MAX_ACCUMULATORS`) in the forms
    #: ``"shared"`` and ``"registers"``, never in ``"fragments"``; True: in every form,
    #: and the intrinsic that masks by data (``p``'s in ``"registers"``, ``x``'s in
    #: ``"fragments"``) runs without the mask on each 16 x 16 tile whose keys all come
    #: before its first row (a test per tile, proved true in the whole tiles' loop:
    #: ``Stage._tensorize_unmasked``); False: one loop.  The backward ignores it
    whole: Optional[bool] = None
    #: the forward's exps in ``form="fragments"`` (``exp(x - m)`` of each score and of
    #: each row's maximum's change): ``ex2.approx.ftz.f32``, results below ``2**-126``
    #: flushed to 0 (two instructions fewer an exp than ``__expf``'s ``ex2.approx``:
    #: :data:`FRAGMENT_STEP_FTZ`; docs/numerics.md says why that is harmless there); a
    #: ScheduleError with another form.  The backward ignores it
    ftz: bool = False
    #: ``form="fragments"``'s exps in base 2 (FlashAttention-2's ``exp2``): ``log2(e)``
    #: folded into the scores' scale (and into a padding mask's values), so that the rows'
    #: ``x``, their maximum ``m`` and the step's differences are in base-2 units and each
    #: exp is ``ex2.approx`` (``.ftz`` with ``ftz``) of a difference, without the multiply
    #: by ``log2(e)`` that ``__expf`` runs (:func:`fragment_step`); the rows' sum ``l`` is
    #: the same.  The logsumexp (the output the backward reads) is converted back once per
    #: row after the key loop, ``m ln(2) + log(l)``: natural-log units, as without it.  A
    #: ScheduleError with another form.  The backward's kernels ignore it (the forward a
    #: ``tc.gradient`` schedules with the backward's config takes it)
    exp2: bool = False
    #: causal with ``whole=True`` in the forms ``"registers"`` and ``"fragments"``: whether
    #: the diagonal key tiles (those after the whole tiles' loop) test each 16 x 16 tile
    #: and run the intrinsic without the mask on a tile whose keys all come before its
    #: first row (True); False: the masked intrinsic on every diagonal tile, no test and
    #: no branch (the whole tiles' loop the same).  False is a ScheduleError with another
    #: form or ``whole``.  The backward ignores it
    diagonal_test: bool = True

    @property
    def block_q(self) -> int:
        return self.warp_rows * self.warps

    @property
    def threads(self) -> int:
        return WARP * self.warps


def shared_bytes(cfg: FlashConfig, d: int, dv: int, dtype: str = "float16") -> int:
    """The shared memory of the forward's kernel with ``cfg``: the query, key and value
    tiles, ``p`` and the output (16-bit, rows padded by 16 bytes; the key and value
    tiles ``stages`` times), the scores' float32 tile (rows padded by
    :func:`scores_pad`) and the rows' logsumexp; with ``form="registers"`` no ``p``
    tile, and the keys' bias and positions and the rows' positions (4 bytes each); with
    ``form="fragments"`` no scores tile and no logsumexp either (the keys' vectors
    ``stages`` times)."""
    e = _dt.nbytes(dtype)
    pad = 16 // e
    bq, bk = cfg.block_q, cfg.block_kv
    p_tile, masks = ((bq * (bk + pad), 0) if cfg.form == "shared"
                     else (0, 2 * bk + bq))
    # (form="fragments": the statistics in registers, no scores tile nor rows' logsumexp;
    # the keys' vectors in rings with the key tiles)
    if cfg.form == "fragments":
        masks += 2 * bk * (max(1, cfg.stages) - 1)
    stats = bq * (bk + scores_pad(d, dv)) + bq if cfg.form != "fragments" else 0
    return ((bq * (d + pad) + (bk * (d + pad) + bk * (dv + pad)) * max(1, cfg.stages)
             + p_tile + bq * (dv + pad)) * e
            + (stats + masks) * 4)


def scores_pad(d: int, dv: int) -> int:
    """The float32 elements the forward's scores tile pads its rows by: 16 bytes up to
    head dim 64 (the statistics' loop reads four floats of a row at a time, conflict-free
    by quarter warps), one beyond (each row in a bank of its own; the 1536 bytes saved
    at 128 rows fit two blocks of head dim 128 per SM of 228 KiB)."""
    return F32_PAD if max(d, dv) <= 64 else 1


#: the tilings :func:`flash_config` tries, in order
FLASH_CONFIGS = (FlashConfig(4, 64), FlashConfig(4, 32), FlashConfig(2, 64), FlashConfig(2, 32))

#: the tilings :func:`flash_config` tries first for head dims up to 64: 16-key tiles.  On an
#: H200 (2026-11-30, ``benchmarks/gpu.py --quick --only "flash attention fwd f16 b4 h16
#: s2048 d64" --sweep``) 4 warps of 16-key tiles ran 1.82x (4, 64) without a mask and
#: 1.75x with ``causal``, the fastest tiling swept; head dim 128 was not swept.  Their key
#: and value tiles in rings of two (``FlashConfig(4, 16, stages=2)``: the same three blocks
#: per SM of sm_90 by ptxas's registers, one barrier a step fewer, the tiles' loads off the
#: step's critical path) wait for a GPU: never run on one, and the emulation's cp.async
#: copies are synchronous, so a missing wait would not show there (``benchmarks/gpu.py
#: --only "flash attention fwd" --ab`` times and checks both).
FLASH_CONFIGS_D64 = (FlashConfig(4, 16),)


#: the float32 accumulators a thread of the output kernel may hold, ``block_kv`` of the
#: scores and ``dv`` of ``p v`` (each warp's 32 rows over its 32 lanes): beyond 160 ptxas
#: spills at 255 registers (head dim 128 with 64-key tiles on sm_90)
MAX_ACCUMULATORS = 160


#: the most float32 accumulators (``block_kv + dv`` a thread of the forward) at which a
#: causal forward runs the key tiles before each block's first query, which the mask
#: leaves whole, in a loop of their own without the mask's tests (``pragma causal_tiles
#: ... whole``: the loop's body twice in the kernel).  Head dim 64's 16-key tiles (80):
#: 160 registers on sm_90a and no spill with ``__launch_bounds__(128, 3)`` (the 3 blocks
#: its shared memory allows; 132 with the mask in every tile; left to itself ptxas took
#: 168 and spilled 8 bytes of the epilogue's values across the diagonal loop), the whole
#: tiles' loop as the non-causal kernel's (SASS: 885 instructions a tile against 1090 in
#: the diagonal ones, whose statistics loop ptxas unrolls); head dim 128's 32-key tiles (160) spilled 136 bytes in the diagonal loop (255
#: registers), so they keep one loop.
WHOLE_TILES_MAX_ACCUMULATORS = 96


def flash_config(d: int, dv: int, dtype: str = "float16",
                 max_shared: Optional[int] = None) -> FlashConfig:
    """The first of :data:`FLASH_CONFIGS` (after :data:`FLASH_CONFIGS_D64` for head dims
    up to 64) whose output kernel fits ``max_shared`` bytes of shared memory (default:
    sm_80's 163 KiB) and whose accumulators fit the registers (:data:`MAX_ACCUMULATORS`),
    else the smallest."""
    limit = max_shared if max_shared is not None else 163 * 1024
    for c in (FLASH_CONFIGS_D64 if max(d, dv) <= 64 else ()) + FLASH_CONFIGS:
        if shared_bytes(c, d, dv, dtype) <= limit and c.block_kv + dv <= MAX_ACCUMULATORS:
            return c
    return FLASH_CONFIGS[-1]


def _parts(outs):
    """The stages of a ``flash_attention``: a dict by role, or ScheduleError."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    out = [t for t in outs if isinstance(t, Tensor) and _tagged(t.op, "flash_attention")]
    lse = [t for t in outs if isinstance(t, Tensor) and _tagged(t.op, "flash_attention_lse")]
    if len(outs) != 2 or len(out) != 1 or len(lse) != 1:
        raise ScheduleError(
            "schedule_flash_attention takes the two outputs of tecomp.nn.flash_attention, "
            f"(out, lse), got {', '.join(getattr(t, 'name', repr(t)[:30]) for t in outs)}")
    out, lse = out[0], lse[0]
    pv = out.op.input_tensors[0]
    p, vp = pv.op.input_tensors
    # (p reads the scores, the rows' logsumexp and a mask)
    sc = next(t for t in p.op.input_tensors if _tagged(t.op, "flash_scores"))
    lse_p = next(t for t in p.op.input_tensors if any(
        _tagged(x.op, "flash_stats") for x in getattr(t.op, "input_tensors", ())))
    stats = lse_p.op.input_tensors[0]
    m, l = stats.op.output(0), stats.op.output(1)
    q, k = sc.op.input_tensors
    if lse_p.op is not lse.op.input_tensors[0].op:
        raise ScheduleError(f"schedule_flash_attention: {out.name} and {lse.name} are not the "
                            "outputs of one tecomp.nn.flash_attention call")
    return dict(out=out, lse=lse, pv=pv, p=p, v=vp, s=sc, lse_p=lse_p, m=m, l=l, q=q, k=k)


def schedule_flash_attention(outs, target: str = "cuda",
                             config: Optional[FlashConfig] = None) -> Schedule:
    """The schedule of ``tecomp.nn.flash_attention``'s outputs ``(out, lse)`` on the
    tensor cores (see the module docstring); ``config`` a :class:`FlashConfig` (default
    :func:`flash_config`'s for the target's shared memory)."""
    _check_target(target)
    t = _parts(outs)
    q = t["q"]
    D, Dv = _cint(q.shape[3]), _cint(t["v"].shape[3])
    cfg = config if config is not None else flash_config(D, Dv, q.dtype,
                                                         max_shared_bytes(target))
    s = create_schedule([t["out"].op, t["lse"].op])
    _forward_into(s, t, cfg, target)
    return s


def sdpa_as_flash(out: Tensor, alone: bool = True) -> Optional[tuple]:
    """``(q, k, v, scale, mask)`` where ``out``, a
    ``tecomp.nn.scaled_dot_product_attention`` output, is what
    :func:`tecomp.nn.flash_attention` computes on the tensor cores: no mask or an
    additive one broadcast over the heads and the queries (a padding mask, ``(b, 1, 1,
    Lk)``; else None); q, k and v of one dtype among ``FLASH_DTYPES``, of constant shapes,
    head dims multiples of 16 up to ``FLASH_MAX_DIM``, and with ``alone`` placeholders
    (the attention alone: computes before it would be root stages the template does not
    schedule); else None (the generic GPU rules)."""
    try:
        t = _attention_parts(out)
    except _NoTemplate:
        return None
    q, k, v, mask = t["q"], t["k"], t["v"], t["mask"]
    if alone and not all(isinstance(x.op, PlaceholderOp) for x in (q, k, v)):
        return None
    if q.dtype not in FLASH_DTYPES or not q.dtype == k.dtype == v.dtype or not all(
            isinstance(e, _Const) for x in (q, k, v) for e in x.shape):
        return None
    if mask is not None:
        if alone and not isinstance(mask.op, PlaceholderOp):
            return None
        try:
            _key_mask(mask, q, out.name, "flash_attention")
        except TecompError:
            return None
    if any(d % 16 or not 16 <= d <= FLASH_MAX_DIM for d in (_cint(q.shape[3]),
                                                            _cint(v.shape[3]))):
        return None
    # the scale: the constant the scores are multiplied by in the exps' stage
    sc = t["scores"]
    found = {float(m.b.value) for m in collect(t["exp"].op.body, lambda n: isinstance(
        n, Mul) and isinstance(n.a, ProducerLoad) and n.a.producer is sc
        and isinstance(n.b, _Const))}
    if len(found) != 1:
        return None
    return q, k, v, found.pop(), mask


def _substitute_flash(s: Schedule, st: Stage, q, k, v, scale, mask,
                      lse: Optional[Stage] = None):
    """Stage ``st`` (a scaled_dot_product_attention output) computed as
    :func:`tecomp.nn.flash_attention`'s output (``<name>.flash.*`` stages inserted
    before it, whichever compute stages they read staying as they are), and stage
    ``lse`` (its ``sdpa_lse``, where ``backward="flash"`` made one) as its logsumexp;
    returns :func:`_parts` of the flash stages, the output being ``st``'s tensor (and
    the logsumexp ``lse``'s, else None)."""
    out = st.op.output(0)
    fout, flse = _flash_forward(q, k, v, False, scale, f"{st.op.name}.flash", mask)
    for x, f in ((st, fout), (lse, flse)):
        if x is None:
            continue
        new = _with_body(x.op, substitute(f.op.body, {
            a.var: b.var for a, b in zip(f.op.axis, x.op.axis)}))
        new.tag, new.attrs = f.op.tag, dict(f.op.attrs)
        s._replace_op(x, new)
    stages = [Stage(op, s) for op in _new_ops(fout.op.input_tensors, s._stage_of)]
    at = min(s.stages.index(x) for x in (st, lse) if x is not None)
    s.stages[at:at] = stages
    for x in stages:
        s._stage_of[id(x.op)] = x
    s._stage_of[id(out.op)] = st
    s.trace.problem = (f"{out.name}: scaled_dot_product_attention computed as "
                       "flash_attention (a substitution, not a schedule primitive)")
    t = _parts([fout, flse])
    t["out"], t["lse"] = out, (lse.op.output(0) if lse is not None else None)
    return t


def _new_ops(tensors, known) -> list:
    """The compute operations under ``tensors``, producers first, down to those in
    ``known`` (ids: stages of the schedule already, whose own producers are not
    walked)."""
    out, seen = [], set()

    def visit(op):
        if id(op) in seen or id(op) in known or isinstance(op, PlaceholderOp):
            return
        seen.add(id(op))
        for t in getattr(op, "input_tensors", ()):
            visit(t.op)
        out.append(op)
    for t in tensors:
        visit(t.op)
    return out


def schedule_sdpa_as_flash(outs, target: str = "cuda",
                           config: Optional[FlashConfig] = None) -> Optional[Schedule]:
    """``tecomp.nn.scaled_dot_product_attention`` on CUDA targets: where
    :func:`sdpa_as_flash` finds it to be a FlashAttention, a schedule whose output stage
    computes it as :func:`tecomp.nn.flash_attention` does (``<name>.flash.*`` stages,
    :func:`schedule_flash_attention`'s kernel; the logsumexp is not computed), the
    graph's own stages left out; else None.  ``p`` is then rounded to the inputs' dtype
    before ``p v``, as FlashAttention's (the general stages keep it float32).  The
    schedule's trace is not replayable (the substitution is no primitive)."""
    _check_target(target)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1 or not isinstance(outs[0], Tensor):
        return None
    out = outs[0]
    got = sdpa_as_flash(out)
    if got is None:
        return None
    s = create_schedule([out.op])
    st = s[out]
    s.stages = [st]     # (the graph's own stages: left out)
    s._stage_of = {id(out.op): st}
    t = _substitute_flash(s, st, *got)
    _forward_into(s, t, config if config is not None else _config_of(t, target), target)
    return s


def _config_of(t: dict, target: str) -> FlashConfig:
    q = t["q"]
    return flash_config(_cint(q.shape[3]), _cint(t["v"].shape[3]), q.dtype,
                        max_shared_bytes(target))


def sdpa_into_flash(s: Schedule, target: str = "cuda",
                    config: Optional[FlashConfig] = None) -> set:
    """In ``s``, a schedule of a larger graph: every
    ``tecomp.nn.scaled_dot_product_attention`` output that :func:`sdpa_as_flash` (not
    ``alone``) finds to be a FlashAttention, and whose stages nothing else reads (a
    gradient reads them), computed as :func:`tecomp.nn.flash_attention`'s (on its
    template, the stages it reads staying as they are).  Returns the ids of the
    operations it scheduled, its own stages' and the output's: the GPU rules schedule
    the others.  ``config``: the tiling of every one (default :func:`flash_config`'s)."""
    _check_target(target)
    before = {id(st.op) for st in s.stages}
    mine = set()
    for st in list(s.stages):
        if not _tagged(st.op, "sdpa") or st.op is not st.origin_op:
            continue
        out = st.op.output(0)
        got = sdpa_as_flash(out, alone=False)
        if got is None:
            continue
        parts = _attention_parts(out)
        inner = {id(parts[w].op) for w in ("scores", "max", "exp", "sum", "rcp", "pv")}
        # its logsumexp (backward="flash": the backward reads it): the flash forward's
        lse = [x for x in s.stages if _tagged(x.op, "sdpa_lse") and x.op is x.origin_op
               and {id(t.op) for t in x.op.input_tensors} == {id(parts["max"].op),
                                                               id(parts["sum"].op)}]
        if any(id(op) in inner for op in s.outputs) or any(
                id(x.op) not in inner and x is not st and x not in lse and any(
                    id(t.op) in inner for t in x.op.input_tensors) for x in s.stages):
            continue
        s.stages = [x for x in s.stages if id(x.op) not in inner]
        for i in inner:
            s._stage_of.pop(i, None)
        t = _substitute_flash(s, st, *got, lse=lse[0] if lse else None)
        if lse:
            mine |= {id(lse[0].op), id(lse[0].origin_op)}
        _forward_into(s, t, config if config is not None else _config_of(t, target), target)
        mine |= {id(st.op), id(st.origin_op)}
    if mine:
        mine |= {id(st.op) for st in s.stages} - before
    return mine


def _rescale(old, new):
    """The factor of a row's accumulator when its statistics go from ``old`` to ``new``
    (``(m, l)`` each): ``exp(lse_old - lse_new) = exp(m_old - m_new) * l_old / l_new``,
    0 while the row had no key (its accumulator is 0 then)."""
    (m0, l0), (m1, l1) = old, new
    f32 = "float32"
    return _te.if_then_else(l0 > _te.const(0.0, f32), _te.fast_exp(m0 - m1) * l0 / l1,
                            _te.const(0.0, f32))


_P_INTRINS: dict = {}


def _p_intrin(scale: float, causal: bool, what: str = "p"):
    """The tensor intrinsic of :func:`tecomp.te.intrin_mma.flash_p` (``what="x"``:
    :func:`~tecomp.te.intrin_mma.flash_x`) for ``scale``, declared once per ``(scale,
    causal, what)``."""
    key = (scale, causal, what)
    if key not in _P_INTRINS:
        op, emit = (_flash_p if what == "p" else _flash_x)(scale, causal)
        _P_INTRINS[key] = decl_tensor_intrin(
            op, cuda=emit, dense=False,
            name=f"cuda.mma_flash_{what}_f32_{'causal_' if causal else ''}{scale:.9g}")
    return _P_INTRINS[key]


#: ``FlashConfig(form="fragments")``'s online softmax (``Stage._lockstep`` with
#: ``fragments``): the rows' ``m`` and ``l`` as row tiles in each warp's registers, and
#: per step, on each 16-row tile with ``x`` its masked, scaled scores (a 16 x 16 tile per
#: 16 keys): ``m_new = max(m, rowmax x)``; ``f = exp(m - m_new)`` (0 while the row has no
#: key), ``l *= f``; ``e = exp(x - m_new)`` (a tile per 16 keys, kept for ``p``) and ``l
#: += rowsum e``; ``r = 1 / l_new`` (0 where ``l_new`` is 0) and the accumulator's factor
#: ``f = l_old exp(m - m_new) r`` (``exp(lse_old - lse_new)``), as :func:`_rescale`;
#: ``p = e r`` (:data:`P_FROM_STEP`: ``exp(x - lse_new)``, one exp an element); the
#: state stored once the key tiles are done (each row by one lane)
FRAGMENT_STEP = dict(
    state=("m", "l"),
    init=("cuda.mma_fill_neg_inf_f32", "cuda.mma_fill_f32"),
    columns=("e",),
    step=((False, (("cuda.mma_rows_copy_f32", "m_old", {"a": "m"}),)),
          (True, (("cuda.mma_row_max_f32", "m", {"c": "x"}),)),
          (False, (("cuda.mma_rows_exp_diff_or_zero_f32", "f", {"a": "m_old", "b": "m"}),
                   ("cuda.mma_rows_mul_f32", "l", {"a": "l", "b": "f"}),
                   ("cuda.mma_rows_copy_f32", "f", {"a": "l"}))),
          (True, (("cuda.mma_exp_diff_or_zero_f32", "e", {"a": "x", "b": "m"}),
                  ("cuda.mma_row_sum_f32", "l", {"c": "e"}))),
          (False, (("cuda.mma_rows_rcp_or_zero_f32", "r", {"a": "l"}),
                   ("cuda.mma_rows_mul_f32", "f", {"a": "f", "b": "r"})))),
    factor="f",
    store="cuda.mma_store_rows_f32")


def fragment_step(exp2: bool = False, ftz: bool = False) -> dict:
    """:data:`FRAGMENT_STEP` with its exps (``cuda.mma_exp_diff_or_zero_f32`` and the row
    tiles' twin) in base 2 (``exp2``: ``cuda.mma_*exp2_diff_or_zero*_f32``, ``2^(x -
    m)`` of operands in base-2 units, ``ex2.approx`` of the difference alone) and as
    ``ex2.approx.ftz`` (``ftz``: a result below ``2**-126`` is 0)."""
    kind = ("exp2_diff_or_zero" if exp2 else "exp_diff_or_zero") + ("_ftz" if ftz else "")
    return dict(FRAGMENT_STEP, step=tuple(
        (per_column, tuple((i.replace("exp_diff_or_zero", kind), o, a) for i, o, a in ops))
        for per_column, ops in FRAGMENT_STEP["step"]))


#: :data:`FRAGMENT_STEP` with ``FlashConfig(ftz=True)``: its exps as ``ex2.approx.ftz``
#: (``cuda.mma_*exp_diff_or_zero_ftz_f32``: a result below ``2**-126`` is 0)
FRAGMENT_STEP_FTZ = fragment_step(ftz=True)

#: ``log2(e)``: ``FlashConfig(exp2=True)`` multiplies the scores' scale (and a padding
#: mask's values) by it, the rows' ``x`` and ``m`` then in base-2 units
LOG2E = 1.0 / math.log(2.0)
#: ``ln(2)``: ``FlashConfig(exp2=True)``'s logsumexp is ``m LN2 + log(l)`` (``m`` in
#: base-2 units), once per row after the key loop
LN2 = math.log(2.0)

#: ``form="fragments"``'s ``p = exp(x - lse)`` at each 16-key tile, as
#: ``Stage._lockstep_view``: the step's ``e = exp(x - m)`` times its ``r = 1 / l``
#: (``cuda.mma_mul_f32``; 0 where the row has no key)
P_FROM_STEP = ("cuda.mma_mul_f32", {"a": "e", "b": "r"})


def _p_in_registers(s: Schedule, t: dict, causal: bool, fragments: bool = False,
                    unmask: bool = False, base2: bool = False) -> dict:
    """``FlashConfig(form="registers")``: ``p`` recomputed as the cast of a float32
    ``p32`` whose masks are data (what :func:`_p_intrin` computes on a tile in
    registers): ``kbias`` (the padding mask's value, or 0, for the keys; ``-inf`` past
    them) and, with ``causal``, the rows' and keys' positions ``qpos``, ``kpos``; the
    same values as the ``p`` of ``tecomp.nn.flash_attention``.  With ``fragments``
    (``form="fragments"``): the masked, scaled scores ``x`` a compute of their own, which
    the statistics reduce (their body rewritten to read it: the same values), and ``p32
    = exp(x - lse)`` (0 where ``lse`` is ``-inf``; computed from the statistics' step,
    :data:`P_FROM_STEP`).  ``base2`` (with ``fragments``, ``FlashConfig(exp2=True)``):
    ``x`` in base-2 units (its scale and the padding mask's values times
    :data:`LOG2E`), the statistics reduce it in base 2 and the rows' logsumexp is
    converted back (:func:`_lse_of_fragments`).  Returns the new tensors by role (stages
    inserted before ``p``'s; with ``fragments``, ``x`` before the statistics' and its
    masks before the key tile's copy)."""
    p, sc, lse_p = t["p"], t["s"], t["lse_p"]
    # (the stage's op: an sdpa output computed as flash_attention has its attributes there)
    attrs = s[t["out"]].op.attrs
    B, H, Lqp, Lkp = (_cint(e) for e in p.shape)
    base, f32 = p.op.name.rsplit(".", 1)[0], "float32"
    ninf, zero = _te.const(float("-inf"), f32), _te.const(0.0, f32)
    Lk = int(attrs["Lk"])
    # the padding mask (p's one other operand): its value per (batch, key)
    masks = [x for x in p.op.input_tensors if x.op is not sc.op and x.op is not lse_p.op]
    # (without one, a vector of the keys alone: its index has no batch to compute)
    # (base2: the mask's values in base-2 units too, as x)
    unit = _te.const(LOG2E, f32) if base2 else None
    if masks:
        read = _key_mask(masks[0], t["q"], t["out"].name, "flash_attention")
        kbias = _te.compute((B, Lkp), lambda b, j: _te.if_then_else(
            j < Lk, read(b, j) * unit if base2 else read(b, j), ninf), name=f"{base}.kbias")
    else:
        kbias = _te.compute((Lkp,), lambda j: _te.if_then_else(j < Lk, zero, ninf),
                            name=f"{base}.kbias")
    qpos = _te.compute((Lqp,), lambda i: i, name=f"{base}.qpos")
    kpos = _te.compute((Lkp,), lambda j: j, name=f"{base}.kpos")
    scale = float(attrs["scale"]) * (LOG2E if base2 else 1.0)
    if fragments:
        x = _te.compute(tuple(p.shape), lambda b, h, i, j: _flash_x_value(
            sc[b, h, i, j], kbias[b, j] if masks else kbias[j], qpos[i], kpos[j], scale,
            causal), name=f"{base}.x")
        # (a row that saw a NaN score: lse NaN, p NaN, as the softmax's)
        p32 = _te.compute(tuple(p.shape), lambda b, h, i, j: _te.if_then_else(
            _te.ne(lse_p[b, h, i], ninf), _te.exp2(x[b, h, i, j] - lse_p[b, h, i] * unit)
            if base2 else _te.fast_exp(x[b, h, i, j] - lse_p[b, h, i]), zero),
            name=f"{base}.p32")
        _reduce_x(s, t, x, base2)
        _lse_of_fragments(s, t, base2)
    else:
        p32 = _te.compute(tuple(p.shape), lambda b, h, i, j: _flash_p_value(
            sc[b, h, i, j], kbias[b, j] if masks else kbias[j], lse_p[b, h, i], qpos[i],
            kpos[j], scale, causal),
            name=f"{base}.p32")
    # (p's own axes: its stage's loops stay)
    new = _with_body(p.op, p32[tuple(iv.var for iv in p.op.axis)].astype(p.dtype))
    new.tag, new.attrs = p.op.tag, dict(p.op.attrs)
    st = s[p]
    s._replace_op(st, new)
    stages = [Stage(op, s) for op in _new_ops([p32], s._stage_of)]
    late = [y for y in stages if not fragments or y.op is p32.op]
    # (with fragments, x before the statistics, which read it, and its masks before the
    # key tile's copy: copied with it, before its barrier)
    xs = [y for y in stages if fragments and y.op is x.op]
    for group, before in ((late, st), (xs, s[t["m"]]),
                          ([y for y in stages if y not in late and y not in xs], s[t["k"]])):
        at = s.stages.index(before)
        s.stages[at:at] = group
    for y in stages:
        s._stage_of[id(y.op)] = y
    # (unmask: the tiles the causal mask leaves whole run p, or x, without it)
    out = dict(p32=p32, kbias=kbias, qpos=qpos if causal else None,
               kpos=kpos if causal else None, intrin=_p_intrin(scale, causal),
               unmasked=_p_intrin(scale, False, "x" if fragments else "p")
               if causal and unmask else None)
    if fragments:
        out.update(x=x, x_intrin=_p_intrin(scale, causal, "x"), intrin=None)
    return out


def _reduce_x(s: Schedule, t: dict, x: Tensor, base2: bool = False) -> None:
    """The statistics' stage (``m``, ``l``) rewritten to reduce ``x`` (the masked, scaled
    scores its body computed itself: the same values; ``base2``: ``x`` in base-2 units,
    reduced by the base-2 online softmax, ``m`` in those units and ``l`` the same), over
    the same axes."""
    st = s[t["m"]]
    old = st.op
    rj = old.reduce_axis[0]
    new = _te.compute(tuple(old.output(0).shape), lambda b, h, i: _online_softmax(base2)(
        (x[b, h, i, rj], _te.const(1.0, "float32")), axis=rj), name=old.name)
    _rebody(s, st, new[0].op)


def _rebody(s: Schedule, st: Stage, new) -> None:
    """Stage ``st``'s computation replaced by that of ``new`` (a compute over axes of the
    same extents), its own axes, name, tag and attributes kept."""
    old = st.op
    axes = {a.var: b.var for a, b in zip(new.axis, old.axis)}
    op = _with_body(old, tuple(substitute(b, axes) for b in new.bodies))
    op.tag, op.attrs = old.tag, dict(old.attrs)
    s._replace_op(st, op)


def _lse_of_fragments(s: Schedule, t: dict, base2: bool = False) -> None:
    """``form="fragments"``: the rows' logsumexp (``lse_padded``, which the output's
    logsumexp and ``p`` read) from the statistics the step leaves: ``m + log(l)``,
    ``-inf`` where ``l`` is 0 (no key) and NaN where it is NaN (a row that saw a NaN
    score: the step's exps of a NaN maximum are NaN, where the shared form's reducer
    keeps ``l`` finite; the logsumexp is NaN either way).  ``base2``
    (``FlashConfig(exp2=True)``): ``m`` in base-2 units, ``m ln(2) + log(l)``
    (:data:`LN2`), natural-log units as the backward and users read them, computed once
    per row after the key loop."""
    st, m, l = s[t["lse_p"]], t["m"], t["l"]
    f32 = "float32"
    new = _te.compute(tuple(t["lse_p"].shape), lambda b, h, i: _te.if_then_else(
        _te.ne(l[b, h, i], _te.const(0.0, f32)),
        (m[b, h, i] * _te.const(LN2, f32) if base2 else m[b, h, i]) + _te.log(l[b, h, i]),
        _te.const(float("-inf"), f32)), name=st.op.name)
    _rebody(s, st, new.op)


def _checked_config(cfg, forward: bool) -> FlashConfig:
    """``cfg`` with numpy integers as Python ints, or a ScheduleError naming the field
    that is no int (``warps``, ``block_kv``, ``warp_rows``; ``stages`` is checked with its
    range by :class:`_Kernels`), and for the forward (``forward``) one whose warps are
    not of :data:`WARP` rows: its per-row stages (the statistics, the logsumexp) are
    spread over the block's ``32 * warps`` threads, which 16-row warps would leave
    past the block's rows, into the rows of other blocks."""
    if not isinstance(cfg, FlashConfig):
        raise ScheduleError(f"the FlashAttention schedules take a FlashConfig, got "
                            f"{cfg!r:.80}")
    ints = {}
    for field in ("warps", "block_kv", "warp_rows", "stages"):
        v = getattr(cfg, field)
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            ints[field] = int(v)
        elif field != "stages":
            raise ScheduleError(f"{cfg}: {field} is an int, got {v!r:.40}; take one of "
                                f"FLASH_CONFIGS")
    cfg = replace(cfg, **ints)
    if forward and cfg.warp_rows != WARP:
        raise ScheduleError(f"{cfg}: the forward's warps take {WARP} query rows each "
                            f"(warp_rows={WARP}, the default); 16-row warps are for "
                            f"schedule_flash_attention_backward; take one of FLASH_CONFIGS")
    return cfg


def _forward_into(s: Schedule, t: dict, cfg: FlashConfig, target="cuda") -> None:
    """The forward's kernels (the stages :func:`_parts` found) in ``s`` for ``target``."""
    cfg = _checked_config(cfg, forward=True)
    q = t["q"]
    k = _Kernels(s, cfg, q.dtype, _cint(q.shape[2]), _cint(t["k"].shape[2]))
    causal = bool(t["out"].op.attrs.get("causal"))
    frag = cfg.form == "fragments"
    if cfg.ftz and not frag:
        raise ScheduleError(f"{cfg}: ftz (the exps as ex2.approx.ftz) is the exps of "
                            "form='fragments' (the rows' statistics in registers); take that "
                            "form or leave ftz False")
    if cfg.exp2 and not frag:
        raise ScheduleError(f"{cfg}: exp2 (the exps in base 2) is the exps of form='fragments' "
                            "(the rows' statistics in registers); take that form or leave exp2 "
                            "False")
    if not cfg.diagonal_test and (cfg.form == "shared" or cfg.whole is not True):
        raise ScheduleError(f"{cfg}: diagonal_test=False drops the test of each 16 x 16 tile "
                            "of a causal forward's diagonal key tiles, which whole=True makes "
                            "in form='registers' or 'fragments'; take whole=True and one of "
                            "those forms, or leave diagonal_test True")
    whole = causal and (cfg.whole if cfg.whole is not None else not frag and (
        cfg.block_kv + _cint(t["v"].shape[3]) <= WHOLE_TILES_MAX_ACCUMULATORS))
    regs = (_p_in_registers(s, t, causal, frag, cfg.whole is True, cfg.exp2)
            if cfg.form != "shared" else None)
    # the rows' logsumexp, for p: a shared copy per key tile (with fragments: from the
    # statistics' row tiles in registers); the output's: read from the statistics the
    # output kernel leaves in global memory
    ls = None if frag else s.cache_read(t["lse_p"], "shared",
                                        [regs["p32"] if regs else t["p"]])
    s[t["lse_p"]].compute_inline()

    # the output: per key tile the scores (tensor cores), the rows' statistics updated
    # in step (each thread a row), p (shared) and p v into each warp's accumulators,
    # rescaled first by exp(lse_old - lse_new)
    ot, bo, pf, ko = k.accumulate(t["out"], t["pv"], t["p"], t["v"], cast16=True,
                                  a_fragment=regs is not None)
    # the blocks per SM its shared memory allows, for ptxas (``__launch_bounds__``): it
    # then fits the registers to them (the causal head dim 64 kernel, left to itself,
    # took 168 on sm_90 and spilled 8 bytes; told 3 blocks, 160 and no spill).  The
    # register form asks for those of the shared one's memory: its p tile saved lets 4
    # blocks of head dim 64 fit sm_90a, whose 128 registers spilled 56 bytes
    ot.pragma(ot.leaf_iter_vars[0], "min_blocks_per_sm", blocks_per_sm_by_shared(
        sm_arch(target), shared_bytes(replace(cfg, form="shared"), _cint(q.shape[3]),
                                      _cint(t["v"].shape[3]), q.dtype)))
    if causal:
        k.skip_causal(pf, ko, "before", whole=whole, masked=not cfg.diagonal_test)
    k.shared_copy(t["q"], ot, bo)
    pad = scores_pad(_cint(q.shape[3]), _cint(t["v"].shape[3]))
    if regs:
        k.p_fragments(t["p"], regs, ot, bo, pf, ko)
    else:
        k.tile16(t["p"], pf, ko)
    k.shared_copy(t["v"], pf, ko, step=True)
    if regs:
        # the scores in each warp's registers at the key loop (read by p there), stored
        # to the shared tile the statistics read (with fragments, none: they read x)
        k.scores_in_registers(t["s"], t["q"], t["k"], pf, ko, [] if frag else [t["m"]], pad)
    else:
        k.scores(t["s"], t["q"], t["k"], pf, ko, pad=pad)
    k.shared_copy(t["k"], pf, ko, step=True)
    if cfg.stages > 1:
        # the value tile copied with the key tile at the step's start, both a ring of
        # cp.async tiles
        kt, vt = s[t["k"]], s[t["v"]]
        s.stages.remove(vt)
        s.stages.insert(s.stages.index(kt) + 1, vt)
        kt.double_buffer(cfg.stages)
        vt.double_buffer(cfg.stages)
        if frag:   # (the keys' vectors: copied with the key tile, so in rings too)
            for x in (regs["kbias"], regs["kpos"]):
                if x is not None:
                    s[x].double_buffer(cfg.stages)
    st = s[t["m"]]
    st.compute_at(pf, ko)
    _cooperative_copy(st, k.threads, cfg.block_q)
    st._lockstep(cfg.block_kv, _rescale, None if not frag else
                 fragment_step(cfg.exp2, cfg.ftz))
    if frag:
        # p from the statistics' step (its exp(x - m) and 1 / l) at each 16-key tile
        s[regs["p32"]]._lockstep_view(st, *P_FROM_STEP)
    else:
        lt = s[ls]
        lt.set_scope("shared")
        lt.compute_at(pf, ko)
        _cooperative_copy(lt, k.threads, cfg.block_q)
    if t["lse"] is not None:
        # the logsumexp: written by the same kernel once the key tiles are done, a
        # thread per row of the block
        st = s[t["lse"]]
        s.stages.remove(st)    # (after the loop over the key tiles: the last stage there)
        s.stages.insert(s.stages.index(ot), st)
        bz = ot.leaf_iter_vars[0]
        H = _Const(_cint(q.shape[1]), "int32")
        st._written_at(ot, bo, [(_op.floordiv(bz.var, H), 1), (_op.floormod(bz.var, H), 1),
                                (_op.mul(bo.var, _Const(cfg.block_q, "int32")), cfg.block_q)])
        _cooperative_copy(st, k.threads, cfg.block_q)


class _Kernels:
    """The pieces the FlashAttention kernels are scheduled from: a block of ``32 *
    warps`` rows (each warp 32), tiles of ``block_kv`` columns per step."""

    def __init__(self, s: Schedule, cfg: FlashConfig, dtype: str, rows_extent: int,
                 cols_extent: int):
        if not isinstance(cfg, FlashConfig):
            raise ScheduleError(f"the FlashAttention schedules take a FlashConfig, got "
                                f"{cfg!r:.80}")
        bq, bk = cfg.block_q, cfg.block_kv
        if cfg.warps < 1 or bk < FRAG or bk % FRAG or rows_extent % bq or \
                cols_extent % bk or cfg.warp_rows not in (FRAG, WARP):
            raise ScheduleError(
                f"{cfg}: warp_rows is {FRAG} or {WARP}, block_q = warp_rows * warps ({bq}) "
                f"must divide the padded row extent "
                f"{rows_extent} and block_kv ({bk}, a multiple of {FRAG}) the padded "
                f"column extent {cols_extent}; take one of FLASH_CONFIGS")
        if isinstance(cfg.stages, bool) or not isinstance(cfg.stages, int) or \
                not 1 <= cfg.stages <= 8:
            raise ScheduleError(f"{cfg}: stages is 1 (the key and value tiles copied where "
                                "they are read) or 2 to 8 (a ring of cp.async tiles)")
        if cfg.form not in ("shared", "registers", "fragments"):
            raise ScheduleError(f"{cfg}: form is 'shared' (p in a shared tile), "
                                "'registers' (p in each warp's registers) or 'fragments' "
                                "(p and the rows' statistics in each warp's registers)")
        if not (cfg.whole is None or isinstance(cfg.whole, bool)) or not all(
                isinstance(x, bool) for x in (cfg.ftz, cfg.exp2, cfg.diagonal_test)):
            raise ScheduleError(f"{cfg}: whole is None (the template's rule), True or "
                                "False, and ftz, exp2 and diagonal_test True or False")
        self.s, self.cfg = s, cfg
        self.names = family_intrinsics("mma", dtype)
        self.per16 = 16 // _dt.nbytes(dtype)
        self.threads = [("threadIdx.x", WARP), ("threadIdx.y", cfg.warps)]

    def blocks(self, st, i):
        """Fuse the batch and head axes of ``st`` (they come first); tile ``i`` by the
        block's rows.  Returns (fused, block, row in the block)."""
        b, h = st.op.axis[:2]
        bz = st.fuse(b, h)
        bo, i = st.split(i, factor=self.cfg.block_q)
        return bz, bo, i

    def shared_copy(self, x, at, axis, step: bool = False) -> None:
        """``x`` (a 16-bit padded copy) into shared memory at ``at``'s ``axis``: a
        block's rows, or with ``step`` a step's ``block_kv`` columns; rows padded by 16
        bytes, 16 bytes a thread and copy."""
        st = self.s[x]
        st.set_scope("shared")
        st.compute_at(at, axis)
        cols = _cint(x.shape[-1])
        st.storage_align(st.op.axis[-2], cols, self.per16)
        rows = self.cfg.block_kv if step else self.cfg.block_q
        _cooperative_copy(st, self.threads, rows * cols * _stacked(x), self.per16)

    def warp_tile(self, T, at, axis, row: int, pad: int = F32_PAD):
        """The float32 tile ``T`` (``[.., rows, cols]``) in shared memory at ``at``'s
        ``axis`` (rows padded from ``row`` floats), each warp storing its 32 rows from an
        ``mma.accumulator`` fragment computed at its rows: returns that fragment's tensor,
        its loops still to be tiled."""
        s = self.s
        ts = s[T]
        ts.set_scope("shared")
        ts.compute_at(at, axis)
        F = s.cache_write(T, "mma.accumulator")
        _, _, *stack, i, j = ts.op.axis
        ts.storage_align(i, row, pad)
        w, i = ts.split(i, factor=self.cfg.warp_rows)
        fi, i = ts.split(i, factor=FRAG)
        fj, j = ts.split(j, factor=FRAG)
        # (a stacked tile: each warp its rows of every accumulator, one reduction)
        ts.reorder(w, *stack, fi, fj, i, j)
        _bind(ts, w, "threadIdx.y")
        ts.tensorize(i, tensor_intrin(self.names["store"]))
        s[F].compute_at(ts, w)
        return F

    def scores(self, S, A, B, at, axis, pad: int = F32_PAD) -> None:
        """The ``block_q x block_kv`` float32 tile of ``S[.., r, c] = sum_d A[.., r, d] *
        B[.., c, d]`` at ``at``'s ``axis``, in shared memory, from the tensor cores: each
        warp its 32 rows.  ``A`` and ``B`` are shared copies (:meth:`shared_copy`)."""
        s, names = self.s, self.names
        SF = self.warp_tile(S, at, axis, self.cfg.block_kv, pad)
        AF = s.cache_read(A, "mma.matrix_a", [SF])
        BF = s.cache_read(B, "mma.matrix_b", [SF])
        sf = s[SF]
        kf = _mma_tiles(sf, names)
        for F, intrin in ((AF, names["load_a"]), (BF, names["load_b"])):
            fs = s[F]
            fs.compute_at(sf, kf)
            *_, r, c = fs.op.axis       # [rows, d]: 16 x 16 tiles down the rows
            ro, r = fs.split(r, factor=FRAG)
            fs.reorder(ro, r, c)
            fs.tensorize(r, tensor_intrin(intrin))

    def scores_in_registers(self, S, A, B, at, axis, readers, pad: int = F32_PAD) -> None:
        """The scores ``S`` (as :meth:`scores`) in each warp's registers at ``at``'s
        ``axis`` (an ``mma.accumulator`` of the warp's rows), and their float32 tile in
        shared memory for ``readers``, each warp storing its rows."""
        s, names, cfg = self.s, self.names, self.cfg
        TS = s.cache_read(S, "shared", readers) if readers else None
        sf = s[S]
        sf.set_scope("mma.accumulator")
        sf.compute_at(at, axis)
        kf = _mma_tiles(sf, names)
        for F, intrin, X in ((s.cache_read(A, "mma.matrix_a", [S]), names["load_a"], A),
                             (s.cache_read(B, "mma.matrix_b", [S]), names["load_b"], B)):
            fs = s[F]
            fs.compute_at(sf, kf)
            *_, r, c = fs.op.axis       # [rows, d]: 16 x 16 tiles down the rows
            ro, r = fs.split(r, factor=FRAG)
            fs.reorder(ro, r, c)
            fs.tensorize(r, tensor_intrin(intrin))
        if TS is None:
            return
        ts = s[TS]
        ts.compute_at(at, axis)
        _, _, i, j = ts.op.axis
        ts.storage_align(i, cfg.block_kv, pad)
        w, i = ts.split(i, factor=cfg.warp_rows)
        fi, i = ts.split(i, factor=FRAG)
        fj, j = ts.split(j, factor=FRAG)
        ts.reorder(w, fi, fj, i, j)
        _bind(ts, w, "threadIdx.y")
        ts.tensorize(i, tensor_intrin(names["store"]))

    def p_fragments(self, P, regs: dict, ot, bo, pf, ko) -> None:
        """``FlashConfig(form="registers")``'s ``p`` (:func:`_p_in_registers`) at the
        accumulator's 16-key loop: ``p32`` on each 16 x 16 tile of the warp's scores in
        registers (its masks' vectors in shared memory: the keys' per key tile, the rows'
        per block), cast into the A operand of ``p v`` (``cuda.mma_acc_to_a_*``).  With
        ``form="fragments"`` the masks are applied by ``x`` at the key loop, and ``p32``
        is a view of the statistics' step (:data:`P_FROM_STEP`)."""
        s, cfg = self.s, self.cfg
        for x, at, axis, n in ((regs["kbias"], pf, ko, cfg.block_kv),
                               (regs["kpos"], pf, ko, cfg.block_kv),
                               (regs["qpos"], ot, bo, cfg.block_q)):
            if x is None:   # (the positions: causal only)
                continue
            st = s[x]
            st.set_scope("shared")
            st.compute_at(at, axis)
            _cooperative_copy(st, self.threads, n)
        for x, intrin in ((P, tensor_intrin(f"cuda.mma_acc_to_a_{TC_DTYPES[P.dtype]}")),
                          (regs["p32"], regs["intrin"])):
            st = s[x]
            st.set_scope("mma.matrix_a" if x is P else "mma.accumulator")
            st.compute_at(pf, self.kf)
            if intrin is None:   # (form="fragments": p32 from the statistics' step)
                continue
            _, _, i, j = st.op.axis
            io, i = st.split(i, factor=FRAG)
            st.reorder(io, i, j)
            st.tensorize(i, intrin)
            if x is not P and regs["unmasked"] is not None:
                st._tensorize_unmasked(regs["unmasked"])
        if "x" in regs:
            # (form="fragments") the masked scores at the key loop, whose tiles the
            # statistics read
            st = s[regs["x"]]
            st.set_scope("mma.accumulator")
            st.compute_at(pf, ko)
            _, _, i, j = st.op.axis
            io, i = st.split(i, factor=FRAG)
            jo, j = st.split(j, factor=FRAG)
            st.reorder(io, jo, i, j)
            st.tensorize(i, regs["x_intrin"])
            if regs["unmasked"] is not None:
                st._tensorize_unmasked(regs["unmasked"])

    def tile16(self, T, at, axis) -> None:
        """The elementwise 16-bit tile ``T`` (``p``, ``dS``) in shared memory at ``at``'s
        ``axis``, one element per thread and step."""
        st = self.s[T]
        st.set_scope("shared")
        st.compute_at(at, axis)
        st.storage_align(st.op.axis[-2], self.cfg.block_kv, self.per16)
        _cooperative_copy(st, self.threads,
                          self.cfg.block_q * self.cfg.block_kv * _stacked(T))

    def skip_causal(self, st, ko, side: str, whole: bool = False,
                    masked: bool = False) -> None:
        """The loop ``ko`` over the column tiles skips the tiles a causal mask empties for
        the block's rows (``pragma causal_tiles``, :mod:`tecomp.lower.causal_tiles`):
        ``"before"``, columns up to the rows (keys of a block of queries), or
        ``"after"``, columns from the rows on (queries of a block of keys); ``whole``:
        the tiles it leaves whole in a loop of their own, without its tests; ``masked``
        (with ``whole``): the others without the test of each 16 x 16 tile
        (``FlashConfig(diagonal_test=False)``)."""
        st._causal_tiles(ko, side, self.cfg.block_q, self.cfg.block_kv, whole, masked)

    def rows_kernel(self, out) -> None:
        """A small output (the logsumexp, FlashAttention's backward's ``delta``) in a
        kernel of its own, 128 threads a block."""
        st = self.s[out]
        f = st.fuse(*st.op.axis)
        fo, fi = st.split(f, factor=128)
        _bind(st, fo, "blockIdx.x")
        _bind(st, fi, "threadIdx.x")

    def cast_tile(self, tile, acc, at, axis):
        """``tile`` (``s.cache_write(out, "shared")`` of an output ``out``, the cast of
        the float32 ``acc`` to the inputs' 16-bit dtype) in shared memory at ``at``'s
        ``axis`` (rows padded by 16 bytes), each warp converting and storing its rows
        from an ``mma.accumulator`` fragment of ``acc`` (``cuda.mma_store_f16`` /
        ``_bf16``): half the shared memory of a float32 tile.  Returns the fragment's
        tensor, its loops still to be tiled."""
        s = self.s
        ts = s[tile]
        F = s.cache_write(acc, "mma.accumulator")
        s[acc].compute_inline()
        ts.compute_at(at, axis)
        _, _, i, j = ts.op.axis
        ts.storage_align(i, _cint(tile.shape[-1]), self.per16)
        w, i = ts.split(i, factor=self.cfg.warp_rows)
        fi, i = ts.split(i, factor=FRAG)
        fj, j = ts.split(j, factor=FRAG)
        ts.reorder(w, fi, fj, i, j)
        _bind(ts, w, "threadIdx.y")
        ts.tensorize(i, tensor_intrin(f"cuda.mma_store_{TC_DTYPES[tile.dtype]}"))
        s[F].compute_at(ts, w)
        return F

    def accumulate(self, out, acc, A, B, cast16: bool = False, a_fragment: bool = False):
        """The kernel of ``out``, the cast of ``acc[.., r, x] = sum_c A[.., r, c] *
        B[.., c, x]`` (float32, ``A`` a 16-bit tile of :meth:`tile16`, ``B`` a shared
        copy) to the inputs' dtype: blocks of rows, each warp's 32 rows accumulated in
        its registers over the steps of ``block_kv`` columns, then stored through a
        float32 tile in shared memory and cast, 16 bytes a thread (``cast16``: cast as
        they are stored, into a 16-bit tile, :meth:`cast_tile`).  ``a_fragment``: ``A``
        is an ``mma.matrix_a`` fragment the caller computes at the accumulator's 16-column
        loop (``self.kf``), not loaded from a tile.  Returns ``(out's stage, its block
        loop, the accumulator's stage, its step loop)``: where the block's operands and
        the steps' tiles are computed."""
        s, names, cfg = self.s, self.names, self.cfg
        if cast16:
            # (out's own stage becomes the copy of the 16-bit tile to global memory)
            tile = s.cache_write(out, "shared")
        ot = s[out]
        bz, bo, i = self.blocks(ot, ot.op.axis[2])
        e = ot.op.axis[3]
        ot.reorder(bz, bo, i, e)
        _bind(ot, bz, "blockIdx.y")
        _bind(ot, bo, "blockIdx.x")
        x = ot.fuse(i, e)
        x, vv = ot.split(x, factor=max(F32_PAD, self.per16))
        for tag, ext in self.threads:
            x, th = ot.split(x, factor=ext)
            _bind(ot, th, tag)
        ot.vectorize(vv)
        PF = (self.cast_tile(tile, acc, ot, bo) if cast16
              else self.warp_tile(acc, ot, bo, _cint(acc.shape[-1])))
        pf = s[PF]
        _, _, *stack, ci, ce = pf.op.axis
        ko, kk = pf.split(pf.op.reduce_axis[0], factor=cfg.block_kv)
        kf, kk = pf.split(kk, factor=FRAG)
        fi, ci = pf.split(ci, factor=FRAG)
        fe, ce = pf.split(ce, factor=FRAG)
        # stacked accumulators (dk's and dv's): each step adds into each in turn
        pf.reorder(ko, *stack, kf, fi, fe, ci, ce, kk)
        pf.tensorize(ci, tensor_intrin(names["mma"]))
        self.kf = kf
        if not a_fragment:
            AF = s.cache_read(A, "mma.matrix_a", [PF])
            fs = s[AF]
            fs.compute_at(pf, kf)
            *_, r, c = fs.op.axis               # A [rows, columns]: tiles down the rows
            ro, r = fs.split(r, factor=FRAG)
            fs.tensorize(r, tensor_intrin(names["load_a"]))
        BF = s.cache_read(B, "mma.matrix_b", [PF])
        fs = s[BF]
        fs.compute_at(pf, kf)
        *_, r, c = fs.op.axis               # B [columns, x]: tiles along x
        co, c = fs.split(c, factor=FRAG)
        fs.reorder(co, r, c)
        fs.tensorize(r, tensor_intrin(names["load_b"]))
        return ot, bo, pf, ko


def schedule_flash_attention_backward(outs, target: str = "cuda",
                                      config: Optional[FlashConfig] = None) -> Schedule:
    """The schedule of ``tecomp.nn.flash_attention_backward``'s ``(dq, dk, dv)`` on the
    tensor cores: a kernel for ``delta`` (a thread per query row), then kernels of
    :meth:`_Kernels.accumulate`'s form, blocks of ``block_q`` rows whose operands stay
    in shared memory and a loop over steps of ``block_kv`` columns:

    * ``dk`` and ``dv`` (rows: keys): per step of queries the scores ``k q^T`` and ``v
      dout^T`` on the tensor cores, the 16-bit tiles of ``p^T`` and ``ds^T`` (one stacked
      tile), and their products with the step's ``dout`` and ``q`` (one stacked copy)
      added into the two accumulators each warp holds in its registers: four GEMMs a
      step, FlashAttention-2's loop;
    * ``dq`` with ``config.dq="atomic"`` (the default where the warps can share its
      tile, :func:`atomic_warps`): in the same loop, ``ds k`` of the step (``ds^T`` of
      the stacked tile read transposed, the block's ``k``) on the tensor cores, each warp
      a part of the ``block_kv x d`` tile, added into a float32 ``dq`` with
      ``atomicAdd`` (zeroed by a kernel before; the blocks of the other keys add into
      the same rows), then a kernel casting it: FlashAttention-2's five GEMMs a step
      (:func:`_atomic_dq`);
    * ``dq`` with ``"recompute"`` (rows: queries): per step of keys the scores and
      ``dout v^T`` again, ``ds`` and ``ds k``: three GEMMs, seven in all, no atomics
      (deterministic).

    ``config``: :func:`flash_backward_config`'s by default (the same tiling for both)."""
    _check_target(target)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    dmask = [op for op in _walk(outs) if _tagged(op, "flash_attention_dmask")]
    if dmask:
        raise ScheduleError(
            f"schedule_flash_attention_backward: {dmask[0].name}, the gradient of "
            "flash_attention's mask, has no CUDA template (its computes hold the Lq x Lk "
            "scores); ask tc.gradient for q, k and v only, or build the mask's gradient "
            "for the CPU")
    by, final = {}, {}
    for t in outs:
        # tc.gradient's results copy the gradients (q.grad = flash_grad.dq); dk and dv
        # of head dims that differ are narrowed from the stacked kernel's outputs
        g = t
        while isinstance(g, Tensor) and not any(_tagged(g.op, f"flash_attention_{w}")
                                                for w in ("dq", "dkv")):
            ins = getattr(g.op, "input_tensors", [])
            if getattr(g.op, "reduce_axis", None) or len(ins) != 1:
                g = None
                break
            g = ins[0]
        if not isinstance(g, Tensor):
            continue
        what = ("dq" if _tagged(g.op, "flash_attention_dq")
                else ("dk", "dv")[g.value_index])
        by[what], final[what] = g, t
    if len(outs) != 3 or len(by) != 3 or (by["dk"].op is not by["dv"].op):
        raise ScheduleError(
            "schedule_flash_attention_backward takes the three outputs of "
            "tecomp.nn.flash_attention_backward, (dq, dk, dv), got "
            f"{', '.join(getattr(t, 'name', repr(t)[:30]) for t in outs)}")
    s = create_schedule([t.op for t in outs])
    for what in ("dq", "dk", "dv"):
        chain = _chain(final[what], by[what])
        for g in (chain if what == "dq" else chain[:-1]):
            s[g].compute_inline()    # the copies down to the cast: into the output
    tf = _backward_into(s, by, final, target, config)
    if tf is not None:
        mine = {id(x.op) for x in tf.values()}
        for op in _walk(outs):   # a head of ones: into its readers
            if id(op) not in mine and not op.reduce_axis and not any(
                    _tagged(op, tg) for tg in ("flash_pad", "flash_p", "flash_ds", "flash_pds",
                                               "flash_attention_dq", "flash_attention_dkv",
                                               "flash_narrow")) \
                    and all(op is not x.op for x in outs) and s[op].attach_type == "root":
                s[op].compute_inline()
    return s


def _forward_of(delta: Tensor, pds: Tensor) -> Optional[dict]:
    """:func:`_parts` of the forward whose output the backward's ``delta`` reads and whose
    logsumexp its stacked tile ``pds`` reads (tc.gradient's), or None (given tensors)."""
    out = [t for t in delta.op.input_tensors if _tagged(t.op, "flash_attention")]
    lse = [t for t in pds.op.input_tensors if _tagged(t.op, "flash_attention_lse")]
    if not out or not lse:
        return None
    return _parts([out[0], lse[0]])


def _backward_into(s: Schedule, by: dict, final: dict, target: str,
                   config: Optional[FlashConfig]) -> Optional[dict]:
    """The backward's kernels in ``s`` (``by``: its ``dq`` cast and ``dkv``'s outputs;
    ``final``: the stages that write them out, narrowed or copied), and the forward's
    where its output and logsumexp are computes (tc.gradient's): returns that forward's
    :func:`_parts`, or None."""
    dkv = by["dk"].op
    D = _cint(by["dq"].shape[3])
    Dv = _cint(final["dv"].shape[3])
    dtype = by["dq"].dtype
    cfg = _checked_config(config, forward=False) if config is not None else \
        flash_backward_config(D, Dv, dtype, max_shared_bytes(target))
    dq_acc = by["dq"].op.input_tensors[0]
    ds = [x for x in dq_acc.op.input_tensors if _tagged(x.op, "flash_ds")][0]
    Lqp, Lkp = _cint(ds.shape[2]), _cint(ds.shape[3])
    delta = [x for x in ds.op.input_tensors if _tagged(x.op, "flash_delta")][0]
    causal = bool(dkv.attrs.get("causal"))
    tf = _forward_of(delta, next(x for x in dkv.input_tensors[0].op.input_tensors
                                 if _tagged(x.op, "flash_pds")))
    if tf is not None:   # tc.gradient's: the forward's output and logsumexp are computed too
        # (with cfg where its warps are of 32 rows, as the forward's must be)
        _forward_into(s, tf, cfg if config is not None and cfg.warp_rows == WARP else
                      flash_config(D, Dv, dtype, max_shared_bytes(target)), target)
    if cfg.dq not in ("atomic", "recompute"):
        raise ScheduleError(f"{cfg}: dq is \"atomic\" (FlashAttention-2's five GEMMs) or "
                            f"\"recompute\" (a second pass, seven), got {cfg.dq!r:.40}")
    atomic = cfg.dq == "atomic"
    if atomic:
        pds = _dq_from_the_stacked_tile(s, dq_acc, dkv.input_tensors[0])
    # dk and dv: blocks of keys, steps of queries, two accumulators
    k = _Kernels(s, cfg, dtype, Lkp, Lqp)
    ot, bo, pf, ko = _gradient_kernel(k, dkv.output(0), dkv.input_tensors[0], "flash_pds",
                                      "after" if causal else None)
    for what in ("dk", "dv"):   # narrowed or copied: a small kernel of their own
        if final[what] is not by[what]:
            k.rows_kernel(final[what])
    if atomic:
        # dq: ds k of each step added into a float32 dq by the dk/dv kernel, then cast
        _atomic_dq(k, dq_acc, pds, ot, bo, pf, ko, _cint(dkv.output(0).shape[1]))
        k.rows_kernel(final["dq"])
    else:
        # dq: blocks of queries, steps of keys
        k = _Kernels(s, cfg, dtype, Lqp, Lkp)
        _gradient_kernel(k, final["dq"], dq_acc, "flash_ds", "before" if causal else None)
    k.rows_kernel(delta)
    return tf


def flash_backward_into(s: Schedule, target: str = "cuda",
                        config: Optional[FlashConfig] = None) -> set:
    """In ``s``, a schedule of a larger graph (a layer's gradient): every
    :func:`tecomp.nn.flash_attention_backward` in it (``tc.gradient`` of a
    ``flash_attention``, or of a ``scaled_dot_product_attention`` with
    ``backward="flash"``) scheduled on its template, with the forward it recomputes;
    the stages it reads (q, k, v, the output's gradient, a mask) stay as they are.
    Returns the ids of the operations it scheduled: the GPU rules schedule the others.
    ``config``: the backward's tiling (default :func:`flash_backward_config`'s)."""
    _check_target(target)
    mine: set = set()
    before = {id(st.op) for st in s.stages}
    dqs = [st.op for st in s.stages if _tagged(st.op, "flash_attention_dq")]
    for st in list(s.stages):
        if not _tagged(st.op, "flash_attention_dkv") or st.op is not st.origin_op:
            continue
        dkv = st.op
        pds = next(x for x in dkv.input_tensors[0].op.input_tensors
                   if _tagged(x.op, "flash_pds"))
        delta = next(x for x in pds.op.input_tensors if _tagged(x.op, "flash_delta"))
        dq = [op for op in dqs if any(
            x.op is delta.op for t in op.input_tensors[0].op.input_tensors
            if _tagged(t.op, "flash_ds") for x in t.op.input_tensors)]
        if len(dq) != 1:
            continue
        by = {"dq": dq[0].output(0), "dk": dkv.output(0), "dv": dkv.output(1)}
        final = dict(by)
        for x in s.stages:   # (head dims that differ: dk or dv narrowed)
            if _tagged(x.op, "flash_narrow"):
                src = x.op.input_tensors[0]
                if src.op is dkv:
                    final[("dk", "dv")[src.value_index]] = x.op.output(0)
        if any(_tagged(x.op, "flash_attention_dmask") for x in s.stages):
            continue   # (the mask's gradient holds the scores: the rules)
        ops = _backward_ops(list(final.values()))
        tf = _backward_into(s, by, final, target, config)
        mine |= {id(op) for op in ops}
        if tf is not None:
            mine |= {id(x.op) for x in tf.values() if x is not None}
            mine |= {id(op) for op in _backward_ops([tf["out"], tf["lse"]])}
    if mine:
        mine |= {id(st.op) for st in s.stages} - before
        mine |= {id(st.origin_op) for st in s.stages if id(st.op) in mine}
    return mine


#: the tags of FlashAttention's computes (forward and backward)
_FLASH_TAGS = ("flash_pad", "flash_scores", "flash_pds", "flash_ds", "flash_grad_acc",
               "flash_delta", "flash_attention_dq", "flash_attention_dkv", "flash_narrow",
               "flash_stats", "flash_p", "flash_pv", "flash_attention", "flash_attention_lse")


def _backward_ops(tensors) -> list:
    """The FlashAttention computes under ``tensors`` (and the forward's unlabelled
    logsumexp of its rows), down to the stages that are not FlashAttention's."""
    out, seen, todo = [], set(), [t.op for t in tensors]
    while todo:
        op = todo.pop()
        if id(op) in seen or isinstance(op, PlaceholderOp):
            continue
        seen.add(id(op))
        ins = getattr(op, "input_tensors", ())
        ours = any(_tagged(op, tg) for tg in _FLASH_TAGS) or any(
            _tagged(t.op, "flash_stats") for t in ins)
        if not ours:
            continue
        out.append(op)
        todo += [t.op for t in ins]
    return out


def _dq_from_the_stacked_tile(s: Schedule, dq_acc: Tensor, acc: Tensor) -> Tensor:
    """FlashAttention-2's ``dq``: ``dq_acc``'s body replaced by ``sum_j ds[i, j] k[j, :]``
    read from the ``dk``/``dv`` kernel's stacked tile (``ds^T``, its second half) and
    its padded ``k`` (the same values as the second pass's ``ds``: the products of the
    same tiles), the second pass's stages dropped from ``s``.  Returns the stacked tile
    (``<name>.pt_dst``)."""
    pds = next(x for x in acc.op.input_tensors if _tagged(x.op, "flash_pds"))
    st = next(x for x in pds.op.input_tensors if x.name.endswith(".scores_k"))
    kp = st.op.input_tensors[0]
    f32 = "float32"
    j = _te.reduce_axis(_cint(kp.shape[2]), name="j")
    body = _te.compute(tuple(dq_acc.shape), lambda b, h, i, d: _te.sum(
        pds[b, h, 1, j, i].astype(f32) * kp[b, h, j, d].astype(f32), axis=j),
        name=dq_acc.op.name)
    st_acc = s[dq_acc]
    s._replace_op(st_acc, _with_body(st_acc.op, substitute(body.op.body, {
        a.var: b.var for a, b in zip(body.op.axis, st_acc.op.axis)})))
    # the stages only the second pass read: out of the schedule
    live, todo = set(), [x for x in s.stages if x.is_output]
    while todo:
        x = todo.pop()
        if id(x) in live:
            continue
        live.add(id(x))
        for t in x.op.input_tensors:
            y = s._stage_of.get(id(t.op))
            if y is not None:
                todo.append(y)
    for x in [x for x in s.stages if id(x) not in live]:
        s.stages.remove(x)
        for key in [key for key, y in s._stage_of.items() if y is x]:
            del s._stage_of[key]
    return pds


def _atomic_dq(k: "_Kernels", dq_acc: Tensor, pds: Tensor, ot: Stage, bo, pf: Stage, ko,
               heads: int) -> None:
    """FlashAttention-2's ``dq`` in the ``dk``/``dv`` kernel: at each step ``ko`` (a
    tile of ``block_kv`` queries), ``ds k`` over the block's keys (the stacked tile's
    ``ds^T`` read transposed, ``k`` the block's shared copy) on the tensor cores, each
    warp a part of the ``block_kv x d`` tile in its registers, added into the float32
    ``dq_acc`` with ``atomicAdd`` (``Stage._atomic_add``: zeroed by a kernel of its
    own before; the blocks of other keys add into the same rows)."""
    s, cfg, names = k.s, k.cfg, k.names
    D = _cint(dq_acc.shape[3])
    bk, warps = cfg.block_kv, cfg.warps
    split = atomic_warps(cfg, D)
    if split is None:
        raise ScheduleError(f"{cfg}: with dq \"atomic\" the warps ({warps}) share the "
                            f"{bk} x {D} tile of dq in tiles of 16 x 16; take another "
                            "tiling (or dq=\"recompute\")")
    QF = s.cache_write(dq_acc, "mma.accumulator")
    st = s[dq_acc]
    s.stages.remove(st)
    s.stages.remove(s[QF])
    # (after the stacked tile and before the host: lowering infers a stage's bounds
    # after its readers' and its host's)
    at = s.stages.index(pf)
    s.stages[at:at] = [s[QF], st]
    b, h, i, d = st.op.axis
    wi, i = st.split(i, nparts=split[0])
    wd, d = st.split(d, nparts=split[1])
    st.reorder(b, h, wi, wd, i, d)
    w = st.fuse(wi, wd)
    fi, i = st.split(i, factor=FRAG)
    fd, d = st.split(d, factor=FRAG)
    st.reorder(b, h, w, fi, fd, i, d)
    _bind(st, w, "threadIdx.y")
    st.tensorize(i, tensor_intrin(names["store"]))
    bz = ot.leaf_iter_vars[0]
    i32 = "int32"
    H = _Const(heads, i32)
    st._atomic_at(pf, ko, [(_op.floordiv(bz.var, H), 1), (_op.floormod(bz.var, H), 1),
                           (_op.mul(ko.var, _Const(bk, i32)), bk), (0, D)])
    qf = s[QF]
    qf.compute_at(st, w)
    qf._reduce_range(_op.mul(bo.var, _Const(cfg.block_q, i32)), cfg.block_q)
    kf = _mma_tiles(qf, names)
    for src, scope, intrin in ((pds, "mma.matrix_a", names["load_a"]),
                               (_key_tile(QF), "mma.matrix_b", names["load_b"])):
        F = s.cache_read(src, scope, [QF])
        fs = s[F]
        fs.compute_at(qf, kf)
        *_, r, c = fs.op.axis      # [j, i] (ds^T) and [j, d] (k): tiles along the columns
        co, c = fs.split(c, factor=FRAG)
        fs.reorder(co, r, c)
        fs.tensorize(r, tensor_intrin(intrin))


def _mma_tiles(st, names):
    """Stage ``st``'s last two data axes and its reduction cut into ``FRAG`` tiles, the
    inner tile tensorized with the mma intrinsic of ``names``; the outer reduction loop
    (where the operands' fragments are loaded) is returned."""
    *_, ci, cj = st.op.axis
    kf, kk = st.split(st.op.reduce_axis[0], factor=FRAG)
    fi, ci = st.split(ci, factor=FRAG)
    fj, cj = st.split(cj, factor=FRAG)
    st.reorder(kf, fi, fj, ci, cj, kk)
    st.tensorize(ci, tensor_intrin(names["mma"]))
    return kf


def atomic_warps(cfg: FlashConfig, d: int) -> Optional[tuple]:
    """How the warps of the backward's ``dk``/``dv`` kernel share the ``block_kv x d``
    tile of ``dq`` with ``dq="atomic"``: ``(row parts, column parts)``, each part whole
    16 x 16 tiles (the rows first), or None where they cannot."""
    rows, cols = cfg.block_kv // FRAG, d // FRAG
    for wi in range(min(rows, cfg.warps), 0, -1):
        wd = cfg.warps // wi
        if rows % wi == 0 and cfg.warps % wi == 0 and cols % wd == 0:
            return wi, wd
    return None


def _key_tile(QF: Tensor) -> Tensor:
    """The padded ``k`` that the atomic ``dq``'s accumulator reads."""
    return next(t for t in QF.op.input_tensors if not _tagged(t.op, "flash_pds"))


def _gradient_kernel(k: "_Kernels", out, acc, tile_tag: str, causal) -> None:
    """A kernel of the backward (:meth:`_Kernels.accumulate`'s form): ``out``, the cast
    of ``acc = T X`` (``T`` the 16-bit tile tagged ``tile_tag``, ``p^T``/``ds^T`` or
    ``ds``; ``X`` the step's operand), per step the score tiles ``T`` reads (their
    block operands copied once, their step operands per step) on the tensor cores;
    ``causal``: the side whose column tiles are skipped, or None."""
    T, X = sorted(acc.op.input_tensors, key=lambda x: not _tagged(x.op, tile_tag))
    ot, bo, pf, ko = k.accumulate(out, acc, T, X)
    loops = (ot, bo, pf, ko)
    if causal:
        k.skip_causal(pf, ko, causal)
    k.tile16(T, pf, ko)
    k.shared_copy(X, pf, ko, step=True)
    for S in (x for x in T.op.input_tensors if _tagged(x.op, "flash_scores")):
        A, B = S.op.input_tensors
        k.scores(S, A, B, pf, ko)
        k.shared_copy(A, ot, bo)
        if B is not X:
            k.shared_copy(B, pf, ko, step=True)
    return loops


def _chain(top: Tensor, bottom: Tensor):
    """The stages from ``top``'s input down to ``bottom`` (single-input copies)."""
    out, t = [], top
    while t is not bottom:
        t = t.op.input_tensors[0]
        out.append(t)
    return out


def _walk(outs):
    """Every compute operation reachable from ``outs``."""
    return [op for op in compute_ops(outs) if hasattr(op, "reduce_axis")]


def backward_shared_bytes(cfg: FlashConfig, d: int, dv: int, dtype: str = "float16") -> int:
    """The shared memory of the larger backward kernel with ``cfg``: ``dk`` and ``dv``'s
    (the key block's ``k`` and ``v``, the step's stacked ``dout`` and ``q``, the two
    float32 score tiles, the stacked 16-bit ``p^T``/``ds^T`` tile and the stacked
    float32 tile of the results) or ``dq``'s (two block and two step operands, two
    score tiles, ``ds`` and the float32 tile of ``dq``)."""
    e = _dt.nbytes(dtype)
    pad = 16 // e
    bq, bk, w = cfg.block_q, cfg.block_kv, max(d, dv)
    scores = 2 * bq * (bk + F32_PAD) * 4
    dkv = ((bq * (d + pad) + bq * (dv + pad) + 2 * bk * (w + pad) + 2 * bq * (bk + pad)) * e
           + scores + 2 * bq * (w + F32_PAD) * 4)
    dq = ((bq * (d + pad) + bq * (dv + pad) + bk * (d + pad) + bk * (dv + pad)
           + bq * (bk + pad)) * e + scores + bq * (d + F32_PAD) * 4)
    return max(dkv, dq)


def backward_accumulators(cfg: FlashConfig, d: int, dv: int) -> int:
    """The float32 accumulators a thread of the backward's ``dk`` and ``dv`` kernel
    holds at most: its share of its warp's rows of both results and of a score tile
    (``dq``'s kernel holds fewer)."""
    return cfg.warp_rows * (2 * max(d, dv) + cfg.block_kv) // WARP


#: the tilings :func:`flash_backward_config` tries, in order: 16-row warps where the
#: two accumulators of 32 rows would not fit the registers
FLASH_BACKWARD_CONFIGS = (FlashConfig(4, 64), FlashConfig(4, 32), FlashConfig(2, 64),
                          FlashConfig(8, 32, 16), FlashConfig(4, 64, 16),
                          FlashConfig(2, 32), FlashConfig(4, 32, 16), FlashConfig(2, 32, 16))


def flash_backward_config(d: int, dv: int, dtype: str = "float16",
                          max_shared: Optional[int] = None) -> FlashConfig:
    """The first of :data:`FLASH_BACKWARD_CONFIGS` whose kernels fit ``max_shared``
    bytes of shared memory (default: sm_80's 163 KiB; :func:`backward_shared_bytes`)
    and whose accumulators fit the registers (:func:`backward_accumulators` up to
    :data:`MAX_ACCUMULATORS`), else the smallest; ``dq="atomic"``, FlashAttention-2's
    five GEMMs, where its warps share ``dq``'s tile in whole 16 x 16 tiles
    (:func:`atomic_warps`), else ``"recompute"``.  (Atomic by default: FlashAttention-2
    computes ``dq`` this way, five GEMMs a tile pair instead of seven, 2/7 fewer tensor
    core operations, against float32 atomics into ``dq`` that the blocks of one head
    contend for; its paper measures its backward so.  Not measured here yet:
    ``benchmarks/gpu.py --only "flash attention bwd" --ab`` times both.)"""
    limit = max_shared if max_shared is not None else 163 * 1024
    for c in FLASH_BACKWARD_CONFIGS:
        if backward_shared_bytes(c, d, dv, dtype) <= limit and \
                backward_accumulators(c, d, dv) <= MAX_ACCUMULATORS:
            return _with_dq(c, d)
    return _with_dq(FLASH_BACKWARD_CONFIGS[-1], d)


def _with_dq(cfg: FlashConfig, d: int) -> FlashConfig:
    """``cfg`` with ``dq="atomic"`` (FlashAttention-2's five GEMMs, the default) where its
    warps can share ``dq``'s tile (:func:`atomic_warps`), else ``"recompute"``."""
    return cfg if atomic_warps(cfg, d) is not None else replace(cfg, dq="recompute")

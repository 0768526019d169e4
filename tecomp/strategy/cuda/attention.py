"""FlashAttention's forward on tensor cores (``tecomp.nn.flash_attention`` on ``cuda``
targets): a schedule of its computes, every tile a schedule decision.

Two kernels carry the work (and a third writes the logsumexp out):

1. **statistics** -- one CUDA block per (batch x head, ``block_q`` queries), ``warps``
   warps of 32 query rows each (``block_q = 32 * warps``).  The block's query tile is
   copied to shared memory once; then per tile of ``block_kv`` keys: the key tile to
   shared memory, the ``block_q x block_kv`` scores on the tensor cores (``ldmatrix`` +
   ``mma.sync.m16n8k16``, :mod:`tecomp.te.intrin_mma`; each warp its 32 rows, stored to a
   float32 tile in shared memory) and every thread folds its row of the tile into its
   running maximum ``m`` and running sum ``l`` (the online softmax's reduction,
   ``tecomp.nn.attention._online_softmax``).  ``m`` and ``l`` go to global memory
   (``b * h * Lq`` floats each: no ``Lq x Lk`` buffer anywhere).
2. **output** -- the same blocks; the query tile again; per key tile: the scores again
   (tensor cores), ``p = exp(s - lse)`` into a 16-bit tile in shared memory (the
   threads of the block, one element each), the value tile, and ``p v`` accumulated in
   each warp's registers (tensor cores); at the end the accumulators go through a float32
   tile in shared memory to the output, cast to q's dtype, 16 bytes a thread.

Because the logsumexp is known before ``p v`` starts, ``p`` is already normalised and
the accumulator needs no rescaling; the price is the scores computed twice (three GEMMs
of ``Lq x Lk x d`` instead of FlashAttention-2's two).  Causal attention computes every
key tile and masks (the tiles above the diagonal are not skipped yet).

:class:`FlashConfig` holds the tiling; :func:`flash_config` picks it from the head
dimension and the shared memory of the target (:func:`shared_bytes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...errors import ScheduleError
from ...ir import dtype as _dt
from ...schedule.schedule import Schedule, create_schedule
from ...te.tensor import Tensor
from ...te.tensor_intrin import tensor_intrin
from .._common import _cint, _has_tag
from .common import _bind, _check_target, _cooperative_copy, max_shared_bytes
from .tensorcore import FRAG, WARP, family_intrinsics

#: the float32 elements a row of a float32 shared tile is padded by (16 bytes)
F32_PAD = 4


@dataclass(frozen=True)
class FlashConfig:
    """The tiling of :func:`schedule_flash_attention`: ``warps`` warps per block, each
    32 query rows (``block_q = 32 * warps`` rows a block); ``block_kv`` keys per step
    (a multiple of 16 that divides 128, ``tecomp.nn.attention.FLASH_PAD``)."""

    warps: int = 4
    block_kv: int = 64

    @property
    def block_q(self) -> int:
        return WARP * self.warps

    @property
    def threads(self) -> int:
        return WARP * self.warps


def shared_bytes(cfg: FlashConfig, d: int, dv: int, dtype: str = "float16") -> int:
    """The shared memory of the output kernel (the larger of the two) with ``cfg``: the
    query, key and value tiles and ``p`` (16-bit, rows padded by 16 bytes), the scores'
    and the output's float32 tiles (rows padded by 16 bytes)."""
    e = _dt.nbytes(dtype)
    pad = 16 // e
    bq, bk = cfg.block_q, cfg.block_kv
    return ((bq * (d + pad) + bk * (d + pad) + bk * (dv + pad) + bq * (bk + pad)) * e
            + (bq * (bk + F32_PAD) + bq * (dv + F32_PAD)) * 4)


#: the tilings :func:`flash_config` tries, in order
FLASH_CONFIGS = (FlashConfig(4, 64), FlashConfig(4, 32), FlashConfig(2, 64), FlashConfig(2, 32))


#: the float32 accumulators a thread of the output kernel may hold, ``block_kv`` of the
#: scores and ``dv`` of ``p v`` (each warp's 32 rows over its 32 lanes): beyond 160 ptxas
#: spills at 255 registers (head dim 128 with 64-key tiles on sm_90)
MAX_ACCUMULATORS = 160


def flash_config(d: int, dv: int, dtype: str = "float16",
                 max_shared: Optional[int] = None) -> FlashConfig:
    """The first of :data:`FLASH_CONFIGS` whose output kernel fits ``max_shared`` bytes of
    shared memory (default: sm_80's 163 KiB) and whose accumulators fit the registers
    (:data:`MAX_ACCUMULATORS`), else the smallest."""
    limit = max_shared if max_shared is not None else 163 * 1024
    for c in FLASH_CONFIGS:
        if shared_bytes(c, d, dv, dtype) <= limit and c.block_kv + dv <= MAX_ACCUMULATORS:
            return c
    return FLASH_CONFIGS[-1]


def _parts(outs):
    """The stages of a ``flash_attention``: a dict by role, or ScheduleError."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    out = [t for t in outs if isinstance(t, Tensor) and _has_tag(t.op, "flash_attention")]
    lse = [t for t in outs if isinstance(t, Tensor) and _has_tag(t.op, "flash_attention_lse")]
    if len(outs) != 2 or len(out) != 1 or len(lse) != 1:
        raise ScheduleError(
            "schedule_flash_attention takes the two outputs of tecomp.nn.flash_attention, "
            f"(out, lse), got {', '.join(getattr(t, 'name', repr(t)[:30]) for t in outs)}")
    out, lse = out[0], lse[0]
    pv = out.op.input_tensors[0]
    p, vp = pv.op.input_tensors
    s2, lse_p = (t for t in p.op.input_tensors)
    if _has_tag(lse_p.op, "flash_scores"):
        s2, lse_p = lse_p, s2
    stats = lse_p.op.input_tensors[0]
    m, l = stats.op.output(0), stats.op.output(1)
    s1 = [t for t in stats.op.input_tensors if _has_tag(t.op, "flash_scores")][0]
    q1, k1 = s1.op.input_tensors
    q2, k2 = s2.op.input_tensors
    if lse_p.op is not lse.op.input_tensors[0].op:
        raise ScheduleError(f"schedule_flash_attention: {out.name} and {lse.name} are not the "
                            "outputs of one tecomp.nn.flash_attention call")
    return dict(out=out, lse=lse, pv=pv, p=p, v=vp, s2=s2, lse_p=lse_p, m=m, l=l, s1=s1,
                q1=q1, k1=k1, q2=q2, k2=k2)


def schedule_flash_attention(outs, target: str = "cuda",
                             config: Optional[FlashConfig] = None) -> Schedule:
    """The schedule of ``tecomp.nn.flash_attention``'s outputs ``(out, lse)`` on the
    tensor cores (see the module docstring); ``config`` a :class:`FlashConfig` (default
    :func:`flash_config`'s for the target's shared memory)."""
    _check_target(target)
    t = _parts(outs)
    q = t["q1"]
    D, Dv = _cint(q.shape[3]), _cint(t["v"].shape[3])
    Lqp, Lkp = _cint(q.shape[2]), _cint(t["k1"].shape[2])
    dtype = q.dtype
    cfg = config if config is not None else flash_config(D, Dv, dtype, max_shared_bytes(target))
    if not isinstance(cfg, FlashConfig):
        raise ScheduleError(f"schedule_flash_attention takes a FlashConfig, got {cfg!r:.80}")
    bq, bk = cfg.block_q, cfg.block_kv
    if cfg.warps < 1 or bk < FRAG or bk % FRAG or Lqp % bq or Lkp % bk:
        raise ScheduleError(
            f"{cfg}: block_q = 32 * warps ({bq}) must divide the padded query length {Lqp} "
            f"and block_kv ({bk}, a multiple of {FRAG}) the padded key length {Lkp}; take "
            "one of FLASH_CONFIGS")
    names = family_intrinsics("mma", dtype)
    per16 = 16 // _dt.nbytes(dtype)
    threads = [("threadIdx.x", WARP), ("threadIdx.y", cfg.warps)]
    s = create_schedule([t["out"].op, t["lse"].op])

    def blocks(st, i):
        """Fuse the batch and head axes onto blockIdx.y, tile ``i`` by block_q on .x."""
        b, h = st.op.axis[:2]
        bz = st.fuse(b, h)
        bo, i = st.split(i, factor=bq)
        return bz, bo, i

    def shared_copy(x, at, axis, rows):
        st = s[x]
        st.set_scope("shared")
        st.compute_at(at, axis)
        cols = _cint(x.shape[3])
        st.storage_align(st.op.axis[-2], cols, per16)
        _cooperative_copy(st, threads, rows * cols, per16)

    def scores(S, Q, K, at, axis):
        """The block_q x block_kv tile of the scores ``S`` at ``at``'s ``axis``, in a
        float32 tile of shared memory, from the tensor cores: each warp its 32 rows."""
        ss = s[S]
        ss.set_scope("shared")
        ss.compute_at(at, axis)
        SF = s.cache_write(S, "mma.accumulator")
        QF = s.cache_read(Q, "mma.matrix_a", [SF])
        KF = s.cache_read(K, "mma.matrix_b", [SF])
        _, _, i, j = ss.op.axis
        ss.storage_align(i, bk, F32_PAD)
        w, i = ss.split(i, factor=WARP)
        fi, i = ss.split(i, factor=FRAG)
        fj, j = ss.split(j, factor=FRAG)
        ss.reorder(w, fi, fj, i, j)
        _bind(ss, w, "threadIdx.y")
        ss.tensorize(i, tensor_intrin(names["store"]))
        sf = s[SF]
        sf.compute_at(ss, w)
        _, _, ci, cj = sf.op.axis
        kf, kk = sf.split(sf.op.reduce_axis[0], factor=FRAG)
        fi, ci = sf.split(ci, factor=FRAG)
        fj, cj = sf.split(cj, factor=FRAG)
        sf.reorder(kf, fi, fj, ci, cj, kk)
        sf.tensorize(ci, tensor_intrin(names["mma"]))
        for F, intrin in ((QF, names["load_a"]), (KF, names["load_b"])):
            fs = s[F]
            fs.compute_at(sf, kf)
            *_, r, c = fs.op.axis       # [rows, d]: 16 x 16 tiles down the rows
            ro, r = fs.split(r, factor=FRAG)
            fs.reorder(ro, r, c)
            fs.tensorize(r, tensor_intrin(intrin))
        shared_copy(K, at, axis, bk)

    # 1. statistics: a thread per query row, folding each key tile into (m, l)
    m, l = t["m"], t["l"]
    st = s[m]
    bz, bo, i = blocks(st, st.op.axis[2])
    ko, kj = st.split(st.op.reduce_axis[0], factor=bk)
    iy, ix = st.split(i, factor=WARP)
    st.reorder(bz, bo, ko, iy, ix, kj)
    _bind(st, bz, "blockIdx.y")
    _bind(st, bo, "blockIdx.x")
    _bind(st, iy, "threadIdx.y")
    _bind(st, ix, "threadIdx.x")
    shared_copy(t["q1"], st, bo, bq)
    scores(t["s1"], t["q1"], t["k1"], st, ko)
    s[t["lse_p"]].compute_inline()

    # the logsumexp out: its own small kernel
    lo = s[t["lse"]]
    f = lo.fuse(*lo.op.axis)
    fo, fi = lo.split(f, factor=128)
    _bind(lo, fo, "blockIdx.x")
    _bind(lo, fi, "threadIdx.x")

    # 2. the output: per key tile, p (shared) and p v (each warp's accumulators)
    out, pv = t["out"], t["pv"]
    ot = s[out]
    bz, bo, i = blocks(ot, ot.op.axis[2])
    e = ot.op.axis[3]
    ot.reorder(bz, bo, i, e)
    _bind(ot, bz, "blockIdx.y")
    _bind(ot, bo, "blockIdx.x")
    vec = max(F32_PAD, per16)
    x = ot.fuse(i, e)
    x, vv = ot.split(x, factor=vec)
    for tag, ext in threads:
        x, th = ot.split(x, factor=ext)
        _bind(ot, th, tag)
    ot.vectorize(vv)
    shared_copy(t["q2"], ot, bo, bq)
    ps = s[pv]
    ps.set_scope("shared")
    ps.compute_at(ot, bo)
    PF = s.cache_write(pv, "mma.accumulator")
    _, _, i, e = ps.op.axis
    ps.storage_align(i, Dv, F32_PAD)
    w, i = ps.split(i, factor=WARP)
    fi, i = ps.split(i, factor=FRAG)
    fe, e = ps.split(e, factor=FRAG)
    ps.reorder(w, fi, fe, i, e)
    _bind(ps, w, "threadIdx.y")
    ps.tensorize(i, tensor_intrin(names["store"]))
    pf = s[PF]
    pf.compute_at(ps, w)
    _, _, ci, ce = pf.op.axis
    ko, kk = pf.split(pf.op.reduce_axis[0], factor=bk)
    kf, kk = pf.split(kk, factor=FRAG)
    fi, ci = pf.split(ci, factor=FRAG)
    fe, ce = pf.split(ce, factor=FRAG)
    pf.reorder(ko, kf, fi, fe, ci, ce, kk)
    pf.tensorize(ci, tensor_intrin(names["mma"]))
    AF = s.cache_read(t["p"], "mma.matrix_a", [PF])
    VF = s.cache_read(t["v"], "mma.matrix_b", [PF])
    fs = s[AF]
    fs.compute_at(pf, kf)
    *_, r, c = fs.op.axis               # p [rows, keys]: tiles down the rows
    ro, r = fs.split(r, factor=FRAG)
    fs.tensorize(r, tensor_intrin(names["load_a"]))
    fs = s[VF]
    fs.compute_at(pf, kf)
    *_, r, c = fs.op.axis               # v [keys, dv]: tiles along dv
    co, c = fs.split(c, factor=FRAG)
    fs.reorder(co, r, c)
    fs.tensorize(r, tensor_intrin(names["load_b"]))
    pt = s[t["p"]]
    pt.set_scope("shared")
    pt.compute_at(pf, ko)
    pt.storage_align(pt.op.axis[-2], bk, per16)
    _cooperative_copy(pt, threads, bq * bk)
    shared_copy(t["v"], pf, ko, bk)
    scores(t["s2"], t["q2"], t["k2"], pf, ko)
    return s

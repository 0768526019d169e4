"""The auto-scheduler's rules for the GPU (``tc.auto_schedule(args, target="cuda")``).

The analytic schedule (``trials=0``) of any compute DAG, read from its structure, with the
tilings of :mod:`tecomp.strategy.cuda` as the building blocks; no measurement:

0. **Templates**: a DAG that is one of tecomp.strategy.cuda's operators (a convolution with its
   elementwise epilogue, a softmax, ``flash_attention``'s two outputs, its gradients)
   gets its template; a convolution's tiling (threads
   and registers per axis, channel step) is a set of knobs around ``conv_config``'s.
1. **Inline** every elementwise stage that is not an output and does not feed a
   contraction's operand (a GEMM's shared tiles copy a tensor in memory).
2. **Contractions**: a (batched) GEMM, ``C[b.., i, j] = sum_k X[.., i|k, k|i] *
   Y[.., k|j, j|k]``, with any layout of either operand (``A B``, ``A B^T``, ``A^T B``),
   runs the GEMM template: blocks of ``gemm_config``'s tiling (the batch axes fused on
   ``blockIdx.z``), shared tiles per k step, a register micro-tile per thread.  An
   elementwise output that reads the GEMM only at its own index (a bias, an activation)
   is computed from the registers when C is stored.  A contraction of float16 or bfloat16
   operands summed in float32, of constant extents, runs on tensor cores instead (odd
   extents in boundary tiles; a GEMV on the CUDA cores), with its epilogue applied from
   a tile of C in shared memory (:mod:`tecomp.strategy.cuda.tensorcore`,
   ``wmma_config``'s tiling; its knobs ``<name>.warps_m``, ``.warps_n``, ``.frags_m``,
   ``.frags_n``, ``.k_tile`` (each among the values whose tiles divide the extents; odd
   extents: no larger than them rounded up to 16), ``.double_buffer``, ``.stages``,
   ``.family``).
3. **Row reductions fused into their output**: an elementwise output whose reductions
   (after inlining) all reduce over the output's last axis per row, read at the row's
   own index (softmax, layer norm, a row-wise normalisation): one block per row (the
   leading axes fused on ``blockIdx.x``), each reduction a cross-thread reduction into
   shared memory computed at the row, then the row's elements across the threads.
4. **Other reductions**: one block per output element with the reduction across its
   threads when the reduction is long (32 or more, or symbolic), else one thread per
   output element.
5. **Elementwise outputs**: axes fused over 256-thread blocks.

Threads per block are a power of two up to 256, no more than the work needs.

Each decision is a knob (:class:`~tecomp.strategy.rules.Knobs`): per contraction its
GEMM tiling (threads, registers, k tile, k steps unrolled, vector copies, double
buffering), per other kernel its threads per block, so that the measured search
(``trials > 0``) samples, mutates and ranks them as it does the CPU rules' knobs.
"""
from __future__ import annotations

import math
import os
from typing import Dict, List, Optional

from ..errors import AutoScheduleError, ScheduleError
from ..ir.expr import Reduce
from . import cuda as nn_cuda
from ._common import _has_tag, _walk, _contraction_operands, _inline_injective
from .cuda.gemm import GemmConfig, _schedule_gemm, gemm_config, reads_at_own_index, expanded_loads
from .cuda.injective import _schedule_injective_stage
from .cuda.softmax import _cross_thread_rows, _row_loop
from .cuda.tensorcore import fits, schedule_wmma_gemm, tensor_core_gemm, wmma_config
from ..schedule.schedule import Schedule, create_schedule
from .cuda.common import _pow2_at_least, max_shared_bytes
from ..te.tensor import ComputeOp, Tensor, thread_axis
from .rules import Knobs, outputs_of, _cint

#: a reduction at least this long (or symbolic) runs across a block's threads
CROSS_THREAD_MIN = 32
#: the most threads a block gets from these rules
MAX_THREADS = 256


def _threads_for(n: Optional[int]) -> int:
    return MAX_THREADS if n is None else max(1, min(MAX_THREADS, _pow2_at_least(n)))


def apply_cuda_rules(args, shapes: Optional[dict] = None, gemm=None, knobs=None) -> Schedule:
    """The rule-based GPU schedule of ``args`` (the list given to ``tc.build``).
    ``gemm``: a :class:`~tecomp.strategy.cuda.GemmConfig` for every contraction instead of
    ``gemm_config``'s, or a :class:`~tecomp.strategy.cuda.WmmaConfig` for every tensor-core one
    (float16 operands, a float32 sum) instead of ``wmma_config``'s, or a
    :class:`~tecomp.strategy.cuda.FlashConfig` for every attention computed as
    FlashAttention instead of ``flash_config``'s (what ``benchmarks/gpu.py --sweep``
    tries).  ``knobs``: a
    :class:`~tecomp.strategy.rules.Knobs` that takes the decisions (the search's
    candidates; by default the analytic ones): per contraction its GEMM tiling, per
    reduction or elementwise kernel its threads per block."""
    outs = outputs_of(args)
    knobs = knobs if knobs is not None else Knobs()
    s = _template(outs, knobs)
    if s is not None:
        return s
    s = create_schedule([t.op for t in outs])
    try:
        # scaled_dot_product_attention inside the graph (a layer's, a padding mask):
        # FlashAttention's template, the rules for the rest
        fcfg = gemm if isinstance(gemm, nn_cuda.FlashConfig) else None
        # and FlashAttention's backward inside it (a layer's gradient): its template
        flash = nn_cuda.attention.flash_backward_into(s)
        flash |= nn_cuda.attention.sdpa_into_flash(s, config=fcfg)
        _CudaRules(s, outs, shapes or {}, None if fcfg else gemm, knobs, skip=flash).run()
    except ScheduleError as exc:
        raise AutoScheduleError(
            f"auto_schedule(target='cuda'): no GPU schedule for these computes ({exc}); "
            "schedule them by hand or with tecomp.strategy.cuda") from None
    return s


def _template(outs: List[Tensor], knobs) -> Optional[Schedule]:
    """The tecomp.strategy.cuda template of a DAG that is one of its operators (a convolution
    with its epilogue, a softmax), or None.  A convolution's tiling is a set of knobs
    (:func:`_conv_knobs`)."""
    ops = _walk(outs)
    # tecomp.nn.flash_attention and its backward (tc.gradient's or
    # flash_attention_backward's): their templates or nothing (the rules would hold the
    # padded scores whole)
    # (inside a larger graph, a layer's gradient: apply_cuda_rules' flash_backward_into)
    if any(_has_tag(op, "flash_attention_dq") for op in ops) and _flash_alone(outs, ops):
        return nn_cuda.schedule_flash_attention_backward(outs, target="cuda")
    if any(_has_tag(op, "flash_attention") for op in ops) and \
            not any(_has_tag(op, "flash_attention_dq") for op in ops):
        return nn_cuda.schedule_flash_attention(outs, target="cuda")
    # scaled_dot_product_attention alone, float16/bfloat16 without a mask: computed as
    # flash_attention, on its template (the tensor cores); else the rules
    if len(outs) == 1 and _has_tag(outs[0].op, "sdpa"):
        s = nn_cuda.schedule_sdpa_as_flash(outs, target="cuda")
        if s is not None:
            return s
    for tag, fn in (("conv2d_nchw", nn_cuda.schedule_conv2d_nchw),
                    ("conv2d_nhwc", nn_cuda.schedule_conv2d_nhwc),
                    ("softmax", nn_cuda.schedule_softmax),
                    ("log_softmax", nn_cuda.schedule_softmax)):
        tagged = [op for op in ops if _has_tag(op, tag)]
        if tagged:
            extra = {}
            if tag.startswith("conv2d"):
                extra["config"] = lambda d, shape: _conv_knobs(knobs, tagged[0].name, d, shape)
            try:
                return fn(outs, target="cuda", **extra)
            except ScheduleError:
                sampled = knobs.rng is not None or bool(knobs.given)
                if sampled and any(n.startswith(tagged[0].name + ".") for n in knobs.values):
                    raise  # a sampled tiling the template refuses: not a candidate
                return None  # not the operator alone (or no tiling fits): the rules
    return None


def _flash_alone(outs: List[Tensor], ops) -> bool:
    """Whether every one of ``outs`` is a gradient of a FlashAttention backward (dq, dk,
    dv, the mask's), through copies (tc.gradient's): the backward alone, for its
    template; else a larger graph (a layer's gradient: the rules, with the template
    inside)."""
    tags = ("flash_attention_dq", "flash_attention_dkv", "flash_narrow",
            "flash_attention_dmask")
    for t in outs:
        g = t
        while not any(_has_tag(g.op, tg) for tg in tags):
            ins = getattr(g.op, "input_tensors", [])
            if getattr(g.op, "reduce_axis", None) or len(ins) != 1:
                return False
            g = ins[0]
    if any(_has_tag(op, "flash_attention_dmask") for op in ops):
        return True   # (the mask's gradient: the template says it has none)
    # (and no other reduction: a layer's, the general stages of an attention the
    # gradient's head reads)
    flash = nn_cuda.attention._FLASH_TAGS
    return all(not getattr(op, "reduce_axis", None) or any(_has_tag(op, t) for t in flash)
               or any(isinstance(t.op, ComputeOp) and _has_tag(t.op, "flash_stats")
                      for t in op.input_tensors) for op in ops)


def _conv_knobs(knobs, name: str, d, shape):
    """The tiling of convolution ``name``: ``d`` (``conv_config``'s) by default; threads
    per axis among the powers of two and the divisors of the output extent up to 16
    (32 channels), registers per thread 1 to 16 channels and 1 to 4 pixels per axis,
    the channel step, and whether its channels are unrolled."""
    from dataclasses import replace

    def spatial(extent):
        return [1, 2, 4, 8, 16] + [t for t in range(3, 17) if extent and extent % t == 0]

    k = knobs.choose
    cfg = replace(
        d, threads_k=k(f"{name}.threads_k", [1, 2, 4, 8, 16, 32], d.threads_k),
        threads_y=k(f"{name}.threads_y", spatial(shape.OH), d.threads_y),
        threads_x=k(f"{name}.threads_x", spatial(shape.OW), d.threads_x),
        regs_k=k(f"{name}.regs_k", [1, 2, 4, 8, 16], d.regs_k),
        regs_y=k(f"{name}.regs_y", [1, 2, 4], d.regs_y),
        regs_x=k(f"{name}.regs_x", [1, 2, 4], d.regs_x),
        c_tile=k(f"{name}.c_tile", [c for c in (1, 2, 4, 8, 16) if not shape.C or c <= shape.C],
                 d.c_tile),
        unroll_c=k(f"{name}.unroll_c", [True, False], d.unroll_c))
    # tilings that idle most of a warp or compute mostly padding: not candidates
    waste = [(cfg.block_k, shape.K), (cfg.block_y, shape.OH), (cfg.block_x, shape.OW)]
    if cfg != d and (cfg.threads < min(32, d.threads)
                     or any(e and b > 2 * e and b > 1 for b, e in waste)):
        raise ScheduleError(f"{name}: the tiling {cfg} idles most of its threads")
    return cfg


class _CudaRules:
    def __init__(self, s: Schedule, outs: List[Tensor], shapes: Dict[str, int], gemm, knobs,
                 skip=frozenset()):
        self.s, self.outs, self.shapes, self.gemm, self.knobs = s, outs, shapes, gemm, knobs
        if skip:   # (ops scheduled already, by a template inside the graph)
            self.ops = [st.op for st in s.stages if isinstance(st.op, ComputeOp)
                        and id(st.op) not in skip and id(st.origin_op) not in skip]
        else:
            self.ops = _walk(outs)
        self.out_ops = {id(t.op) for t in outs}
        self.done = set(skip)  # ids of the ops scheduled already
        #: the tensors a template inside the graph reads: computed whole, not inlined
        self.keep = [t.op for op in s.stages if id(op.op) in skip
                     for t in op.op.input_tensors if id(t.op) not in skip]

    def cint(self, e) -> Optional[int]:
        return _cint(e, self.shapes)

    def elems(self, extents) -> Optional[int]:
        vals = [self.cint(e) for e in extents]
        return None if any(v is None for v in vals) else math.prod(vals)

    def run(self) -> None:
        s = self.s
        contractions = [op for op in self.ops if _contraction_operands(op) is not None]
        operands = []
        for op in contractions:
            _, (a, _), (b, _) = _contraction_operands(op)
            operands += [a.op, b.op]
        _inline_injective(s, self.ops, keep=operands + self.keep)
        for op in contractions:
            self.contraction(op)
        for t in self.outs:
            if id(t.op) not in self.done and not t.op.reduce_axis:
                self.fused_rows(t)
        for op in reversed(self.ops):  # consumers first: what is left runs at the root
            st = s[op]
            if id(op) in self.done or st.attach_type != "root":
                continue
            if op.reduce_axis:
                self.reduction(op.output(0))
            else:
                self.elementwise(op.output(0))

    # -- 2. contractions ----------------------------------------------------------------
    def contraction(self, op: ComputeOp) -> None:
        s, gemm = self.s, op.output(0)
        out = gemm
        if id(op) not in self.out_ops:
            via = [c for c in self.ops if id(c) in self.out_ops and not c.reduce_axis
                   and self._reads(c, op)]
            # (an output that sums several GEMMs, a gradient's, is the epilogue of the first
            # one only: the others are kernels of their own that it reads)
            if len(via) == 1 and id(via[0]) not in self.done and \
                    self._only_reader(op, via[0]):
                cand = via[0].output(0)
                if (len(cand.shape) == len(gemm.shape)
                        and all(self.cint(a) is not None and self.cint(a) == self.cint(b)
                                or a is b for a, b in zip(cand.shape, gemm.shape))
                        and reads_at_own_index(s, cand, gemm)):
                    out = cand  # the epilogue, computed from the registers
        *batch, M, N = (self.cint(e) for e in gemm.shape)
        K = self.cint(op.reduce_axis[0].dom.extent)
        nb = None if any(b is None for b in batch) else math.prod(batch)
        if not isinstance(self.gemm, GemmConfig) and tensor_core_gemm(
                gemm, tf32=getattr(self.gemm, "tf32", False)):
            _, (a, _), _ = _contraction_operands(op)
            wcfg = self.gemm or wmma_config(M, N, K, nb, epilogue=out is not gemm,
                                            max_shared=max_shared_bytes("cuda"), dtype=a.dtype)
            if wcfg is not None:   # float16 in, float32 sums, constant extents: tensor cores
                schedule_wmma_gemm(s, gemm, wcfg if self.gemm else self.wmma_knobs(
                    op.name, wcfg, M, N, K), out)
                self.done |= {id(op), id(out.op)}
                return
        _schedule_gemm(s, gemm, out, self.gemm or self.gemm_knobs(
            op.name, gemm_config(M, N, K, nb)))
        self.done |= {id(op), id(out.op)}

    def wmma_knobs(self, name: str, d, M: int, N: int, K: int):
        """The tensor-core tiling of contraction ``name`` (``M x N x K``): ``d``
        (``wmma_config``'s) by default; the warps and fragments per axis and the k step
        among the values whose tiles divide the extents (odd extents, padded: whose tiles
        are no larger than the extents rounded up to 16), drawn outermost first; the family
        (``"mma"``: sm_80 and later, refused by the build for older GPUs), double buffering
        and the ring's stages."""
        from dataclasses import replace

        k = self.knobs.choose

        def pick(knob, values, default, divides):
            ok = [v for v in values if divides(v)]
            return k(knob, ok, default if divides(default) else ok[-1])

        if fits(d, M, N, K):
            def tiles(x, t):   # (extents the tiles divide)
                return x % t == 0
        else:   # odd extents (padded tiles): no tile past the extent rounded up to 16
            def tiles(x, t):
                return t <= -(-x // 16) * 16
        wm = pick(f"{name}.warps_m", [1, 2, 4], d.warps_m, lambda v: tiles(M, 16 * v))
        wn = pick(f"{name}.warps_n", [1, 2, 4], d.warps_n, lambda v: tiles(N, 16 * v))
        fm = pick(f"{name}.frags_m", [1, 2, 4], d.frags_m, lambda v: tiles(M, 16 * wm * v))
        fn = pick(f"{name}.frags_n", [1, 2, 4], d.frags_n, lambda v: tiles(N, 16 * wn * v))
        kt = pick(f"{name}.k_tile", [16, 32, 64], d.k_tile, lambda v: tiles(K, v))
        db = k(f"{name}.double_buffer", [False, True], d.double_buffer)
        return replace(d, warps_m=wm, warps_n=wn, frags_m=fm, frags_n=fn, k_tile=kt,
                       double_buffer=db, family=k(f"{name}.family", ["wmma", "mma"], d.family),
                       stages=k(f"{name}.stages", [2, 3, 4], d.stages) if db else d.stages)

    def gemm_knobs(self, name: str, d):
        """The GEMM tiling of contraction ``name``: ``d`` (``gemm_config``'s) by default."""
        from dataclasses import replace

        k = self.knobs.choose
        return replace(
            d, threads_m=k(f"{name}.threads_m", [4, 8, 16], d.threads_m),
            threads_n=k(f"{name}.threads_n", [8, 16, 32], d.threads_n),
            regs_m=k(f"{name}.regs_m", [1, 2, 4, 8, 16], d.regs_m),
            regs_n=k(f"{name}.regs_n", [1, 2, 4, 8], d.regs_n),
            k_tile=k(f"{name}.k_tile", [8, 16, 32], d.k_tile),
            unroll_k=k(f"{name}.unroll_k", [True, False], d.unroll_k),
            vector=k(f"{name}.vector", [1, 4], d.vector),
            double_buffer=k(f"{name}.double_buffer", [False, True], d.double_buffer))

    def threads(self, name: str, default: int) -> int:
        """Threads per block of kernel ``name``."""
        return self.knobs.choose(f"{name}.threads", [32, 64, 128, 256, 512], default)

    def _reads(self, consumer: ComputeOp, producer: ComputeOp) -> bool:
        return any(ld.producer.op is producer for ld in expanded_loads(self.s, consumer.output(0)))

    def _only_reader(self, op: ComputeOp, reader: ComputeOp) -> bool:
        """Whether ``reader`` is the only stage that is not inlined and reads ``op``."""
        return all(c is reader or not self._reads(c, op) for c in self.ops
                   if self.s[c].attach_type != "inline" and c is not op)

    # -- 3. row reductions fused into their elementwise output ------------------------
    def fused_rows(self, out: Tensor) -> None:
        s = self.s
        lead = len(out.shape) - 1
        if lead < 1:
            return
        reds = []
        for ld in expanded_loads(s, out):
            p = ld.producer.op
            if isinstance(p, ComputeOp) and p.reduce_axis and p not in reds \
                    and id(p) not in self.done and s[p].attach_type == "root":
                reds.append(p)
        if not reds:
            return
        # every reduction: one value per row, over the row's elements (its own inputs read
        # at the row only, with the reductions it reads among ``reds``); read at the row
        N = self.cint(out.shape[-1])
        todo, seen = list(reds), []
        while todo:
            r = todo.pop()
            if r in seen:
                continue
            seen.append(r)
            if (id(r) in self.out_ops or len(r.axis) != lead or len(r.reduce_axis) != 1
                    or r.num_outputs != 1 or not isinstance(r.body, Reduce)
                    or self.cint(r.reduce_axis[0].dom.extent) != N
                    or any(self.cint(a) != self.cint(b) for a, b in zip(r.axis, out.op.axis))):
                return
            for ld in expanded_loads(s, r.output(0)):
                p = ld.producer.op
                if isinstance(p, ComputeOp) and p.reduce_axis:
                    if s[p].attach_type != "root" or id(p) in self.done:
                        return
                    todo.append(p)
        if not all(reads_at_own_index(s, out, r.output(0), lead) for r in seen):
            return
        # computed inside ``out``'s rows, a reduction is there for no other reader (a
        # gradient's other outputs, layer_norm's g.grad reading its var): those keep
        # their kernels of their own
        if any(self._reads(c, r) for r in seen for c in self.ops
               if c is not out.op and c not in seen and s[c].attach_type != "inline"):
            return
        T = self.threads(out.name, _threads_for(None if N is None else max(32, N // 4)))
        so = s[out]
        row_axes = list(so.op.axis[:-1])
        row = so.fuse(*row_axes) if len(row_axes) > 1 else row_axes[0]
        so.bind(row, thread_axis("blockIdx.x"))
        for r in (op for op in self.ops if op in seen):  # producers first
            _cross_thread_rows(s, r.output(0), so, row, T)
            self.done.add(id(r))
        _row_loop(so, T, N)
        self.done.add(id(out.op))

    # -- 4. other reductions ---------------------------------------------------------------
    def reduction(self, t: Tensor) -> None:
        st = self.s[t]
        R = self.elems([iv.dom.extent for iv in st.op.reduce_axis])
        if st.op.num_outputs == 1 and (R is None or R >= CROSS_THREAD_MIN or not st.op.axis):
            red = st.fuse(*st.op.reduce_axis) if len(st.op.reduce_axis) > 1 \
                else st.op.reduce_axis[0]
            _, ki = st.split(red, factor=self.threads(t.name, _threads_for(R)))
            if st.op.axis:
                data = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
                st.bind(data, thread_axis("blockIdx.x"))
            st.bind(ki, thread_axis("threadIdx.x"))
        else:
            self.elementwise(t)
        self.done.add(id(t.op))

    # -- 5. elementwise -------------------------------------------------------------------
    def elementwise(self, t: Tensor) -> None:
        st = self.s[t]
        if not st.op.axis:
            return
        _schedule_injective_stage(st, self.elems(t.shape),
                                  self.threads(t.name, MAX_THREADS))
        self.done.add(id(t.op))


def gpu_rules(args, knobs, info, shapes) -> Schedule:
    """The search's view of the GPU rules (``apply_rules``'s signature; ``info`` unused)."""
    return apply_cuda_rules(args, shapes, knobs=knobs)


def measure_unavailable(target) -> Optional[str]:
    """Why candidates for ``target`` (cuda or cuda-emu) cannot be measured from here, or
    None.  Checked without initialising CUDA in this process (the measuring children are
    forked from it): a GPU that is missing makes every candidate fail in its child."""
    import shutil

    if target.is_emulated:
        cxx = os.environ.get("CXX", "g++")
        return None if shutil.which(cxx) else f"no C++ compiler ({cxx}) for the emulation"
    from importlib.util import find_spec

    if find_spec("pycuda") is None:
        return "pycuda is not installed: pip install tecomp[cuda]"
    return None if shutil.which("nvcc") else "nvcc is not on PATH"

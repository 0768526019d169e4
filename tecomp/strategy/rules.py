"""The auto-scheduler's rules: a schedule for any compute DAG, read from its structure.

:func:`generic_rules` (and :func:`tecomp.strategy.apply_rules`, which tries the operator
templates first) writes the schedule with ordinary schedule primitives, so the result
is a trace a user could have written (``s.trace.python()``).  Every decision it makes is
a *knob* (:class:`Knobs`): a name, the values it may take, and the value the analytic
model picks.  With no measurement the defaults are the schedule (``trials=0``); the search
(:mod:`tecomp.autoschedule.search`) samples and mutates the same knobs, so there is one
home for every decision.

The rules, in the order they run (Ansor's sketch rules and Halide's Mullapudi2016 model
in spirit):

1. **Templates** (:func:`tecomp.strategy.apply_rules`, not this module).  A DAG that is
   one of ``tecomp.nn``'s operators with a tuned template (matmul / dense, conv2d with an
   elementwise epilogue, depthwise and grouped conv, pooling, softmax, attention) gets
   that template; the GEMM template's blocking (``mr``, ``nr``, ``kc``, ``mc``, ``nc``, how
   the threads share it) is knobs whose defaults are the template's heuristics.  An
   operator with a template inside a larger DAG (``parts``) gets it before rule 2.
2. **Inline** every elementwise (reduction-free) intermediate whose readers are elementwise
   and which is not read with broadcast reuse (a per-row value read by every column is
   computed once per row instead), nor tagged :data:`NO_INLINE`; an elementwise stage
   read by a reduction (a padded input) is computed per task of that reduction, not
   inlined into its inner loop (one that only re-indexes its input in the same order,
   a 1x1 convolution's weights as a GEMM operand, is inlined: read in place; so is a cheap
   stage of whole rows read by row reductions, layer norm's ``x - mean``: recomputed by
   each pass over the row, :meth:`_Rules._recomputed_in_rows`).
3. **Reductions with a vectorizable output axis** (GEMM-like: batched matmul, ``A^T B``,
   convolutions written as plain computes, most gradients; :mod:`tecomp.strategy.blocks`):
   a register block of ``mr`` rows of one axis (``u``) by ``nv`` vectors of the output's
   innermost axis (``v``), sized to the vector registers, accumulated over the whole reduction in a
   ``local`` buffer (``cache_write``, or the reduction itself when an elementwise epilogue
   reads it: the epilogue is applied to each block on its way out; also one that reads it,
   through inlined stages, with its plane flattened, a 1x1 convolution's GEMM read back
   as ``[N, K, H, W]``: :data:`FUSE_FLAT_EPILOGUES`).  Operands read with a
   stride along ``v`` are packed per panel into a copy stored ``v`` innermost
   (``cache_read`` + ``storage_order``).  Outer loops are fused and run in parallel.
   Where the output's last two axes, fused, fill the vectors better than its rows (a
   1x1 convolution over a 7x7 or 14x14 image), the block's vector axis is that plane.
4. **Row reductions** (the reduction runs along contiguous memory and the output has no
   axis worth vectorizing: a row sum, the mean and variance of layer norm): the
   reduction is split by the lane count and ``rfactor``-ed into vector accumulators; it is
   computed at the row loop of the elementwise stage that reads it when there is one.
   Over several axes whose last is contiguous (batch norm's statistics over ``n, h, w``):
   one vector of partial results per output element (:meth:`_Rules.plane_reduction`).
   An argmax's index and value pairs the same way, in vector lanes
   (:meth:`_Rules.tuple_row_reduction`).  A plane or column reduction of bool or
   8-bit values takes 64 lanes of a 512-bit vector (packed bytes), of 16-bit ones 32
   (a row keeps ``4 x`` float32's 16 partial results, one vector of packed bytes, which
   the code generator reduces across its lanes: ``any``, ``all`` and integer rows are
   exact in any order, :func:`tecomp.lower.vectorize.horizontal_reduction`).
   **Column reductions** (before rule 3: the reduction runs across rows, over a first or
   middle axis, and no value is read twice: a sum over an NCHW tensor's channels or
   batch, a matrix's column sums): tiles of whole output rows (a share of L2), the tiles
   in parallel, the reduce axes outside the tile's vectors and four reduction steps a
   pass (eight for values of one byte, sixteen past L2), so the input is streamed once in contiguous runs (:meth:`_Rules.column_reduction`);
   short runs from beyond L2 with the passes ahead prefetched (:data:`COLUMN_PREFETCH`).
   **Split reductions**: a reduction to fewer values than threads (every axis reduced)
   or a column reduction of too few tiles has its first reduce axis cut into chunks,
   ``rfactor``-ed into parallel partial results (:meth:`_Rules.split_reduction`).
   **Vector outputs**: a reduction whose operands are all broadcast along its innermost
   output axis (a cumulative sum written as ``sum(where(k <= j, x[i, k], 0))``) takes
   its lanes along that axis (:meth:`_Rules.vector_output_reduction`).
5. **Elementwise outputs**: innermost axis vectorized (four vectors a step where they
   divide a constant row, one where the row is cut at a point that moves from row to
   row: :meth:`_Rules._cut_per_row`), outer axes fused and parallel; a row with a vector tail fused
   with the axis before it where every read takes both whole (a 7x7 map); a division by
   a value constant along the row (a softmax's ``e / sum``) one reciprocal per row,
   multiplied (``pragma fp_reciprocal``); an output no other stage reads, in runs of
   whole cache lines, stored past the cache (``pragma nontemporal``) where it alone (a
   plain pass) or with what its nest reads (a row kernel) is more than half the
   last-level cache, or a plain pass with what it reads more than twice that cache.

Before rule 3, an int8 GEMM (uint8 x int8 summed in int32) is tensorized with the
target's dot-product intrinsic (:mod:`tecomp.strategy.tensorize`).

Extents are read from the DAG (or from ``shapes=`` for symbolic ones); the machine (vector
width, vector registers, L1 / L2 sizes, threads) from :func:`tecomp.target.cpu_model`.
"""
from __future__ import annotations

import math
import numbers
import random
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import AutoScheduleError
from ..ir import dtype as _dt
from ..ir.expr import CmpOp, Const, Div, Reduce, Var, same_as
from ..ir.functor import collect, uses_var
from ..ir.simplify import simplify
from ..lower.schedule_ops import expand_inlined
from ..lower.vectorize import selection_reducer
from ..schedule.schedule import Schedule, Split, Stage, create_schedule
from ..te.scatter import ScatterOp
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .blocks import BlockRules
from ._common import (_cheap, _cint, _elems, _is_injective, _is_view, _loads, _read_by_nest,
                      _reads_through_inline, _stride_along, _streams_past_cache,
                      _streams_past_llc, _tags)
from .rows import (prefetch_next_row, reorderable as _vec_reorderable, row_prefetch_rows,
                   row_reduce_at)
from .tensorize import tensorize_reduction


#: the tag of an elementwise stage that rule 2 keeps in memory by default (the knob
#: ``inline.<stage>`` defaults to False): a strided subsample its readers would
#: otherwise read through their own index arithmetic, a gather per element (the
#: ``torch.compile`` backend's strided 1x1 convolutions)
NO_INLINE = "no_inline"

#: whether an elementwise epilogue that reads a reduction through its last two axes
#: flattened (a 1x1 convolution as a GEMM over the image's pixels, with its batch norm
#: and ReLU; not with a residual add) is tiled with the reduction, applied to each
#: register block on its way out (else the reduction goes to memory and the epilogue is
#: a second pass)
FUSE_FLAT_EPILOGUES = True

#: a column reduction (a sum over a tensor's first or a middle axis:
#: :meth:`_Rules.column_reduction`) keeps 1 / COLUMN_TILE_L2 of the L2 cache in
#: accumulators per tile (128 KiB of a 1 MiB L2): each reduction step reads a contiguous
#: run of that size, the accumulators stay in L2.  Tiles of 8 and 32 KiB streamed the
#: input at 47% and 55% of a row sum's rate, 128 KiB at 68% (a sum over the middle axis
#: of 8x64x128x256, 2 threads, Zen 5, under load; history/2026-11-30.md, "h15-reduce")
COLUMN_TILE_L2 = 8

#: whether a cheap elementwise stage of whole rows read by row reductions (layer norm's
#: centred values) is inlined, recomputed by each pass over the row from the input in L1
#: (:meth:`_Rules._recomputed_in_rows`), instead of a row buffer stored and read back
RECOMPUTE_IN_ROWS = True

#: whether an elementwise stage that divides by a value constant along its rows (a
#: softmax's ``e / sum``) has its nest marked ``fp_reciprocal``: one reciprocal per row,
#: multiplied (the knob ``rcp.<stage>``)
RECIPROCAL_ROWS = True

#: whether an elementwise output of more than half the last-level cache is stored past
#: the cache (``pragma nontemporal``: the knob
#: ``stream.<stage>``, :meth:`_Rules._streams`).  floor / clip / hardsigmoid of 16M
#: float32 (2 threads, AMD EPYC Zen 4 VM, under load): 4.9 -> 3.2, 3.7 -> 2.6, 3.6 ->
#: 2.5 ms.  Off: every store through the cache, as before
#: (``benchmarks/reductions.py --stream-off``)
STREAM_OUTPUTS = True

#: whether an elementwise output of at most half the last-level cache is stored past the
#: cache too where its pass moves (what it reads and its output) more than twice the
#: last-level cache: most of it would be gone from the cache when the pass ends, and
#: each line written through the cache is read first.  ``isnan`` / ``isinf`` of 16M
#: float32 (64 MB in, 16 MB of bools out; 2 threads, AMD EPYC Zen 4 VM, under load):
#: 5.85 -> 3.96 ms, 6.67 -> 3.95 ms.  Off: such outputs cached (as with
#: :data:`STREAM_OUTPUTS` for every output)
STREAM_WIDE_PASSES = True

#: whether a row kernel (stages computed at an elementwise output's row loop: a
#: softmax's max, exps and sum) stores its output past the cache (``pragma nontemporal``)
#: where its inputs and output take more than half the last-level cache (the knob
#: ``stream.<stage>``; :meth:`_Rules._streams`)
STREAM_ROWS = True

#: whether a reduction whose operands are all broadcast along its innermost output axis
#: (a cumulative sum written as a masked reduction, ``sum(where(k <= j, x[i, k], 0))``)
#: is vectorized along that axis instead of along its reduction
#: (:meth:`_Rules._lanes_along_output`)
VECTOR_OUTPUTS = True

#: whether an elementwise row cut at a point that moves from row to row (a causal mask,
#: :meth:`_Rules._cut_per_row`) is vectorized one vector a step (else four where they
#: divide the row, as any row)
VECTOR_STEP_CUTS = True

#: the rows a column reduction reads per pass over its tile (the last reduce axis split
#: by it, unrolled inside the tile's vectors): each accumulator is loaded and stored once
#: per COLUMN_STEPS rows
COLUMN_STEPS = 4

#: the same for values of one byte (bools, 8-bit integers: 64 packed lanes a 512-bit
#: vector, where a step is one test or one byte operation a vector): the accumulators'
#: loads and stores weigh more against the steps.  `all` / `any` over the middle axis of
#: 8x64x128x256 bools: 4 -> 8 steps 1.05 -> 0.85 ms and 0.81 -> 0.66 ms (medians of 41,
#: 2 threads, AMD EPYC Zen 4 VM under load 15; benchmarks/history/2026-12-01.md,
#: "h17-reduce").  Where the input is more than the threads' L2 caches hold:
#: :data:`COLUMN_STEPS_PACKED_PAST_L2`
COLUMN_STEPS_PACKED = 8

#: the steps a pass of a column reduction of one-byte values whose input is more than
#: the threads' L2 caches hold (the L3's and memory's: each pass re-reads its tile of
#: accumulators from beyond L1); where 16 do not divide the reduce axis: 8, else 4, else
#: 1.  `all` / `any` over the middle axis of 16 MiB of bools, 8 -> 16 steps: 0.80-0.94x
#: the time in nine of twelve A/Bs, 1.01x in two, 1.28x in one; 64 MiB a tie (0.99x,
#: 1.00x); 512 KiB (in L2) 1.2x slower, so such inputs keep 8; 32 or 64 steps 1.4-1.7x
#: slower (1 thread, CPU time, Zen 4 VM under load 14-22), but on the quiet host 16 read
#: 0.84x / 0.81x (2 threads) and 0.95x / 0.89x (1 thread, CPU time) the speed of 8:
#: benchmarks/DECISIONS.md, "Column reductions of bytes: sixteen rows a pass past L2".
#: So 8, as :data:`COLUMN_STEPS_PACKED`, by default; set 16 to try it again (what
#: ``reductions.py --steps16-on`` does)
COLUMN_STEPS_PACKED_PAST_L2 = 8

#: the same for a reduction of several values at once (an argmax's index and value: two
#: accumulators loaded and stored a pass for each element read).  argmax over the middle
#: axis of 8x64x128x256: 3.38 -> 2.95 ms (one thread, CPU time, medians of 21, Zen 4 VM
#: under load 15); a float sum over the same axis stays best at COLUMN_STEPS (2.35 ms
#: against 2.61 with 8)
COLUMN_STEPS_TUPLE = 8

#: whether a column reduction whose input is larger than the L2 cache prefetches, into
#: L2, the rows of its passes ahead (the machine model's ``column_prefetch_bytes``: that
#: many bytes of passes ahead, at least one; knob ``<stage>.prefetch_passes``, 0: none),
#: and then reads :data:`COLUMN_STEPS_PREFETCHED` rows a pass.  Each pass starts its rows
#: anew (a column sum of 4096 x 4096 float32: 4-8 runs of 16 KiB a pass), and the
#: hardware prefetchers start each run cold.  On Zen 4 (1 thread, CPU time, under load):
#: the column sum 3.27 -> 2.60 ms (77% -> 97% of the read stream), max 74% -> 87-90%.
#: Off: no prefetch, :data:`COLUMN_STEPS` rows a pass, as before
#: (``benchmarks/reductions.py --colpf-off``)
COLUMN_PREFETCH = True

#: the rows a column reduction that prefetches its passes ahead reads per pass (of one
#: value: a sum, a max): 8, where it was 4 without the prefetch (the column sum above,
#: prefetched 1 pass ahead: 4 rows 86.9%, 8 rows 96.6-104.5% of the read stream)
COLUMN_STEPS_PREFETCHED = 8


# ---------------------------------------------------------------------------------------
# knobs


_NONE = object()


def choice_of(value, choices: Sequence):
    """The choice of ``choices`` that ``value`` names, or ``_NONE``: equal and of the same
    kind (``2.0`` is not the int choice ``2``, ``0`` not ``False``, ``True`` not ``1``; a
    numpy integer names an int choice), so that a template never gets a float where it
    splits by the value (session 25: ``Config.set("conv2d_nhwc.channel_vectors", 2.0)``
    crashed the template)."""
    for c in choices:
        if isinstance(c, bool) or isinstance(value, bool):
            same = isinstance(c, bool) and isinstance(value, bool)
        elif isinstance(c, int):
            same = isinstance(value, numbers.Integral)
        else:
            same = isinstance(value, type(c))    # (numpy's float64 and str_ included)
        try:
            if same and value == c:
                return c
        except (TypeError, ValueError):
            continue
    return _NONE


class Knobs:
    """The decisions of one schedule: ``choose(name, choices, default)`` returns the value
    of knob ``name``.

    * analytic (no ``rng``, no ``values``): the default;
    * given ``values`` (a dict from an earlier schedule or a mutation): that value when it
      is still among ``choices``, else the default (``rng``: a random choice);
    * ``rng`` (a ``random.Random``) and no value: a random choice (sampling a candidate).

    ``space`` records every knob met with its choices, ``values`` what was chosen."""

    def __init__(self, values: Optional[dict] = None, rng: Optional[random.Random] = None):
        self.given = dict(values or {})
        self.rng = rng
        self.values: Dict[str, object] = {}
        self.space: Dict[str, list] = {}
        self.defaults: Dict[str, object] = {}

    def choose(self, name: str, choices: Sequence, default):
        choices = list(dict.fromkeys(choices))
        if default not in choices:
            choices.append(default)
        self.space[name] = choices
        self.defaults[name] = default
        given = choice_of(self.given[name], choices) if name in self.given else _NONE
        if given is not _NONE:
            v = given
        elif self.rng is not None:
            v = self.rng.choice(choices)
        else:
            v = default
        self.values[name] = v
        return v


# ---------------------------------------------------------------------------------------
# the entry point


def outputs_of(args) -> List[Tensor]:
    """The compute tensors of a ``tc.build`` argument list (its outputs)."""
    outs = [a for a in args if isinstance(a, Tensor) and not isinstance(a.op, PlaceholderOp)]
    if not outs:
        raise AutoScheduleError(
            "auto_schedule: the argument list has no compute tensor to schedule; pass the "
            "list you give tc.build, e.g. [A, B, C] with C = tc.compute(...)")
    return outs


def generic_rules(args, knobs: Knobs, info, shapes: Optional[dict] = None,
                  parts: Optional[Dict[str, object]] = None) -> Schedule:
    """The generic rules' schedule of ``args`` (see the module docstring, rules 2-5), its
    decisions taken from ``knobs``; ``parts`` maps a tag to the template of an operator
    inside a larger DAG (``fn(s, out, knobs, info) -> set of id(op)`` scheduled, None when
    it does not fit), applied first.  :func:`tecomp.strategy.apply_rules` tries the
    operator templates before these."""
    outs = outputs_of(args)
    s = create_schedule([t.op for t in outs])
    _Rules(s, outs, knobs, info, shapes or {}, parts=parts).run()
    return s


def _in_scan_step(st: Stage) -> bool:
    """Whether ``st`` is a stage of a scan's body at its time loop: scheduled as a root
    stage is (its loops run once per step)."""
    a = st.attach_stage
    return (st.attach_type == "scope" and a is not None and hasattr(a.op, "scan_axis")
            and st.attach_ivar is a.op.scan_axis)


# ---------------------------------------------------------------------------------------
# 2-5. the generic rules


def schedule_stages(s: Schedule, outs, info, only=None, knobs: Optional[Knobs] = None,
                    shapes: Optional[dict] = None, parts: Optional[Dict[str, object]] = None
                    ) -> Schedule:
    """Apply the generic rules (2-5) to the stages of an existing schedule ``s`` whose
    operations are in ``only`` (a set of ``id(op)``; None: every stage): how
    :func:`tecomp.strategy.schedule_backward` and the ``tecomp.nn`` schedules schedule
    the stages they have no template for."""
    _Rules(s, list(outs), knobs or Knobs(), info, shapes or {}, only, parts).run()
    return s


#: a selection's row reduction (an argmax along contiguous memory) takes four vectors of
#: partial pairs a step where its row has at least this many such steps, else two (the
#: tree that combines the lanes at the row's end costs about as much as four steps of
#: four vectors: argmax over rows of 256 float32, 64 lanes 3.51 ms, 32 lanes 2.93, one
#: thread, Zen 4 under load; rows of 1024 the same either way)
SELECTION_WIDE_STEPS = 8

#: the rows of a selection along rows (an argmax over the last axis) taken per step of its
#: row loop (knob ``<stage>.row_block``), unrolled: each row's vectors of partial pairs
#: and the tree across their lanes at its end (:data:`SELECTION_WIDE_STEPS`) are a chain
#: of dependent combines, and the rows' chains side by side overlap.  Rows of 256 from
#: memory, one thread: 1.18x faster with 4 (benchmarks/history/2026-12-01.md, "Session
#: 20, helper h20-redux").  1: a row per step
SELECTION_ROW_BLOCK = 4

#: a row reduction at the root whose input streams from beyond the L2 caches is compiled
#: for the machine model's ``stream_load_bytes`` registers where that is narrower than
#: its own (``pragma vector_bytes``), four accumulators of that width (PyTorch's loop):
#: Zen 4's 256-bit loads read memory 1.08-1.11x faster than its 512-bit ones, 1 thread,
#: under load, and a tie in the quiet re-measures, so no named CPU's model asks for it
#: (benchmarks/DECISIONS.md, "Reductions: 256-bit loads from memory (Zen 4)").  Float
#: sums, means and products only: a row min read 0.92-0.93x so in three runs, a row max
#: 0.92-0.99x.  False: the registers' width (``reductions.py --vbytes-off``)
STREAM_LOADS = True


class _Rules(BlockRules):
    def __init__(self, s: Schedule, outs, knobs: Knobs, info, shapes, only=None, parts=None):
        self.s, self.outs, self.k, self.info, self.shapes = s, outs, knobs, info, shapes
        self.parts = parts or {}
        self.fused_ext: Dict[object, int] = {}   # fused axes -> their constant extent
        self.L = info.lanes
        # ids of ops scheduled (or attached) already; with ``only``, every other stage
        self.done = set() if only is None else {
            id(st.op) for st in s.stages if id(st.op) not in only}

    def ext(self, e) -> Optional[int]:
        return _cint(e, self.shapes)

    def readers(self, op) -> List[ComputeOp]:
        outs = op._outs
        return [st.op for st in self.s.stages
                if any(x is t for x in st.op.input_tensors for t in outs)]

    # -- 2. inlining ----------------------------------------------------------------------
    def inline(self):
        for st in list(self.s.stages):
            op = st.op
            if st.is_output or not _is_injective(op) or id(op) in self.done:
                continue
            rd = self.readers(op)
            if not rd:
                continue
            if any(r.reduce_axis for r in rd):
                # read by a reduction: computed per task (see attach_producers), unless
                # it only re-indexes its input in the same order (a 1x1 convolution's
                # weights as a GEMM's [1, K, C]): read in place, it costs nothing, where
                # a copy per task copied all of it again for every task
                if (_is_view(op) or self._recomputed_in_rows(op, rd)) and \
                        NO_INLINE not in _tags(op) and \
                        self.k.choose(f"inline.{op.name}", [True, False], True):
                    st.compute_inline()
                continue
            if any(getattr(r, "call", None) is not None or isinstance(r, ScatterOp) for r in rd):
                continue   # read by an extern stage's function or a scatter: it stays in memory
            n_me = _elems(op.output(0), self.shapes)
            n_rd = max((_elems(r.output(0), self.shapes) or 0) for r in rd)
            reused = n_me is not None and n_rd > 2 * n_me
            if reused and not all(_cheap(b) for b in op.bodies):
                continue   # a per-row value read by every column: once per row
            name = f"inline.{op.name}"
            if self.k.choose(f"{name}", [True, False], NO_INLINE not in _tags(op)):
                st.compute_inline()

    def _recomputed_in_rows(self, op, readers) -> bool:
        """Whether elementwise ``op`` is cheap (:func:`_cheap`: no call, no division
        along its last axis),
        reads its inputs along contiguous rows (or not at all along its last axis) and is
        read by row reductions over its last axis (and elementwise stages): inlined,
        each row pass recomputes it from rows in L1 instead of storing a row buffer
        and reading it back (layer norm's centred values ``x - mean``, read by the sum of
        squares and by the output)."""
        last = op.axis[-1].var
        if not RECOMPUTE_IN_ROWS or len(op.axis) < 2 or \
                not all(_cheap(b, along=last) for b in op.bodies):
            return False
        if any(_stride_along(ld.indices, last) == "strided" for b in op.bodies
               for ld in _loads(b)):
            return False
        n = len(op.axis) - 1
        return all(not r.reduce_axis or (len(r.axis) == n and self._row_reducible(r))
                   for r in readers)

    def part_templates(self):
        """Operators with a template of their own inside a larger DAG (attention in a
        transformer layer): scheduled by it before anything is inlined, and left alone."""
        if not self.parts:
            return
        for st in reversed(list(self.s.stages)):
            op = st.op
            if id(op) in self.done or not isinstance(op, ComputeOp) or st.attach_type != "root":
                continue
            for tag in _tags(op):
                fn = self.parts.get(tag)
                if fn is None or not self.k.choose(f"part.{op.name}", [True, False], True):
                    continue
                got = fn(self.s, op.output(0), self.k, self.info)
                if got:
                    self.done |= set(got)
                break

    def run(self):
        self.part_templates()
        self.inline()
        s = self.s
        # consumers first: an output decides the loops its producers attach to
        for st in reversed(list(s.stages)):
            op = st.op
            if hasattr(op, "scan_axis") and id(op) not in self.done:
                self.scan_step(st)
                self.done.add(id(op))
            if id(op) in self.done or not isinstance(op, ComputeOp):
                continue   # (an extern stage is a call, a scan a loop over steps)
            if st.attach_type != "root" and not _in_scan_step(st):
                continue
            if op.reduce_axis:
                self.reduction(st)
            else:
                self.elementwise(st)
            self.done.add(id(op))

    def scan_step(self, st: Stage):
        """A scan's own loops: the time loop stays serial and outermost; the innermost
        state axis is vectorized (its body stages, at the time loop, are scheduled as root
        stages are, less their time axis)."""
        axes = list(st.op.spatial_axis)
        if not axes:
            return
        L, ie = self.L, self.ext(axes[-1].dom.extent)
        if ie is not None and ie >= L and self.k.choose(f"vec.{st.op.name}", [True, False], True):
            _, vi = st.split(axes[-1], factor=L)
            st.vectorize(vi)

    # -- 5. elementwise ------------------------------------------------------------------
    def elementwise(self, st: Stage):
        """Vector over the innermost axis; outer axes fused and parallel; the row
        reductions and per-row values it reads computed at its row loop."""
        op = st.op
        # an epilogue of one GEMM-like reduction: tile it like the reduction
        red, flat = self._epilogue_of(op)
        col = red if red is not None and not flat else self._epilogue_of(op, columns=True)[0]
        if col is not None and self._column_plan(col) is not None and \
                not self.split_reduction_wanted(col) and \
                self.k.choose(f"{col.name}.columns", [True, False], True):
            # a column reduction's epilogue (a mean's division, an int64 argmax's
            # widening of its int32 index): tiled with it
            self.column_reduction(st, self.s[col])
            return
        if col is not None and col.axis and self._row_reducible(col, tuples=True) and \
                not self.split_reduction_wanted(col) and \
                selection_reducer(col.bodies[0].combiner) and \
                self.k.choose(f"{col.name}.tuple_rows", [True, False], True) and \
                self.k.choose(f"fuse_epilogue.{op.name}", [True, False], True):
            # a row argmax's epilogue (an int64 argmax's widening of its int32 index):
            # blocks of rows, each block's pairs reduced, then widened as a vector
            self.tuple_row_reduction(self.s[col], st)
            self.done.add(id(col))
            return
        if red is not None and self.k.choose(f"fuse_epilogue.{op.name}", [True, False], True):
            oaxes = None
            if flat:
                # the reduction's plane is the epilogue's last two axes fused (a 1x1
                # convolution as a GEMM over the flattened pixels): the epilogue's loops
                # over that plane fused first, then tiled as the reduction's last axis
                axes = list(op.axis)
                fused = st.fuse(*axes[-2:])
                self.fused_ext[fused] = self.ext(red.shape[-1])
                oaxes = axes[:-2] + [fused]
            self.tile_reduction(self.s[red], st, red, oaxes=oaxes)
            self.done.add(id(red))
            return
        axes = list(op.axis)
        if not axes:
            return
        L = self.L
        exts = [self.ext(iv.dom.extent) for iv in axes]
        if self._fusable_last_pair(op) and \
                self.k.choose(f"coalesce.{op.name}", [True, False], True):
            # rows with a tail (a 7x7 or 28x28 plane): the trailing axes every read takes
            # whole are one contiguous run, vectorized as one axis
            fused = st.fuse(*axes[-2:])
            self.fused_ext[fused] = math.prod(exts[-2:])
            axes, exts = axes[:-2] + [fused], exts[:-2] + [self.fused_ext[fused]]
        inner, ie = axes[-1], exts[-1]
        # (a whole axis is vectorized only when constant)
        ce = ie if len(axes) < len(op.axis) else _cint(inner.dom.extent)
        # four vectors a step where they divide the row (LLVM's own vectorizer
        # interleaves so too): more loads in flight (benchmarks/DECISIONS.md, "Rules:
        # elementwise rows four vectors a step")
        # (one where the row is cut at a point that moves from row to row, a causal
        # mask's ``j <= i``: loop partitioning's part around the cut would be a step of
        # four vectors with bounds of its own)
        four = ce is not None and ce % (4 * L) == 0 and ce > 0 and \
            not self._cut_per_row(op)
        vec_f = self.k.choose(f"vec.{op.name}", [1, L, 2 * L, 4 * L],
                              4 * L if four else L if ie is None or ie >= L else 1)
        outer_axes = axes[:-1]
        if vec_f > 1 and ce is not None and ce <= vec_f:
            if ce > 1:
                st.vectorize(inner)
        elif vec_f > 1:
            vo = self._vectorize_by(st, inner, vec_f)
            if not (len(axes) < len(op.axis) and outer_axes):
                # (a fused run's outer loop stays serial inside the tasks: fused into
                # them too, its vector loads would no longer be proved contiguous)
                outer_axes = outer_axes + [vo]
        row = None
        if outer_axes:
            row = self.parallel(st, outer_axes, [self.ext(self._leaf_extent(st, a)) for a in
                                                 outer_axes])
        # producers that are per row (fewer axes, indexed by our leading axes)
        lead = list(op.axis[:-1]) if len(axes) == len(op.axis) else []
        at_row = None
        if lead and row is not None:
            at_row = self.attach_rows(st, lead, row if len(axes[:-1]) and row is not None
                                      else None)
            if at_row:
                own = vo if vec_f > 1 and ce is not None and ce > vec_f and vo is not row \
                    and vo in st.leaf_iter_vars else None
                at_row[op] = own
                self._prefetch_rows(st, row, at_row)
        if st.is_output and row is not None and vec_f > 1 and self.k.choose(
                f"stream.{op.name}", [True, False],
                self._streams(st, op, row if lead and at_row else None, ce)):
            # a pass over more than half the last-level cache: its output stored past
            # the cache (x86 ``vmovntps``), each line written once, not read first
            st.pragma(st.leaf_iter_vars[0], "nontemporal")
        if self._divides_by_row_values(op) and \
                self.k.choose(f"rcp.{op.name}", [True, False], True):
            # a / s[i] along the row: one reciprocal per row, multiplied (what the
            # softmax template computes; two roundings instead of one)
            st.pragma(st.leaf_iter_vars[0], "fp_reciprocal")

    def _streams(self, st: Stage, op, row, run: Optional[int]) -> bool:
        """Whether elementwise output ``op``, whose contiguous runs of stores are ``run``
        elements (its vectorized row), stores past the cache by default (knob
        ``stream.<stage>``): no other stage reads it, its runs are whole cache lines, and
        what it moves is more than half the last-level cache
        (:func:`tecomp.strategy._common._streams_past_cache`).  What it moves:

        - a row kernel (``row``: the loop other stages are computed at, a softmax's max,
          exps and sum; :data:`STREAM_ROWS`): the tensors its nest reads and its output.
          A 4-compute softmax over 16 MB in and out: 2.03 -> 1.75 ms, one thread
          (benchmarks/DECISIONS.md, "Rules: row kernels stream their output");
        - a plain elementwise pass (:data:`STREAM_OUTPUTS`): its output alone.  A 12 MB
          floor followed by a sum over its output was 15-30% slower streamed (its 24 MB
          pass over half of a 32 MB L3; the output would have stayed in it), a 16 MB one
          even, 20 and 24 MB ones 20% faster (2 threads, AMD EPYC Zen 4 VM, under load;
          benchmarks/history/2026-12-01.md, "h18-reduce"; where the model's
          ``stream_output_bytes`` is measured and smaller, an output of more than that);
          and a smaller output whose pass moves more than twice the last-level cache
          with what it reads
          (:data:`STREAM_WIDE_PASSES`: the cache could not keep it for a next operator)."""
        dtype = op.output(0).dtype
        # (an output another stage reads, another output of the DAG, stays cached)
        if self.readers(op):
            return False
        if row is not None:
            return STREAM_ROWS and _streams_past_llc(_read_by_nest(self.s, st, row),
                                                     op.output(0), self.info, run,
                                                     limit=self.info.stream_output_bytes)
        n = _elems(op.output(0), self.shapes)
        if not STREAM_OUTPUTS or n is None:
            return False
        return _streams_past_cache(n * _dt.nbytes(dtype), run, dtype, self.info,
                                   limit=self.info.stream_output_bytes) or (
            STREAM_WIDE_PASSES and _streams_past_llc(_read_by_nest(self.s, st, None),
                                                     op.output(0), self.info, run, over=2))

    @staticmethod
    def _cut_per_row(op) -> bool:
        """Whether a comparison of index arithmetic alone (no load) in ``op``'s body
        relates its last axis to another of its axes (``j <= i``: a causal mask, a
        triangle), which loop partitioning cuts each row at: a point that moves with the
        row.  A causal mask fill of 1024 x 1024 float32 ran 5% slower in steps of four
        vectors than of one (87.8 against 83.3 us, one thread, AMD EPYC Zen 4 VM, under
        load; ``benchmarks/te_corpus.py``)."""
        if not VECTOR_STEP_CUTS or len(op.axis) < 2:
            return False
        last = op.axis[-1].var
        others = [a.var for a in op.axis[:-1]]
        return any(collect(b, lambda n: isinstance(n, CmpOp) and not _loads(n) and
                           uses_var(n, last) and any(uses_var(n, v) for v in others))
                   for b in op.bodies)

    @staticmethod
    def _divides_by_row_values(op) -> bool:
        """Whether ``op`` (of two axes or more) divides floats by a value that does not
        move along its last axis (a softmax's ``e[i, j] / sum[i]``)."""
        if len(op.axis) < 2:
            return False
        last = op.axis[-1].var
        return RECIPROCAL_ROWS and any(collect(b, lambda n: isinstance(n, Div) and (
            _dt.is_float(n.dtype) and not uses_var(n.b, last))) for b in op.bodies)

    def _leaf_extent(self, st, iv):
        # extent of a leaf axis made by a split of an op axis (for task counting)
        for rel in st.relations:
            if isinstance(rel, Split) and rel.outer is iv:
                pe = self.ext(rel.parent.dom.extent) if rel.parent.dom is not None else \
                    self.fused_ext.get(rel.parent)
                f = self.ext(rel.factor) if rel.factor is not None else None
                if pe is not None and f:
                    return Const(-(-pe // f), "int32")
                return Var("?", "int32")
        return iv.dom.extent

    def parallel(self, st: Stage, axes, exts, min_tasks: Optional[int] = None):
        """Fuse the leading ``axes`` until they make enough tasks and run them in
        parallel; returns the fused axis (the "row" loop) or None."""
        T = self.info.threads
        want = self.k.choose(f"tasks.{st.op.name}", [1, 2, 4, 8, 16], 4) * T
        if min_tasks is not None:
            want = max(want, min_tasks)
        if _in_scan_step(st) and axes and axes[0] is st.op.axis[0]:
            # a scan's body: its time axis covers one step (extent 1 in its region)
            axes, exts = axes[1:], exts[1:]
            if not axes:
                return None
        take, total = [], 1
        for ax, e in zip(axes, exts):
            take.append(ax)
            total = None if (e is None or total is None) else total * e
            if total is None or total >= want:
                break
        fused = take[0] if len(take) == 1 else st.fuse(*take)
        if T > 1 and (total is None or total >= 2):
            st.parallel(fused)
        return fused

    def attach_rows(self, st: Stage, lead, row):
        """Compute at ``st``'s row loop every root producer with one value per row (a
        per-row mean, variance, 1/sqrt) whose readers are ``st`` or stages computed at
        that row already; row reductions are vectorized there.  So is an elementwise
        producer of whole rows (``exp(x - max)`` between a softmax's two reductions)
        whose readers are all at the row: it is computed a row at a time, in a row
        buffer that stays in cache, instead of a full-size intermediate array.  Returns
        the ops it computed at the row, each with its loop over the row's vectors (None
        for a reduction, a per-row value or a row of one step)."""
        s = self.s
        at_row_loops = {}
        if row is None or any(a in st.leaf_iter_vars for a in lead[1:]) or (
                len(lead) == 1 and row is not lead[0] and lead[0] in st.leaf_iter_vars):
            return at_row_loops   # the row loop does not cover exactly the leading axes
        want = [self.ext(a.dom.extent) for a in lead]
        changed = True
        while changed:
            changed = False
            for pst in reversed(list(s.stages)):
                pop = pst.op
                if not isinstance(pop, ComputeOp) or id(pop) in self.done or pst.is_output \
                        or pst.attach_type != "root":
                    continue
                whole_row = self._row_block(pop, lead, want)
                shape = [self.ext(e) for e in pop.shape]
                # one value per row: the leading extents, then only axes of extent 1 (a
                # row max kept as an (M, 1) array for broadcasting)
                per_row = shape[:len(want)] == want and all(e == 1 for e in shape[len(want):])
                if not whole_row and not per_row:
                    continue
                at_row = {id(st.op)} | {id(x.op) for x in s.stages if x.attach_stage is st
                                        and x.attach_ivar is row}
                rd = self._readers_through_inline(pop)
                if not rd or not all(id(r) in at_row for r in rd):
                    continue
                if not self.k.choose(f"at_row.{pop.name}", [True, False], True):
                    continue
                if pop.reduce_axis and self._row_reducible(pop):
                    self.attach_row_reduction(pop, st, row)
                    at_row_loops[pop] = None
                else:
                    pst.compute_at(st, row)
                    at_row_loops[pop] = self._vector_row(pst) if whole_row else None
                self.done.add(id(pop))
                changed = True
        return at_row_loops

    def _prefetch_rows(self, st: Stage, row, vec_loops):
        """A row-wise kernel (whole-row stages computed at ``st``'s row loop) prefetches
        the next row of its inputs during a whole-row stage's vector loop, as the
        softmax template does (:func:`tecomp.strategy.rows.prefetch_next_row`); only
        where such a loop reads the input."""
        ops_ = [x.op for x in self.s.stages if x.attach_stage is st and
                x.attach_ivar is row] + [st.op]
        if self.k.choose(f"prefetch_rows.{st.op.name}", [True, False], True):
            prefetch_next_row(self.s, st.op.output(0), ops_, vec_loops, st, row, None,
                              self.info.l1_bytes)

    def _row_block(self, op, lead, want) -> bool:
        """Whether ``op`` is an elementwise stage of whole rows over ``lead`` (its leading
        extents ``want``, one more axis) whose row fits in the L2 cache with room to
        spare: computed a row at a time at the reader's row loop (:meth:`attach_rows`)."""
        if op.reduce_axis or not _is_injective(op) or len(op.axis) != len(lead) + 1:
            return False
        ext = [self.ext(e) for e in op.shape]
        if ext[:-1] != want or ext[-1] is None:
            return False
        bytes_ = ext[-1] * _dt.nbytes(op.output(0).dtype)
        return bytes_ * 4 <= self.info.l2_bytes

    def _fusable_last_pair(self, op) -> bool:
        """Whether the last two axes of elementwise ``op`` (constant extents, the last one
        not a whole number of vectors) are taken whole by every read that uses them -- its
        last two indices are those axes, in order, over a tensor of the same extents
        there -- so that, fused, they are one contiguous run.  (Two axes at most: lowering
        proves a fused pair's vector loads contiguous, ``(q*16 + l) // W`` and
        ``(q*16 + l) % W``; over three it leaves gathers.)"""
        axes = list(op.axis)
        if len(axes) < 2 or len(op.bodies) != 1:
            return False
        pair = axes[-2:]
        # (constant: not the estimate of a symbolic extent, which the whole fused run
        # would be vectorized by)
        exts = [_cint(a.dom.extent) for a in pair]
        if None in exts or exts[1] % self.L == 0:
            return False
        vs = [a.var for a in pair]
        for ld in _loads(op.body):
            idx = list(ld.indices)
            if not any(uses_var(i, v) for i in idx for v in vs):
                continue
            if len(idx) < 2 or not all(i is v for i, v in zip(idx[-2:], vs)) or any(
                    uses_var(i, v) for i in idx[:-2] for v in vs) or [
                    _cint(e) for e in list(ld.producer.shape)[-2:]] != exts:
                return False
        return True

    def _vector_row(self, st: Stage):
        """The row loop of a stage computed a row at a time: four vectors a step where
        they divide the row, else one (as :meth:`elementwise`)."""
        inner = st.op.axis[-1]
        L, ce = self.L, self.ext(inner.dom.extent)
        if ce is not None and ce >= L:
            f = 4 * L if ce % (4 * L) == 0 else L
            vo = self._vectorize_by(st, inner, f)
            return vo if ce > f else None
        return None

    def _vectorize_by(self, st: Stage, inner, vec_f: int):
        """Split ``inner`` by ``vec_f`` lanes, vectors of the target's width unrolled
        within it; the outer loop it leaves."""
        vo, vi = st.split(inner, factor=vec_f)
        if vec_f > self.L:
            vv, vl = st.split(vi, factor=self.L)
            st.unroll(vv)
            st.vectorize(vl)
        else:
            st.vectorize(vi)
        return vo

    def _readers_through_inline(self, op) -> List[ComputeOp]:
        """The stages that read ``op``, a reader that is inlined replaced by its own
        readers (the gradient of layer norm sums two per-row terms in an inlined
        ``mean.grad``: the reductions under it are read at the row of the stage it is
        inlined into)."""
        out, seen, todo = [], set(), list(self.readers(op))
        while todo:
            r = todo.pop()
            if id(r) in seen:
                continue
            seen.add(id(r))
            if self.s[r.output(0)].attach_type == "inline":
                todo.extend(self.readers(r))
            else:
                out.append(r)
        return out

    def attach_row_reduction(self, op, st, row):
        row_reduce_at(self.s, op.output(0), st, row, self.info.lanes)

    def _indexed_by(self, reader, t, lead):
        for ld in (x for b in reader.bodies for x in _loads(b)):
            if ld.producer is t:
                yield len(ld.indices) == len(lead) and all(
                    i is a.var for i, a in zip(ld.indices, lead))

    def _row_reducible(self, op, tuples: bool = False) -> bool:
        """A sum/max/min whose last reduce axis runs along contiguous memory in every load
        that moves with it, with at least two vectors' worth of steps (``tuples``: an
        argmax's index and value too, over one or more axes, the last one contiguous)."""
        if (len(op.reduce_axis) != 1 and not tuples) or not op.reduce_axis or \
                (len(op.bodies) != 1 and not tuples) or \
                not all(isinstance(b, Reduce) for b in op.bodies):
            return False   # (a tuple reduction: tuple_row_reduction, at the root)
        r = op.reduce_axis[-1]
        e = self.ext(r.dom.extent)
        if e is None or e < 2 * self.L:
            return False
        kinds = [_stride_along(ld.indices, r.var) for b in op.bodies
                 for ld in _loads(b.source)]
        return "strided" not in kinds and "unit" in kinds

    def _epilogue_of(self, op, columns: bool = False) -> Tuple[Optional[ComputeOp], bool]:
        """The one reduction ``op`` reads at its own indices (an elementwise epilogue of a
        GEMM-like stage), when only ``op`` reads it and the reduction can be tiled, and
        whether ``op`` reads it through its plane flattened and through inlined stages
        (:meth:`_flat_epilogue_of`); ``(None, False)`` where there is none.  With
        ``columns``: a tuple reduction too, to tile as a column reduction (it gets no
        register block; no flattened plane)."""
        reds = []
        for t in op.input_tensors:
            if isinstance(t.op, ComputeOp) and t.op.reduce_axis:
                reds.append(t.op)
        if len(reds) != 1:
            flat = None if columns else self._flat_epilogue_of(op)
            return (flat, True) if flat is not None else (None, False)
        red = reds[0]
        if not self._tileable_epilogue(op, red, self.readers(red), columns) or \
                [self.ext(e) for e in red.shape] != [self.ext(e) for e in op.shape] or \
                not all(self._indexed_by(op, red.output(0), list(op.axis))):
            return None, False
        return red, False

    def _tileable_epilogue(self, op, red, readers, columns: bool = False) -> bool:
        """Whether reduction ``red``, read by ``op`` only (``readers``: its readers, those
        inlined replaced by theirs), can be tiled with ``op`` as its epilogue (with
        ``columns``: a tuple reduction too, as a column reduction, whose tiles need no
        register block)."""
        if id(red) in self.done or (len(red.bodies) > 1 and not columns) or \
                len(op.bodies) > 1:
            return False
        rst = self.s[red]   # (a stage a template gave a cache_write: its op is not red)
        if rst.op is not red or rst.is_output or rst.attach_type != "root" or \
                len(readers) != 1 or readers[0] is not op:
            return False
        return (columns and len(red.bodies) > 1) or self._plan_block(red) is not None

    def _flat_epilogue_of(self, op) -> Optional[ComputeOp]:
        """The reduction ``red`` (``[..., H*W]``) that elementwise ``op`` (``[..., H, W]``,
        the same leading extents) reads, through inlined stages (a batch norm, a ReLU),
        only as ``red[..., h*W + w]`` at its own indices, reading no other tensor that
        varies over the plane (no residual): the epilogue of a 1x1
        convolution written as a GEMM over the flattened pixels (``tecomp.dynamo``'s
        ``_conv_1x1_as_gemm``), which :meth:`elementwise` tiles with the reduction once
        its last two axes are fused; None where there is none (or with
        :data:`FUSE_FLAT_EPILOGUES` off)."""
        if not FUSE_FLAT_EPILOGUES or len(op.bodies) != 1 or len(op.axis) < 3:
            return None
        body = expand_inlined(self.s, op.body)
        reds = {id(ld.producer.op): ld.producer.op for ld in _loads(body)
                if isinstance(ld.producer.op, ComputeOp) and ld.producer.op.reduce_axis}
        if len(reds) != 1:
            return None
        red = next(iter(reds.values()))
        if len(red.axis) + 1 != len(op.axis) or \
                not self._tileable_epilogue(op, red, self._readers_through_inline(red)):
            return None
        oe = [self.ext(a.dom.extent) for a in op.axis]
        re_ = [self.ext(e) for e in red.shape]
        if None in oe or None in re_ or oe[:-2] != re_[:-1] or oe[-2] * oe[-1] != re_[-1]:
            return None
        h, w = op.axis[-2].var, op.axis[-1].var
        want = simplify(h * oe[-1] + w)
        lead = [a.var for a in op.axis[:-2]]
        for ld in _loads(body):
            if ld.producer is not red.output(0):
                if any(uses_var(i, v) for i in ld.indices for v in (h, w)):
                    # another tensor over the plane (a residual): read a register block
                    # at a time (a line of each of mr channel planes) it ran 1.2x the
                    # time of the GEMM and a second pass (8 x 256->1024 at 14x14 and 8 x
                    # 128->512 at 28x28 + add + ReLU, one thread, Zen 5, under load;
                    # without the add, 0.94x and 0.88x: benchmarks/history/2026-11-30.md,
                    # "h13-epilogue")
                    return None
                continue
            idx = list(ld.indices)
            if len(idx) != len(lead) + 1 or not all(i is v for i, v in zip(idx, lead)) or \
                    not same_as(simplify(idx[-1]), want):
                return None
        return red

    # -- 3/4. reductions ---------------------------------------------------------------
    def reduction(self, st: Stage):
        if tensorize_reduction(self, st):
            return
        op = st.op
        if self.split_reduction(st):
            return
        if self._column_plan(op) is not None and \
                self.k.choose(f"{op.name}.columns", [True, False], True):
            self.column_reduction(st, st)
            return
        plan = self._plan_block(op)
        if plan is not None:
            cache = self.s.cache_write(op.output(0), "local")
            self.tile_reduction(self.s[cache], st, cache.op, origin=op)
            return
        if self._lanes_along_output(op) and \
                self.k.choose(f"{op.name}.vector_output", [True, False], True):
            self.vector_output_reduction(st)
            return
        if self._row_reducible(op) and op.axis:
            self.row_reduction_root(st)
            return
        if self.plane_reduction(st):
            return   # (several independent sums over several axes too: batch norm's)
        if len(op.bodies) > 1 and op.axis and self._row_reducible(op, tuples=True) and \
                self.k.choose(f"{op.name}.tuple_rows", [True, False], True):
            self.tuple_row_reduction(st)
            return
        self.fallback(st)

    def split_reduction(self, st: Stage) -> bool:
        """A reduction to fewer values than there are threads (every axis reduced, a 0-d
        sum or max; ``keepdims`` ones of extent 1), or a column reduction whose tiles
        make fewer tasks than threads (the column sums of a matrix): its first reduce
        axis cut into chunks, ``rfactor``-ed into a stage of one partial result per
        chunk (each chunk streams its part of the input), which runs in parallel, each
        chunk vectorized (:meth:`column_reduction`, :meth:`plane_reduction` or a row
        reduction); the partials are then reduced in order.  True when it applied."""
        op = st.op
        T = self.info.threads
        rexts = [self.ext(r.dom.extent) for r in op.reduce_axis]
        if not self.split_reduction_wanted(op):
            return False
        if not self.k.choose(f"{op.name}.split", [True, False], True):
            return False
        r0 = next(r for r, e in zip(op.reduce_axis, rexts) if e > 1)
        e0 = self.ext(r0.dom.extent)
        want = self.k.choose(f"{op.name}.chunks", [1, 2, 4, 8, 16, 32],
                             min(e0, 4 * T) if T > 1 else 1)
        f = -(-e0 // max(1, want))
        s = self.s
        ro, _ = st.split(r0, factor=f)
        part = s.rfactor(op.output(0), ro, factor_axis=0)
        pst = s[part]
        # the partials: parallel over the chunks (and the output's axes)
        if self._column_plan(pst.op) is not None:
            self.column_reduction(pst, pst)
        elif not self.plane_reduction(pst):
            if self._row_reducible(pst.op):
                self.row_reduction_root(pst)
            elif len(pst.op.bodies) > 1 and self._row_reducible(pst.op, tuples=True):
                self.tuple_row_reduction(pst)
            else:
                self.fallback(pst)
        self.done.add(id(pst.op))
        st = s[op.output(0)]
        if self._column_plan(st.op) is not None:
            self.column_reduction(st, st)   # (the partial columns added, vectorized)
        return True

    def split_reduction_wanted(self, op) -> bool:
        """Whether :meth:`split_reduction` applies to ``op``: constant extents, at least
        64 vectors reduced per output value, fewer outputs than threads or a column
        reduction of fewer tiles than threads."""
        T = self.info.threads
        exts = [self.ext(a.dom.extent) for a in op.axis]
        rexts = [self.ext(r.dom.extent) for r in op.reduce_axis]
        if None in exts or None in rexts or not op.reduce_axis or \
                math.prod(rexts) < 64 * self.L:
            return False
        col = self._column_plan(op)
        return math.prod(exts) < max(2, T) or (col is not None and T > 1 and
                                               self._column_tasks(op, col) < T)

    def _column_input(self, op, t) -> Optional[str]:
        """How column reduction ``op`` reads tensor ``t``: ``"memory"`` (an input, or a
        stage in memory or inlined already), ``"inline"`` (an elementwise stage only
        ``op`` reads: inlined into it, each of its values computed once, as each is read
        once), or None (an elementwise stage that others read too: the register block's
        rule computes it per task instead)."""
        if not isinstance(t.op, ComputeOp):
            return "memory"
        st = self.s[t.op]
        if st.attach_type == "inline" or t.op.reduce_axis or not _is_injective(t.op):
            return "memory"
        if st.is_output or id(t.op) in self.done or st.attach_type != "root" or \
                [r for r in self.readers(t.op)] != [op]:
            return None
        return "inline"

    def _column_tasks(self, op, plan) -> int:
        """The tiles (tasks) of column reduction ``op`` under ``plan``."""
        u, mr, nr = plan
        exts = [self.ext(a.dom.extent) for a in op.axis]
        return math.prod(exts[:-1]) // mr * -(-exts[-1] // nr)

    def _column_plan(self, op) -> Optional[Tuple[Optional[object], int, int]]:
        """``(u, mr, nr)`` for a reduction that streams its input in columns: every
        load moves along the innermost output axis ``v`` by one element, depends on every
        output axis of extent > 1 (no value is read for two outputs: nothing to keep in
        registers, as a GEMM's block does) and on no reduce axis in its last index (the
        reduction runs across rows: a sum over the first or a middle axis, over an NCHW
        tensor's batch, a column sum); an elementwise stage it reads must be one only it
        reads (:meth:`_column_input`).  The tile is ``mr`` values of ``u`` (the axis
        before ``v``, when every load reads its rows back to back: whole rows of ``v``)
        by ``nr`` of ``v``, a share of L2 in accumulators (:data:`COLUMN_TILE_L2`): each
        reduction step then reads one contiguous run of that size.  None where it does
        not apply."""
        if not op.axis or not op.reduce_axis or \
                not all(isinstance(b, Reduce) for b in op.bodies):
            return None
        v = op.axis[-1]
        ev = self.ext(v.dom.extent)
        exts = [self.ext(a.dom.extent) for a in op.axis]
        if ev is None or ev < self.L or None in exts:
            return None
        loads = [ld for b in op.bodies for ld in _loads(b.source)]
        if not loads:
            return None
        if any(self._column_input(op, ld.producer) is None for ld in loads):
            return None
        for ld in loads:
            idx = ld.indices
            if _stride_along(idx, v.var) != "unit" or \
                    not all(any(uses_var(i, a.var) for i in idx) for a, e in
                            zip(op.axis, exts) if e > 1) or \
                    any(uses_var(idx[-1], r.var) for r in op.reduce_axis):
                return None
        size = max(_dt.nbytes(op.output(k).dtype) for k in range(len(op.bodies)))
        tile = max(self.L, self.k.choose(
            f"{op.name}.tile_bytes", [2048, 8192, 32768, 131072, 262144],
            max(2048, self.info.l2_bytes // COLUMN_TILE_L2)) // size)
        want = 4 * self.info.threads
        lead = math.prod(exts[:-1])
        u, mr, nr = None, 1, ev
        if ev > tile:
            nr = max(self.L, tile // self.L * self.L)
            while nr > 4 * self.L and lead * -(-ev // nr) < want:
                nr //= 2
            return None, 1, nr
        if len(op.axis) >= 2 and exts[-2] > 1 and all(
                len(ld.indices) >= 2 and ld.indices[-2] is op.axis[-2].var and
                self.ext(ld.producer.shape[-1]) == ev for ld in loads):
            u, eu = op.axis[-2], exts[-2]
            mr = max(1, min(eu, tile // ev))
            while mr > 1 and (eu % mr or lead // eu * (eu // mr) < want):
                mr -= 1
        return u, mr, nr

    def _lanes_of(self, op) -> int:
        """The lanes of a vector of reduction ``op``'s values in a plane or column
        reduction: packed bytes for bool and 8-bit values (64 to a 512-bit vector, not
        the 16 of float32), 16-bit ones two to a float32 lane; the float32 lanes for
        wider ones.  (A row reduction keeps ``4 x`` float32's lanes of partial results:
        :func:`tecomp.strategy.rows.row_reduce_at`.)"""
        size = max(_dt.nbytes(op.output(k).dtype) for k in range(len(op.bodies)))
        return self.L * 4 // size if size < 4 else self.L

    def column_reduction(self, outer: Stage, red: Stage):
        """Schedule a column reduction (:meth:`_column_plan`): ``outer`` (the reduction
        itself, or an elementwise stage that reads it at its own indices: a mean's
        division) in tiles of ``mr`` x ``nr`` values, the tiles' loops fused and
        parallel; the reduction at the tile, its reduce axes outside the tile's
        vectors, so each reduction step reads a contiguous run into accumulators that
        stay in L1, and the input is streamed once."""
        op = red.op
        u, mr, nr = self._column_plan(op)
        pos_u = len(op.axis) - 2 if u is not None else None
        for t in op.input_tensors:
            if self._column_input(op, t) == "inline":
                self.s[t.op].compute_inline()
                self.done.add(id(t.op))

        def tile(st):
            axes = list(st.op.axis)
            lead, inner = axes[:-1], []
            if pos_u is not None:
                uo, ui = st.split(axes[pos_u], factor=mr)
                lead = axes[:pos_u] + [uo]
                inner.append(ui)
            if nr < self.ext(axes[-1].dom.extent):
                vo, vi = st.split(axes[-1], factor=nr)
                lead.append(vo)
            else:
                vi = axes[-1]
            return lead, inner, vi

        lanes = self._lanes_of(op)   # (four vectors a step where they divide the row)

        # the inputs the passes ahead are prefetched of (COLUMN_PREFETCH)
        ahead_of = self._column_prefetched(op, mr * nr)

        # several reduction steps a pass (unrolled, inside the tile's vectors): each
        # accumulator is loaded and stored once per ``steps`` rows read
        r_last = self.ext(op.reduce_axis[-1].dom.extent)
        want = (COLUMN_STEPS_PACKED_PAST_L2 if self._input_past_l2(op) else
                COLUMN_STEPS_PACKED) if lanes >= 4 * self.L else \
            COLUMN_STEPS_TUPLE if len(op.bodies) > 1 else \
            COLUMN_STEPS_PREFETCHED if ahead_of else COLUMN_STEPS
        steps = self.k.choose(f"{op.name}.steps", [1, 2, 4, 8], next(
            (w for w in (want, COLUMN_STEPS_PACKED, COLUMN_STEPS)
             if w <= want and r_last is not None and r_last % w == 0), 1))
        # the passes ahead: the model's bytes over a pass's (steps rows of the tile of
        # each input), at least one, a power of two
        pass_bytes = steps * mr * nr * max(
            [_dt.nbytes(t.dtype) for t in ahead_of] or [1])
        passes = 0
        if ahead_of:
            passes = 1
            while passes < 4 and 2 * passes * pass_bytes <= \
                    self.info.column_prefetch_bytes:
                passes *= 2
        if ahead_of:   # (a knob only where there is something to prefetch)
            passes = self.k.choose(f"{op.name}.prefetch_passes", [0, 1, 2, 4], passes)

        def vectorize(st, vi, rax):
            """``st``'s loops: ``lead`` (done), ``rax`` (the reduce axes, or none), the
            tile's rows and vectors, the steps of the last reduce axis, the lanes."""
            ki = None
            if rax and steps > 1:
                ko, ki = st.split(rax[-1], factor=steps)
                rax = rax[:-1] + [ko]
            f = 4 * lanes if nr % (4 * lanes) == 0 else lanes
            if nr <= lanes:
                vs, vl = [], vi
            else:
                vo, vv = st.split(vi, factor=f)
                vs = [vo]
                if f > lanes:
                    vv, vl = st.split(vv, factor=lanes)
                    st.unroll(vv)
                    vs.append(vv)
                else:
                    vl = vv
            return rax, vs, ki, vl

        def order(st, lead, rax, inner, vi):
            rax, vs, ki, vl = vectorize(st, vi, rax)
            st.reorder(*lead, *rax, *inner, *vs, *([ki] if ki is not None else []), vl)
            if ki is not None:
                st.unroll(ki)
            st.vectorize(vl)
            if passes and rax and vs:
                # at each step over the tile's vectors, the same columns of the rows
                # ``passes`` passes ahead, into L2
                for t in ahead_of:
                    st.prefetch(t, vs[0], passes, along=rax[-1], level=2)

        lead, inner, vi = tile(outer)
        order(outer, lead, list(op.reduce_axis) if outer is red else [], inner, vi)
        exts = [self.ext(self._leaf_extent(outer, a)) for a in lead]
        fused = self.parallel(outer, lead, exts) if lead else None
        if outer is red or fused is None:
            return
        block = next((a for a in reversed(lead) if a in outer.leaf_iter_vars), fused)
        red.compute_at(outer, block)
        _, inner_r, vi_r = tile(red)
        order(red, [], list(op.reduce_axis), inner_r, vi_r)
        self.done.add(id(op))

    def _column_prefetched(self, op, run: int) -> List[Tensor]:
        """The tensors column reduction ``op`` reads (through inlined stages) that it
        prefetches the passes ahead of (:data:`COLUMN_PREFETCH`), its tile's rows ``run``
        elements (each a contiguous run read once a pass): those larger than the L2
        cache whose runs are shorter than the machine model's ``column_prefetch_bytes``
        (a sum over the middle axis of 8x64x128x256 reads runs of 128 KiB, which the
        hardware prefetchers keep fed: 0.89-1.06x with the prefetch, 1 thread, Zen 4)."""
        want = self.info.column_prefetch_bytes
        if not COLUMN_PREFETCH or want <= 0:
            return []
        out = []
        for t in _reads_through_inline(self.s, op):
            n, size = _elems(t, self.shapes), _dt.nbytes(t.dtype)
            if n is not None and n * size > self.info.l2_bytes and run * size < want:
                out.append(t)
        return out

    def plane_reduction(self, st: Stage) -> bool:
        """A sum/max/min (or several in one pass) over several axes whose last one runs
        along contiguous memory (batch norm's per-channel sums over ``n, h, w``, a bias
        gradient): the output axes fused and in parallel, and per output element the
        reduction ``rfactor``-ed into one vector of partial results along the last axis,
        the other reduce axes outside it.  True when it applied."""
        op = st.op
        if (len(op.bodies) > 1 and not op.bodies[0].combiner.independent) or \
                len(op.reduce_axis) < 2 or not op.axis:
            return False
        r = op.reduce_axis[-1]
        e = self.ext(r.dom.extent)
        exts = [self.ext(a.dom.extent) for a in op.axis]
        if e is None or e < 4 or None in exts:   # (4-15 lanes: one masked vector)
            return False
        kinds = [_stride_along(ld.indices, r.var) for b in op.bodies for ld in _loads(b.source)]
        if "strided" in kinds or "unit" not in kinds:
            return False
        if not self.k.choose(f"{op.name}.plane", [True, False], True):
            return False
        s = self.s
        # packed bytes: four vectors of partial results, four independent chains (one
        # chain of bool ands, a masked test each, ran `all` at 0.4x the rate of `any`'s
        # ors over the same 128x256 planes of bools, one thread, Zen 5)
        L = self._lanes_of(op)
        chains = 4 if L > self.L and e % (4 * L) == 0 else 1
        # an output exact in any order (bools, integers) accumulates in a local, whose
        # last partial results the code generator reduces across the lanes of one vector
        # (an argument may alias another: it is updated one partial result at a time)
        red, cache = op.output(0), None
        if st.is_output and len(op.bodies) == 1 and _vec_reorderable(op):
            cache = red = s.cache_write(op.output(0), "local")
            r = s[cache].op.reduce_axis[-1]
        _, ri = s[red].split(r, factor=L * chains)
        rf = s[s.rfactor(red, ri, factor_axis=len(op.axis))]
        lanes = rf.op.axis[-1]
        rf.reorder(*(list(rf.op.axis[:-1]) + list(rf.op.reduce_axis) + [lanes]))
        if chains > 1:
            vv, lanes = rf.split(lanes, factor=L)
            rf.unroll(vv)
        rf.vectorize(lanes)
        st, axes = s[op.output(0)], list(s[op.output(0)].op.axis)
        row = axes[0] if len(axes) == 1 else st.fuse(*axes)
        if self.info.threads > 1 and math.prod(exts) >= 2:
            st.parallel(row)
        rf.compute_at(st, row)
        self.done.add(id(rf.op))
        if cache is not None:
            s[cache].compute_at(st, row)
            self.done.add(id(s[cache].op))
        return True

    def row_reduction_root(self, st: Stage):
        """A row reduction at the root (a row sum as an output): blocks of rows in
        parallel, each row's reduction vectorized (``rfactor``)."""

        s = self.s
        op = st.op
        cache = s.cache_write(op.output(0), "local")
        st = s[op.output(0)]
        axes = list(st.op.axis)
        exts = [self.ext(a.dom.extent) for a in axes]
        row = axes[0] if len(axes) == 1 else st.fuse(*axes)
        total = math.prod(exts) if None not in exts else None
        # rows short enough that each row's closing combines hold back the loads of the
        # next: the rows ahead prefetched, as the machine model asks (CpuModel.
        # row_prefetch_bytes), within a task (the prefetch clamped to its last row): a
        # quarter of its rows at most, tasks of 64 rows where the model asks for more
        # than 4 and there are rows enough (the knob's 0: none)
        want = self._row_prefetch_rows(op, self.ext(op.reduce_axis[0].dom.extent))
        T = self.info.threads
        rb = self.k.choose(f"{op.name}.rows_per_task", [1, 4, 16, 64],
                           1 if (total or 0) < 64 * T else
                           64 if want > 4 and total >= 4 * 64 * T else 16)
        if rb > 1:
            ro, ri = st.split(row, factor=rb)
        else:
            ro = ri = row
        if T > 1 and (total is None or total >= 2):
            st.parallel(ro)
        ahead = self.k.choose(f"{op.name}.prefetch_rows", [0, 1, 2, 4, 8, 16],
                              min(want, max(1, rb // 4)) if rb > 1 else want)
        # (a row streaming from memory on a CPU whose narrower loads read it faster: four
        # accumulators of that width, the kernel compiled for such registers)
        vb = self._stream_load_bytes(op)
        row_reduce_at(s, cache, st, ri, vb // 4 if vb else self.info.lanes,
                      prefetch_rows=ahead)
        if vb:
            st.pragma(ro, "vector_bytes", vb)

    def tuple_row_reduction(self, st: Stage, epilogue: Optional[Stage] = None):
        """A row reduction of several values at once (an argmax's index and value, along
        contiguous memory; over several axes, the others outside), at the root:
        ``rfactor``-ed whole into vectors of partial pairs (four vectors a step),
        computed at the row loop, which runs in parallel; the code generator then
        combines the lanes as a tree (a selection reducer: an argmax,
        :func:`tecomp.lower.vectorize.selection_reducer`; else steps of one vector, then
        four lanes, then the lanes in order).  With ``epilogue`` (the one elementwise
        stage that reads it, at its own indices: an int64 argmax's widening), the
        epilogue's rows in parallel blocks of a vector, the reduction computed at each
        block (no second pass over the results).  (A multi-output stage takes no
        ``cache_write``: the partials are the stage's own.)"""
        s, L = self.s, self.L
        op = st.op
        K = self.ext(op.reduce_axis[-1].dom.extent)
        parts = []
        # (the last vector folded into 4 lanes before the lanes are combined one at a
        # time: 16 scalar combines of an argmax's pairs, with their NaN and tie tests,
        # took a third of the time along rows of 256: 8.4 against 6.2 ms for
        # 8x64x128x256, one thread, Zen 5, under load)
        tail = [4] if L > 4 else []
        steps = ([4 * L, L] if K >= 8 * L else [L]) + tail
        if selection_reducer(op.bodies[0].combiner):
            # the code generator combines the last partials across the lanes of their
            # vectors, a tree of neighbouring lanes (lower.vectorize.selection_reduction):
            # no steps in between.  Those (4L -> L -> 4 -> 1, each a chain of dependent
            # combines through the stack) took more instructions than the 16 vectors
            # of a row of 256 (asm of argmax over 8x64x128x256's last axis).  The tree
            # over 4L lanes costs about what a few steps of four vectors do, so four
            # vectors a step only where the row has SELECTION_WIDE_STEPS of them, else two
            steps = [4 * L if K >= 4 * L * SELECTION_WIDE_STEPS else 2 * L
                     if K >= 8 * L else L]
        for F in steps:
            rs = s[op.output(0)]
            _, ki = rs.split(rs.op.reduce_axis[-1], factor=F)
            parts.append(s[s.rfactor(op.output(0), ki, factor_axis=len(rs.op.axis))])
        st = s[op.output(0)]
        axes = list(st.op.axis)
        exts = [self.ext(a.dom.extent) for a in axes]
        row = axes[0] if len(axes) == 1 else st.fuse(*axes)
        # a block of rows a step: their partial vectors and the trees at their ends one
        # straight-line body, each row still read whole before the next (two rows read
        # in turns ran 2.8x slower from memory: the hardware prefetcher loses them)
        # (each row's partials in registers until its tree: at most half of them in all)
        want = SELECTION_ROW_BLOCK
        while want > 1 and want * (steps[0] // L) * len(op.bodies) > self.info.vregs // 2:
            want //= 2
        block = self.k.choose(f"{op.name}.row_block", [1, 2, 4, 8], want) \
            if len(parts) == 1 and selection_reducer(op.bodies[0].combiner) else 1
        # (the rows' real extents, not the shapes' hints: a block of a symbolic row
        # loop leaves the partials' rows at the block an extent that is not a constant,
        # which cannot be unrolled -- tc.build refused the rule's own schedule)
        if exts[-1] is None or exts[-1] % block or \
                any(not isinstance(a.dom.extent, Const) for a in axes):
            block = 1
        # the loop the rows ahead are prefetched along (None: the row loop) and the rows
        # a step of it takes
        along, per = None, block
        if epilogue is None:
            if block > 1:
                row, rb = st.split(row, factor=block)
                st.unroll(rb)
            if self.info.threads > 1 and (None in exts or math.prod(exts) >= 2):
                st.parallel(row)
        else:
            eaxes = list(epilogue.op.axis)
            erow = eaxes[0] if len(eaxes) == 1 else epilogue.fuse(*eaxes)
            total = math.prod(exts) if None not in exts else None
            rb = L if total is not None and total % L == 0 and \
                total >= 4 * L * self.info.threads else 1
            if rb > 1:
                erow, ri = epilogue.split(erow, factor=rb)
                epilogue.vectorize(ri)
            if self.info.threads > 1 and (total is None or total >= 2):
                epilogue.parallel(erow)
            st.compute_at(epilogue, erow)
            # the rows ahead along the epilogue's loop, a step of it (its tasks' rows)
            # at least: along the block loop inside it, a task's last block would
            # prefetch nothing (clamped to the task)
            along, per = erow, rb
            if block > 1 and rb % block == 0:
                row, rbi = st.split(row, factor=block)
                st.unroll(rbi)
            else:
                block = 1
        for rf in parts:
            rf.compute_at(st, row)
            rki = rf.op.axis[-1]
            rf.reorder(*(list(rf.op.axis[:-1]) + list(rf.op.reduce_axis) + [rki]))
            if block > 1:
                rf.unroll(rf.op.axis[-2])
            rf.vectorize(rki)
            self.done.add(id(rf.op))
        # the rows ahead prefetched, as a row reduction's (row_reduction_root): each
        # row's tree across its lanes holds back the next rows' loads (an int64 argmax
        # over rows of 256 float32 from memory, one thread, CPU time, Intel Xeon VM under
        # load: 4 rows ahead along the block loop 1.41-1.45x faster than none; a step of
        # the epilogue's loop (16 rows) ahead 1.46-1.52x faster than that, 95-107% of the
        # read stream; 2 threads 1.16-1.25x)
        # (one reduce axis only: over several, a step of the first partials' outer
        # loop reads more than a row's part)
        ahead = self.k.choose(f"{op.name}.prefetch_rows", [0, 1, 2, 4, 8, 16],
                              self._row_prefetch_rows(
                                  op, K, bool(selection_reducer(op.bodies[0].combiner)))
                              if len(op.reduce_axis) == 1 else 0)
        if ahead > 0 and len(parts[0].op.reduce_axis) == 1:
            for t in _reads_through_inline(s, parts[0].op):
                parts[0].prefetch(t, parts[0].op.reduce_axis[0], max(1, ahead // per),
                                  along=row if along is None else along)

    def _stream_load_bytes(self, op) -> int:
        """The register width (bytes) a row reduction ``op`` is compiled for
        (``pragma vector_bytes``): the machine model's ``stream_load_bytes`` where that is
        narrower than its registers, ``op`` reads more than the L2 caches of the threads
        hold (from memory) and its partial results are folded in order (a float sum,
        mean or product: not a max or min, whose 512-bit form read Zen 4's memory as fast
        or faster, nor bools or integers); 0 (the registers') otherwise, or with
        :data:`STREAM_LOADS` off."""
        vb = self.info.stream_load_bytes
        if not STREAM_LOADS or not vb or vb >= 4 * self.info.lanes or _vec_reorderable(op):
            return 0
        return vb if self._input_past_l2(op) else 0

    def _input_past_l2(self, op) -> bool:
        """Whether what reduction ``op`` reads (through inlined stages) is more than the
        L2 caches of the threads hold (False where a size is not known)."""
        ins = _reads_through_inline(self.s, op)
        sizes = [_elems(t, self.shapes) for t in ins]
        return bool(ins) and None not in sizes and sum(
            n * _dt.nbytes(t.dtype) for n, t in zip(sizes, ins)) > \
            self.info.l2_bytes * max(1, self.info.threads)

    def _row_prefetch_rows(self, op, K: Optional[int], selection: bool = False) -> int:
        """The rows ahead a reduction ``op`` along rows of ``K`` elements prefetches as
        the machine model asks (:func:`tecomp.strategy.rows.row_prefetch_rows`; 0 where
        ``K`` or a size is not known; ``selection``: an argmax's, its own distance)."""
        ins = _reads_through_inline(self.s, op)
        sizes = [_elems(t, self.shapes) for t in ins]
        return row_prefetch_rows(
            self.info, K and K * max(_dt.nbytes(t.dtype) for t in ins) if ins else None,
            None if None in sizes else sum(n * _dt.nbytes(t.dtype) for n, t in zip(sizes, ins)),
            selection)

    def _lanes_along_output(self, op) -> bool:
        """Whether reduction ``op`` is better vectorized along its innermost output axis
        ``v`` than along its reduction (:data:`VECTOR_OUTPUTS`): ``v`` a constant extent
        of at least a vector, no register block (:meth:`_plan_block`: no operand moves
        along ``v``), every load broadcast along ``v`` (the same element for every
        lane), and the body reading ``v`` (a mask, ``k <= j``: a cumulative sum written
        as a reduction).  Per output value, the lanes of ``v`` cost ``K / L`` vector
        steps (a broadcast element each) for ``K`` reduction steps and ``L`` lanes,
        the reduction's vectors ``ceil(K / L)`` vector steps and a reduction across the
        lanes besides: never more, and the lanes' sum needs no reassociation."""
        if not VECTOR_OUTPUTS or not op.axis or len(op.bodies) != 1 or \
                not isinstance(op.body, Reduce) or self._plan_block(op) is not None:
            return False
        v = op.axis[-1]
        ev = _cint(v.dom.extent)
        if ev is None or ev < self.L:
            return False
        if any(_stride_along(ld.indices, v.var) != "bcast" for ld in _loads(op.body)):
            return False
        return uses_var(op.body, v.var)

    def vector_output_reduction(self, st: Stage):
        """A reduction vectorized along its innermost output axis
        (:meth:`_lanes_along_output`): accumulated in a ``local`` buffer of four vectors
        of outputs where they divide the axis (four independent chains), else one, the
        reduction outside its lanes; the outer axes and the vectors' loop fused and
        parallel."""
        s, L = self.s, self.L
        op = st.op
        cache = s.cache_write(op.output(0), "local")
        st = s[op.output(0)]
        axes = list(st.op.axis)
        ev = _cint(axes[-1].dom.extent)
        f = self.k.choose(f"vec.{op.name}", [L, 4 * L], 4 * L if ev % (4 * L) == 0 else L)
        vo, vi = st.split(axes[-1], factor=f)
        outer = axes[:-1] + [vo]
        row = self.parallel(st, outer, [self.ext(self._leaf_extent(st, a)) for a in outer])
        at = vo if vo in st.leaf_iter_vars else row
        cs = s[cache]
        cs.compute_at(st, at)
        # (split by the lanes even for one vector: at a tail the buffer's extent is
        # symbolic, a min, and only a constant one is vectorized)
        cvo, cvl = cs.split(cs.op.axis[-1], factor=L)
        cs.reorder(*cs.op.reduce_axis, cvo, cvl)
        if f > L:
            cs.unroll(cvo)
        cs.vectorize(cvl)
        if f > L:
            svo, svl = st.split(vi, factor=L)
            st.unroll(svo)
            st.vectorize(svl)
        else:
            st.vectorize(vi)
        self.done.add(id(cache.op))

    def fallback(self, st: Stage):
        """Neither blocked nor a row reduction: the outer axes in parallel, the
        innermost output axis vectorized when its reads allow."""
        op = st.op
        axes = list(op.axis)
        if not axes:
            return
        exts = [self.ext(a.dom.extent) for a in axes]
        self.parallel(st, axes[:-1] or axes, exts[:-1] or exts)

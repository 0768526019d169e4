"""Rule 3 of :mod:`tecomp.strategy.rules`: register blocks for reductions with a vectorizable
output axis (GEMM-like DAGs: batched matmul, ``A^T B``, convolutions written as plain
computes, most gradients).

:class:`BlockRules` plans the block (``u`` rows by ``v`` vectors, or the image plane as the
vector axis), sizes it to the vector registers (:func:`block_rate`), orders the task and
block loops by what fits in L1/L2, packs operands read with a stride along ``v`` into
panels (or transposes them with the target's register-transpose intrinsic), and attaches
each operand's producer at the loop where it is used.  It is a part of the rules' class
(``_Rules`` derives from it) and reads from it only the schedule ``s``, the knobs ``k``, the
lane count ``L``, the machine ``info``, the set ``done`` of scheduled operations, the
extents ``fused_ext`` of fused axes,
``ext(extent)`` and ``parallel(stage, axes, extents)``.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

from ..ir import dtype as _dt
from ..ir.expr import ProducerLoad, Reduce, Var
from ..ir.functor import collect, uses_var
from ..schedule.schedule import Stage
from ..te.tensor import ComputeOp
from ..te.tensor_intrin import transpose_intrin, tensor_intrins_for
from ._common import (_cint, _is_padding, _loads, _read_by_nest, _reused_across_outputs,
                      _stride_along, _streams_past_llc)


#: whether a register block whose rows share no vector load (:meth:`BlockRules.
#: _rows_share_loads`) is one row tall
ONE_ROW_WITHOUT_SHARED_LOADS = True

#: whether such a one-row block over more than half the last-level cache stores its
#: output past the cache (``pragma nontemporal``, knob ``<stage>.stream``)
STREAM_ALONE = True


class BlockRules:
    """The register-blocked schedule of one reduction (rule 3): :meth:`_plan_block` says
    whether it applies, :meth:`tile_reduction` applies it."""

    def _plan_block(self, op):
        """(u, v) axes of a register block for reduction ``op``, or None: ``v`` is the
        innermost output axis, wide enough to vectorize, along which every operand is
        contiguous, broadcast, or strided but packable (it then does not move with
        ``u``); ``u`` another output axis (the innermost one with extent > 1 that some
        operand moving with ``v`` does not depend on, else the innermost)."""
        if not op.axis or len(op.bodies) != 1 or not isinstance(op.body, Reduce):
            return None
        v = op.axis[-1]
        ev = self.ext(v.dom.extent)
        if ev is not None and ev < 4:
            return None   # (rows of 4-15 lanes are one masked vector: DECISIONS.md, "Rules:
            #              rows shorter than half a vector")
        loads = _loads(op.body.source)
        kinds = [(ld, _stride_along(ld.indices, v.var)) for ld in loads]
        if not any(k == "unit" or k == "strided" for _, k in kinds):
            return None
        us = [a for a in op.axis[:-1] if (self.ext(a.dom.extent) or 2) > 1]
        u = None
        movers = [ld for ld, k in kinds if k != "bcast"]
        for a in reversed(us):
            if any(not any(uses_var(i, a.var) for i in ld.indices) for ld in movers):
                u = a
                break
        if u is None and us:
            u = us[-1]
        # a strided operand is packed per panel: it must not move with u
        for ld, k in kinds:
            if k == "strided" and (u is None or any(uses_var(i, u.var) for i in ld.indices)):
                return None   # (without rows to reuse it, a packed panel is a transpose)
        return u, v

    def tile_reduction(self, inner: Stage, outer: Stage, red_op, origin=None, oaxes=None):
        """The register-blocked nest: ``outer`` (the copy out of the local buffer, or an
        elementwise epilogue) loops over blocks; ``inner`` (the reduction into a local
        buffer) is computed at the block's loop.  ``oaxes``: ``outer``'s axes matching the
        reduction's one for one, where they are not its own (an epilogue's plane fused
        into one axis, its extent in ``fused_ext``)."""
        k, L, info = self.k, self.L, self.info
        name = (origin or red_op).name
        plan = self._plan_block(origin or red_op)
        u_red, v_red = plan
        w_red = None if oaxes is not None else \
            self._plane_axis(origin or red_op, outer.op, u_red, v_red)
        if w_red is not None:
            plane = self._panel_bytes(origin or red_op, v_red, u_red,
                                      self.ext(v_red.dom.extent) * self.ext(w_red.dom.extent))
            # (every block of rows reads the whole plane over the whole reduction: where
            # that is more than half of L2 it comes from L3 for every block, and the rows'
            # blocks won: DECISIONS.md, "Rules: the image plane as the vector axis"; past
            # L1 it comes from L2, too slowly for blocks of few rows on fast FMA ports:
            # "Rules: the plane from L2")
            on = plane <= self.info.l2_bytes // 2 and not (
                plane > self.info.l1_bytes and
                self._plane_fma_cycles(origin or red_op, outer.op, u_red) <= 1.0)
            if k.choose(f"{name}.plane", [True, False], on):
                self._tile_plane(inner, outer, red_op, origin, u_red)
                return
        # the same positions in outer's axes
        pos_v = len(red_op.axis) - 1
        pos_u = list((origin or red_op).axis).index(u_red) if u_red is not None else None
        if inner.scope != "local":
            inner.set_scope("local")
        oaxes = list(oaxes if oaxes is not None else outer.op.axis)
        ev = self._axis_ext(oaxes[pos_v])
        eu = self._axis_ext(oaxes[pos_u]) if pos_u is not None else 1
        red_exts = [self.ext(r.dom.extent) for r in red_op.reduce_axis]
        fit = self._l2_fit(origin or red_op, u_red, v_red)
        most = self._rows_one_set(origin or red_op, u_red)
        alone = ONE_ROW_WITHOUT_SHARED_LOADS and u_red is not None and \
            not self._rows_share_loads(origin or red_op, u_red, v_red)
        if alone:
            most = 1   # (rows that share no load: see _rows_share_loads)
        if most is not None:   # (at most 8 rows of the block in one L1 set)
            fit = (lambda mr, nr, f=fit: mr <= most and (f is None or f(mr, nr)))
        mr0, nr0 = self._register_block(ev, eu, fit)
        nr = k.choose(f"{name}.nr", sorted({self._whole(n, ev) for n in (
            nr0, L, 2 * L, 3 * L, 4 * L)} | ({ev} if ev is not None and ev < L else set())),
            nr0)
        nv = max(1, -(-nr // L))
        budget = max(1, (info.vregs - nv - 2) // nv)
        mr_choices = sorted({mr0} | {m for m in (1, 2, 3, 4, 6, 8, 12, 16) if m <= budget})
        mr = k.choose(f"{name}.mr", mr_choices, mr0) if pos_u is not None else 1
        order = k.choose(f"{name}.order", ["vu", "uv"], self._order_default(
            red_op, origin, u_red, v_red, nr, mr, ev))
        # outer's loops: the others and the first panel loop (the tasks), then the
        # second panel loop, then the block
        odims = [d for d in range(len(oaxes)) if d != pos_v and d != pos_u]
        vo, vi = outer.split(oaxes[pos_v], factor=nr)
        if pos_u is not None:
            uo, ui = outer.split(oaxes[pos_u], factor=mr)
            first, second = (vo, uo) if order == "vu" else (uo, vo)
        else:
            first, second, ui = vo, None, None
        fdim = pos_v if order == "vu" or pos_u is None else pos_u
        fext = ev if fdim == pos_v else eu
        lead = [(oaxes[d], self._axis_ext(oaxes[d])) for d in odims]
        first_task = (first, -(-fext // (nr if fdim == pos_v else mr))
                      if fext is not None else None)
        # the first panel loop after the other axes, or at its own axis's place among them
        # (an NCHW convolution's channel blocks outside its rows: a block of weights
        # stays in L2 while a thread's tasks go down the rows)
        if odims and k.choose(f"{name}.task_order", ["rest", "axes"], self._task_order_default(
                origin or red_op, u_red, eu, order)) == "axes":
            lead.insert(sum(1 for d in odims if d < fdim), first_task)
        else:
            lead.append(first_task)
        par_axes = [a for a, _ in lead]
        par_exts = [e for _, e in lead]
        outer.reorder(*par_axes, *[a for a in (second, ui) if a is not None], vi)
        if ui is not None:
            outer.unroll(ui)
        self._vector(outer, vi, nr)
        block_loop = second if second is not None else first
        fused = self.parallel(outer, par_axes, par_exts)
        if first not in outer.leaf_iter_vars:
            first = fused            # (fused into the parallel loop)
        if second is None:
            block_loop = fused
        # the reduction at the block
        inner.compute_at(outer, block_loop)
        if alone and mr == 1 and STREAM_ALONE and _streams_past_llc(
                _read_by_nest(self.s, outer, block_loop), outer.op.output(0), info) and \
                k.choose(f"{name}.stream", [True, False], True):
            # a pass that reads each input once per output, over more than half the
            # last-level cache: its output stored past the cache (a causal depthwise
            # conv1d, 4x1536x1024: 1.67 -> 1.45 ms, one thread; benchmarks/DECISIONS.md,
            # "Rules: rows that share no load")
            outer.pragma(outer.leaf_iter_vars[0], "nontemporal")
        iaxes = list(inner.op.axis)
        ivo, ivi = inner.split(iaxes[pos_v], factor=nr)
        rax = list(inner.op.reduce_axis)
        if pos_u is not None:
            iuo, iui = inner.split(iaxes[pos_u], factor=mr)
            inner.reorder(*rax, iui, ivi)
            inner.unroll(iui)
        else:
            inner.reorder(*rax, ivi)
        self._vector(inner, ivi, nr)
        # small windows unrolled (a conv's taps); a whole window of at most 16 taps
        # (depthwise 3x3) its first axis too: the rows' loads are then shared by the
        # taps that read them (benchmarks/DECISIONS.md, "Rules: the whole window
        # unrolled")
        taps = 1
        for e in red_exts:
            taps = taps * e if e is not None and taps is not None and e <= 7 else None
        if len(rax) > 1 and _cint(rax[0].dom.extent) is not None and taps is not None and \
                k.choose(f"{name}.unroll_window", [True, False], taps <= 16):
            inner.unroll(rax[0])
        for r, e in zip(rax[1:], red_exts[1:]):
            if _cint(r.dom.extent) is not None and e <= 7 and k.choose(f"{name}.unroll_{r.name}",
                                                     [True, False], True):
                inner.unroll(r)
        last = rax[-1]
        if red_exts[-1] is None or red_exts[-1] > 7 or len(rax) == 1:
            inner.pragma(last if len(rax) == 1 else rax[0], "unroll_count",
                         k.choose(f"{name}.unroll_count", [1, 2, 4, 8], 4))
        inner.pragma(rax[0], "fp_contract")
        # pack operands read with a stride along v (and large row strides on request)
        self._pack(inner, outer, red_op, red_op.axis[pos_v],
                   red_op.axis[pos_u] if pos_u is not None else None,
                   first if order == "vu" else block_loop,
                   block_loop if pos_u is not None else None, name, nr)
        # producers read by the reduction (a padded input): per task, or inlined with
        # the block loops split where the padding's test is known
        self._attach_producers(red_op, outer, fused,
                               [a for a in (first, second) if a is not None and a is not fused
                                and a in outer.leaf_iter_vars])

    def _axis_ext(self, ax) -> Optional[int]:
        """The constant extent of axis ``ax`` of a stage (an op's axis, or one fused of
        several, recorded in ``fused_ext``), or None."""
        if ax in self.fused_ext:
            return self.fused_ext[ax]
        return self.ext(ax.dom.extent) if ax.dom is not None else None

    def _plane_axis(self, op, outer_op, u, v):
        """The axis ``w`` before ``v`` when the output's last two axes, fused, make a
        better vector axis than ``v`` alone (a 1x1 convolution over a 14x14 or 7x7 image:
        rows of 14 or 7 use 14 or 7 of 16 lanes, the plane of 196 or 49 pixels 196 of 208
        and 49 of 64), else None.  Every operand that moves with ``w`` or ``v`` (and
        what ``outer_op``, the copy out or an epilogue, reads) must be indexed by exactly
        ``w`` and ``v`` in its last two dimensions, its rows ``ev`` long, so that the
        plane is contiguous in it; the plane takes at most 16 vectors.  (DECISIONS.md,
        "Rules: the image plane as the vector axis")"""
        axes = list(op.axis)
        if len(axes) < 2 or u is None or u is axes[-2]:
            return None
        w, L = axes[-2], self.L
        ev, ew = self.ext(v.dom.extent), self.ext(w.dom.extent)
        if ev is None or ew is None or ev * ew > 16 * L:
            return None

        def use(n):
            return n / (-(-n // L) * L)

        if use(ev * ew) <= use(ev) * 1.02:
            return None
        for o in (op, outer_op):
            ow, ovar = o.axis[-2].var, o.axis[-1].var
            for body in o.bodies:
                for ld in _loads(body.source if isinstance(body, Reduce) else body):
                    idx = ld.indices
                    moves = [d for d, e in enumerate(idx) if uses_var(e, ow) or uses_var(e, ovar)]
                    if not moves:
                        continue
                    if moves != [len(idx) - 2, len(idx) - 1] or idx[-2] is not ow or \
                            idx[-1] is not ovar or self.ext(ld.producer.shape[-1]) != ev:
                        return None
        return w

    def _tile_plane(self, inner, outer, red_op, origin, u_red):
        """The register block of :meth:`_plane_axis`: ``mr`` rows of ``u`` by the whole
        plane (``w`` and ``v`` fused, split into vectors, the last one partial), the
        reduction innermost, the plane's vectors outside the rows in the unrolled block
        (each operand vector is loaded once and used by ``mr`` FMAs: with the rows
        outside, LLVM loaded all of them first and spilled the accumulators).  The
        blocks of ``u`` (and the axes before) are the tasks."""
        k, L, info = self.k, self.L, self.info
        op = origin or red_op
        name = op.name
        pos_v = len(red_op.axis) - 1
        pos_w = pos_v - 1
        pos_u = list(op.axis).index(u_red)
        if inner.scope != "local":
            inner.set_scope("local")
        oaxes = list(outer.op.axis)
        mr0, budget = self._plane_rows(op, outer.op, u_red)
        eu = self.ext(oaxes[pos_u].dom.extent)
        mr = k.choose(f"{name}.plane_mr", sorted({mr0} | {m for m in (1, 2, 3, 4, 6, 8)
                                                        if m <= budget}), mr0)
        odims = [d for d in range(len(oaxes)) if d not in (pos_v, pos_w, pos_u)]
        lead = [(oaxes[d], self.ext(oaxes[d].dom.extent)) for d in odims]
        uo, ui = outer.split(oaxes[pos_u], factor=mr)
        lead.append((uo, -(-eu // mr) if eu is not None else None))
        f = outer.fuse(oaxes[pos_w], oaxes[pos_v])
        fo, fi = outer.split(f, factor=L)
        par_axes = [a for a, _ in lead]
        outer.reorder(*par_axes, ui, fo, fi)
        outer.unroll(ui)
        outer.unroll(fo)
        outer.vectorize(fi)
        fused = self.parallel(outer, par_axes, [e for _, e in lead])
        # the block: the blocks of u, or the parallel loop they were fused into
        inner.compute_at(outer, uo if uo in outer.leaf_iter_vars else fused)
        iaxes = list(inner.op.axis)
        rax = list(inner.op.reduce_axis)
        f2 = inner.fuse(iaxes[pos_w], iaxes[pos_v])
        f2o, f2i = inner.split(f2, factor=L)
        _, iui = inner.split(iaxes[pos_u], factor=mr)
        inner.reorder(*rax, f2o, iui, f2i)
        inner.unroll(iui)
        inner.unroll(f2o)
        inner.vectorize(f2i)
        inner.pragma(rax[-1], "unroll_count", k.choose(f"{name}.plane_unroll", [1, 2, 4, 8], 2))
        inner.pragma(rax[0], "fp_contract")
        self._attach_producers(red_op, outer, fused, [])

    def _plane_rows(self, op, outer_op, u) -> Tuple[int, int]:
        """(rows, the most rows) of :meth:`_tile_plane`'s block: ``mr x nv`` accumulators,
        ``mr`` rows' values and one vector in the registers (2 rows for a 14x14 plane's 13
        vectors, 6 for 7x7's 4), at most :meth:`_rows_one_set`, the fewest blocks in the
        tail of ``u``."""
        oaxes, pos_v = list(outer_op.axis), len(op.axis) - 1
        F = self.ext(oaxes[pos_v].dom.extent) * self.ext(oaxes[pos_v - 1].dom.extent)
        nv = -(-F // self.L)
        budget = max(1, (self.info.vregs - 1) // (nv + 1))
        most = self._rows_one_set(op, u)
        if most is not None:
            budget = min(budget, most)
        eu = self.ext(oaxes[list(op.axis).index(u)].dom.extent)

        def rows_busy(m):   # rows doing useful work per block, with u's tail
            return m if eu is None else eu / -(-eu // m)

        return max(range(1, budget + 1), key=lambda m: (rows_busy(m), -m)), budget

    def _plane_fma_cycles(self, op, outer_op, u) -> float:
        """Cycles of the FMA ports that one vector of the plane feeds: its ``mr`` rows'
        FMAs, at ``fma_ports`` FMAs of ``fma_lanes`` lanes a cycle (2 rows on two 512-bit
        ports: 1 cycle; on Zen 4's 256-bit datapath: 2)."""
        mr, _ = self._plane_rows(op, outer_op, u)
        lanes = self.info.fma_lanes or self.L
        return mr * self.L / (lanes * max(1, self.info.fma_ports))

    def _vector(self, st, axis, nr):
        L = self.L
        if nr >= 2 * L and nr % L == 0:
            a, b = st.split(axis, factor=L)
            st.unroll(a)
            st.vectorize(b)
        else:
            st.vectorize(axis)

    def _whole(self, nr: int, ev: Optional[int]) -> int:
        """Without AVX-512's mask registers, ``ev`` for a panel ``nr`` that covers the
        whole axis (extent ``ev``) in one to four vectors: the vector is then the axis,
        unguarded, instead of ``nr`` lanes with a guard past ``ev`` in every vector
        statement, which AVX2 runs lane by lane (several times slower on the convolutions
        measured).  With AVX-512 a guarded lane is a masked one, and the panel stays as it
        was.  (measurements: benchmarks/DECISIONS.md, "Rules: the whole axis as the panel")"""
        if ev is not None and ev <= nr and ev <= 4 * self.L and not self.info.masks:
            return ev
        return nr

    def _rows_one_set(self, op, u) -> Optional[int]:
        """The most rows a register block may have when the operand that moves with
        ``u`` has its rows a multiple of 64 bytes apart: ``mr`` rows read at one
        reduction step then fall in ``mr / sets`` lines of each of ``sets`` L1 sets (the
        sets repeat every 4 KiB on Zen 4's 32 KiB 8-way and recent Intel's 48 KiB 12-way
        L1), and more than 8 of them in one set evict each other at every step (a 1x1
        convolution over 2048 channels, rows 8 KiB apart: 16 rows ran 49 GFLOP/s, 8 rows
        119; DECISIONS.md, "Rules: rows shorter than half a vector").  None: no limit."""
        if u is None:
            return None
        most = None
        for ld in _loads(op.body.source):
            dims = [d for d, i in enumerate(ld.indices) if uses_var(i, u.var)]
            if len(dims) != 1 or not isinstance(ld.indices[dims[0]], Var):
                continue
            step = max(1, _dt.bits(ld.producer.dtype) // 8)
            for e in ld.producer.shape[dims[0] + 1:]:
                n = self.ext(e)
                step = None if n is None or step is None else step * n
            if step is None or step % 64:
                continue
            sets = 64 // math.gcd(step // 64, 64)
            most = 8 * sets if most is None else min(most, 8 * sets)
        return most

    def _rows_share_loads(self, op, u, v) -> bool:
        """Whether the rows of a block along ``u`` share any vector load: some operand
        that moves with ``v`` does not move with ``u`` (a GEMM's ``B[k, j]``), or moves
        with it through a window (``x[h + kh, w + kw]``: with the taps unrolled, row
        ``h + 1`` reads at ``kh = 0`` what row ``h`` read at ``kh = 1``).  Where none
        does (a causal depthwise conv1d's ``x[b, c, t - k]``: each channel reads its own
        row), a block of several rows loads as much per multiply-add as one row and
        only streams more rows at once, a row apart: one row (the plain
        ``parallel(outer)`` + ``vectorize(inner)`` loop, with the accumulators in
        registers) ran 2.2x faster (benchmarks/DECISIONS.md, "Rules: rows that share no
        load")."""
        red = [r.var for r in op.reduce_axis]
        for ld in _loads(op.body.source):
            if _stride_along(ld.indices, v.var) == "bcast":
                continue
            at_u = [i for i in ld.indices if uses_var(i, u.var)]
            if not at_u or any(uses_var(i, r) for i in at_u for r in red):
                return True
        return False

    def _l2_fit(self, op, u, v):
        """``fit(mr, nr)``: whether a panel of ``nr`` columns of the operands that do not
        move with ``u`` and ``mr`` rows of those that do, each over the whole reduction,
        take at most half of L2 (the panel stays there while the rows stream by; a long
        reduction with a tall block evicts it: DECISIONS.md, "Rules: register blocks that
        fit L2"); None when the footprint does not depend on the block."""
        col = self._panel_bytes(op, v, u, 1)
        row = self._row_bytes(op, u)
        if not col or not row:
            return None
        half = self.info.l2_bytes // 2
        return lambda mr, nr: col * nr + row * mr <= half

    def _register_block(self, ev, eu, fit=None) -> Tuple[int, int]:
        """(mr, nr) maximising the modelled FMA rate of one block (see
        :func:`block_rate`), among those that ``fit`` (when given; 1 row always does)."""
        L, info = self.L, self.info
        best, arg = -1.0, (1, L)
        nrs = sorted({self._whole(n * L, ev) for n in (1, 2, 3, 4)})
        if ev is not None and ev < L:
            nrs = [ev]
        for nr in nrs:
            nv = -(-nr // L)
            if ev is not None and nv > 1 and (nv - 1) * L >= ev:
                continue
            budget = max(1, (info.vregs - nv - 2) // nv)
            for mr in range(1, min(budget, 16) + 1):
                if eu is not None and mr > eu:
                    break
                if fit is not None and mr > 1 and not fit(mr, nr):
                    break
                r = block_rate(mr, nr, L, ev, eu, info.masks)
                if r > best + 1e-9:
                    best, arg = r, (mr, nr)
        return arg

    def _task_order_default(self, op, u, eu, order) -> str:
        """``axes`` where the blocks of ``u`` are the tasks and the operand that moves with
        ``u`` is larger than half of L2 (a 1x1 convolution's 2048 x 512 weights: with the
        rows outside, every row streams all of them again), else ``rest``."""
        if order != "uv" or u is None or eu is None:
            return "rest"
        return "axes" if self._row_bytes(op, u) * eu > self.info.l2_bytes // 2 else "rest"

    def _order_default(self, red_op, origin, u, v, nr, mr, ev=None) -> str:
        """``vu`` (a panel of the operand that moves with ``v`` stays in cache while the
        rows go by) unless there is no such operand, or that panel is larger than half of
        L2, or one panel covers the
        whole of ``v`` (a 1x1 convolution's row of 7 or 14 pixels): then the blocks of
        ``u`` are the tasks, not a loop of one panel (DECISIONS.md, "Rules: rows shorter
        than half a vector"); or the panels of all of ``v`` fit in half of L1 while the
        operands that move with both take more than twice L1 over ``u`` (below)."""
        if ev is not None and ev <= nr and u is not None:
            return "uv"
        op = origin or red_op
        panel = self._panel_bytes(op, v, u, nr)
        if panel == 0 and u is not None:
            # no operand moves with v alone (a depthwise convolution: x[b, c, t - k] moves
            # with both): nothing to keep while the rows go by, and with v outside each
            # row of u would be read a block at a time, a page apart
            return "uv"
        eu = self._axis_ext(u) if u is not None else None
        if ev is not None and eu is not None and \
                self._panel_bytes(op, v, u, ev) <= self.info.l1_bytes // 2 and \
                self._both_bytes(op, u, v, eu, ev) > 2 * self.info.l1_bytes:
            # the panels of the whole of v fit in half of L1 (a channels-last depthwise
            # conv1d's w[k, c], 5 x 256): with the rows outside they all stay there while
            # the rows go by; with v outside, each panel walks all the rows of the operand
            # that moves with both (x[b, t + k - 2, c]) a block at a time, a row apart,
            # past what L1 holds (8 x 512 x 256 on the Xeon: 0.70x the trivial schedule,
            # "uv" 1.36x faster; DECISIONS.md, "Rules: small panels, the rows outside")
            return "uv"
        return "vu" if panel <= self.info.l2_bytes // 2 else "uv"

    def _both_bytes(self, op, u, v, eu: int, ev: int) -> int:
        """Bytes of the operands that move with both ``u`` and ``v``, one value each over
        the whole of both (what one pass along ``u`` at a block of ``v`` walks through)."""
        return sum(eu * ev * max(1, _dt.bits(ld.producer.dtype) // 8)
                   for ld in _loads(op.body.source)
                   if any(uses_var(i, u.var) for i in ld.indices) and
                   any(uses_var(i, v.var) for i in ld.indices))

    def _panel_bytes(self, op, v, u, nr) -> int:
        total = 0
        for ld in _loads(op.body.source):
            if _stride_along(ld.indices, v.var) == "bcast":
                continue
            if u is not None and any(uses_var(i, u.var) for i in ld.indices):
                continue
            total += nr * self._reduction_span(op, ld) * 4
        return total

    def _row_bytes(self, op, u) -> int:
        """Bytes one value of ``u`` reads over the whole reduction from the operands that
        move with ``u`` (a block's row of them); 0 without ``u``."""
        if u is None:
            return 0
        return sum(self._reduction_span(op, ld) * 4 for ld in _loads(op.body.source)
                   if any(uses_var(i, u.var) for i in ld.indices))

    def _reduction_span(self, op, ld) -> int:
        """Elements of ``ld`` one output point reads over the whole reduction (a
        symbolic extent counts 256)."""
        n = 1
        for r in op.reduce_axis:
            if any(uses_var(i, r.var) for i in ld.indices):
                n *= self.ext(r.dom.extent) or 256
        return n

    def _pack(self, inner, outer, red_op, v, u, at, block, name, nr):
        """Copy operands into panels laid out for the block's loads:

        * one that moves with ``v`` (not ``u``), strided along ``v`` or a narrow slice of
          long rows: its panel (``nr`` wide), at loop ``at`` of ``outer``, stored ``v``
          innermost;
        * one that moves with ``u`` (not ``v``) with a stride along the reduction (``A[k,
          i]``): its ``mr``-row panel, at the block loop ``block``, stored ``u``
          innermost, so that each reduction step's broadcasts are consecutive."""
        s = self.s
        src = red_op.body.source
        last_r = red_op.reduce_axis[-1].var if red_op.reduce_axis else None
        for t in list(red_op.input_tensors):
            lds = [ld for ld in _loads(src) if ld.producer is t]
            if len(lds) != 1 or not all(isinstance(i, Var) for i in lds[0].indices):
                continue   # read twice, or windowed / offset: not packed
            idx = lds[0].indices
            mv = _stride_along(idx, v.var) != "bcast"
            mu = u is not None and _stride_along(idx, u.var) != "bcast"
            if mv and not mu:
                kind = _stride_along(idx, v.var)
                row = self.ext(t.shape[-1]) or 4096
                eu = self.ext(u.dom.extent) if u is not None else 1
                default = kind == "strided" or (row > 2 * self.L * 4 and (eu or 64) >= 16)
                key, where, lane = v, at, v.var
                if default and idx[-1] is v.var and self._panel_of_its_own(red_op, t, outer, at):
                    default = False
            elif mu and not mv and last_r is not None and \
                    _stride_along(idx, last_r) != "bcast":
                # (an operand the last reduction axis does not index has no dimension
                # to transpose: not packed, whatever the knob says -- fuzz seed 3016817)
                # Where u runs along its rows (A[k, i], u = i) a step's mr broadcasts are
                # consecutive already: the transposed copy only costs (DECISIONS.md,
                # "Rules: A^T B without the transposed copy")
                default = _stride_along(idx, last_r) == "strided" and \
                    _stride_along(idx, u.var) != "unit"
                key, where, lane = u, block, u.var
            else:
                continue
            if where is None or not self.k.choose(f"{name}.pack_{t.name}", [True, False],
                                                  default):
                continue
            c = s.cache_read(t, "local", [inner])
            cs = s[c]
            if key is u:
                self._transposed_copy(cs, idx, last_r)
                continue
            cs.compute_at(outer, where)
            # the dimension indexed by the lane axis innermost in the copy
            vdim = [d for d, i in enumerate(idx) if i is lane]
            ax = list(cs.op.axis)
            if vdim and vdim[0] != len(idx) - 1:
                order = [a for d, a in enumerate(ax) if d != vdim[0]] + [ax[vdim[0]]]
                cs.storage_order(*order)
                cs.reorder(*order)
                e = self.ext(t.shape[vdim[0]])
                if key is v and self._transpose_panel(cs, t, idx, order, red_op, v, nr, name):
                    continue
                if e is not None and key is v:
                    _, vi = cs.split(order[-1], factor=min(self.L, e))
                    cs.vectorize(vi)
            elif key is v:
                e = self.ext(t.shape[-1])
                if e is not None and e >= self.L:
                    _, vi = cs.split(ax[-1], factor=self.L)
                    cs.vectorize(vi)

    def _panel_of_its_own(self, red_op, t, outer, at) -> bool:
        """Whether ``t`` is an elementwise stage that :meth:`_attach_producers` computes
        at the loop ``at`` (the tasks), whose region there is the panel already (a 1x1
        convolution's flattened pixels, ``nr`` columns of them): a packed copy of it
        would copy the same panel once more."""
        pop = t.op
        if not isinstance(pop, ComputeOp) or pop.reduce_axis \
                or id(pop) in self.done or at is None or at not in outer.leaf_iter_vars:
            return False
        pst = self.s[pop]
        if pst.is_output or pst.attach_type != "root":
            return False
        readers = [st for st in self.s.stages if any(x is t for x in st.op.input_tensors)]
        return len(readers) == 1 and readers[0].op is red_op and \
            self._narrows(red_op, t, outer, at)

    def _transpose_panel(self, cs, t, idx, order, red_op, v, nr, name) -> bool:
        """The panel copy ``cs`` (``nr`` wide, stored ``v`` innermost: ``order``; ``t``
        read at ``idx``, its last dimension walked by a reduction axis, so that the copy
        covers it whole) in ``L x L`` tiles, each one ``x86.transpose_f32_LxL`` (rows
        loaded, transposed in registers, stored), where the tiles divide the panel and
        ``t``: instead of a strided vector load (an insert per lane) per ``L`` elements.
        (measurements: benchmarks/DECISIONS.md, "Rules: weight panels transposed in
        registers")"""
        L = self.L
        intrin = self._transpose_intrin(t)
        if intrin is None or not any(idx[-1] is r.var for r in red_op.reduce_axis):
            return False
        exts = [self.ext(x) for x in t.shape]
        ev = self.ext(v.dom.extent)
        # whole tiles: along the reduction (t's last dimension) and across the panel (nr,
        # which must divide v: no ragged last panel); constant strides for the intrinsic
        if any(e is None for e in exts) or exts[-1] % L or ev is None or nr % L or ev % nr:
            return False
        if not self.k.choose(f"{name}.pack_{t.name}.transpose", [True, False], True):
            return False
        ko, oo, ki, oi = cs.tile(order[-2], order[-1], L, L)
        cs.tensorize(ki, intrin)
        return True

    def _transpose_intrin(self, t):
        """The target's ``L x L`` transpose intrinsic for tensor ``t``, or None."""
        return transpose_intrin(self.info.target, self.L, t.dtype)

    def target_intrin(self, name: str):
        """The built-in tensor intrinsic ``name`` where the target has it, else None."""
        return next((x for x in tensor_intrins_for(self.info.target) if x.name == name), None)

    def _transposed_copy(self, cs, idx, r):
        """A copy of a whole operand at the root, stored with the dimension the
        reduction ``r`` walks innermost (``A[k, i]`` becomes rows of ``k``), made in
        16 x 16 tiles (both sides stay in L1) by parallel tasks; in ``L x L`` tiles, each
        one ``x86.transpose_f32_LxL``, where those divide both dimensions (see
        :meth:`_transpose_panel`)."""
        ax = list(cs.op.axis)
        rd = [d for d, i in enumerate(idx) if i is r][0]
        order = [a for d, a in enumerate(ax) if d != rd] + [ax[rd]]
        cs.storage_order(*order)
        inner_d = len(ax) - 1
        if rd == inner_d:
            return
        e_r, e_i = self.ext(ax[rd].dom.extent), self.ext(ax[inner_d].dom.extent)
        intrin = self._transpose_intrin(cs.op.output(0))
        if intrin is not None and e_r is not None and e_i is not None and \
                not e_r % self.L and not e_i % self.L and \
                self.k.choose(f"{cs.op.name}.transpose", [True, False], True):
            t = self.L
        else:
            intrin, t = None, 16
        ro, io, ri, ii = cs.tile(ax[rd], ax[inner_d], t, t)
        cs.reorder(*[a for d, a in enumerate(ax) if d not in (rd, inner_d)], io, ro, ii, ri)
        if intrin is not None:
            cs.tensorize(ii, intrin)
        else:
            cs.unroll(ii)
        lead = [a for d, a in enumerate(ax) if d not in (rd, inner_d)] + [io]
        self.parallel(cs, lead, [self.ext(a.dom.extent) for a in lead[:-1]] + [
            -(-e_i // t) if e_i is not None else None])

    def _attach_producers(self, red_op, outer, task_loop, block_loops=()):
        """Root elementwise stages read by the reduction (a padded input): computed at
        the task loop (the region one task reads), vectorized along their last axis.  A
        padding (knob ``<stage>.inline_padding``) may instead be inlined into the
        reduction, with ``pragma partition`` on ``block_loops`` (``outer``'s serial
        loops over blocks): the blocks inside the image then read the input with no
        test and no copy, the border blocks with the padding's test.  The default where
        no output axis reuses the padded input (a depthwise convolution); a convolution
        over input channels keeps its copy per task, which every output channel reads
        (measurements: benchmarks/DECISIONS.md, "Rules: an inlined padding")."""
        s = self.s
        for t in red_op.input_tensors:
            pop = t.op
            if not isinstance(pop, ComputeOp) or id(pop) in self.done:
                continue
            pst = s[pop]
            if pst.is_output or pst.attach_type != "root" or pop.reduce_axis:
                continue
            readers = [st for st in s.stages if any(x is t for x in st.op.input_tensors)]
            if len(readers) != 1 or not self._inside(readers[0], outer, task_loop):
                # read through a copy made elsewhere (a transposed copy at the root, fuzz
                # seed 3055292): computed at the task loop it would not be ready for it
                continue
            if task_loop is not None and not self._narrows(red_op, t, outer, task_loop):
                # every task reads all of it (the A of a GEMM whose tasks are column
                # blocks): at the task loop it would be computed once per task
                continue
            if block_loops and _is_padding(pop) and self.k.choose(
                    f"{pop.name}.inline_padding", [True, False],
                    not _reused_across_outputs(red_op, t)):
                pst.compute_inline()
                for lp in block_loops:
                    outer.pragma(lp, "partition")
                self.done.add(id(pop))
                continue
            if self.k.choose(f"at_task.{pop.name}", [True, False], True) and task_loop is not None:
                pst.compute_at(outer, task_loop)
                last = pst.op.axis[-1]
                e = self.ext(last.dom.extent)
                if e is not None and e >= self.L:
                    _, vi = pst.split(last, factor=self.L)
                    pst.vectorize(vi)
                self.done.add(id(pop))

    @staticmethod
    def _narrows(red_op, t, outer: Stage, loop) -> bool:
        """Whether the region of ``t`` that ``red_op`` reads depends on ``outer``'s loop
        ``loop``: one of the output axes the loop is made of indexes ``t``."""
        parents = {}
        for rel in outer.relations:
            if hasattr(rel, "parent"):
                parents[rel.outer] = parents[rel.inner] = [rel.parent]
            else:
                parents[rel.fused] = [rel.outer, rel.inner]
        roots, todo = set(), [loop]
        while todo:
            iv = todo.pop()
            if iv in parents:
                todo.extend(parents[iv])
            else:
                roots.add(iv)
        # (an axis of extent 1 narrows nothing: batch_matmul's batch of one reads its
        # weights at [b, i, k] too, and every task would copy all of them)
        dims = [d for d, iv in enumerate(outer.op.axis) if iv in roots and
                _cint(iv.dom.extent) != 1]
        nr_, no = len(red_op.axis), len(outer.op.axis)
        if no == nr_ + 1 and nr_ >= 1:
            # an epilogue over the reduction's last axis unflattened (a plane of the
            # rules' flat epilogues): its last two axes are that one
            dims = [min(d, nr_ - 1) for d in dims]
        elif nr_ != no:
            return True  # no positional correspondence to check: keep the old behaviour
        vars_ = {red_op.axis[d].var for d in dims}
        for ld in collect(red_op.body, lambda n: isinstance(n, ProducerLoad) and n.producer is t):
            if any(uses_var(i, v) for i in ld.indices for v in vars_):
                return True
        return False

    @staticmethod
    def _inside(st: Stage, outer: Stage, loop) -> bool:
        """Whether stage ``st`` runs inside ``outer``'s loop ``loop``: it is ``outer``, or
        computed at that loop or one inside it."""
        if st is outer:
            return True
        if loop is None or st.attach_type != "scope" or st.attach_stage is not outer:
            return False
        leaves = outer.leaf_iter_vars
        return (st.attach_ivar in leaves and loop in leaves
                and leaves.index(st.attach_ivar) >= leaves.index(loop))


def block_rate(mr: int, nr: int, L: int, ev: Optional[int], eu: Optional[int],
               masks: bool = True) -> float:
    """Modelled useful FMAs per cycle of an ``mr x nr`` register block (two FMA and two
    load ports), times the fraction of lanes and rows that do useful work at the edges.
    An FMA's latency of 4 cycles needs 8 independent accumulators in theory; a step takes
    at least 6 cycles here, so that blocks of 12 accumulators win over those of 8 (BLIS's
    6 x 16 on AVX2, which beat 4 x 16 and 12 x 8 on a 3x3 conv over rows of 56).
    (measurements: benchmarks/DECISIONS.md, "Rules: at least 6 cycles a step")"""
    nv = -(-nr // L)
    cycles = max(mr * nv / 2.0, (mr + nv) / 2.0, 6.0)
    # (ties between blocks that all keep the FMA ports busy: fewer loads per FMA leave
    # the caches more room, and a narrower panel keeps more reduction steps in L1, so
    # 12 x 2 vectors wins over 6 x 4)
    # (measurements: benchmarks/DECISIONS.md, "Rules: ties between busy blocks")
    rate = mr * nv / cycles * (1.0 - 0.05 * (mr + nv) / (mr * nv) - 0.04 * nv)
    if ev is not None:
        if nr >= L and ev % nr and ev % nr % L and not masks:
            # without AVX-512's masks the guarded lanes of a tail that is not whole
            # vectors run one by one, several times slower
            # (measurements: benchmarks/DECISIONS.md, "Rules: a guarded tail without masks")
            rate *= 0.25 * ev / (nv * L * -(-ev // nr))
        elif nr >= L and ev % nr and ev % L == 0:
            # a tail of whole vectors: the last block is a narrower one of its own, at a
            # lower rate, not a block of wasted lanes (the 56-wide rows above: 3 blocks
            # of 16 and one of 8)
            rate *= (ev - ev % nr * 0.15) / ev
        else:
            rate *= ev / (nv * L * -(-ev // nr) if nr >= L else max(ev, 1))
        if nr < L:
            rate *= nr / L
    if eu is not None:
        tail = eu % mr
        full = eu // mr
        # a tail block runs its own (smaller) kernel: rows wasted only by its lower rate
        rate *= (full * mr + tail * (0.7 if tail else 0)) / eu if eu else 1.0
    return rate

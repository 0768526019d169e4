"""Expressions in the LLVM function emitter (:class:`_ExprEmitter`, a part of
:class:`~tecomp.codegen.llvm.emitter._FnEmitter`): values in a lane context (broadcasts,
ramps, ``map1`` / ``map2`` over uniform or vector values, masks), integer helpers that
fold constants and keep a value's affine structure, and the constant, variable,
arithmetic, comparison, logic, ``Select`` and ``Cast`` nodes (integer division that never
traps, float min/max, lazy selects, float -> int conversion).  The rules: "Numerics" and
"Floating point" in the docstring of :mod:`tecomp.codegen.llvm.emitter`; the math
functions (``Call``) are in :mod:`tecomp.codegen.llvm.emit_math`.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...errors import BuildError, InternalError
from ...ir import dtype as _dt
from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, BufferLoad, Call, Cast, CmpOp, Const, Expr, Mul, Or, Select, Var,
)
from ...ir.functor import children, collect
from .intrinsics import _bf16_to_f32, _f32_to_bf16, _f64_to_f16, _Freeze
from .values import (
    _F16, _F32, _I1, _I32, _I64, _REG, Val, _is_const, _lit, _operand_key, _poison, _splat,
    _splat_const, _unsigned, _with_lanes, _wrap_signed,
)


#: a lazy vector select whose sides have more nodes than this runs them masked only:
#: its fast path (the side every lane takes, unmasked) copies each side once more, and a
#: chain of selects, each holding the ones below, would grow as the square of its depth
SELECT_FAST_PATH_NODES = 64

#: whether a select operand whose loads are at places the condition loads (an ELU's
#: ``if_then_else(x > 0, x, expm1(x))``, an argmax's index accumulator beside its value)
#: is evaluated on every lane, the select one blend (:meth:`_ExprEmitter._speculable`).
#: ELU of 256K float32, one thread, under load: 0.107 -> 0.072 ms.  Off: only operands
#: the condition itself evaluates
SPECULATE_CONDITION_LOADS = True

#: a vector select on an or of two float compares, both operands evaluated, is emitted
#: as the select on the and of their negations (a NaN-exact negation: ``not (a >= b)``
#: is ``a < b`` or unordered), its operands swapped: on AVX-512 an and of two compares is
#: one compare under the other's mask, where the or needed a ``korw``.  The in-order
#: update of an argmax over the middle axis (``keep = acc >= x or acc != acc``): 6 -> 5
#: instructions a vector, in cache 1.09x faster (one thread, Zen 4, under load).  Off:
#: the or as written
INVERT_OR_SELECTS = True

#: a float32 ``x * sigmoid(x)`` (``tecomp.nn.silu``) computed as ``x / (1 + exp(-x))``:
#: the same exp, one multiply fewer a vector and one rounding fewer (the quotient is
#: rounded once, where ``x`` times the rounded ``1 / (1 + exp(-x))`` rounded twice).  In
#: cache 1.04-1.16x faster on Zen 4 (benchmarks/DECISIONS.md, "silu: x / (1 + exp(-x))").
#: Off: the product as written (the A/B switch of ``benchmarks/reductions.py
#: --silu-off``)
SILU_DIVIDES = True

#: a float32 ``select(x > c, x, softplus(x))`` with ``c >= 16`` (``tecomp.nn.softplus``
#: with ``beta = 1``, torch's ``threshold = 20``) computed as ``softplus(x)`` alone: every
#: CPU form of float32 ``softplus`` is ``max(x, 0) + g`` with ``g <= log1p(exp(-15.5))``
#: (1.9e-7, below half an ulp of 16) for ``x >= 16``, so it returns ``x`` itself there
#: (``+inf`` too; NaN fails the compare either way): the same bits without the compare
#: and the blend (benchmarks/DECISIONS.md, "softplus: its threshold's select dropped").
#: Off: the select as written (``benchmarks/reductions.py --math31-off``)
SOFTPLUS_DROPS_THRESHOLD = True

#: the least threshold ``c`` for :data:`SOFTPLUS_DROPS_THRESHOLD`
_SOFTPLUS_IS_X_FROM = 16.0

#: a masked vector select whose true side is a load alone and whose false side a
#: constant (a padded window's tap: ``select(x >= 1, X[.., x - 1], 0)`` or ``-inf``),
#: outside any other mask: the load's masked-off lanes filled with the constant (the
#: ``llvm.masked.load`` / ``gather``'s pass-through), no select after it.  LLVM dropped
#: the load's zero pass-through for the select's lanes and kept the select, as an and
#: (``vandps``) after each ``{z}``-masked load of the data: avg_pool2d 3x3/1 p1's inner
#: row 6 of its ~55 instructions.  False: the load filled with zeros and selected, as
#: before (an A/B switch; benchmarks/DECISIONS.md, "Code generator (emit_expr.
#: FILL_MASKED_LOADS): a padded tap's masked load filled with the select's constant")
FILL_MASKED_LOADS = True


def _filled_load(x, mask, fill) -> bool:
    """Whether ``x`` is one ``llvm.masked.load`` or ``llvm.masked.gather`` under
    ``mask`` whose masked-off lanes are ``fill`` (:data:`FILL_MASKED_LOADS`)."""
    return (isinstance(x, ir.CallInstr) and len(x.args) == 4
            and x.callee.name.startswith(("llvm.masked.load", "llvm.masked.gather"))
            and x.args[2] is mask and x.args[3] is fill)


def _small(e) -> bool:
    """Whether ``e`` has at most :data:`SELECT_FAST_PATH_NODES` nodes (counted without
    recursion, stopping past the limit)."""
    n, todo = 0, [e]
    while todo:
        n += 1
        if n > SELECT_FAST_PATH_NODES:
            return False
        todo.extend(children(todo.pop()))
    return True


#: per LLVM float type, ``(k, top)`` of :meth:`_ExprEmitter._reciprocal_div`: divisors
#: with ``|c|`` outside ``[2**-top, 2**top]`` (where ``1 / c`` is not a normal number) are
#: scaled by ``2**k`` or ``2**-k`` first (into normal numbers whose reciprocal is normal)
_RECIPROCAL_SCALE = {"float": (64, 126), "double": (512, 1022)}


def _silu_operand(e: Mul):
    """``x`` where ``e`` is a float32 ``x * sigmoid(x)`` (either order), else None."""
    if e.dtype != "float32":
        return None
    for x, s in ((e.a, e.b), (e.b, e.a)):
        if isinstance(s, Call) and s.op == "sigmoid" and len(s.args) == 1 and s.args[0] == x:
            return x
    return None


def _softplus_threshold(e: Select) -> bool:
    """Whether ``e`` is a float32 ``select(x > c, x, softplus(x))`` (or ``c < x``) with a
    constant ``c >= 16`` (:data:`SOFTPLUS_DROPS_THRESHOLD`)."""
    cond, f = e.cond, e.false_value
    if isinstance(cond, GT) and isinstance(cond.b, Const):
        x, c = cond.a, cond.b.value
    elif isinstance(cond, LT) and isinstance(cond.a, Const):
        x, c = cond.b, cond.a.value
    else:
        return False
    return (x.dtype == "float32" and e.true_value == x and isinstance(f, Call)
            and f.op == "softplus" and len(f.args) == 1 and f.args[0] == x
            and c >= _SOFTPLUS_IS_X_FROM)


class _ExprEmitter:
    """The part of :class:`~tecomp.codegen.llvm.emitter._FnEmitter` that emits expressions
    (the state it works on: ``_FnEmitter.__init__``)."""

    # -- lane helpers ------------------------------------------------------------------------
    def vtype(self, scalar_ty):
        return ir.VectorType(scalar_ty, self.lanes)

    def bcast(self, s):
        """Broadcast the scalar ``s`` to a vector of ``self.lanes``."""
        vty = self.vtype(s.type)
        if isinstance(s, ir.Constant) and not isinstance(s.type, ir.PointerType):
            return _splat_const(vty, s)
        b = self.b
        v = b.insert_element(_poison(vty), s, ir.Constant(_I32, 0))
        return b.shuffle_vector(v, _poison(vty),
                                _lit(ir.VectorType(_I32, self.lanes), "zeroinitializer"))

    def vec(self, val: Val):
        """Materialise ``val`` as a vector of ``self.lanes``."""
        if val.v is not None:
            return val.v
        bc = self.bcast(val.s)
        if val.step == 0:
            return bc
        ty = val.s.type
        steps = ir.Constant(self.vtype(ty), [ir.Constant(ty, _wrap_signed(l * val.step, ty.width))
                                             for l in range(self.lanes)])
        return self.b.add(bc, steps)

    def lanes_iota(self):
        return ir.Constant(ir.VectorType(_I64, self.lanes),
                           [ir.Constant(_I64, l) for l in range(self.lanes)])

    def map1(self, val: Val, fn) -> Val:
        if val.uniform:
            return Val(fn(val.s))
        return Val(v=fn(self.vec(val)))

    def map2(self, a: Val, c: Val, fn) -> Val:
        if a.uniform and c.uniform:
            return Val(fn(a.s, c.s))
        return Val(v=fn(self.vec(a), self.vec(c)))

    def any_lane(self, mask_vec):
        """i1: is any lane of the <L x i1> ``mask_vec`` set?"""
        b = self.b
        bits = b.bitcast(mask_vec, ir.IntType(self.lanes))
        return b.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(self.lanes), 0))

    def and_mask(self, m):
        """The current mask and ``m`` (a lane vector of i1)."""
        if self.mask is None:
            return m
        return self.b.and_(self.mask, m)

    def all_true(self):
        return ir.Constant(ir.VectorType(_I1, self.lanes), [ir.Constant(_I1, 1)] * self.lanes)

    # -- integer helpers with folding --------------------------------------------------------
    def _int_op(self, op: str, x, y):
        """``x op y`` emitted once per basic block: the unrolled bodies index every load
        with the same few products and sums, and each copy is text for llvmlite to print,
        LLVM to parse and its passes to fold again.  A value from the current block
        dominates the builder's position (it only ever appends at a block's end)."""
        blk = self.b.block
        key = (op, _operand_key(x), _operand_key(y))
        hit = self._int_cse.get(key)
        if hit is not None and hit[0] is blk:
            return hit[1]
        r = getattr(self.b, op)(x, y)
        self._int_cse[key] = (blk, r)
        return r

    def iadd(self, x, y):
        if _is_const(x) and _is_const(y):
            return ir.Constant(x.type, _wrap_signed(x.constant + y.constant, x.type.width))
        if _is_const(x) and x.constant == 0:
            return y
        if _is_const(y) and y.constant == 0:
            return x
        return self._int_op("add", x, y)

    def isub(self, x, y):
        if _is_const(x) and _is_const(y):
            return ir.Constant(x.type, _wrap_signed(x.constant - y.constant, x.type.width))
        if _is_const(y) and y.constant == 0:
            return x
        return self._int_op("sub", x, y)

    def imul(self, x, y):
        if _is_const(x) and _is_const(y):
            return ir.Constant(x.type, _wrap_signed(x.constant * y.constant, x.type.width))
        if _is_const(x) and x.constant == 1:
            return y
        if _is_const(y) and y.constant == 1:
            return x
        if (_is_const(x) and x.constant == 0) or (_is_const(y) and y.constant == 0):
            return ir.Constant(x.type, 0)
        return self._int_op("mul", x, y)

    def vadd(self, a: Val, c: Val, sub: bool = False) -> Val:
        """Integer add/sub keeping affine structure."""
        if a.lane_affine and c.lane_affine:
            s = self.isub(a.s, c.s) if sub else self.iadd(a.s, c.s)
            return Val(s, a.step - c.step if sub else a.step + c.step)
        f = self.b.sub if sub else self.b.add
        return Val(v=f(self.vec(a), self.vec(c)))

    def vmul(self, a: Val, c: Val) -> Val:
        """Integer multiply keeping affine structure when one side is a constant."""
        if a.uniform and c.uniform:
            return Val(self.imul(a.s, c.s))
        if a.lane_affine and c.lane_affine:
            if c.uniform and _is_const(c.s):
                return Val(self.imul(a.s, c.s), a.step * c.s.constant)
            if a.uniform and _is_const(a.s):
                return Val(self.imul(a.s, c.s), c.step * a.s.constant)
        return Val(v=self.b.mul(self.vec(a), self.vec(c)))

    def int_convert(self, val: Val, src: str, dst: str) -> Val:
        """Integer -> integer conversion keeping affine structure (see the docstring)."""
        if src == dst:
            return val
        sb = 1 if src == "bool" else _dt.bits(src)
        db = 1 if dst == "bool" else _dt.bits(dst)
        ty = _REG[dst]
        b = self.b
        if dst == "bool":
            return self.map1(val, lambda x: b.icmp_unsigned("!=", x, _splat(x.type, 0)))
        if db == sb:
            return val
        if val.v is None and _is_const(val.s) and (val.step == 0 or not _unsigned(src)):
            # fold (unrolled and widened loops bind constants), as the affine case below
            c = val.s.constant
            if db > sb and _unsigned(src):
                c &= (1 << sb) - 1
            return Val(ir.Constant(ty, _wrap_signed(c, db)), val.step)
        if db < sb:
            f = lambda x: b.trunc(x, _with_lanes(ty, x.type))  # noqa: E731
        elif _unsigned(src):
            f = lambda x: b.zext(x, _with_lanes(ty, x.type))  # noqa: E731
        else:
            f = lambda x: b.sext(x, _with_lanes(ty, x.type))  # noqa: E731
        if val.v is None and val.step != 0 and not _unsigned(src):
            return Val(f(val.s), val.step)
        return self.map1(val, f)

    # -- expressions -------------------------------------------------------------------------
    def e_const(self, e: Const) -> Val:
        return Val(self.const(e.dtype, e.value))

    @staticmethod
    def const(dtype: str, value):
        ty = _REG[dtype]
        if dtype == "bool":
            return ir.Constant(_I1, 1 if value else 0)
        if _dt.is_float(dtype):
            v = float(value)
            if _dt.is_storage_float(dtype):
                v = _dt.round_storage(dtype, v)
            return ir.Constant(ty, v)
        return ir.Constant(ty, _wrap_signed(int(value), ty.width))

    def e_var(self, e: Var) -> Val:
        v = self.env.get(e)
        if v is None:
            raise BuildError(f"variable `{e.name}` is used outside the scope that defines it")
        return v

    def _operands(self, e):
        if e.a.dtype != e.b.dtype:
            raise InternalError(f"operands of {type(e).__name__} have dtypes {e.a.dtype} and "
                                f"{e.b.dtype}")
        return self.expr(e.a), self.expr(e.b), e.a.dtype

    def e_add(self, e):
        a, c, dt = self._operands(e)
        if _dt.is_float(dt):
            return self.map2(a, c, lambda x, y: self.b.fadd(x, y, flags=self.mb.fp_flags))
        return self.vadd(a, c)

    def e_sub(self, e):
        a, c, dt = self._operands(e)
        if _dt.is_float(dt):
            return self.map2(a, c, lambda x, y: self.b.fsub(x, y, flags=self.mb.fp_flags))
        return self.vadd(a, c, sub=True)

    def e_mul(self, e):
        x = _silu_operand(e) if SILU_DIVIDES else None
        if x is not None:
            return self._silu(self.expr(x))
        a, c, dt = self._operands(e)
        if _dt.is_float(dt):
            return self.map2(a, c, lambda x, y: self.b.fmul(x, y, flags=self.mb.fp_flags))
        return self.vmul(a, c)

    def _silu(self, x: Val) -> Val:
        """``x / (1 + exp(-x))`` of float32 ``x`` (:data:`SILU_DIVIDES`), with the exp of
        ``tc.exp``: ``x = -inf`` gives NaN and ``x <= -88.73`` (where ``exp(-x)``
        overflows) ``-0``, as the product did."""
        b = self.b
        return self.map1(x, lambda v: b.fdiv(v, b.fadd(
            _splat(v.type, 1.0), self.exp_neg(v))))

    def e_div(self, e):
        a, c, dt = self._operands(e)
        if not _dt.is_float(dt):
            raise InternalError(f"true division of {dt} operands (Div is for floats)")
        if self.mb.div_flags and c.uniform:
            return self._reciprocal_div(a, c.s)
        return self.map2(a, c, self.b.fdiv)

    def _reciprocal_div(self, a: Val, c) -> Val:
        """``a / c`` for a lane-invariant float ``c`` under ``pragma fp_reciprocal``:
        ``(a * r) * m`` with ``r = 1 / (c * m)`` and ``m`` a power of two, 1 where ``1 /
        c`` is a normal number, ``2**k`` for a subnormal ``c`` (``1 / c`` would overflow
        or round coarsely: ``0 / c`` would be ``0 * inf``, NaN), ``2**-k`` for ``|c|``
        above ``2**(emax - 1)`` (``1 / c`` subnormal).  ``r`` and ``m`` depend on ``c``
        only (LLVM hoists them out of the loops ``c`` does not change in); each element
        costs two multiplies, and every special value (``c`` zero of either sign, inf,
        NaN, subnormal; ``a`` zero, inf, NaN) gives the division's result."""
        b = self.b
        ty = c.type
        k, top = _RECIPROCAL_SCALE[str(ty)]
        m = b.call(self.mb.intrinsic("llvm.fabs", ty, [ty], [ty]), [c])
        tiny = b.fcmp_ordered("<", m, ir.Constant(ty, 2.0 ** (-top)))
        huge = b.fcmp_ordered(">", m, ir.Constant(ty, 2.0 ** top))
        scale = b.select(tiny, ir.Constant(ty, 2.0 ** k),
                         b.select(huge, ir.Constant(ty, 2.0 ** -k), ir.Constant(ty, 1.0)))
        r = b.fdiv(ir.Constant(ty, 1.0), b.fmul(c, scale))
        return self.map2(self.map2(a, Val(r), b.fmul), Val(scale), b.fmul)

    def _intdiv(self, e, kind: str) -> Val:
        a, c, dt = self._operands(e)
        if _dt.is_float(dt) or dt == "bool":
            raise InternalError(f"{type(e).__name__} of {dt} operands")
        uns = _unsigned(dt)
        b = self.b
        cconst = c.s.constant if c.uniform and _is_const(c.s) else None
        needs_guard = cconst is None or cconst == 0 or (cconst == -1 and not uns)

        def fn(x, y):
            ty = x.type
            zero = None
            ys = y
            if needs_guard:
                zero = b.icmp_signed("==", y, _splat(ty, 0))
                bad = zero
                if not uns:
                    width = (ty.element if isinstance(ty, ir.VectorType) else ty).width
                    ovf = b.and_(b.icmp_signed("==", y, _splat(ty, -1)),
                                 b.icmp_signed("==", x, _splat(ty, -(1 << (width - 1)))))
                    bad = b.or_(zero, ovf)
                ys = b.select(bad, _splat(ty, 1), y)
            if uns:
                q, r = b.udiv(x, ys), b.urem(x, ys)
            else:
                q, r = b.sdiv(x, ys), b.srem(x, ys)
            if kind == "truncdiv":
                res = q
            elif kind == "truncmod":
                res = r
            else:
                if uns:
                    res = q if kind == "floordiv" else r
                else:
                    # floor: adjust when the remainder is non-zero and its sign differs
                    adj = b.and_(b.icmp_signed("!=", r, _splat(ty, 0)),
                                 b.icmp_signed("<", b.xor(r, ys), _splat(ty, 0)))
                    if kind == "floordiv":
                        res = b.sub(q, b.zext(adj, ty))
                    else:
                        res = b.add(r, b.select(adj, ys, _splat(ty, 0)))
            if zero is not None:
                res = b.select(zero, _splat(ty, 0), res)
            return res

        return self.map2(a, c, fn)

    def e_floordiv(self, e):
        return self._intdiv(e, "floordiv")

    def e_floormod(self, e):
        return self._intdiv(e, "floormod")

    def e_truncdiv(self, e):
        return self._intdiv(e, "truncdiv")

    def e_truncmod(self, e):
        return self._intdiv(e, "truncmod")

    def _minmax_pair(self, e, is_min: bool) -> Val:
        """``max(max(a, v1), v2)`` (or ``min``) of float vectors, a node that
        ``_ControlEmitter._minmax_chain`` marked: the target's own max of ``v1`` into ``a``
        and of ``v2`` into that (``v > a ? v : a``, which keeps ``a`` when either is NaN:
        a NaN accumulator stays), then ``v1 + v2`` (a NaN) in the lanes where ``v1`` or
        ``v2`` is NaN: one unordered compare into a mask for the two values, where
        :meth:`_minmax` has one per value (a column max's rows: 2 mask writes of 4)."""
        b = self.b
        op = "min" if is_min else "max"
        a, v1, v2 = self.expr(e.a.a), self.expr(e.a.b), self.expr(e.b)
        x, y1, y2 = self.vec(a), self.vec(v1), self.vec(v2)
        hw = self.policy.vector_op(op, x.type)
        if hw is None:
            r = x
            for y in (y1, y2):
                r = b.select(b.fcmp_ordered("<" if is_min else ">", y, r), y, r)
        else:
            r = hw(b, self.mb, y2, hw(b, self.mb, y1, x))
        nan = b.fadd(y1, y2, flags=self.mb.fp_flags)
        return Val(v=b.select(b.fcmp_unordered("uno", y1, y2), nan, r))

    def _minmax(self, e, is_min: bool) -> Val:
        if id(e) in self._minmax_pairs and self.lanes > 1:
            return self._minmax_pair(e, is_min)
        a, c, dt = self._operands(e)
        b = self.b
        if _dt.is_float(dt):
            # where the policy says so (x86), vectors, and scalars in a kernel the schedule
            # vectorized: ``y > x ? y : x`` as the target's own max (one vmaxps/vmaxss,
            # which gives x when either is NaN), then y where y is NaN.  NaN propagates,
            # the zero of max(0.0, -0.0) is unspecified (see ir.expr.Max).  A reduction's
            # update is ``max(acc, v)``: the accumulator goes through the max alone (one
            # vmaxps masked by v's NaN test, done beside it), 4 cycles a step where a
            # compare-select on it took 6 and llvm.maximum (which also orders -0 below +0)
            # more.  Other scalars use llvm.maximum: LLVM's loop vectorizer (it runs on
            # modules that tecomp did not vectorize) never returned on a max reduction
            # written as a compare-select (a loop of ``acc = max(acc, alpha + x[k % 3])``).
            select = self.policy.vector_minmax_select
            op = "min" if is_min else "max"

            def fn(x, y):
                vector = isinstance(x.type, ir.VectorType)
                hw = self.policy.vector_op(op, x.type) if select else None
                if not (vector and select) and not (hw is not None
                                                    and self.mb.has_vectorized_loop):
                    name = "llvm.minimum" if is_min else "llvm.maximum"
                    return b.call(self.mb.intrinsic(name, x.type, [x.type, x.type], [x.type]),
                                  [x, y])
                if hw is not None:
                    r = hw(b, self.mb, y, x)
                else:
                    r = b.select(b.fcmp_ordered("<" if is_min else ">", y, x), y, x)
                return b.select(b.fcmp_ordered("ord", y, y), r, y)
        else:
            cmp = b.icmp_unsigned if _unsigned(dt) else b.icmp_signed

            def fn(x, y):
                return b.select(cmp("<" if is_min else ">", x, y), x, y)
        return self.map2(a, c, fn)

    def e_min(self, e):
        return self._minmax(e, True)

    def e_max(self, e):
        return self._minmax(e, False)

    _CMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}

    def e_cmp(self, e: CmpOp) -> Val:
        a, c, dt = self._operands(e)
        op = self._CMP[type(e)]
        b = self.b
        if _dt.is_float(dt):
            if op == "!=":
                return self.map2(a, c, lambda x, y: b.fcmp_unordered("!=", x, y))
            return self.map2(a, c, lambda x, y: b.fcmp_ordered(op, x, y))
        cmp = b.icmp_unsigned if _unsigned(dt) else b.icmp_signed
        return self.map2(a, c, lambda x, y: cmp(op, x, y))

    def e_and(self, e):
        return self.map2(self.expr(e.a), self.expr(e.b), self.b.and_)

    def e_or(self, e):
        return self.map2(self.expr(e.a), self.expr(e.b), self.b.or_)

    def e_not(self, e):
        return self.map1(self.expr(e.a), lambda x: self.b.xor(x, _splat(x.type, 1)))

    def e_select(self, e: Select) -> Val:
        if SOFTPLUS_DROPS_THRESHOLD and _softplus_threshold(e):
            return self.expr(e.false_value)
        cond = self.expr(e.cond)
        if cond.uniform and isinstance(cond.s, ir.Constant):
            return self.expr(e.true_value if cond.s.constant else e.false_value)
        safe = self._speculable((e.true_value, e.false_value), e.cond)
        b = self.b
        if cond.uniform:
            if safe:
                t, f = self.expr(e.true_value), self.expr(e.false_value)
                return self.map2(t, f, lambda x, y: b.select(cond.s, x, y))
            return self.if_value(cond.s, lambda: self.expr(e.true_value),
                                 lambda: self.expr(e.false_value))
        if safe:
            inv = self._inverted_or(e.cond)
            t, f = self.expr(e.true_value), self.expr(e.false_value)
            if inv is not None:
                return Val(v=b.select(inv, self.vec(f), self.vec(t)))
            return Val(v=b.select(self.vec(cond), self.vec(t), self.vec(f)))
        c = self.vec(cond)

        def masked():
            old = self.mask
            fill = self._load_fill(e)
            try:
                self.mask = m = self.and_mask(c)
                self.fill = fill
                t = self.expr(e.true_value)
                self.fill = None
                if fill is not None and _filled_load(t.v, m, fill):
                    return t
                self.mask = old
                self.mask = self.and_mask(b.xor(c, self.all_true()))
                f = self.expr(e.false_value)
            finally:
                self.mask, self.fill = old, None
            return Val(v=b.select(c, self.vec(t), self.vec(f)))

        if self.mask is not None or not (_small(e.true_value) and _small(e.false_value)):
            return masked()
        # where every lane takes the same side (a concatenation's inputs, a padded read
        # away from the edge) that side alone runs, unmasked: masked loads are slow on
        # AVX2 (bytes go one by one); the lanes that differ take the masked path
        # (inside it a mask is set, so nested selects add one copy each, not three)
        ity = ir.IntType(self.lanes)
        bits = b.bitcast(c, ity)
        all_true = b.icmp_unsigned("==", bits, ir.Constant(ity, (1 << self.lanes) - 1))
        none_true = b.icmp_unsigned("==", bits, ir.Constant(ity, 0))
        return self.if_value(all_true, lambda: self.expr(e.true_value), lambda: self.if_value(
            none_true, lambda: self.expr(e.false_value), masked, name="sel.none"),
            name="sel.all")

    def _load_fill(self, e: Select):
        """The constant vector that the masked load of ``e``'s true side fills its
        masked-off lanes with in place of the select (:data:`FILL_MASKED_LOADS`): ``e``'s
        false side, a constant, where the true side is a load of a float buffer whose
        indices load nothing and no outer mask is set; else None."""
        t, f = e.true_value, e.false_value
        if (not FILL_MASKED_LOADS or self.mask is not None or not isinstance(t, BufferLoad)
                or not isinstance(f, Const) or t.dtype not in ("float32", "float64")
                or f.dtype != t.dtype
                or any(collect(i, lambda n: isinstance(n, BufferLoad)) for i in t.indices)):
            return None
        v = self.vec(self.expr(f))
        return v if isinstance(v, ir.Constant) else None

    #: each compare's negation (an ordered compare's is unordered, ``!=``'s ordered)
    _NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

    def _inverted_or(self, cond):
        """The vector of ``not cond`` as the and of two negated compares where ``cond``
        is an or of two float compares (:data:`INVERT_OR_SELECTS`), else None."""
        if not INVERT_OR_SELECTS or not isinstance(cond, Or) or not all(
                isinstance(p, CmpOp) and _dt.is_float(p.a.dtype) for p in (cond.a, cond.b)):
            return None
        b = self.b
        parts = []
        for p in (cond.a, cond.b):
            x, y, _ = self._operands(p)
            neg = self._NEGATED[self._CMP[type(p)]]
            fcmp = b.fcmp_ordered if neg == "==" else b.fcmp_unordered
            parts.append(self.vec(self.map2(x, y, lambda u, v, fcmp=fcmp, neg=neg:
                                            fcmp(neg, u, v))))
        return b.and_(parts[0], parts[1])

    def _speculable(self, operands, cond) -> bool:
        """Whether the select ``operands`` may be evaluated whatever the condition: each
        loads nothing (a load may be out of bounds where the condition is false: a
        padded read), or only what the condition itself loads (a max reduction's
        ``select(a > b, a, b)``, an ELU's ``select(x > 0, x, expm1(x))``; integer
        division never traps).  Both operands speculated, a vector select
        is one blend instead of three branches and masked loads: the softmax's row max
        ran at a third of the speed that way (benchmarks/DECISIONS.md, "Code generator:
        select operands the condition evaluates")."""
        loading = [x for x in operands if self.mb.has_load(x)]
        if not loading:
            return True
        try:
            evaluated = _unconditional(cond)
            if all(x in evaluated for x in loading):
                return True
            if not SPECULATE_CONDITION_LOADS:
                return False
            # (each load of an operand at a place the condition loads: an ELU's
            # ``expm1(x)`` where the condition reads ``x``, an argmax's index accumulator
            # read at the address where the condition reads the value accumulator; a
            # load at the place of one the condition evaluates is in bounds, the buffers
            # having one shape)
            places = {_place(x) for x in evaluated if isinstance(x, BufferLoad)}
            return all(x in evaluated or all(_place(y) in places for y in collect(
                x, lambda n: isinstance(n, BufferLoad))) for x in loading)
        except TypeError:        # a node that is not hashable: keep the select lazy
            return False

    def e_cast(self, e: Cast) -> Val:
        src, dst = e.value.dtype, e.dtype
        val = self.expr(e.value)
        if src == dst:
            return val
        if (_dt.is_int(src) or src == "bool") and (_dt.is_int(dst) or dst == "bool"):
            return self.int_convert(val, src, dst)
        return self.map1(val, lambda x: self.cast_value(x, src, dst))

    def cast_value(self, x, src: str, dst: str):
        """Convert the scalar or vector register value ``x`` from ``src`` to ``dst``."""
        b = self.b
        T = lambda ty: _with_lanes(ty, x.type)  # noqa: E731
        if dst == "bool":
            if _dt.is_float(src):
                return b.fcmp_unordered("!=", x, _splat(x.type, 0.0))
            return b.icmp_unsigned("!=", x, _splat(x.type, 0))
        if dst == "bfloat16":
            if src == "float64":
                x = b.fptrunc(x, T(_F32))
            elif not _dt.is_float(src):
                x = (b.uitofp if _unsigned(src) else b.sitofp)(x, T(_F32))
            return _bf16_to_f32(b, _f32_to_bf16(b, x))   # (a storage float's value is f32)
        if _dt.is_float(dst):
            if _dt.is_float(src):
                if dst == "float16":
                    if src == "float16":
                        return x
                    h = _f64_to_f16(b, x) if src == "float64" else b.fptrunc(x, T(_F16))
                    return b.fpext(h, T(_F32))
                sw = _REG[src]
                dw = _REG[dst]
                if sw == dw:
                    return x
                if isinstance(dw, ir.DoubleType):
                    return b.fpext(x, T(dw))
                return b.fptrunc(x, T(dw))
            conv = b.uitofp if _unsigned(src) else b.sitofp
            if dst == "float16":
                return b.fpext(conv(x, T(_F16)), T(_F32))
            return conv(x, T(_REG[dst]))
        # float -> int
        if _dt.bits(dst) >= 32:
            return self._freeze(b.fptosi(x, T(_REG[dst])))
        return b.trunc(self._freeze(b.fptosi(x, T(_I32))), T(_REG[dst]))

    def _freeze(self, v):
        instr = _Freeze(self.b.block, v)
        self.b._insert(instr)
        return instr


def _unconditional(cond) -> set:
    """The expressions evaluated wherever ``cond`` is: all of its nodes but the operands
    of a select inside it (each evaluated only where its own condition picks it: a load
    there, ``if_then_else(i < n - 1, X[i + 1], 0)``, may be out of bounds elsewhere, and
    an operand of the outer select that loads the same place is not in bounds for it)."""
    out, stack = set(), [cond]
    while stack:
        n = stack.pop()
        if not isinstance(n, Expr) or n in out:
            continue
        out.add(n)
        stack.extend([n.cond] if isinstance(n, Select) else children(n))
    return out


def _place(load: BufferLoad):
    """What makes a load's address in bounds: its buffer's shape (constant extents, or
    the buffer itself) and its indices; two loads of one place are both in bounds or
    neither is."""
    shape = tuple(int(e.value) if isinstance(e, Const) else None for e in load.buffer.shape)
    return (shape if None not in shape else load.buffer, load.indices)

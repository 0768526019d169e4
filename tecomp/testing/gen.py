"""Random programs: elementwise chains, broadcasts, reductions with ``where=``, padding
through ``if_then_else``, strided and affine indices, several stages, symbolic extents.

``gen_program(draw)`` returns a :class:`~tecomp.testing.program.Program`.  Every index is
in bounds by construction (see ``program.py``).  ``draw`` is a
:class:`~tecomp.testing.draw.RandomDraw` or :class:`~tecomp.testing.draw.HypothesisDraw`.
"""
from __future__ import annotations

import importlib.util
from typing import List, Optional

from .program import (
    AxVal, Ax, CAnd, Cmp, IBin, IC, Load, NVar, Program, ReduceSpec, TSpec, VBin, VCast,
    VConst, VParam, VPos, VSel, VUn, is_float,
)

# first option = what a failing case shrinks to
DTYPES = ("float32", "int32", "float64", "float32", "int8", "int64", "uint8", "float16")
# bfloat16 arrays are ml_dtypes' (the test extra), imported where one is made
# (program.py): its import costs about 0.7 s of CPU, which every fuzz process paid here
if importlib.util.find_spec("ml_dtypes") is not None:
    DTYPES = DTYPES + ("bfloat16",)
#: the dtypes of the programs run in the CUDA emulation
GPU_DTYPES = DTYPES
SIZES = (4, 1, 2, 3, 5, 7, 8, 13, 16)
RSIZES = (3, 1, 2, 4, 5, 8)
N_VALUES = (5, 0, 1, 2, 3, 7, 11, 17)
MAX_POINTS = 1500  # data points x reduce points of one stage (keeps the interpreter fast)


# ---------------------------------------------------------------------------------
# index intervals


def interval(ie, exts):
    """[lo, hi] of index expression ``ie`` (exact for the forms we generate), or None when
    it depends on the symbolic extent."""
    if isinstance(ie, Ax):
        e = exts[ie.k]
        if e == "n":
            return None
        return (0, e - 1)
    if isinstance(ie, IC):
        return (ie.v, ie.v)
    if isinstance(ie, NVar):
        return None
    a = interval(ie.a, exts)
    b = interval(ie.b, exts)
    if a is None or b is None:
        return None
    if ie.op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if ie.op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if ie.op == "*":
        c = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
        return (min(c), max(c))
    if ie.op == "//":
        q = b[0]
        return (a[0] // q, a[1] // q)
    if ie.op == "%":
        q = b[0]
        if a[0] >= 0 and a[1] < q:
            return a
        return (0, q - 1)
    raise ValueError(ie.op)


def _and(parts):
    out = None
    for p in parts:
        out = p if out is None else CAnd(out, p)
    return out


class _StageCtx:
    def __init__(self, draw, prog: Program, exts, nd, dtype, symbolic, allow_new=True):
        self.d = draw
        self.prog = prog
        self.exts = list(exts)  # of every axis (data then reduce)
        self.nd = nd
        self.dtype = dtype
        self.symbolic = symbolic
        self.allow_new = allow_new
        self.loads = 0

    @property
    def int_axes(self):
        return [k for k, e in enumerate(self.exts) if e != "n"]

    @property
    def n_axes(self):
        return [k for k, e in enumerate(self.exts) if e == "n"]


def _affine_form(c: _StageCtx, k: int):
    """A random index expression over int-extent axis k (maybe with a second axis)."""
    d = c.d
    form = d.choice(("id", "id", "shift", "stride", "two", "div", "mod", "rev", "affdiv", "const"))
    e = c.exts[k]
    x = Ax(k)
    if form == "id":
        return x
    if form == "shift":
        s = d.choice((1, -1, 2, 3, -2))
        return IBin("+", x, IC(s)) if s > 0 else IBin("-", x, IC(-s))
    if form == "stride":
        return IBin("+", IBin("*", x, IC(d.choice((2, 3)))), IC(d.choice((0, 1))))
    if form == "two":
        others = [j for j in c.int_axes if j != k]
        if not others:
            return x
        j = d.choice(others)
        a = d.choice((1, 2))
        first = x if a == 1 else IBin("*", x, IC(a))
        return IBin("+", first, Ax(j))
    if form == "div":
        return IBin("//", x, IC(d.choice((2, 3, 4))))
    if form == "mod":
        return IBin("%", x, IC(d.choice((2, 3))))
    if form == "rev":
        return IBin("-", IC(e - 1), x)
    if form == "affdiv":
        return IBin("//", IBin("+", IBin("*", x, IC(d.choice((2, 3)))), IC(d.choice((0, 1)))),
                    IC(d.choice((2, 4))))
    return IC(d.int(0, 2))


def _fit(c: _StageCtx, ie, size: int):
    """Make ``ie`` (range known) fit [0, size): returns (ie, guard parts)."""
    lo, hi = interval(ie, c.exts)
    if lo >= 0 and hi < size:
        return ie, []
    if isinstance(ie, IC):
        return IC(min(max(ie.v, 0), size - 1)), []
    if c.d.bool(0.5):
        parts = []
        if lo < 0:
            parts.append(Cmp(">=", ie, IC(0)))
        if hi >= size:
            parts.append(Cmp("<", ie, IC(size)))
        return ie, parts
    return IBin("%", ie, IC(size)), []


def _index_for(c: _StageCtx, size):
    """An index expression for a dimension of extent ``size`` (int or "n"):
    (ie, guard parts)."""
    d = c.d
    if size == "n":
        if c.n_axes:
            k = d.choice(c.n_axes)
            f = d.choice(("id", "id", "shift", "rev"))
            if f == "id":
                return Ax(k), []
            if f == "shift":
                ie = IBin("+", Ax(k), IC(d.choice((1, 2))))
                return ie, [Cmp("<", ie, NVar())]
            return IBin("-", IBin("-", NVar(), IC(1)), Ax(k)), []
        return IC(0), [Cmp("<", IC(0), NVar())]
    if c.int_axes and d.bool(0.9):
        k = d.choice(c.int_axes)
        return _fit(c, _affine_form(c, k), size)
    if c.n_axes and d.bool(0.5):
        return IBin("%", Ax(d.choice(c.n_axes)), IC(size)), []
    return IC(d.int(0, size - 1)), []


def _new_dim(c: _StageCtx):
    """An index expression and the extent of a new placeholder's dimension."""
    d = c.d
    if c.n_axes and (not c.int_axes or d.bool(0.3)):
        return Ax(d.choice(c.n_axes)), "n", []
    if not c.int_axes:
        return IC(0), 1, []
    k = d.choice(c.int_axes)
    ie = _affine_form(c, k)
    lo, hi = interval(ie, c.exts)
    parts = []
    if lo < 0:
        parts.append(Cmp(">=", ie, IC(0)))
    size = hi + 1 + d.choice((0, 0, 1, 2))
    if d.bool(0.2) and hi >= 1 and not isinstance(ie, IC):
        size = d.int(1, hi)  # padding: part of the range reads zeros
        parts.append(Cmp("<", ie, IC(size)))
    return ie, max(size, 1), parts


def _new_placeholder(c: _StageCtx):
    d = c.d
    prog = c.prog
    nd = d.int(1, 3)
    idx, shape, parts = [], [], []
    for _ in range(nd):
        ie, size, ps = _new_dim(c)
        idx.append(ie)
        shape.append(size)
        parts += ps
    dt = c.dtype
    if d.bool(0.1):
        dt = d.choice(("int32", "float32", "float64", "int8"))
    name = f"P{len(prog.tensors)}"
    prog.tensors.append(TSpec(name, tuple(shape), dt))
    return Load(len(prog.tensors) - 1, tuple(idx), _and(parts))


def _load(c: _StageCtx, prefer: Optional[int] = None):
    d = c.d
    prog = c.prog
    c.loads += 1
    if prefer is None:
        existing = list(range(len(prog.tensors)))
        if not existing or (c.allow_new and d.bool(0.4)):
            ld = _new_placeholder(c)
            return _cast_load(c, ld)
        prefer = d.choice(existing[::-1])
    t = prog.tensors[prefer]
    idx, parts = [], []
    for size in t.shape:
        ie, ps = _index_for(c, size)
        idx.append(ie)
        parts += ps
    return _cast_load(c, Load(prefer, tuple(idx), _and(parts)))


def _cast_load(c: _StageCtx, ld: Load):
    src = c.prog.tensors[ld.t].dtype
    if src == c.dtype:
        return ld
    return VCast(ld, src)


def _index_cond(c: _StageCtx, ks: List[int]):
    """A condition over the axes ``ks``."""
    d = c.d
    ks = [k for k in ks if c.exts[k] != "n"] or ks
    k = d.choice(ks)
    f = d.choice(("lt", "mod", "le2", "ge", "tap"))
    e = c.exts[k]
    data = [j for j in range(c.nd) if c.exts[j] != "n"]
    ks = [r for r in ks if c.exts[r] != "n"]
    if f == "tap" and data and ks:
        # a convolution's taps inside the image: ``y + ky >= 1 && x + kx < W + 1``, terms
        # that read outer and inner loops (lower/loop_partition.py splits on either bound,
        # lower/hoist_guards.py moves each term out on its own where loops stay whole)
        def tap(op):
            j = d.choice(data)
            r = d.choice(ks)
            bound = IC(1) if op == ">=" else IC(c.exts[j] + c.exts[r] - 2)
            return Cmp(op, IBin("+", Ax(j), Ax(r)), bound)
        return tap(">=") if d.bool(0.4) else CAnd(tap(">="), tap("<"))
    if f == "lt":
        bound = IC(d.int(0, e)) if e != "n" else IBin("-", NVar(), IC(1))
        return Cmp("<", Ax(k), bound)
    if f == "mod":   # built as Python's == or != (they build IR), by the axis' parity
        r = d.int(0, 1)
        return Cmp("==", IBin("%", Ax(k), IC(2)), IC(r)) if k % 2 == 0 else \
            Cmp("!=", IBin("%", Ax(k), IC(2)), IC(1 - r))
    if f == "le2":
        others = [j for j in range(len(c.exts)) if j != k]
        if others:
            return Cmp("<=", Ax(k), Ax(d.choice(others)))
        return Cmp("<=", Ax(k), IC(1))
    return Cmp(">=", Ax(k), IC(1))


def _value(c: _StageCtx, depth: int):
    d = c.d
    dt = c.dtype
    if depth <= 0 or d.bool(0.35):
        kind = d.choice(("load", "load", "load", "load", "const", "axis", "param"))
        if kind == "load":
            return _load(c)
        if kind == "param":
            if c.prog.alpha is None:
                adt = "float32" if dt in ("float16", "bfloat16") else dt
                val = (d.choice((0.75, -1.5, 2.0)) if is_float(adt) else d.choice((3, 1, 5)))
                c.prog.alpha = (adt, val)
            return VParam()
        if kind == "const":
            if is_float(dt):
                return VConst(d.choice((1.0, 0.5, -2.0, 0.25, 3.0)))
            return VConst(d.choice((1, 2, 3, 7) if dt == "uint8" else (1, 2, 3, -1, 7)))
        ie = Ax(d.int(0, len(c.exts) - 1))
        if d.bool(0.3) and c.exts[ie.k] != "n":
            ie = IBin("%", ie, IC(3))
        return AxVal(ie)
    kind = d.choice(("bin", "bin", "un", "sel"))
    if kind == "bin":
        if is_float(dt):
            op = d.choice(("+", "*", "-", "max", "min", "div", "pow", "atan2"))
        else:
            op = d.choice(("+", "*", "-", "max", "min", "fdiv", "mod", "tdiv", "tmod"))
        a = _value(c, depth - 1)
        if op in ("fdiv", "mod", "tdiv", "tmod"):
            return VBin(op, a, VConst(d.choice((2, 3, 5))))
        return VBin(op, a, _value(c, depth - 1))
    if kind == "un":
        if is_float(dt):
            op = d.choice(("neg", "abs", "exp", "tanh", "sigmoid", "sqrt", "leaky", "log1p",
                           "expm1", "exp2", "log2", "softplus", "sin", "cos", "erf", "log",
                           "tan", "atan", "cbrt", "erfc", "fast_erfc"))
        else:
            op = d.choice(("neg", "abs"))
        return VUn(op, _value(c, depth - 1))
    ks = list(range(len(c.exts)))
    cond = _value_cond(c) if d.bool(0.3) else _index_cond(c, ks)
    return VSel(cond, _value(c, depth - 1), _value(c, depth - 1))


def _value_cond(c: _StageCtx):
    """``P[idx] > 0`` on a placeholder's value: a data-dependent condition (exact)."""
    prog = c.prog
    phs = [i for i, t in enumerate(prog.tensors) if t.is_placeholder]
    if phs and c.d.bool(0.6):
        ld = _load(c, prefer=c.d.choice(phs))
    else:
        ld = _new_placeholder(c)
        c.loads += 1
    if isinstance(ld, VCast):
        ld = ld.a
    return VPos(ld)


def _points(exts, n_as=8):
    p = 1
    for e in exts:
        p *= n_as if e == "n" else e
    return p


def gen_program(d, *, max_stages: int = 4, dtypes=DTYPES, symbolic: Optional[bool] = None,
                max_depth: int = 3) -> Program:
    """A random program with 1..max_stages computes."""
    dtype = d.choice(dtypes)
    sym = d.bool(0.2) if symbolic is None else symbolic
    prog = Program([], [], sym)
    nstages = d.int(1, max_stages)
    computes: List[int] = []
    for si in range(nstages):
        nd = d.int(1, 3)
        shape = []
        for k in range(nd):
            if sym and d.bool(0.4):
                shape.append("n")
            else:
                shape.append(d.choice(SIZES))
        red = None
        if d.bool(0.4):
            nr = d.choice((1, 1, 2))
            rex = []
            for _ in range(nr):
                rex.append("n" if sym and d.bool(0.2) else d.choice(RSIZES))
            op = d.choice(("sum", "sum", "max", "min", "prod") if dtype != "float16"
                          else ("sum", "sum", "max", "min"))
            red = ReduceSpec(op, tuple(rex))
        exts = list(shape) + (list(red.extents) if red else [])
        while _points(exts) > MAX_POINTS:
            big = max(range(len(exts)), key=lambda i: 8 if exts[i] == "n" else exts[i])
            if exts[big] == "n":
                exts[big] = 2
            else:
                exts[big] = max(1, exts[big] // 2)
        shape = exts[:nd]
        if red:
            red.extents = tuple(exts[nd:])
        c = _StageCtx(d, prog, exts, nd, dtype, sym)
        body = None
        if computes and d.bool(0.85):
            # read the previous stage (keeps the DAG connected)
            first = _load(c, prefer=computes[-1])
            body = first
            if d.bool(0.6):
                op = d.choice(("+", "*", "max", "-")) if is_float(dtype) else d.choice(("+", "*", "max", "-"))
                body = VBin(op, first, _value(c, d.int(0, max_depth - 1)))
            elif d.bool(0.3):
                body = VUn("neg" if not is_float(dtype) else d.choice(("exp", "neg", "tanh", "abs")), first)
        else:
            body = _value(c, d.int(0, max_depth))
            if c.loads == 0:
                body = VBin("+", body, _load(c))
        if red is not None and d.bool(0.35):
            ks = list(range(nd, len(exts)))
            red.where = _value_cond(c) if d.bool(0.3) else _index_cond(c, ks)
        name = f"C{len(prog.tensors)}"
        prog.tensors.append(TSpec(name, tuple(shape), dtype, body, red))
        computes.append(len(prog.tensors) - 1)
    read = set()
    for j, s in enumerate(prog.tensors):
        if not s.is_placeholder:
            for i in range(len(prog.tensors)):
                if prog.readers(i):
                    read.add(i)
    prog.outputs = [i for i in computes if i not in read]
    prog.symbolic = any("n" in s.axis_extents for s in prog.tensors)
    return prog


def gen_n(d) -> int:
    return d.choice(N_VALUES)


def gen_int8_gemm(d) -> Program:
    """An int8 GEMM, ``C[(b,) i, j] = sum(int32(A[(b,) i, k]) * int32(W[...]), k)`` with A
    uint8 and W int8 over their whole ranges: the shape the dot-product intrinsics take
    (columns a multiple of 8 or 16, the reduction of 4) most of the time, but not always;
    W as ``[K, N]`` or ``[N, K]``, the operands in either order, maybe batched, maybe with
    an elementwise epilogue."""
    batch = d.choice((0, 0, 2))
    M = d.choice((3, 1, 2, 4, 5, 7))
    N = d.choice((8, 16, 16, 24, 12, 32))
    K = d.choice((8, 4, 12, 16, 6, 20))
    while M * N * K * max(batch, 1) > MAX_POINTS and M > 1:
        M -= 1
    while M * N * K * max(batch, 1) > MAX_POINTS:
        K = max(4, K // 2)
    lead = (batch,) if batch else ()
    nb = len(lead)
    b = [Ax(0)] if batch else []
    i, j, k = Ax(nb), Ax(nb + 1), Ax(nb + 2)
    wt = d.bool(0.4)     # W[N, K], as a dense layer stores it
    prog = Program([TSpec("A", lead + (M, K), "uint8"),
                    TSpec("W", lead + ((N, K) if wt else (K, N)), "int8")], [],
                   full_range=True)
    xa = VCast(Load(0, tuple(b + [i, k])), "uint8")
    xw = VCast(Load(1, tuple(b + ([j, k] if wt else [k, j]))), "int8")
    body = VBin("*", xw, xa) if d.bool(0.5) else VBin("*", xa, xw)
    prog.tensors.append(TSpec("C", lead + (M, N), "int32", body, ReduceSpec("sum", (K,))))
    out = 2
    if d.bool(0.3):
        axes = b + [Ax(nb), Ax(nb + 1)]
        prog.tensors.append(TSpec("D", lead + (M, N), "int32",
                                  VBin(d.choice(("+", "-", "max")), Load(2, tuple(axes)),
                                       VConst(d.int(-9, 9)))))
        out = 3
    prog.outputs = [out]
    return prog


def gen_tensor_core_gemm(d) -> Program:
    """A float16 or bfloat16 GEMM summed in float32, ``C[(b,) i, j] = sum(f32(A) *
    f32(W), k)``, extents multiples of 16 or (one case in two) some of them 1 to 7 short
    of a multiple of 32 (the GPU rules put both on tensor cores, the odd ones in padded
    tiles: zero-filled copies, guarded stores; no larger than the even ones), ``A``
    as ``[M, K]`` or ``[K, M]`` and ``W`` as ``[K, N]`` or ``[N, K]``, maybe batched, and
    mostly with an elementwise epilogue (a bias over the columns or a constant, a max,
    min or tanh, a float32, float16 or bfloat16 result, sometimes plus a second GEMM's
    ``C2``) that the tensor-core template applies from its tile of C in shared memory."""
    dt = d.choice(("float16", "bfloat16"))
    batch = d.choice((0, 0, 2))
    M, N, K = (16 * d.choice(c) for c in ((1, 2, 3), (1, 2, 3), (1, 2)))
    while M * N * K * max(batch, 1) > 16 * MAX_POINTS and N > 16:
        N -= 16
    at, wt = d.bool(0.3), d.bool(0.5)     # A[K, M]; W[N, K] as a dense layer stores it
    bias = d.bool(0.5)
    epi = None
    if d.bool(0.75):   # (bias or constant, activation, result dtype, a second GEMM)
        const = None if bias else d.choice((0.5, -1.25))
        pick = d.int(0, 3)
        act = d.choice(("max", "min")) if pick == 1 else ("tanh" if pick == 2 else None)
        epi = (const, act, d.choice(("float32", dt, dt)), not batch and d.bool(0.3))
    # odd extents, drawn last (the draws above, and so the seeds' other choices, are as
    # they were): each of those of 32 or more maybe 1 to 7 short
    if d.bool(0.5):
        M, N, K = (x - d.int(1, 7) if x >= 32 and d.bool(0.6) else x for x in (M, N, K))
    lead = (batch,) if batch else ()
    nb = len(lead)
    b = [Ax(0)] if batch else []
    i, j, k = Ax(nb), Ax(nb + 1), Ax(nb + 2)
    tensors = [TSpec("A", lead + ((K, M) if at else (M, K)), dt),
               TSpec("W", lead + ((N, K) if wt else (K, N)), dt)]
    if bias:
        tensors.append(TSpec("bias", (N,), "float32"))
    xa = VCast(Load(0, tuple(b + ([k, i] if at else [i, k]))), dt)
    xw = VCast(Load(1, tuple(b + ([j, k] if wt else [k, j]))), dt)
    c = len(tensors)
    tensors.append(TSpec("C", lead + (M, N), "float32", VBin("*", xa, xw),
                         ReduceSpec("sum", (K,))))
    prog = Program(tensors, [c])
    if epi is not None:
        const, act, odt, second = epi
        e = Load(c, tuple(b + [i, j]))
        e = VBin("+", e, Load(2, (j,)) if bias else VConst(const))
        if act in ("max", "min"):
            e = VBin(act, e, VConst(0.0))
        elif act == "tanh":
            e = VUn("tanh", e)
        if second:
            # plus a second GEMM of the same shape (a gradient summed from two products):
            # the epilogue of one of the two, read by it from the other's kernel
            a2 = len(prog.tensors)
            prog.tensors += [TSpec("A2", (M, K), dt), TSpec("W2", (K, N), dt)]
            prog.tensors.append(TSpec("C2", (M, N), "float32", VBin(
                "*", VCast(Load(a2, (i, k)), dt), VCast(Load(a2 + 1, (k, j)), dt)),
                ReduceSpec("sum", (K,))))
            e = VBin("+", e, Load(a2 + 2, (i, j)))
        prog.tensors.append(TSpec("D", lead + (M, N), odt, VCast(e, "float32")))
        prog.outputs = [len(prog.tensors) - 1]
    return prog


def gen_skinny_gemm(d) -> Program:
    """A float32 skinny GEMM of two placeholders (what ``strategy.cpu.skinny`` schedules,
    LLM decoding's ``A @ W^T``): ``M`` from 1 to 16 rows (``SKINNY_MAX_ROWS``), ``N`` and
    ``K`` mostly odd (tails of the tiles of W's rows, of the vectors along ``K`` and of
    the rows-in-lanes masks), W as ``[N, K]`` (a dense layer's) or ``[K, N]``, maybe
    batched, maybe under an elementwise epilogue (a bias and a ReLU)."""
    batch = d.choice((0, 0, 0, 2))
    M = d.int(1, 16)
    N = d.choice((7, 9, 13, 17, 5, 31, 3, 16))
    K = d.choice((15, 17, 33, 9, 45, 63, 1, 32))
    while M * N * K * max(batch, 1) > MAX_POINTS and N > 3:
        N -= 2
    while M * N * K * max(batch, 1) > MAX_POINTS and K > 1:
        K = max(1, K // 2 - 1 + K % 2)
    lead = (batch,) if batch else ()
    nb = len(lead)
    b = [Ax(0)] if batch else []
    i, j, k = Ax(nb), Ax(nb + 1), Ax(nb + 2)
    wt = d.bool(0.6)
    prog = Program([TSpec("A", lead + (M, K), "float32"),
                    TSpec("W", lead + ((N, K) if wt else (K, N)), "float32")], [])
    xa, xw = Load(0, tuple(b + [i, k])), Load(1, tuple(b + ([j, k] if wt else [k, j])))
    prog.tensors.append(TSpec("C", lead + (M, N), "float32", VBin("*", xa, xw),
                              ReduceSpec("sum", (K,))))
    out = 2
    if d.bool(0.3):
        axes = tuple(b + [Ax(nb), Ax(nb + 1)])
        prog.tensors.append(TSpec("D", lead + (M, N), "float32",
                                  VBin("max", VBin("+", Load(2, axes), VConst(0.5)),
                                       VConst(0.0))))
        out = 3
    prog.outputs = [out]
    return prog


def gen_view_gemm(d) -> Program:
    """A float32 GEMM tagged ``matmul`` (as :func:`tecomp.nn.matmul`'s, so the GEMM
    template schedules it) one of whose operands is a view of a placeholder read through
    composed indices: ``V[a, b] = P[f // W, f % W]`` with ``f = a*cols + b`` (a reshape of
    ``P[R, W]``) or ``f = b*rows + a`` (a reshape then a transpose) -- the reads a
    template's ``align_bounds`` must prove inside memory (``torch.compile``'s views of a
    projection feeding MultiheadAttention's GEMMs)."""
    M = d.choice((13, 1, 3, 5, 16))
    K = d.choice((24, 4, 8, 12, 6))
    N = d.choice((20, 5, 8, 16, 3))
    while M * N * K > MAX_POINTS and M > 1:
        M -= 1
    view_b = d.bool(0.6)
    rows, cols = (K, N) if view_b else (M, K)
    total = rows * cols
    W = d.choice([w for w in range(2, total) if total % w == 0] or [total])
    transposed = d.bool(0.3)
    flat = (IBin("+", IBin("*", Ax(1), IC(rows)), Ax(0)) if transposed else
            IBin("+", IBin("*", Ax(0), IC(cols)), Ax(1)))
    prog = Program([TSpec("P", (total // W, W), "float32"),
                    TSpec("O", (M, K) if view_b else (K, N), "float32"),
                    TSpec("V", (rows, cols), "float32",
                          Load(0, (IBin("//", flat, IC(W)), IBin("%", flat, IC(W)))))], [])
    i, j, k = Ax(0), Ax(1), Ax(2)
    a, b = (Load(1, (i, k)), Load(2, (k, j))) if view_b else (Load(2, (i, k)), Load(1, (k, j)))
    prog.tensors.append(TSpec("C", (M, N), "float32", VBin("*", a, b), ReduceSpec("sum", (K,)),
                              tag="matmul"))
    prog.outputs = [3]
    return prog

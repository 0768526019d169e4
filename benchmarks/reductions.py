"""Reductions over any axes and elementwise math operators on 16M elements, auto-scheduled, against PyTorch.

Each workload is one ``tecomp.nn`` operator (``sum``, ``mean``, ``max``, ``min``, ``prod``,
``argmax``, ``argmin``, ``all``, ``any`` over the given axes, with or without
``keepdims``; ``exp``, ``log``, ... ``cast``, ``clip``, ``prelu``) on 16M float32
elements (8x64x128x256 as NCHW, or 4096x4096; 16M bools for ``all``/``any``; 16M int32
for the ``argmax:last:int32`` and ``argmin:last:int32`` rows), scheduled by
``tc.auto_schedule(args)`` at trials=0 (none of these operators has a template: the
generic rules of ``tecomp.strategy.rules`` schedule them, rules 3-5), timed against
PyTorch's operator (its ``out=`` variant into a preallocated tensor where one exists:
``torch.sum(..., out=)``, ``torch.ops.aten.silu.out``, ``Tensor.copy_`` for a cast and for
the row ``copy``, a plain ``tc.compute`` copy),
interleaved in one process, medians in ms.  ``ratio`` is PyTorch's time over
tecomp's (> 1: tecomp is faster).  ``GB/s`` counts the input read once and the output
written once; ``%`` compares it with the memory stream timed in the same turns: for a
reduction the read stream (a tecomp row sum of as many bytes, rows of 4096 float32, auto-
scheduled: compiled for narrower registers where the machine model's ``stream_load_bytes``
asks for them -- no named CPU does), for
an elementwise operator a copy of its input (a tecomp kernel, vectorized and parallel,
its stores past the cache as every elementwise output over half the last-level cache,
counting its read and its write).  Every result is checked against PyTorch's first.
The inputs and the streams' arrays come from ``common.HugePool``: one buffer per byte
size each, starting on a 2 MiB boundary and advised into huge pages, allocated once and
reused by every row of that size (a row's input and its stream alike; before session 28
each input was a fresh numpy array, and the 16 MB bool inputs of ``all``/``any`` came
in 4 KiB pages while the stream's array was in huge ones).  A row whose input (or the
stream's) is still not all in 2 MiB pages says so (``pages: input 40% huge``): from 4
KiB pages the same kernel read up to 1.6x slower (a plane sum), so its ``%`` compares
unlike memory (its ratio to PyTorch does not: both read the same array).

``ratio`` and ``%`` are taken round by round (each round's medians of the two tools, whose
turns lie seconds apart) and then their median over the rounds (``common.paired``); the
brackets give the lowest and highest round, how far the rounds disagree (a row whose
range straddles a target is not settled by one run).  ``tecomp ... ms`` is the median of
all its counted calls.  ``--held`` (two threads or more): the wall clock, but counting
only the calls in which every thread held its core throughout (``common.
interleaved_turns``); each row says how many of tecomp's calls counted.

    python3 benchmarks/reductions.py [--threads 2] [--rounds 7] [--only sum,exp,...]
        [--threads 1 --cpu-time | --held] [--rules-off]
        [--new-off] [--select-off] [--seed-off] [--steps-off]
        [--minmax-off] [--rowblock-off] [--prefetch-off] [--pairs-off] [--colpf-off]
        [--steps16-on] [--regs-off] [--along1-off] [--match-off] [--match-ints-off]
        [--vbytes-off] [--stream-off]
        [--math-off] [--math20-off] [--silu-off] [--math30-off] [--math31-off]
        [--fresh-inputs]
"""
from __future__ import annotations

from common import (HugePool, add_cpu_time, base_parser, clock_of, huge_page_share,
                    interleaved_turns, paired, pin_threads, torch_or_none)

NCHW = (8, 64, 128, 256)
SQUARE = (4096, 4096)

#: the axes each reduction is timed over: (label, shape, axis)
AXES = [("last", NCHW, -1), ("first", NCHW, 0), ("middle", NCHW, 1), ("hw", NCHW, (2, 3)),
        ("nhw", NCHW, (0, 2, 3)), ("all", NCHW, None),
        ("rows", SQUARE, 1), ("cols", SQUARE, 0), ("all", SQUARE, None)]


def _dims(shape, axis):
    if axis is None:
        return tuple(range(len(shape)))
    return tuple(a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,)))


def reduction_workloads():
    """name -> (shape, input kind, tecomp builder(nn, X), torch fn(torch, x, out), out
    dtype or None, kind)."""
    work = {}

    def add(op, label, shape, axis, keep, tfn, kind="float", out=None):
        name = f"{op}:{label}{'+keep' if keep else ''}"
        work[name] = (shape, kind, lambda nn, X: getattr(nn, op)(X, axis=axis, keepdims=keep),
                      tfn(axis, keep), out, "reduce")

    def torch_reduce(fn, one_dim=False):
        def make(axis, keep):
            def f(torch, x, out):
                dims = _dims(x.shape, axis)
                if len(dims) == x.ndim and not keep:
                    if out is None:
                        return getattr(torch, fn)(x)
                    return getattr(torch, fn)(x, dim=dims, out=out) if not one_dim else \
                        out.copy_(getattr(torch, fn)(x))
                if one_dim and len(dims) > 1:
                    # (torch.prod takes one dim: the reduced axes moved last, flattened)
                    rest = [d for d in range(x.ndim) if d not in dims]
                    y = x.permute(*rest, *dims).reshape(*[x.shape[d] for d in rest], -1)
                    r = getattr(torch, fn)(y, -1)
                    if keep:
                        r = r.reshape(out.shape)
                    return out.copy_(r)
                d = dims[0] if one_dim else dims
                return getattr(torch, fn)(x, d, keepdim=keep, out=out)
            return f
        return make

    for label, shape, axis in AXES:
        add("sum", label, shape, axis, False, torch_reduce("sum"))
        add("max", label, shape, axis, False, torch_reduce("amax"))
        if shape is NCHW:
            add("sum", label, shape, axis, True, torch_reduce("sum"))
    for label, shape, axis in AXES:
        if shape is NCHW and label in ("last", "middle", "hw", "nhw", "all"):
            add("mean", label, shape, axis, False, torch_reduce("mean"))
            add("min", label, shape, axis, False, torch_reduce("amin"))
            add("prod", label, shape, axis, False, torch_reduce("prod", one_dim=True),
                kind="near1")

    def torch_arg(fn):
        def make(axis, keep):
            return lambda torch, x, out: getattr(torch, fn)(x, axis, keepdim=keep, out=out)
        return make

    for op in ("argmax", "argmin"):
        for label, shape, axis, kind in (("last", NCHW, -1, "float"),
                                         ("middle", NCHW, 1, "float"),
                                         ("cols", SQUARE, 0, "float"),
                                         ("last:int32", NCHW, -1, "int32")):
            name = f"{op}:{label}"
            work[name] = (shape, kind, lambda nn, X, op=op, axis=axis: getattr(nn, op)(
                X, axis=axis, dtype="int64"), torch_arg(op)(axis, False), "int64", "reduce")

    def torch_logic(fn):
        def make(axis, keep):
            def f(torch, x, out):
                dims = _dims(x.shape, axis)
                if len(dims) == x.ndim:
                    return out.copy_(getattr(torch, fn)(x))
                return getattr(torch, fn)(x, dims if len(dims) > 1 else dims[0],
                                          keepdim=keep, out=out)
            return f
        return make

    for op in ("all", "any"):
        for label, shape, axis in (("last", NCHW, -1), ("middle", NCHW, 1), ("hw", NCHW, (2, 3)),
                                   ("all", NCHW, None)):
            add(op, label, shape, axis, False, torch_logic(op), kind="all" if op == "all"
                else "any")
    return work


def elementwise_workloads():
    """name -> (shape, input kind, tecomp builder(nn, X[, S]), torch fn, out dtype, kind)."""
    def aten(op, *extra):
        def f(torch, x, out):
            return getattr(torch.ops.aten, op).out(x, *extra, out=out)
        return f

    plain = [("exp", "float"), ("log", "pos"), ("sqrt", "pos"), ("rsqrt", "pos"),
             ("erf", "float"), ("abs", "float"), ("sign", "float"), ("floor", "float"),
             ("ceil", "float"), ("round", "float"), ("tan", "float"), ("isnan", "float"),
             ("isinf", "float"), ("elu", "float"), ("hardswish", "float"),
             ("hardsigmoid", "float"), ("silu", "float"), ("softplus", "float")]
    work = {}
    for op, kind in plain:
        out = "bool" if op in ("isnan", "isinf") else None
        tfn = {"isnan": lambda torch, x, out: torch.isnan(x),
               "isinf": lambda torch, x, out: torch.isinf(x),
               "elu": aten("elu", 1.0, 1, 1),
               "softplus": aten("softplus", 1.0, 20.0)}.get(op, aten(op))
        work[op] = (NCHW, kind, lambda nn, X, op=op: getattr(nn, op)(X), tfn, out, "elem")
    work["clip"] = (NCHW, "float", lambda nn, X: nn.clip(X, -0.5, 0.5),
                    lambda torch, x, out: torch.clamp(x, -0.5, 0.5, out=out), None, "elem")
    work["leaky_relu"] = (NCHW, "float", lambda nn, X: nn.leaky_relu(X, 0.01),
                          aten("leaky_relu", 0.01), None, "elem")
    work["cast:float16"] = (NCHW, "float", lambda nn, X: nn.cast(X, "float16"),
                            lambda torch, x, out: out.copy_(x), "float16", "elem")
    work["cast:int32"] = (NCHW, "float", lambda nn, X: nn.cast(X, "int32"),
                          lambda torch, x, out: out.copy_(x), "int32", "elem")
    # a plain copy (tc.compute(shape, lambda *i: X[i])) against Tensor.copy_
    work["copy"] = (NCHW, "float", "copy", lambda torch, x, out: out.copy_(x), None, "elem")
    work["prelu:channel"] = (NCHW, "float", "prelu",
                             lambda torch, x, out, w=None: torch.prelu(x, w), None, "elem")
    return work


def rules_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled with the column, split and tuple-row
    rules of ``tecomp.strategy.rules`` off (every stage's knobs ``.columns``,
    ``.split``, ``.tuple_rows`` False): the schedule the rules gave before them."""
    from tecomp.strategy.cpu import apply_rules, cpu_model
    from tecomp.strategy.rules import Knobs
    from tecomp.strategy._common import _walk
    off = {f"{op.name}.{k}": False for op in _walk([t for t in sig[-1:]])
           for k in ("columns", "split", "tuple_rows")}
    f = tc.build(apply_rules(sig, Knobs(off), cpu_model("llvm")), sig)
    out = tc.empty(tuple(int(e.value) for e in sig[-1].shape), sig[-1].dtype)
    return lambda: f(*ins, out)


def prefetch_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled without the rows ahead prefetched (every
    stage's knob ``.prefetch_rows`` 0: what a machine model without
    ``row_prefetch_bytes`` gives)."""
    from tecomp.strategy.cpu import apply_rules, cpu_model
    from tecomp.strategy.rules import Knobs
    from tecomp.strategy._common import _walk
    off = {f"{op.name}.prefetch_rows": 0 for op in _walk([t for t in sig[-1:]])}
    f = tc.build(apply_rules(sig, Knobs(off), cpu_model("llvm")), sig)
    out = tc.empty(tuple(int(e.value) for e in sig[-1].shape), sig[-1].dtype)
    return lambda: f(*ins, out)


def flags_off(tc, sig, ins, flags):
    """A call of the kernel of ``sig`` scheduled and built with the module flags
    ``flags`` (``(module, name)`` pairs) False."""
    old = [getattr(m, n) for m, n in flags]
    for m, n in flags:
        setattr(m, n, False)
    try:
        f = tc.build(tc.auto_schedule(sig), sig)
    finally:
        for (m, n), v in zip(flags, old):
            setattr(m, n, v)
    out = tc.empty(tuple(int(e.value) for e in sig[-1].shape), sig[-1].dtype)
    return lambda: f(*ins, out)


def new_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built without session 16's paths: no ``reduce``
    vector plan (``tecomp.lower.vectorize.HORIZONTAL_REDUCTIONS``) and no in-order
    combine of tuple reductions (``tecomp.lower.schedule_ops.IN_ORDER_COMBINE``)."""
    from tecomp.lower import schedule_ops, vectorize
    return flags_off(tc, sig, ins, [(vectorize, "HORIZONTAL_REDUCTIONS"),
                                    (schedule_ops, "IN_ORDER_COMBINE")])


def select_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built without the ``reduce`` plan of selections
    (``tecomp.lower.vectorize.SELECTION_REDUCTIONS``: an argmax's lanes combined in
    steps through memory, as before session 17)."""
    from tecomp.lower import vectorize
    return flags_off(tc, sig, ins, [(vectorize, "SELECTION_REDUCTIONS")])


def seed_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with every selection's accumulator started at
    the identity (``tecomp.lower.schedule_ops.SEED_SELECTIONS`` False: an argmax tests
    per vector that its running index is not the identity's -1), as before session 19."""
    from tecomp.lower import schedule_ops
    return flags_off(tc, sig, ins, [(schedule_ops, "SEED_SELECTIONS")])


def steps_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled with the steps of session 18: a
    selection's row reduction taking four vectors of partial pairs a step wherever its
    row has two such steps (``tecomp.strategy.rules.SELECTION_WIDE_STEPS`` 2; 8 now), a
    column reduction of several values reading four rows a pass (``COLUMN_STEPS_TUPLE``
    4; 8 now)."""
    from tecomp.strategy import rules
    old = rules.SELECTION_WIDE_STEPS, rules.COLUMN_STEPS_TUPLE
    rules.SELECTION_WIDE_STEPS, rules.COLUMN_STEPS_TUPLE = 2, rules.COLUMN_STEPS
    try:
        f = tc.build(tc.auto_schedule(sig), sig)
    finally:
        rules.SELECTION_WIDE_STEPS, rules.COLUMN_STEPS_TUPLE = old
    out = tc.empty(tuple(int(e.value) for e in sig[-1].shape), sig[-1].dtype)
    return lambda: f(*ins, out)


def minmax_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled and built with a float max or min
    reduced over the lanes in order after a fold to one vector
    (``tecomp.lower.vectorize.FLOAT_MINMAX_REDUCTIONS`` False), as before session 19."""
    from tecomp.lower import vectorize
    return flags_off(tc, sig, ins, [(vectorize, "FLOAT_MINMAX_REDUCTIONS")])


def pairs_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with a float max, min, argmax or argmin over
    an unrolled run of rows into one accumulator tested for NaN row by row, as before
    session 24 (not once per two rows: ``tecomp.codegen.llvm.emit_control.
    PAIRED_NAN_TESTS`` and ``PAIRED_SELECTION_TESTS`` False)."""
    from tecomp.codegen.llvm import emit_control
    return flags_off(tc, sig, ins, [(emit_control, "PAIRED_NAN_TESTS"),
                                    (emit_control, "PAIRED_SELECTION_TESTS")])


def rowblock_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled and built as before session 20: a
    selection along rows one row a step (``tecomp.strategy.rules.SELECTION_ROW_BLOCK``
    1), a select on an or of two float compares emitted as written (an argmax's update:
    ``tecomp.codegen.llvm.emit_expr.INVERT_OR_SELECTS`` False)."""
    from tecomp.codegen.llvm import emit_expr
    from tecomp.strategy import rules
    old = rules.SELECTION_ROW_BLOCK
    rules.SELECTION_ROW_BLOCK = 1
    try:
        return flags_off(tc, sig, ins, [(emit_expr, "INVERT_OR_SELECTS")])
    finally:
        rules.SELECTION_ROW_BLOCK = old


def steps16_on(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled with a column reduction of one-byte
    values (bools, 8-bit integers) whose input is past L2 reading 16 rows a pass, not 8
    (``tecomp.strategy.rules.COLUMN_STEPS_PACKED_PAST_L2`` 16: tried in session 30, not
    the default)."""
    from tecomp.strategy import rules
    old = rules.COLUMN_STEPS_PACKED_PAST_L2
    rules.COLUMN_STEPS_PACKED_PAST_L2 = 16
    try:
        f = tc.build(tc.auto_schedule(sig), sig)
    finally:
        rules.COLUMN_STEPS_PACKED_PAST_L2 = old
    out = tc.empty(tuple(int(e.value) for e in sig[-1].shape), sig[-1].dtype)
    return lambda: f(*ins, out)


def colpf_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled with a column reduction's passes ahead
    not prefetched and 4 rows a pass (``tecomp.strategy.rules.COLUMN_PREFETCH`` False),
    as before session 25."""
    from tecomp.strategy import rules
    return flags_off(tc, sig, ins, [(rules, "COLUMN_PREFETCH")])


def along1_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with a prefetch along an enclosing loop
    (``along=``) at a loop of one iteration dropped, as before session 31 (a column
    reduction of bools over 128x256 planes: its passes ahead not prefetched;
    ``tecomp.lower.prefetch.ALONG_AT_ONE_ITERATION`` False)."""
    from tecomp.lower import prefetch
    return flags_off(tc, sig, ins, [(prefetch, "ALONG_AT_ONE_ITERATION")])


def regs_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with a column argmax's (argmin's) unrolled run
    of rows storing its accumulator pair at every step and loading it back at the next,
    as before session 26 (not held in registers through the run:
    ``tecomp.codegen.llvm.emit_control.SELECTION_PAIRS_IN_REGISTERS`` False)."""
    from tecomp.codegen.llvm import emit_control
    return flags_off(tc, sig, ins, [(emit_control, "SELECTION_PAIRS_IN_REGISTERS")])


def match_ints_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with an argmax's (argmin's) lanes over integer
    values combined as a tree of its condition, not by matching their max
    (``tecomp.codegen.llvm.emit_control.SELECTION_MATCH_INTS`` False), as before session
    28."""
    from tecomp.codegen.llvm import emit_control
    return flags_off(tc, sig, ins, [(emit_control, "SELECTION_MATCH_INTS")])


def vbytes_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled without a row reduction streaming from
    memory compiled for the machine model's narrower ``stream_load_bytes`` registers
    (``tecomp.strategy.rules.STREAM_LOADS`` False: the registers' own width, 512-bit on
    Zen 4), as before session 29."""
    from tecomp.strategy import rules
    return flags_off(tc, sig, ins, [(rules, "STREAM_LOADS")])


def match_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with an argmax's (argmin's) lanes combined
    as a tree of the full condition (``tecomp.codegen.llvm.emit_control.SELECTION_MATCH``
    False), as before session 27, not by matching the lanes' max."""
    from tecomp.codegen.llvm import emit_control
    return flags_off(tc, sig, ins, [(emit_control, "SELECTION_MATCH")])


def stream_off(tc, sig, ins):
    """A call of the kernel of ``sig`` scheduled with every store through the cache (no
    ``pragma nontemporal`` on an elementwise output over half the last-level cache, nor on
    a smaller one of a pass over twice that cache: ``tecomp.strategy.rules.STREAM_OUTPUTS``
    and ``STREAM_WIDE_PASSES`` False)."""
    from tecomp.strategy import rules
    return flags_off(tc, sig, ins, [(rules, "STREAM_OUTPUTS"), (rules, "STREAM_WIDE_PASSES")])


def math_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built without session 19's math changes: select
    operands that load what their condition loads stay lazy
    (``tecomp.codegen.llvm.emit_expr.SPECULATE_CONDITION_LOADS``), float32 softplus takes
    its one-polynomial ``log1p`` (``tecomp.codegen.llvm.emit_math.SOFTPLUS_SEGMENTS``)."""
    from tecomp.codegen.llvm import emit_expr, emit_math
    return flags_off(tc, sig, ins, [(emit_expr, "SPECULATE_CONDITION_LOADS"),
                                    (emit_math, "SOFTPLUS_SEGMENTS")])


def math20_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built without session 20's math changes: float32
    softplus takes an exponential and then its ``log1p``, not its direct segments
    (``tecomp.codegen.llvm.emit_math.SOFTPLUS_DIRECT``)."""
    from tecomp.codegen.llvm import emit_math
    return flags_off(tc, sig, ins, [(emit_math, "SOFTPLUS_DIRECT")])


def silu_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built with a float32 ``x * sigmoid(x)`` emitted as
    the product, as before session 26 (not ``x / (1 + exp(-x))``:
    ``tecomp.codegen.llvm.emit_expr.SILU_DIVIDES`` False)."""
    from tecomp.codegen.llvm import emit_expr
    return flags_off(tc, sig, ins, [(emit_expr, "SILU_DIVIDES")])


def math30_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built without session 30's math changes: float32
    ``exp`` with Cephes' degree-5 polynomial (``tecomp.codegen.llvm.emit_math.EXP_SHORT_POLY``
    False: ``exp``, ``sigmoid``, ``silu``, ``softplus``'s exponential), ``exp(-x)`` of
    the negated ``x`` (``EXP_NEG_FOLDED`` False: ``sigmoid``, ``silu``), ``expm1``'s
    common lanes with two scalings and a select of tiny ``x`` (``EXPM1_FMA_SIGN``
    False: ``elu``)."""
    from tecomp.codegen.llvm import emit_math
    return flags_off(tc, sig, ins, [(emit_math, "EXP_SHORT_POLY"),
                                    (emit_math, "EXP_NEG_FOLDED"),
                                    (emit_math, "EXPM1_FMA_SIGN")])


def math31_off(tc, sig, ins):
    """A call of the kernel of ``sig`` built without session 31's math changes: float32
    ``tan`` with Knuth's TwoSum in its reduction on every lane
    (``tecomp.codegen.llvm.emit_math_f32.TAN_FMA_RESIDUAL`` False), ``softplus`` with its
    threshold's select (``tecomp.codegen.llvm.emit_expr.SOFTPLUS_DROPS_THRESHOLD``
    False)."""
    from tecomp.codegen.llvm import emit_expr, emit_math_f32
    return flags_off(tc, sig, ins, [(emit_math_f32, "TAN_FMA_RESIDUAL"),
                                    (emit_expr, "SOFTPLUS_DROPS_THRESHOLD")])


#: the A/B switches: (the option's dest and the row's key, the family it applies to, the
#: builder of the kernel with the switch off, the column's label)
_AB = [("rules_off", "reduce", rules_off, "rules off"),
       ("new_off", "reduce", new_off, "new paths off"),
       ("select_off", "reduce", select_off, "select off"),
       ("seed_off", "reduce", seed_off, "seed off"),
       ("steps_off", "reduce", steps_off, "steps off"),
       ("minmax_off", "reduce", minmax_off, "minmax off"),
       ("rowblock_off", "reduce", rowblock_off, "rowblock off"),
       ("prefetch_off", "reduce", prefetch_off, "prefetch off"),
       ("pairs_off", "reduce", pairs_off, "pairs off"),
       ("colpf_off", "reduce", colpf_off, "colpf off"),
       ("steps16_on", "reduce", steps16_on, "steps16 on"),
       ("regs_off", "reduce", regs_off, "regs off"),
       ("along1_off", "reduce", along1_off, "along1 off"),
       ("match_off", "reduce", match_off, "match off"),
       ("match_ints_off", "reduce", match_ints_off, "match ints off"),
       ("vbytes_off", "reduce", vbytes_off, "vbytes off"),
       ("stream_off", "elem", stream_off, "stream off"),
       ("math_off", "elem", math_off, "math off"),
       ("math20_off", "elem", math20_off, "math20 off"),
       ("silu_off", "elem", silu_off, "silu off"),
       ("math30_off", "elem", math30_off, "math30 off"),
       ("math31_off", "elem", math31_off, "math31 off")]


def _input(np, rng, shape, kind):
    x = rng.standard_normal(shape).astype("float32")
    if kind == "pos":
        return np.abs(x) + np.float32(0.1)
    if kind == "near1":   # a product of 256 values that stays finite
        return (np.float32(1) + x * np.float32(1e-3)).astype("float32")
    if kind == "all":     # mostly True: every element must be read
        return rng.random(shape) > 1e-7
    if kind == "any":     # mostly False
        return rng.random(shape) < 1e-7
    if kind == "int32":   # integers over a wide range (few ties)
        return rng.integers(-2 ** 20, 2 ** 20, shape, dtype="int32")
    return x


def main() -> None:
    ap = base_parser(__doc__, rounds=7)
    ap.add_argument("--only", default="", help="comma-separated workload names (a prefix "
                    "each: sum, sum:hw, exp, ...); default: all")
    ap.add_argument("--rules-off", action="store_true", help="also time each reduction "
                    "scheduled without the column, split and tuple-row rules (their knobs "
                    "off: the schedule before them), in the same turns")
    ap.add_argument("--new-off", action="store_true", help="also time each reduction "
                    "built without the reduce vector plan and the in-order combine of "
                    "tuple reductions (their module flags off), in the same turns")
    ap.add_argument("--select-off", action="store_true", help="also time each reduction "
                    "built without the reduce plan of selections (an argmax's lanes "
                    "combined in steps), in the same turns")
    ap.add_argument("--seed-off", action="store_true", help="also time each reduction "
                    "built with a selection's accumulator started at the identity, not at "
                    "its first element (an argmax's index tested per vector), in the same "
                    "turns")
    ap.add_argument("--steps-off", action="store_true", help="also time each reduction "
                    "scheduled with a selection's row taking four vectors of partial pairs "
                    "a step wherever it has two such steps (not only where it has eight) "
                    "and a column reduction of several values reading four rows a pass "
                    "(not eight), in the same turns")
    ap.add_argument("--minmax-off", action="store_true", help="also time each reduction "
                    "built with a float max or min folded to one vector and its lanes "
                    "reduced in order (not as a tree of halves), in the same turns")
    ap.add_argument("--rowblock-off", action="store_true", help="also time each "
                    "reduction built with a selection along rows one row a step (not a "
                    "block of rows) and a select on an or of float compares as written "
                    "(not the and of their negations), in the same turns")
    ap.add_argument("--prefetch-off", action="store_true", help="also time each "
                    "reduction scheduled without the rows ahead prefetched (the machine "
                    "model's row_prefetch_bytes), in the same turns")
    ap.add_argument("--pairs-off", action="store_true", help="also time each reduction "
                    "built with a float max, min, argmax or argmin over an unrolled run of "
                    "rows tested for NaN row by row (not one unordered compare per two "
                    "rows), in the same turns")
    ap.add_argument("--colpf-off", action="store_true", help="also time each reduction "
                    "scheduled without a column reduction's passes ahead prefetched (and 4 "
                    "rows a pass, not 8), in the same turns")
    ap.add_argument("--steps16-on", action="store_true", help="also time each reduction "
                    "scheduled with a column reduction of one-byte values (bools, 8-bit "
                    "integers) past L2 reading 16 rows a pass (not 8), in the same turns")
    ap.add_argument("--regs-off", action="store_true", help="also time each reduction "
                    "built with a column argmax's accumulator pair stored and reloaded at "
                    "every step of its run of rows (not held in registers), in the same "
                    "turns")
    ap.add_argument("--along1-off", action="store_true", help="also time each reduction "
                    "built with a prefetch along an enclosing loop at a loop of one "
                    "iteration dropped (a bool column reduction over the middle axis: no "
                    "passes ahead prefetched), in the same turns")
    ap.add_argument("--match-off", action="store_true", help="also time each reduction "
                    "built with an argmax's (argmin's) lanes combined as a tree of its full "
                    "condition (not by matching the lanes' max), in the same turns")
    ap.add_argument("--match-ints-off", action="store_true", help="also time each "
                    "reduction built with an argmax's (argmin's) lanes over integer values "
                    "combined as a tree (not by matching their max), in the same turns")
    ap.add_argument("--vbytes-off", action="store_true", help="also time each reduction "
                    "scheduled with its registers' own width where the machine model's "
                    "stream_load_bytes asks for narrower ones (a float row sum streaming "
                    "from memory: 512-bit, not 256-bit, on Zen 4), in the same turns")
    ap.add_argument("--stream-off", action="store_true", help="also time each elementwise "
                    "operator scheduled with its output stored through the cache (no "
                    "non-temporal stores), in the same turns")
    ap.add_argument("--math-off", action="store_true", help="also time each elementwise "
                    "operator built without session 19's math changes (lazy selects of "
                    "what the condition loads, softplus's one-polynomial log1p), in the "
                    "same turns")
    ap.add_argument("--math20-off", action="store_true", help="also time each elementwise "
                    "operator built without session 20's math changes (softplus's direct "
                    "segments), in the same turns")
    ap.add_argument("--silu-off", action="store_true", help="also time each elementwise "
                    "operator built with silu's x * sigmoid(x) as the product (not x / (1 + "
                    "exp(-x))), in the same turns")
    ap.add_argument("--math30-off", action="store_true", help="also time each elementwise "
                    "operator built without session 30's math changes (exp's degree-5 "
                    "polynomial, exp(-x) of the negated x, expm1's two scalings and "
                    "select), in the same turns")
    ap.add_argument("--math31-off", action="store_true", help="also time each elementwise "
                    "operator built without session 31's math changes (tan's TwoSum on "
                    "every lane, softplus's threshold select), in the same turns")
    ap.add_argument("--fresh-inputs", action="store_true", help="each row's input a fresh "
                    "aligned numpy array (tc.aligned), as before session 28, not the huge-page "
                    "pool's buffer of its size (the stream's arrays stay in the pool)")
    add_cpu_time(ap)
    ap.add_argument("--held", action="store_true", help="count only the calls in which "
                    "every thread held its core (the wall clock, two threads or more)")
    args = ap.parse_args()
    clock = clock_of(ap, args)
    if args.held:
        if args.cpu_time or args.threads < 2:
            ap.error("--held counts calls on several threads by the wall clock: use it "
                     "with --threads 2 or more, without --cpu-time")
        clock = {"held": args.threads}
    pin_threads(args.threads)
    import os
    # PyTorch's OpenMP workers sleep between calls instead of spinning against tecomp's
    # (its best configuration on a shared 2-core VM: benchmarks/run.py)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numpy as np

    import tecomp as tc
    from tecomp import nn

    torch = torch_or_none(args.threads)
    if torch is None:
        return
    rng = np.random.default_rng(0)
    print(f"{tc.target.cpu_name()}, {args.threads} threads, {args.rounds} rounds, OMP_WAIT_POLICY="
          f"{os.environ['OMP_WAIT_POLICY']}{', CPU time' if args.cpu_time else ''}{', calls with every thread on its core' if args.held else ''}; rows prefetched "
          f"{tc.target.cpu_model().row_prefetch_bytes} bytes ahead, selections "
          f"{tc.target.cpu_model().selection_prefetch_bytes or 'as much'}; load "
          f"{os.getloadavg()[0]:.2f}")
    picked = [p for p in args.only.split(",") if p]
    refs = {}
    # the inputs and the streams' arrays: one buffer per size each, 2 MiB aligned and
    # advised into huge pages, allocated once and reused (common.HugePool: a fair pair)
    inputs, streams = HugePool(), HugePool()

    def reference(kind, nbytes):
        """(function, bytes it moves): the read stream (a row sum) or a copy, of
        ``nbytes`` bytes of float32."""
        key = (kind, nbytes)
        if key not in refs:
            n = nbytes // 4
            if kind == "reduce":
                A = tc.placeholder((n // 4096, 4096), name="A")
                B = nn.sum(A, axis=-1)
                a, b = streams.copy_of(np.ones((n // 4096, 4096), "float32")), \
                    tc.empty((n // 4096,))
            else:
                A = tc.placeholder((n,), name="A")
                B = tc.compute((n,), lambda i: A[i], name="copy")
                a, b = streams.copy_of(np.ones(n, "float32")), tc.empty((n,))
            f = tc.build(tc.auto_schedule([A, B]), [A, B])
            refs[key] = ((lambda: f(a, b)), nbytes * (2 if kind == "elem" else 1), a)
        return refs[key]

    work = {**reduction_workloads(), **elementwise_workloads()}
    rows = []
    for name, (shape, kind, build, tfn, odt, family) in work.items():
        if picked and not any(name.startswith(p) for p in picked):
            continue
        x = tc.aligned(_input(np, rng, shape, kind)) if args.fresh_inputs else \
            inputs.copy_of(_input(np, rng, shape, kind))
        tx = torch.from_numpy(x)
        X = tc.placeholder(shape, dtype=str(x.dtype), name="X")
        ins, tins = [x], [tx]
        if build == "prelu":
            w = tc.aligned(rng.uniform(0.05, 0.3, shape[1]).astype("float32"))
            S = tc.placeholder((shape[1],), name="S")
            Y = nn.prelu(X, S)
            ins.append(w)
            tw = torch.from_numpy(w)
            tfn = (lambda f, tw: lambda torch, x, out: f(torch, x, out, tw))(tfn, tw)
            sig = [X, S, Y]
        elif build == "copy":
            Y = tc.compute(shape, lambda *i: X[i], name="copy")
            sig = [X, Y]
        else:
            Y = build(nn, X)
            sig = [X, Y]
        f = tc.build(tc.auto_schedule(sig), sig)
        oshape = tuple(int(e.value) for e in Y.shape)
        out = tc.empty(oshape, Y.dtype)
        tout = torch.empty(oshape, dtype=getattr(torch, Y.dtype))
        f(*ins, out)
        want = tfn(torch, tx, tout)
        if want is None or want is tout or (isinstance(want, torch.Tensor) and
                                             want.data_ptr() == tout.data_ptr()):
            want = tout
        else:   # (no out= variant: the allocating call is what PyTorch offers)
            tout = None
        got, ref = np.asarray(out), want.numpy()
        tol = {"tan": 1e-4, "prod": 1e-4, "mean": 1e-4, "sum": 1e-4}.get(name.split(":")[0],
                                                                        1e-5)
        ok = True
        try:
            if got.dtype == np.float16:
                np.testing.assert_allclose(got.astype("float32"), ref.astype("float32"),
                                           rtol=1e-3, atol=1e-3)
            elif got.dtype.kind == "f":
                scale = 1.0 if family == "elem" else float(np.abs(ref).max() or 1)
                if name.split(":")[0] in ("sum", "mean") and x.size > ref.size:
                    # a sum's rounding grows with the sum of the absolute values, not
                    # with the result (16M normal floats summed to -54 differ by 0.03
                    # from float64: docs/numerics.md's bound for a row reduction)
                    per = x.size // ref.size
                    cond = float(np.abs(x).astype(np.float64).mean()) * (
                        per if name.startswith("sum") else 1)
                    scale = max(scale, cond * 1e-2)
                np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * scale)
            else:
                np.testing.assert_array_equal(got, ref)
        except AssertionError as e:
            ok = False
            print(f"  {name}: MISMATCH against PyTorch: {str(e).splitlines()[3:5]}")
        ref_fn, ref_bytes, ref_in = reference(family, x.nbytes)
        shares = [(what, huge_page_share(arr)) for what, arr in (("input", x),
                                                                  ("stream", ref_in))]
        pages = ", ".join(f"{what} {100 * v:.0f}% huge" for what, v in shares
                          if v is not None and v < 0.9)
        fns = {"tecomp": lambda: f(*ins, out), "torch": lambda: tfn(torch, tx, tout),
               "stream": ref_fn}
        for key, family_of, build_off, _ in _AB:
            if getattr(args, key) and family == family_of:
                fns[key] = build_off(tc, sig, ins)
        per, counts = {}, {}
        t = interleaved_turns(fns, args.rounds, per_round=per, counts=counts, **clock)
        gbs = (x.nbytes + out.nbytes) / t["tecomp"] / 1e9
        stream = ref_bytes / t["stream"] / 1e9
        # tecomp's share of the stream: its bytes over the stream's, times the stream's
        # time over tecomp's, round by round
        share = [100 * (x.nbytes + out.nbytes) / ref_bytes * v for v in
                 paired(per["stream"], per["tecomp"])]
        ratio, rlo, rhi = paired(per["torch"], per["tecomp"])
        rows.append((name, ratio, share[0], rlo, rhi, share[1], share[2]))
        dims = 'x'.join(map(str, oshape)) or '()'
        print(f"  {name:22s} {'x'.join(map(str, shape)):>13s} -> {dims:>11s}"
              f"  tecomp {t['tecomp'] * 1e3:7.3f} ms | torch {t['torch'] * 1e3:7.3f} ms | "
              f"ratio {ratio:5.2f}x [{rlo:4.2f}-{rhi:4.2f}] | {gbs:6.1f} GB/s ({share[0]:4.0f}% "
              f"[{share[1]:3.0f}-{share[2]:3.0f}] of "
              f"{'read' if family == 'reduce' else 'copy'} {stream:5.1f}){'' if ok else ' WRONG'}"
              + (f" | counted {counts['tecomp'][0]}/{counts['tecomp'][1]}" if args.held else "")
              + "".join(f" | {label} {t[key] * 1e3:7.3f} ms ({t[key] / t['tecomp']:5.2f}x)"
                        for key, _, _, label in _AB if key in t)
              + (f" | pages: {pages}" if pages else ""),
              flush=True)
    # (a row with no round of counted calls, --held on a busy machine: not measured)
    unmeasured = [r[0] for r in rows if r[1] != r[1] or r[2] != r[2]]
    rows = [r for r in rows if r[0] not in unmeasured]
    bad = [r for r in rows if r[1] < 1.0 or r[2] < 80]
    print(f"load {os.getloadavg()[0]:.2f}; {len(rows) - len(bad)} of {len(rows)} rows at "
          f">= 1.0x PyTorch and >= 80% of the stream"
          + (f"; not measured (no round with a counted call of each tool): "
             f"{', '.join(unmeasured)}" if unmeasured else ""))
    for name, ratio, pct, rlo, rhi, plo, phi in sorted(bad, key=lambda r: min(r[1],
                                                                            r[2] / 80)):
        # every round under the target it misses, or some rounds over it
        under = (ratio >= 1.0 or rhi < 1.0) and (pct >= 80 or phi < 80)
        print(f"  below: {name:22s} {ratio:5.2f}x [{rlo:4.2f}-{rhi:4.2f}] {pct:4.0f}% "
              f"[{plo:3.0f}-{phi:3.0f}]{'' if under else '  (some rounds meet it)'}")


if __name__ == "__main__":
    main()

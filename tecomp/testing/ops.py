"""The fuzzer's ``ops`` family: one ``tecomp.nn`` operator call with random parameters.

The other families draw TE programs; this one draws *operator calls*, so that the CPU
schedules the auto-scheduler picks for ``tecomp.nn``'s operators (pooling, reductions,
depthwise and grouped convolutions) meet parameters nobody pinned in a test.  Each case
is drawn from its own random stream (``RandomDraw(seed * 7919 + 41)``) and is one of:

``pool``
    ``max_pool{1,2,3}d`` / ``avg_pool{1,2,3}d`` in either layout: kernel, stride (below,
    equal to or above the kernel; channels first, 70% of the 2-d and 3-d ones overlapping
    along rows of 16-33 outputs, at a stride of 1 up to the kernel's less 1: the
    template's windows in two steps), padding written in any of the forms ``Args.padding``
    reads (an int, per dimension, ``(before, after)`` pairs, befores-then-afters,
    ``"SAME"``/``"VALID"``; asymmetric ones too), dilation (max), ``ceil_mode``,
    ``count_include_pad`` (avg).
``adaptive``
    ``adaptive_{avg,max}_pool{1,2,3}d`` to any output size (dividing the input or not,
    larger than it, ``None`` for a dimension).
``global``
    ``global_{avg,max}_pool2d`` in either layout.
``reduce``
    ``sum mean max min prod argmax argmin all any`` over a random axis set (None, ``()``,
    one, several, all, negative, unsorted), keepdims, ranks 1-5, extents 1 and odd;
    bool inputs for ``all``/``any``, int32 inputs for some.
``depthwise``
    ``depthwise_conv2d_{nchw,nhwc}`` (multiplier, stride, padding, dilation), batch 1-9;
    15% big (input and output past half a 32 MiB last-level cache: streamed outputs).
``grouped``
    ``conv2d_{nchw,nhwc}`` with ``groups`` (1-32 channels per group), batch 1-9; 15% big
    (a group's planes within a quarter of L2, the data past a quarter of L3).  A fifth
    stream (``RandomDraw(seed * 7919 + 45)``) makes a third of the legal ones that are
    not big, not depthwise and of a constant batch 3x3 stride-1 convolutions with
    ``algorithm="winograd"`` (compared within ten times the tolerance below).

The float inputs of pools and reductions hold NaN, +-inf and -0.0 among normal values
in half the cases (and small integers, so that windows and rows hold ties, in a quarter);
in 30% of those, also a whole row (or leading slice) of one of NaN, +inf, -inf; in
30% of those of ``max``, ``min``, ``argmax`` and ``argmin``, the lines along the first
reduced axis finite but for one NaN in half of them (first, second, middle,
second-to-last or last element, or anywhere) and an infinity in an eighth.
A stream of its own (``RandomDraw(seed * 7919 + 42)``) makes the batch symbolic (a
``tc.var`` passed last; a reduction's first axis) in 15% of the cases, the float32 data
of pools and reductions float64 in 15% (float16 in 10% of the rest, compared within a
float16 ulp besides), and passes 6% of the inputs as a stride-0 broadcast along their
first axis; an eighth (``RandomDraw(seed * 7919 + 48)``, session 28) gives half the
symbolic batches a hint, ``tc.auto_schedule(args, shapes={"n": hint})`` (1 to 4096: the
rules once took a hint for the rows' extent and unrolled a loop that is not constant),
half of those reductions a batch of rows of 33 to 256 reduced along the rows.
A ninth (``RandomDraw(seed * 7919 + 49)``, session 28) gives half the channels-last
2-d/3-d poolings over padded data pixels of 21 to 64 channels (the template's peeled
pixels, ``pool.PEEL_PIXELS``).
A tenth (``RandomDraw(seed * 7919 + 50)``, session 28) gives a third of the int32
``max``/``min``/``argmax``/``argmin`` int8, uint8 or int64 data of a few values, the type's
ends among them (the lanes matched as signed or unsigned).
An eleventh (``RandomDraw(seed * 7919 + 51)``, session 29) runs half the 2-d/3-d poolings
of a stride of 2 or more along the rows (that no drawn model reached) under the host's
model with a ``stream_output_bytes`` of 64 or 1024 bytes: their data then come "from
memory", and the next output row's data are prefetched along the current one
(``pool.PREFETCH_NEXT_ROW``).
A twelfth (``RandomDraw(seed * 7919 + 54)``, session 29) gives half the drawn machine
models 32-byte ``stream_load_bytes`` (a float row sum from past the drawn L2 compiled for
256-bit registers on an AVX-512 host: ``strategy.rules.STREAM_LOADS``).
The kernel is ``tc.auto_schedule(args)`` (no trials) built for the case's
target and called with an input as a view (strided, one element off a 64-byte line -- 4
bytes for float32 --, a non-contiguous torch tensor) and an output one element off a
64-byte line (a non-temporal store path must fall back) or a torch tensor.

The reference is PyTorch's (numpy's for ``all``/``any`` and for the empty axis set,
which reduces nothing, as ``numpy.sum(x, axis=())``): sums, means, products and
convolutions in float64, compared with a tolerance of ``1e-5`` times the same
computation over the absolute values (``2.4e-7 * count`` relative for products: two
float32 half-ulps a factor); maxima,
minima, argmax/argmin and max pooling exactly (NaN where PyTorch has NaN; ``-0.0`` and
``0.0`` count as equal).  A padding PyTorch cannot take (asymmetric, or more than half
the kernel) is applied to the reference's input first (``-inf`` for max, zeros for avg;
``count_include_pad=False`` divides by the pooled ones of a mask).  A third stream
(``RandomDraw(seed * 7919 + 43)``) has half the max poolings of float32/float64 data (a
constant batch) also build their data gradient (``tc.gradient`` with a random head,
auto-scheduled) and compare it with PyTorch's rule computed in float64
(:func:`_max_pool_grad_ref`: each window's head to its first data element equal to the
maximum, never to the padding, to its last NaN where it holds one, nothing from a window
on padding only), within ``1e-5`` of the summed magnitudes.

One in ten of the others (the second stream) writes an argument as a careless user
would: numpy integers for ints, lists for tuples, ``keepdims=1`` (used as given, or
refused naming the parameter), ``True`` or ``2.0`` for a kernel (refused naming it).
About one case in twelve is illegal in one way (a zero kernel or stride, a negative
padding, a layout that does not exist, an axis out of range or given twice, ``argmax``
over no axis, an output size of 0, groups that do not divide the channels, a weight of
the wrong channel count); a fourth stream (``RandomDraw(seed * 7919 + 44)``) gives 4% of
the legal ones with a stride or dilation one past 2**31 - 1.  An illegal
call must raise a :class:`~tecomp.errors.TecompError` whose message names the parameter.
Outcomes: ``ok``, ``refused`` (an illegal call refused as
it must be, or an average pooling window on padding only -- tecomp's documented refusal --
for a padding past PyTorch's limit; a max pooling window on padding only is -inf),
``mismatch`` (a wrong value or shape, or an illegal call accepted) or ``crash`` (any
other exception, a legal call refused).
"""
from __future__ import annotations

import itertools
import math
import numbers
import traceback
from dataclasses import dataclass

import numpy as np

import tecomp as tc
from .. import nn
from ..errors import TecompError
from .diff import Outcome, SpecCase
from .draw import RandomDraw
from . import mathpoints
from .machines import drawn_machine, machine_line, maybe_machine

FAMILY = "ops"
KINDS = ("pool", "adaptive", "global", "reduce", "depthwise", "grouped")
REDUCERS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "all", "any")
SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17)
SPECIALS = (float("nan"), float("inf"), float("-inf"), -0.0)


@dataclass
class OpCase(SpecCase):
    """One case: ``spec`` (JSON-able: the operator, its arguments, the input shape and how
    the arrays are passed) and the seed of its data."""

    family: str = FAMILY

    def call_source(self) -> str:
        """The operator call as Python (``Y = nn.<op>(X, ...)``)."""
        sp = self.spec
        pos = "X, W" if "wshape" in sp else "X"
        kw = ", ".join(f"{k}={v!r}" for k, v in sp["kwargs"].items())
        return f"Y = nn.{sp['op']}({pos}{', ' if kw else ''}{kw})"

    def source(self) -> str:
        sp = self.spec
        if sp["kind"] == "mathpoint":
            return "\n".join([
                f"# ops family: {sp['fn']} ({sp['dtype']}) at its special points, check "
                f"{sp['check']!r} (tecomp.testing.mathpoints)",
                *self.replay_lines("tecomp.testing.fuzz --only ops", "ops", "run_op_case")])
        lines = [f"# ops family: {self.call_source()}",
                 f"# X {sp['shape']} {sp['dtype']}" + (f", W {sp['wshape']}" if "wshape" in sp
                                                        else "")
                 + (f"; the batch symbolic, scheduled with shapes={{'n': {sp['batch_hint']}}}"
                    if sp.get("batch_hint") else ""),
                 f"# input passed as {sp['in_view']!r}, output as {sp['out_view']!r}"
                 + (f", NaN/inf/-0.0 among the values" if sp.get("specials") else "")
                 + (f"; illegal: must raise a TecompError naming {sp['illegal']!r}"
                    if sp.get("illegal") else ""),
                 *([machine_line(sp["machine"])] if sp.get("machine") else []),
                 "import numpy as np",
                 *self.replay_lines("tecomp.testing.fuzz --only ops", "ops", "run_op_case")]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------
# drawing


def draw_op_case(seed: int, target: str = "llvm") -> OpCase:
    """Case ``seed`` of the family (its own random stream)."""
    d = RandomDraw(seed * 7919 + 41)
    kind = d.choice(KINDS)
    sp = {"pool": _draw_pool, "adaptive": _draw_adaptive, "global": _draw_global,
          "reduce": _draw_reduce, "depthwise": _draw_depthwise,
          "grouped": _draw_grouped}[kind](d)
    sp["kind"] = kind
    sp["in_view"] = d.choice(("contig", "contig", "strided", "offset", "torch_view"))
    sp["out_view"] = d.choice(("contig", "offset", "offset", "torch"))
    if kind in ("depthwise", "grouped"):
        sp["specials"] = False
    if not sp.get("illegal") and d.bool(1 / 12):
        _make_illegal(d, sp)
    # a stream of its own for what came later (the draws above stay as they were): a
    # symbolic batch, float64 data
    e = RandomDraw(seed * 7919 + 42)
    sp["sym_batch"] = e.bool(0.15)   # (a reduction: its first axis symbolic)
    if kind in ("pool", "adaptive", "global", "reduce") and sp["dtype"] == "float32" and \
            e.bool(0.15):
        sp["dtype"] = "float64"
    if e.bool(0.06):
        sp["in_view"] = "broadcast"   # the first axis a stride-0 broadcast of one slice
    if not sp.get("illegal") and e.bool(0.1):
        _make_careless(e, sp)
    if kind in ("pool", "adaptive", "global", "reduce") and sp["dtype"] == "float32" and \
            e.bool(0.1):
        sp["dtype"] = "float16"       # summed (multiplied) in float32, rounded once
    # (a third stream) max pooling's data gradient too: to the first data maximum of
    # each window, never the padding, or its last NaN; nothing from one on padding only
    g = RandomDraw(seed * 7919 + 43)
    sp["grad"] = (kind == "pool" and sp["pool"] == "max" and not sp.get("illegal")
                  and not sp["sym_batch"] and sp["dtype"] in ("float32", "float64")
                  and g.bool(0.5))
    # (a fourth stream) a stride or dilation past int32, which must be refused naming it
    # (it was a DTypeError about the index arithmetic; a transposed convolution's phase
    # loop over 2**31 - 1 never ended)
    h = RandomDraw(seed * 7919 + 44)
    if not sp.get("illegal") and h.bool(0.04):
        arg = h.choice(tuple(a for a in ("stride", "dilation") if a in sp["kwargs"]) or
                       (None,))
        if arg is not None:
            sp["kwargs"][arg] = h.choice((2**31, 2**32 + 1, 2**40))
            sp["illegal"] = arg
    # (a fifth stream) a third of the legal grouped convolutions that are no depthwise one
    # become 3x3, stride-1 Winograd convolutions (algorithm="winograd", F(2x2) or F(4x4)
    # as the rule picks, groups and layout as drawn)
    v = RandomDraw(seed * 7919 + 45)
    if kind == "grouped" and not sp.get("illegal") and not sp.get("lenient") and \
            not sp["big"] and not sp["sym_batch"] and v.bool(1 / 3):
        _make_winograd(v, sp)
    # (a sixth stream) a drawn machine model of small caches and thresholds, so that
    # these small shapes take the schedules' big-shape paths (tecomp.testing.machines)
    m = maybe_machine(seed, 46)
    if m is not None and not sp.get("illegal"):
        sp["machine"] = m
    # (an eighth stream, session 28) half the symbolic batches scheduled with a hint of
    # the batch (``tc.auto_schedule(args, shapes={"n": hint})``), as a user who knows
    # the usual batch would: the rules took a hint that was a multiple of a row block
    # for the rows' extent and unrolled a loop whose extent is not a constant (an argmax
    # along rows; tc.build refused the rules' own schedule)
    b = RandomDraw(seed * 7919 + 48)
    if sp.get("sym_batch") and b.bool(0.5):
        sp["batch_hint"] = b.choice((1, 2, 3, 4, 8, 16, 64, 1000, 4096))
        if kind == "reduce" and not sp.get("illegal") and b.bool(0.5):
            # a batch of rows long enough for the rules' vector partials, reduced along
            # the rows (the rules take them a block of rows at a time)
            sp["shape"] = [sp["shape"][0] if sp["shape"] else 3, b.choice((33, 64, 100, 256))]
            sp["kwargs"]["axis"] = -1
    # (a ninth stream, session 28) channels-last 2-d/3-d pooling over padded data with a pixel of
    # several vectors (a partial one at its end): the template's peeled pixels
    # (pool.PEEL_PIXELS: the rows' border pixels partitioned off, a max pooling's
    # maxima in a local block), where the drawn channels are mostly under a vector
    q = RandomDraw(seed * 7919 + 49)
    if (kind == "pool" and not sp.get("illegal") and sp["layout"][1] != "C"
            and sp["nd"] > 1 and any(a or b for a, b in sp["pairs"]) and q.bool(0.5)):
        c = q.choice((21, 37, 48, 64))
        if math.prod(sp["shape"][:-1]) * c <= 600_000:
            sp["shape"][-1] = c
    # (a tenth stream, session 28) a third of the integer max/min/argmax/argmin over
    # another width or an unsigned type: their lanes are combined by matching, the
    # integer max (min) signed or not (emit_control.SELECTION_MATCH_INTS)
    u = RandomDraw(seed * 7919 + 50)
    if kind == "reduce" and sp["dtype"] == "int32" and \
            sp["op"] in ("max", "min", "argmax", "argmin") and u.bool(1 / 3):
        sp["dtype"] = u.choice(tuple(INT_EXTREMES))
    # (a twelfth stream, session 29; drawn before the eleventh, so that it changes only
    # the models the sixth stream drew) half the drawn machine models read memory fastest
    # with 32-byte loads (``stream_load_bytes``): a float row sum past the drawn L2 is
    # then compiled for 256-bit registers where the host's are wider (AVX-512), four
    # accumulators of 8 lanes (strategy.rules.STREAM_LOADS)
    z = RandomDraw(seed * 7919 + 54)
    if sp.get("machine") is not None and z.bool(0.5):
        sp["machine"]["stream_load_bytes"] = 32
    # (an eleventh stream, session 29) half the 2-d/3-d poolings with a stride of 2 or
    # more along the rows under a model whose stream_output_bytes is small: their data
    # "from memory", the next output row's data prefetched along the current row
    # (pool.PREFETCH_NEXT_ROW; the sixth stream's drawn models reach it a quarter of the
    # time, with small caches besides)
    r = RandomDraw(seed * 7919 + 51)
    if (kind == "pool" and not sp.get("illegal") and sp["nd"] > 1
            and sp["s"][-2] >= 2 and "machine" not in sp and r.bool(0.5)):
        sp["machine"] = {"stream_output_bytes": r.choice((64, 1024))}
    # (a seventh stream) an elementwise math function at its special points instead:
    # its gradient against PyTorch's, or its NaN bits vectorized against serial
    w = RandomDraw(seed * 7919 + 47)
    if w.bool(0.05):
        check = w.choice(("grad", "nan_bits"))
        names = list(mathpoints.UNARY) + list(
            mathpoints.GRAD_BINARY if check == "grad" else mathpoints.BINARY)
        sp = {"kind": "mathpoint", "op": "mathpoint", "check": check, "fn": w.choice(names),
              "dtype": w.choice(("float32", "float64")), "nan_seed": w.int(0, 2**16)}
    return OpCase(sp, d.int(0, 2**16), target, f"fuzz seed {seed} (ops: {sp['op']})",
                  fuzz_seed=seed, twist={"op": sp["op"]})


def _values(d, sp):
    """How the float data is drawn: plain, with specials, with ties."""
    sp["specials"] = d.bool(0.5)
    sp["ties"] = d.bool(0.25)


def _shape_nd(d, nd, layout, lo=1):
    n, c = d.int(1, 4), d.choice((1, 2, 3, 5, 8, 16))
    sp = [d.choice(SIZES) if d.bool(0.7) else d.int(lo, 24) for _ in range(nd)]
    sp = [max(lo, x) for x in sp]
    if d.bool(0.25):
        # wide: planes of whole vectors and not (7x7 = 49 = 3 x 16 + 1, 56, 50, 64),
        # more channels, at most about 2M elements
        sp = [d.choice((7, 14, 28, 32, 49, 50, 56, 64, 65)) for _ in range(nd)]
        if nd == 3:
            sp = [min(x, 28) for x in sp]
        c = d.choice((16, 32, 64, 256))
        while n * c * math.prod(sp) > 2_000_000 and c > 1:
            c //= 2
    if layout[1] == "C":
        return [n, c] + sp
    return [n] + sp + [c]


def _draw_padding(d, nd, k, s, dil, size, allow_over: bool):
    """(the padding as written, its (before, after) pairs, may_refuse)."""
    if d.bool(0.1):
        mode = d.choice(("SAME", "VALID", "same", "valid"))
        if mode.upper() == "VALID":
            return mode, [(0, 0)] * nd, False
        pairs = []
        for x, kk, ss, dd in zip(size, k, s, dil):
            total = max((-(-x // ss) - 1) * ss + (kk - 1) * dd + 1 - x, 0)
            pairs.append((total // 2, total - total // 2))
        return mode, pairs, True
    over = allow_over and d.bool(0.1)
    hi = [(kk - 1) if over else kk // 2 for kk in k]
    form = d.choice(("int", "per_dim", "pairs", "flat"))
    if form == "int":
        p = d.int(0, min(hi))
        return p, [(p, p)] * nd, over
    if form == "per_dim":
        ps = [d.int(0, h) for h in hi]
        return ps, [(p, p) for p in ps], over
    pairs = [(d.int(0, h), d.int(0, h)) for h in hi]
    if form == "pairs":
        return [list(p) for p in pairs], pairs, over
    return [b for b, _ in pairs] + [e for _, e in pairs], pairs, over


def _draw_pool(d):
    nd = d.choice((1, 2, 2, 3))
    kind = d.choice(("max", "avg"))
    layout = d.choice({1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[nd])
    k = [d.choice((1, 2, 3, 3, 4, 5)) for _ in range(nd)]
    if nd == 3:
        k = [min(x, 3) for x in k]
    dil = [d.choice((1, 1, 2, 3)) for _ in range(nd)] if kind == "max" else [1] * nd
    stride_form = d.choice(("none", "equal", "less", "more", "one"))
    s = {"none": k, "equal": k, "one": [1] * nd,
         "less": [max(1, x - 1) for x in k],
         "more": [x + d.int(1, 3) for x in k]}[stride_form]
    # windows overlapping along the rows (a stride of 1 up to the kernel's less 1),
    # channels first, 2-d and 3-d, an output row of a vector or more: the template's
    # windows in two steps (Schedule.separate; at a stride of 1 the taps read from the
    # local row's registers, emit_memory.PRIVATE_SHIFTED_LOADS)
    two_steps = layout[1] == "C" and nd > 1 and stride_form != "none" and d.bool(0.7)
    if two_steps:
        k[-1] = max(k[-1], 3)
        s[-1] = d.int(1, k[-1] - 1)
    # 1-d windows side by side (kernel = stride, even, 4 or more) along a row of whole
    # vectors, channels first, no padding: the template's pairs first
    # (pool.PAIRS_FIRST: a local row of each pair's reduction, then the windows' pairs)
    pairs_first = layout == "NCW" and d.bool(0.7)
    if pairs_first:
        k, dil = [d.choice((4, 6, 8))], [1]
        s = list(k)
    shape = _shape_nd(d, nd, layout)
    if pairs_first:
        # (16-64 outputs: whole vectors of 8 and 16 lanes)
        shape[-1] = k[0] * 16 * d.int(1, 4)
        while math.prod(shape) > 600_000 and shape[1] > 1:
            shape[1] //= 2
    if two_steps:
        # (16-33 outputs along the row: one or two vectors and a part of one)
        shape[-1] = max(shape[-1], d.choice((16, 17, 20, 28, 33)) * s[-1]
                        + dil[-1] * (k[-1] - 1))
        while math.prod(shape) > 600_000 and shape[1] > 1:
            shape[1] //= 2
    axes = [i for i, c in enumerate(layout) if c in "DHW"]
    size = [shape[a] for a in axes]
    padding, pairs, may_refuse = _draw_padding(d, nd, k, s, dil, size, allow_over=True)
    if pairs_first:
        padding, pairs, may_refuse = 0, [(0, 0)], False
    # at least one output: grow the input where the window does not fit
    for j, a in enumerate(axes):
        need = dil[j] * (k[j] - 1) + 1 - pairs[j][0] - pairs[j][1]
        if shape[a] < need:
            shape[a] = need + d.int(0, 2)
    if isinstance(padding, str) and padding.upper() == "SAME":
        # SAME depends on the size: recompute with the final shape
        size = [shape[a] for a in axes]
        pairs = []
        for x, kk, ss, dd in zip(size, k, s, dil):
            total = max((-(-x // ss) - 1) * ss + (kk - 1) * dd + 1 - x, 0)
            pairs.append((total // 2, total - total // 2))
    kwargs = {"kernel": k if d.bool(0.7) or len(set(k)) > 1 else k[0]}
    if stride_form != "none":
        kwargs["stride"] = s if len(set(s)) > 1 or d.bool(0.5) else s[0]
    kwargs["padding"] = padding
    if kind == "max" and any(x != 1 for x in dil):
        kwargs["dilation"] = dil
    kwargs["ceil_mode"] = d.bool(0.4)
    if kind == "avg":
        kwargs["count_include_pad"] = d.bool(0.5)
    kwargs["layout"] = layout
    sp = {"op": f"{kind}_pool{nd}d", "nd": nd, "pool": kind, "shape": shape,
          "dtype": "float32", "kwargs": kwargs, "k": k, "s": s, "dil": dil,
          "pairs": [list(p) for p in pairs],
          # (a max window on padding only is -inf: only an average one may be refused)
          "may_refuse": may_refuse and kind == "avg", "layout": layout}
    _values(d, sp)
    return sp


def _draw_adaptive(d):
    nd = d.choice((1, 2, 2, 3))
    kind = d.choice(("max", "avg"))
    layout = d.choice({1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[nd])
    shape = _shape_nd(d, nd, layout)
    axes = [i for i, c in enumerate(layout) if c in "DHW"]
    outs = []
    for a in axes:
        n = shape[a]
        outs.append(d.choice((1, n, max(1, n // 2), n + 1, 2 * n + 1, d.int(1, 2 * n + 2),
                              None)))
    if d.bool(0.3) and all(o is not None for o in outs):
        out = outs[0]
        outs = [out] * nd
        osize = out
    else:
        osize = outs if nd > 1 or d.bool(0.5) else outs[0]
        if nd == 1 and osize is None:
            osize = [None]
    sp = {"op": f"adaptive_{kind}_pool{nd}d", "nd": nd, "pool": kind, "shape": shape,
          "dtype": "float32", "kwargs": {"output_size": osize, "layout": layout},
          "layout": layout, "out_hw": [shape[a] if o is None else o
                                       for a, o in zip(axes, outs)]}
    _values(d, sp)
    return sp


def _draw_global(d):
    kind = d.choice(("max", "avg"))
    layout = d.choice(("NCHW", "NHWC"))
    shape = _shape_nd(d, 2, layout)
    if d.bool(0.3):   # a plane that is (or is not) a multiple of a vector width
        hw = d.choice((16, 32, 64, 17, 33, 63))
        h = d.choice([x for x in (1, 2, 4, 8, 16, 3, 11) if hw % x == 0])
        if layout == "NCHW":
            shape[2], shape[3] = h, hw // h
        else:
            shape[1], shape[2] = h, hw // h
    sp = {"op": f"global_{kind}_pool2d", "nd": 2, "pool": kind, "shape": shape,
          "dtype": "float32", "kwargs": {"layout": layout}, "layout": layout,
          "out_hw": [1, 1]}
    _values(d, sp)
    return sp


def _draw_reduce(d):
    op = d.choice(REDUCERS)
    rank = d.int(1, 5)
    cap = {1: 600, 2: 80, 3: 24, 4: 11, 5: 7}[rank]
    shape = [d.choice([x for x in (1, 2, 3, 5, 7, 8, 16, 17, 31, 33, 64, 65, 300) if x <= cap])
             for _ in range(rank)]
    if d.bool(0.25):
        # big: extents of whole vectors and not, up to a few million elements (the
        # split, column and plane rules' sizes)
        shape = [d.choice((1, 3, 7, 8, 16, 64, 65, 128, 256, 257, 1000, 4099, 65537))
                 for _ in range(rank)]
        limit = 300_000 if op == "prod" else 3_000_000
        while math.prod(shape) > limit:
            i = max(range(rank), key=lambda j: shape[j])
            shape[i] = max(1, shape[i] // d.choice((2, 3, 4, 7)))
    if op in ("all", "any"):
        dtype = "bool"
    elif op in ("sum", "max", "min", "argmax", "argmin") and d.bool(0.2):
        dtype = "int32"
    else:
        dtype = "float32"
    form = d.choice(("none", "empty", "one", "one", "several", "all"))
    if form == "none":
        axis = None
    elif form == "empty":
        axis = () if op not in ("argmax", "argmin") else 0
    elif form == "one":
        ax = d.int(0, rank - 1)
        axis = ax - rank if d.bool(0.3) else ax
    else:
        k = rank if form == "all" else d.int(1, rank)
        axs = d.sample(range(rank), k)
        axis = tuple(a - rank if d.bool(0.3) else a for a in axs)
    kwargs = {"axis": axis, "keepdims": d.bool(0.5)}
    if op in ("argmax", "argmin") and d.bool(0.3):
        kwargs["dtype"] = "int64"
    sp = {"op": op, "shape": shape, "dtype": dtype, "kwargs": kwargs}
    _values(d, sp)
    if dtype != "float32":
        sp["specials"] = False
    return sp


def _draw_conv_window(d, nchw, n_, c, co, wshape, op, extra, hw=None):
    kh, kw = d.choice((1, 3, 3, 5, 2, 4)), d.choice((1, 3, 3, 5, 2, 4, 7))
    st = [d.choice((1, 1, 2, 3)) for _ in range(2)]
    dil = [d.choice((1, 1, 1, 2)) for _ in range(2)]
    h, w = d.int(1, 20), d.int(1, 20)
    if hw is not None:   # a big case: the plane given, odd or not
        h, w = hw + d.int(0, 1), hw + d.int(0, 1)
        st = [1, 1] if d.bool(0.7) else st
    padding, pairs, _ = _draw_padding(d, 2, [kh, kw], st, dil, [h, w], allow_over=False)
    if not isinstance(padding, str):
        need = [dil[0] * (kh - 1) + 1 - sum(pairs[0]), dil[1] * (kw - 1) + 1 - sum(pairs[1])]
        h, w = max(h, need[0]), max(w, need[1])
    else:
        h, w = max(h, dil[0] * (kh - 1) + 1), max(w, dil[1] * (kw - 1) + 1)
        if padding.upper() == "SAME":
            pairs = []
            for x, kk, ss, dd in zip((h, w), (kh, kw), st, dil):
                total = max((-(-x // ss) - 1) * ss + (kk - 1) * dd + 1 - x, 0)
                pairs.append((total // 2, total - total // 2))
    if hw is not None and not isinstance(padding, str) and d.bool(0.5):
        # output rows of whole 64-byte lines (stride 1 along them): where the depthwise
        # NCHW template streams its stores
        st[1] = 1
        ow = w + sum(pairs[1]) - dil[1] * (kw - 1)
        w += -ow % 16
    shape = [n_, c, h, w] if nchw else [n_, h, w, c]
    kwargs = {"stride": st if st[0] != st[1] or d.bool(0.5) else st[0], "padding": padding}
    if dil != [1, 1]:
        kwargs["dilation"] = dil
    kwargs.update(extra)
    return {"op": op, "shape": shape, "dtype": "float32", "kwargs": kwargs,
            "wshape": wshape(kh, kw), "pairs": [list(p) for p in pairs], "s": st,
            "dil": dil, "nchw": nchw, "specials": False, "ties": False}


def _draw_depthwise(d):
    nchw = d.bool()
    n_, c, m = d.int(1, 9), d.choice((1, 2, 3, 4, 8, 16, 17, 32)), d.choice((1, 1, 2, 3))
    hw = None
    if d.bool(0.15):
        # big: input and output past half the last-level cache (32 MiB here), where the
        # depthwise templates stream their outputs (pragma nontemporal)
        n_, c = d.int(2, 9), d.choice((16, 32, 64))
        hw = math.isqrt(6_000_000 // (n_ * c * (1 + m))) + 1
    if nchw:
        wshape = lambda kh, kw: [c, m, kh, kw]  # noqa: E731
    else:
        wshape = lambda kh, kw: [kh, kw, c, m]  # noqa: E731
    sp = _draw_conv_window(d, nchw, n_, c, c * m, wshape,
                           "depthwise_conv2d_nchw" if nchw else "depthwise_conv2d_nhwc", {}, hw)
    sp["groups"], sp["mult"], sp["big"] = c, m, hw is not None
    return sp


def _draw_grouped(d):
    nchw = d.bool()
    g = d.choice((1, 2, 3, 4, 8))
    cpg = d.choice((1, 2, 3, 4, 8, 16, 32))
    while g * cpg > 64:
        cpg //= 2
    opg = d.choice((1, 2, 3, 4, 8))
    n_ = d.int(1, 9) if d.bool(0.5) else 1
    c, o = g * cpg, g * opg
    hw = None
    if d.bool(0.15):
        # big: a group's input planes within a quarter of L2 and the data past a quarter
        # of L3, where the NCHW rows copy their group's planes first
        hw = min(160, math.isqrt(60_000 // cpg))
        n_ = max(1, min(9, -(-3_000_000 // ((c + o) * hw * hw))))
    if nchw:
        wshape = lambda kh, kw: [o, cpg, kh, kw]  # noqa: E731
    else:
        wshape = lambda kh, kw: [kh, kw, cpg, o]  # noqa: E731
    sp = _draw_conv_window(d, nchw, n_, c, o, wshape, "conv2d_nchw" if nchw else "conv2d_nhwc",
                           {"groups": g}, hw)
    sp["groups"], sp["big"] = g, hw is not None
    if g * cpg > 32 and hw is None:
        sp["shape"] = [min(sp["shape"][0], 3)] + sp["shape"][1:]
    return sp


def _make_winograd(d, sp):
    """Rewrite a grouped convolution's spec as a Winograd one: a 3x3 kernel, stride 1, no
    dilation, padding 0 or 1, the plane at least 3x3 (unless its groups are its channels:
    a depthwise grouping, which Winograd does not compute)."""
    nchw, g = sp["nchw"], sp["groups"]
    c = sp["shape"][1] if nchw else sp["shape"][3]
    if c == g:
        return
    p = d.choice((0, 1))
    hw = (2, 3) if nchw else (1, 2)
    for ax in hw:
        sp["shape"][ax] = max(sp["shape"][ax], 3)
    if nchw:
        sp["wshape"][2:] = [3, 3]
    else:
        sp["wshape"][:2] = [3, 3]
    sp["kwargs"] = {"stride": 1, "padding": p, "groups": g, "algorithm": "winograd"}
    sp.update(pairs=[[p, p], [p, p]], s=[1, 1], dil=[1, 1], winograd=True)


def _make_careless(d, sp):
    """Write one argument the way a careless user would: numpy integers, lists for
    tuples, ``True`` or ``2.0`` for a kernel, ``1`` for ``keepdims``.
    ``sp["lenient"]``: the parameter a refusal must name where the value may be refused
    (numpy integers, ``keepdims=1``); ``sp["illegal"]`` where it must be (a bool or a
    float kernel)."""
    kw, kind = sp["kwargs"], sp["kind"]
    if kind == "pool":
        how = d.choice(("np", "np", "bool", "float"))
        k = kw["kernel"]
        if how == "np":
            kw["kernel"] = [np.int64(x) for x in k] if isinstance(k, list) else np.int64(k)
            sp["lenient"] = "kernel"
        elif how == "bool":
            kw["kernel"] = True
            sp["illegal"] = "kernel"
        else:
            kw["kernel"] = float(k[0] if isinstance(k, list) else k)
            sp["illegal"] = "kernel"
    elif kind == "reduce":
        ax = kw["axis"]
        if isinstance(ax, int):
            kw["axis"] = np.int64(ax)
            sp["lenient"] = "axis"
        elif isinstance(ax, tuple) and ax:
            kw["axis"] = list(ax)
        else:
            kw["keepdims"] = int(kw["keepdims"])
            sp["lenient"] = "keepdims"
    elif kind == "adaptive":
        o = kw["output_size"]
        kw["output_size"] = (np.int64(o) if isinstance(o, int) else
                             [None if x is None else np.int64(x) for x in o]
                             if isinstance(o, list) else o)
        sp["lenient"] = "output_size"
    elif kind in ("depthwise", "grouped"):
        st = kw["stride"]
        kw["stride"] = [np.int64(x) for x in st] if isinstance(st, list) else np.int64(st)
        sp["lenient"] = "stride"


def _make_illegal(d, sp):
    """Twist one parameter into an illegal value; ``sp["illegal"]``: the parameter the
    error message must name."""
    kw, kind = sp["kwargs"], sp.get("kind")
    if kind == "pool":
        how = d.choice(("kernel", "stride", "padding", "layout", "dilation"))
        if how == "kernel":
            kw["kernel"] = 0
        elif how == "stride":
            kw["stride"] = 0
        elif how == "padding":
            kw["padding"] = -1
        elif how == "layout":
            kw["layout"] = d.choice(("NCWH", "nchw", "NCHW ", "HWCN"))
        else:
            kw["dilation"] = 0
            if sp["pool"] == "avg":   # avg pooling has no dilation: a TypeError is Python's
                kw.pop("dilation")
                kw["stride"] = 0
                how = "stride"
        sp["illegal"] = how
    elif kind == "adaptive":
        kw["output_size"] = 0
        sp["illegal"] = "output_size"
    elif kind == "global":
        kw["layout"] = "NCWH"
        sp["illegal"] = "layout"
    elif kind == "reduce":
        rank = len(sp["shape"])
        how = d.choice(("range", "twice", "empty") if sp["op"] in ("argmax", "argmin")
                       else ("range", "twice"))
        if how == "range":
            kw["axis"] = d.choice((rank, -rank - 1, 99))
        elif how == "twice":
            kw["axis"] = (0, 0 - rank) if rank > 0 else (0, 0)
        else:
            kw["axis"] = ()
        sp["illegal"] = "axis"
    elif kind == "depthwise":
        w = sp["wshape"]
        ci = 0 if sp["nchw"] else 2
        w[ci] += 1
        sp["illegal"] = "weight"
    elif kind == "grouped":
        c = sp["shape"][1] if sp["nchw"] else sp["shape"][3]
        bad = [g for g in range(2, c + 2) if c % g][:3] or [c + 1]
        kw["groups"] = d.choice(bad)
        sp["illegal"] = "groups"


# ---------------------------------------------------------------------------------
# data and arguments


#: the other integer types of the tenth stream, and the values their data is drawn from
INT_EXTREMES = {
    "int8": (-128, -127, -1, 0, 1, 126, 127),
    "uint8": (0, 1, 127, 128, 129, 254, 255),
    "int64": (-2**63, -2**40, -1, 0, 1, 2**40, 2**63 - 1),
}


def _data(case: OpCase):
    sp = case.spec
    rng = np.random.default_rng(case.seed)
    shape = tuple(sp["shape"])
    if sp["dtype"] == "bool":
        p = rng.choice((0.05, 0.5, 0.95))
        x = rng.random(shape) < p
        if rng.random() < 0.5:
            # (drawn last: a seed's other values stay what they were) true as any
            # non-zero byte, as a uint8 array viewed as bool holds: every bool load tests
            # != 0, and an output must still hold 0 or 1 (an `all`'s bytes' umin)
            ones = rng.choice(np.array([1, 2, 127, 128, 255], np.uint8), size=shape)
            x = np.where(x, ones, np.uint8(0)).astype(np.uint8).view(bool)
    elif sp["dtype"] == "int32":
        x = rng.integers(-5, 6, shape).astype("int32")
    elif sp["dtype"] in INT_EXTREMES:
        # a few values, each type's ends among them (ties; a sign taken for the other)
        x = rng.choice(np.array(INT_EXTREMES[sp["dtype"]], sp["dtype"]), size=shape)
    elif sp.get("op") == "prod":
        # factors exp(N(0, 1 / n)): a product of all of them is exp(N(0, 1)), far from
        # float32's (and float16's) ends in any order
        n = max(1, int(np.prod(shape)))
        x = np.exp(rng.standard_normal(shape) / math.sqrt(n)).astype("float32") * \
            np.where(rng.random(shape) < 0.1, -1, 1).astype("float32")
    elif sp.get("ties"):
        x = rng.integers(-3, 4, shape).astype("float32")
    else:
        x = rng.standard_normal(shape).astype("float32")
    if sp.get("specials") and x.size:
        flat = x.reshape(-1)
        k = max(1, flat.size // 30)
        at = rng.choice(flat.size, size=min(k, flat.size), replace=False)
        flat[at] = rng.choice(np.array(SPECIALS, "float32"), size=at.size)
    w = None
    if "wshape" in sp:
        w = rng.standard_normal(tuple(sp["wshape"])).astype("float32")
    if sp.get("specials") and x.size and rng.random() < 0.3:
        # (drawn after the weights: a seed's other values stay what they were) a whole
        # slice of one special value: a row of -inf, whose argmax is its first index
        # (the start value must be replaced by an equal element), a plane of NaN
        v = np.float32(rng.choice(np.array(SPECIALS[:3], "float32")))
        if rng.random() < 0.5:
            x.reshape(-1, x.shape[-1])[0] = v
        else:
            x[0] = v
    if sp.get("specials") and sp.get("op") in ("max", "min", "argmax", "argmin") and \
            x.size and \
            rng.random() < 0.3:
        x = _one_nan_a_line(rng, x, sp["kwargs"].get("axis"))
    x = x.astype(sp["dtype"])
    if sp.get("in_view") == "broadcast":
        x = np.broadcast_to(x[:1], x.shape)
    return x, w


def _one_nan_a_line(rng, x: np.ndarray, axis) -> np.ndarray:
    """``x`` (drawn last: a seed's other values stay what they were) with its lines
    along the first reduced axis of ``axis`` made finite, then half of them given one NaN
    each: at the line's first, second, middle, second-to-last or last element or
    anywhere, and a quarter of the others an ``inf`` or ``-inf``: a column max's (an
    argmax's) NaN test of its rows in pairs (``codegen.llvm.emit_control.
    PAIRED_NAN_TESTS``, ``PAIRED_SELECTION_TESTS``) must find a NaN in either row of a
    pair, and in the accumulator.  ``x`` unchanged for an axis a case refuses."""
    try:
        axes = _norm_axes(axis, x.ndim)
    except (TypeError, ValueError, ZeroDivisionError):
        return x
    if not axes or x.ndim == 0:
        return x
    ax = axes[0]
    m = np.moveaxis(x, ax, -1).copy()
    n = m.shape[-1]
    lines = m.reshape(-1, n)
    lines[~np.isfinite(lines)] = 0.25
    nl = lines.shape[0]
    pos = np.array([0, min(1, n - 1), n // 2, max(n - 2, 0), n - 1])[
        rng.integers(0, 5, nl)]
    pos = np.where(rng.random(nl) < 0.2, rng.integers(0, n, nl), pos)
    which = rng.random(nl)
    rows = np.arange(nl)
    lines[rows[which < 0.5], pos[which < 0.5]] = np.nan
    inf = (which >= 0.5) & (which < 0.625)
    lines[rows[inf], pos[inf]] = np.where(rng.random(int(inf.sum())) < 0.5, np.inf, -np.inf)
    return np.ascontiguousarray(np.moveaxis(lines.reshape(m.shape), -1, ax))


def _aligned(n: int, dtype, off_bytes: int):
    """A 1-d array of ``n`` elements that starts ``off_bytes`` past a 64-byte line (a
    multiple of the element's size: an array of misaligned elements is refused, as it
    must be, with an ``ArgumentError``)."""
    dt = np.dtype(dtype)
    raw = np.zeros(n * dt.itemsize + 128 + off_bytes, np.uint8)
    start = (-raw.ctypes.data) % 64 + off_bytes
    return raw[start:start + n * dt.itemsize].view(dt)


def _as_input(a: np.ndarray, how: str):
    """``a`` passed the way ``how`` says (the same values)."""
    if how == "broadcast":
        return a                 # (_data made it: stride 0 along the first axis)
    if how == "strided":
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],) if a.ndim else (), a.dtype)
        v = big[..., ::2] if a.ndim else big
        v[...] = a
        return v
    if how == "offset":
        itemsize = a.dtype.itemsize
        v = _aligned(a.size, a.dtype, itemsize).reshape(a.shape)
        v[...] = a
        return v
    if how == "torch_view" and a.ndim >= 2:
        import torch

        # a transposed copy, transposed back: non-contiguous, the same values
        t = torch.from_numpy(np.ascontiguousarray(np.swapaxes(a, 0, -1)))
        return t.transpose(0, -1)
    return a


def _output(shape, dtype, how: str):
    if how == "offset":
        itemsize = np.dtype(dtype).itemsize
        return _aligned(int(np.prod(shape, dtype=np.int64)), dtype, itemsize).reshape(shape)
    if how == "torch":
        import torch

        return torch.zeros(shape, dtype=getattr(torch, dtype))
    return np.zeros(shape, dtype)


# ---------------------------------------------------------------------------------
# references


def _pool_ref(sp, x):
    """(reference in the layout, expected spatial output sizes)."""
    import torch
    import torch.nn.functional as F

    nd, layout = sp["nd"], sp["layout"]
    t = torch.from_numpy(np.array(x)).double()
    last = layout[1] != "C"
    if last:
        t = t.movedim(-1, 1)
    size = list(t.shape[2:])
    if sp["kind"] == "pool":
        k, s, dil, pairs = sp["k"], sp["s"], sp["dil"], sp["pairs"]
        ceil = sp["kwargs"]["ceil_mode"]
        outs = []
        for n, kk, ss, dd, (b, e) in zip(size, k, s, dil, pairs):
            num = n + b + e - dd * (kk - 1) - 1
            o = (-(-num // ss) if ceil else num // ss) + 1
            if ceil and (o - 1) * ss >= n + b:
                o -= 1
            outs.append(o)
        flat = []
        for b, e in reversed(pairs):
            flat += [b, e]
        if sp["pool"] == "max":
            tp = F.pad(t, flat, value=-math.inf)
            fn = getattr(F, f"max_pool{nd}d")
            r = fn(tp, k, s, 0, dil, ceil_mode=ceil)
        else:
            tp = F.pad(t, flat, value=0.0)
            fn = getattr(F, f"avg_pool{nd}d")
            r = fn(tp, k, s, 0, ceil_mode=ceil, count_include_pad=True)
            if not sp["kwargs"]["count_include_pad"]:
                ones = F.pad(torch.ones_like(t), flat, value=0.0)
                r = r / fn(ones, k, s, 0, ceil_mode=ceil, count_include_pad=True)
        r = r[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
    else:
        outs = sp["out_hw"]
        kind = "max" if sp["pool"] == "max" else "avg"
        fn = getattr(F, f"adaptive_{kind}_pool{nd}d")
        r = fn(t, outs)
        if kind == "max":
            # PyTorch's adaptive max returns the values, not a (values, indices) pair here
            r = r[0] if isinstance(r, tuple) else r
    if sp["pool"] == "avg":
        ta = t.abs()
        if sp["kind"] == "pool":
            flat = []
            for b, e in reversed(sp["pairs"]):
                flat += [b, e]
            sc = getattr(F, f"avg_pool{nd}d")(F.pad(ta, flat), sp["k"], sp["s"], 0,
                                              ceil_mode=sp["kwargs"]["ceil_mode"])
            sc = sc[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
            if not sp["kwargs"]["count_include_pad"]:
                sc = sc * 1e3   # a divisor of the data count only: a generous scale
        else:
            sc = getattr(F, f"adaptive_avg_pool{nd}d")(ta, outs)
    else:
        sc = None
    if last:
        r = r.movedim(1, -1)
        sc = sc.movedim(1, -1) if sc is not None else None
    return r.numpy(), (sc.numpy() if sc is not None else None), outs


def _max_pool_grad_ref(sp, x, h):
    """Max pooling's data gradient for head ``h`` (PyTorch's rule, in float64): each
    window's head to its first data element (row-major) equal to its maximum, or to its
    last NaN; never to the padding, nothing from a window on padding only.  ``(gradient,
    scale)``, the scale the summed magnitudes (the sums' order differs)."""
    last = sp["layout"][1] != "C"
    xc = np.moveaxis(x, -1, 1) if last else x
    hc = np.moveaxis(h, -1, 1).astype(np.float64) if last else h.astype(np.float64)
    g = np.zeros(xc.shape, np.float64)
    sc = np.zeros(xc.shape, np.float64)
    size = xc.shape[2:]
    k, s, dil, pairs = sp["k"], sp["s"], sp["dil"], sp["pairs"]
    for pos in np.ndindex(*hc.shape[2:]):
        taps = [[o * ss - b + j * dd for j in range(kk)]
                for o, kk, ss, dd, (b, _) in zip(pos, k, s, dil, pairs)]
        data = [t for t in itertools.product(*taps)
                if all(0 <= i < n for i, n in zip(t, size))]
        if not data:
            continue
        vals = np.stack([xc[(slice(None), slice(None)) + t].astype(np.float64)
                         for t in data], -1)             # [N, C, taps], row-major
        nan = np.isnan(vals)
        top = np.max(np.where(nan, -np.inf, vals), -1, keepdims=True)
        first = np.argmax(vals == top, -1)
        lastnan = vals.shape[-1] - 1 - np.argmax(nan[..., ::-1], -1)
        pick = np.where(nan.any(-1), lastnan, first)
        hv = hc[(slice(None), slice(None)) + pos]
        for ti, t in enumerate(data):
            m = pick == ti
            idx = (slice(None), slice(None)) + t
            g[idx] += np.where(m, hv, 0.0)
            sc[idx] += np.where(m, np.abs(hv), 0.0)
    if last:
        g, sc = np.moveaxis(g, 1, -1), np.moveaxis(sc, 1, -1)
    return g, sc


def _norm_axes(axis, rank):
    if axis is None:
        return tuple(range(rank))
    if isinstance(axis, numbers.Integral):
        axis = (axis,)
    return tuple(sorted(int(a) % rank for a in axis))


def _reduce_ref(sp, x):
    """(reference, scale for the tolerance or None for exact)."""
    import torch

    op, kw = sp["op"], sp["kwargs"]
    rank = x.ndim
    axes = _norm_axes(kw["axis"], rank)
    keep = kw["keepdims"]
    if op in ("all", "any"):   # (true as any non-zero byte: see _data)
        return getattr(np, op)(x.view(np.uint8) != 0, axis=axes, keepdims=keep), None
    x64 = x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)
    if not axes:
        return x.copy(), None
    if op in ("sum", "mean", "prod"):
        fn = {"sum": np.sum, "mean": np.mean, "prod": np.prod}[op]
        r = fn(x64, axis=axes, keepdims=keep)
        if x.dtype.kind != "f":
            return r.astype(x.dtype), None
        if op == "prod":
            cnt = int(np.prod([x.shape[a] for a in axes]))
            # one rounding a factor: at most cnt float32 half-ulps (1.2e-7 * cnt relative,
            # twice that here) whatever the order of the products
            return r, np.abs(r) * 0.024 * cnt + 1e-30
        return r, fn(np.abs(x64), axis=axes, keepdims=keep)
    t = torch.from_numpy(x64)
    if op in ("max", "min"):
        r = (torch.amax if op == "max" else torch.amin)(t, dim=axes, keepdim=keep)
        return r.numpy(), None
    # argmax / argmin: the flat row-major index over the reduced axes
    rest = [a for a in range(rank) if a not in axes]
    tt = t.permute(rest + list(axes))
    tt = tt.reshape([x.shape[a] for a in rest] + [-1])
    r = (torch.argmax if op == "argmax" else torch.argmin)(tt, dim=-1)
    if keep:
        shape = [1 if a in axes else x.shape[a] for a in range(rank)]
        r = r.reshape(shape)
    return r.numpy(), None


def _conv_ref(sp, x, w):
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.array(x)).double()
    wt = torch.from_numpy(w).double()
    if not sp["nchw"]:
        t = t.permute(0, 3, 1, 2)
    g = sp["groups"]
    if sp["kind"] == "depthwise":
        c, m = (w.shape[0], w.shape[1]) if sp["nchw"] else (w.shape[2], w.shape[3])
        if not sp["nchw"]:
            wt = wt.permute(2, 3, 0, 1)   # [C, M, KH, KW]
        wt = wt.reshape(c * m, 1, wt.shape[2], wt.shape[3])
    elif not sp["nchw"]:
        wt = wt.permute(3, 2, 0, 1)       # [O, I, KH, KW]
    flat = []
    for b, e in reversed(sp["pairs"]):
        flat += [b, e]
    tp = F.pad(t, flat)
    r = F.conv2d(tp, wt, None, sp["s"], 0, sp["dil"], g)
    sc = F.conv2d(tp.abs(), wt.abs(), None, sp["s"], 0, sp["dil"], g)
    if not sp["nchw"]:
        r, sc = r.permute(0, 2, 3, 1), sc.permute(0, 2, 3, 1)
    return r.numpy(), sc.numpy()


# ---------------------------------------------------------------------------------
# running


def _exc(e) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


def build_op(case: OpCase):
    """The placeholders and the operator's output: ``(X, W or None, Y)``."""
    sp = case.spec
    shape = list(sp["shape"])
    n = None
    if sp.get("sym_batch"):
        n = shape[0] = tc.var("n")
    X = tc.placeholder(tuple(shape), dtype=sp["dtype"], name="X")
    W = None
    if "wshape" in sp:
        W = tc.placeholder(tuple(sp["wshape"]), name="W")
    fn = getattr(nn, sp["op"])
    kw = dict(sp["kwargs"])
    Y = fn(X, W, **kw) if W is not None else fn(X, **kw)
    return X, W, Y, n


def run_op_case(case: OpCase, check_passes: bool = False) -> "Outcome":
    """Run a case (see the module doc): never raises for a finding."""
    with drawn_machine(case.spec.get("machine")):
        return _run_op_case(case)


def _run_op_case(case: OpCase) -> "Outcome":
    sp = case.spec
    if sp["kind"] == "mathpoint":
        return _run_mathpoint(case)
    illegal = sp.get("illegal")
    try:
        X, W, Y, n = build_op(case)
    except TecompError as e:
        msg = str(e)
        if illegal:
            if illegal.lower() in msg.lower():
                return Outcome("refused", case, "op", msg)
            return Outcome("mismatch", case, "op", f"the error does not name {illegal!r}:\n"
                           f"{type(e).__name__}: {msg}")
        if sp.get("may_refuse") and "padding only" in msg and "padding" in msg:
            return Outcome("refused", case, "op", msg)
        if sp.get("lenient"):
            if sp["lenient"].lower() in msg.lower():
                return Outcome("refused", case, "op", msg)
            return Outcome("mismatch", case, "op", f"the error does not name "
                           f"{sp['lenient']!r}:\n{type(e).__name__}: {msg}")
        return Outcome("crash", case, "op", "a legal call refused:\n" + _exc(e))
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, "op", _exc(e))
    if illegal:
        return Outcome("mismatch", case, "op", f"an illegal call ({illegal!r}) accepted: "
                       f"{case.call_source()}")
    stage, ir = "auto_schedule", ""
    try:
        args = [X] + ([W] if W is not None else []) + [Y] + ([n] if n is not None else [])
        s = tc.auto_schedule(args, target=case.target,
                             shapes={"n": sp["batch_hint"]} if sp.get("batch_hint") else None)
        stage = "build"
        f = tc.build(s, args, target=case.target)
        stage = "data"
        x, w = _data(case)
        stage = "reference"
        with np.errstate(all="ignore"):      # (NaN and inf among the data)
            want, scale = _reference(case, x, w)
        stage = "call"
        # (the symbolic batch n where it is an output axis; a reduction keeps it or not)
        oshape = tuple(x.shape[0] if n is not None and e is n else int(e.value)
                       for e in Y.shape)
        if tuple(want.shape) != oshape:
            return Outcome("mismatch", case, "shape", f"output shape {oshape}, PyTorch's "
                           f"{tuple(want.shape)}")
        out = _output(oshape, Y.dtype, sp["out_view"])
        xin = _as_input(x, sp["in_view"])
        f(*([xin] + ([w] if w is not None else []) + [out]
            + ([x.shape[0]] if n is not None else [])))
        got = out.numpy() if hasattr(out, "numpy") else np.asarray(out)
        stage = "compare"
        # (Winograd's transforms round more than a direct sum: ten times the tolerance)
        bad = _compare(got, want, scale * 10 if sp.get("winograd") and scale is not None
                       else scale)
        if bad:
            try:
                ir = str(tc.lower(s, args))
            except Exception:  # noqa: BLE001
                ir = ""
            return Outcome("mismatch", case, "compare", bad, ir)
        if sp.get("grad"):
            stage = "gradient"
            H = tc.placeholder(Y.shape, dtype=Y.dtype, name="H")
            (G,) = tc.gradient(Y, [X], head=H)
            gs = tc.auto_schedule([X, H, G], target=case.target)
            stage = "gradient build"
            fg = tc.build(gs, [X, H, G], target=case.target)
            h = np.random.default_rng(case.seed + 1).standard_normal(oshape).astype(Y.dtype)
            gx = np.zeros(x.shape, X.dtype)
            stage = "gradient call"
            fg(np.ascontiguousarray(x), h, gx)
            stage = "gradient compare"
            want_g, scale_g = _max_pool_grad_ref(sp, np.asarray(x), h)
            bad = _compare(gx, want_g, scale_g)
            if bad:
                try:
                    ir = str(tc.lower(gs, [X, H, G]))
                except Exception:  # noqa: BLE001
                    ir = ""
                return Outcome("mismatch", case, "gradient", bad, ir)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, stage, _exc(e), ir)
    return Outcome("ok", case, "compare")


def _run_mathpoint(case: OpCase) -> "Outcome":
    """A ``mathpoint`` case: :mod:`tecomp.testing.mathpoints`' check of one function."""
    sp = case.spec
    try:
        if sp["check"] == "grad":
            bad = mathpoints.grad_differences(sp["fn"], sp["dtype"], case.target)
        else:
            bad = mathpoints.nan_bit_differences(sp["fn"], sp["dtype"], case.target,
                                                 seed=sp["nan_seed"])
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, sp["check"], _exc(e))
    if bad:
        return Outcome("mismatch", case, sp["check"], "\n".join(bad))
    return Outcome("ok", case, sp["check"])


def _reference(case, x, w):
    sp = case.spec
    if sp["kind"] in ("pool", "adaptive", "global"):
        if sp["kind"] == "global":
            sp = dict(sp, kind="adaptive")
        r, sc, _ = _pool_ref(sp, x)
        return r, sc
    if sp["kind"] == "reduce":
        return _reduce_ref(sp, x)
    return _conv_ref(sp, x, w)


def _compare(got, want, scale) -> str:
    """'' when ``got`` matches ``want`` (exactly where ``scale`` is None, else within
    ``1e-5 * scale``), else what differs."""
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    with np.errstate(invalid="ignore", over="ignore"):
        return _differs(got, want, scale)


def _differs(got, want, scale) -> str:
    if got.dtype == bool and got.size and got.view(np.uint8).max() > 1:
        return f"a bool output byte is {int(got.view(np.uint8).max())}, not 0 or 1"
    if got.dtype == bool or want.dtype == bool:
        bad = got.astype(bool) != want.astype(bool)
    elif got.dtype.kind in "iu":
        bad = got.astype(np.int64) != want.astype(np.int64)
    else:
        g, r = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(over="ignore"):
            r = np.where(np.isfinite(r), r.astype(got.dtype).astype(np.float64), r) \
                if np.isinf(r.astype(got.dtype)).any() else r   # past the output's range: inf
        gn, rn = np.isnan(g), np.isnan(r)
        fin = ~gn & ~rn
        if scale is None:
            # float32 outputs of an exact float64 reference: equal after rounding
            close = g == r.astype(got.dtype).astype(np.float64)
        else:
            sc = np.where(np.isfinite(scale), scale, 0.0)
            # (the output's own rounding: an ulp of float16, subnormal ones too; float32's
            # within 1e-6)
            fi = np.finfo(got.dtype)
            rel, tiny = max(1e-6, float(fi.eps)), float(fi.smallest_subnormal)
            close = (g == r) | (np.isfinite(g) & np.isfinite(r)
                                & (np.abs(g - r) <= 1e-5 * sc + rel * np.abs(r) + tiny))
        bad = (gn != rn) | (fin & ~close)
    if not bad.any():
        return ""
    idx = np.argwhere(bad)
    first = tuple(int(i) for i in idx[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {first}: got "
            f"{got[first]!r}, want {want[first]!r}")

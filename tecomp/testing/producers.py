"""The fuzzer's ``producers`` family: a templated operator meeting a producer it does not
expect.

The CPU templates (:mod:`tecomp.strategy.cpu.templates`) recognise ``tecomp.nn``'s
operators by their stages' tags and then read the stages around them: a template that
expects a compute where the user gave a placeholder (session 23: the Winograd template on
weights given already transformed) or a placeholder where the user gave a compute, or
that assumes two operands are two tensors, crashed -- and a template's crash is now an
:class:`~tecomp.errors.InternalError`.  Each case here builds one such DAG, schedules it
with ``tc.auto_schedule`` (trials=0), builds it, runs it and compares every output with a
float64 numpy reference.  Each case is drawn from its own random stream
(``RandomDraw(seed * 7919 + 71)``) and is one of:

``winograd_pre``
    ``nn.conv2d_winograd`` of weights given transformed, a placeholder (NCHW or NHWC,
    tile 2 or 4, groups 1 or 2, padding 0 or 1), the weight transform built as its own
    kernel (``tc.auto_schedule([W, U])``); the data a placeholder or a ReLU / cast
    compute; maybe a ReLU after it.
``winograd``
    ``conv2d_nchw`` / ``conv2d_nhwc`` with ``algorithm="winograd"`` whose data is a ReLU,
    ``nn.pad`` or cast compute and whose weights may be a compute (scaled, or an
    ``nn.transpose`` of weights stored in another layout).
``conv``
    A direct (or ``"auto"``) ``conv2d_nchw`` / ``conv2d_nhwc`` / depthwise convolution of
    a computed input (ReLU, pad, cast) or of weights computed (scaled, transposed); groups.
``gemm``
    ``matmul`` / ``dense`` / ``batch_matmul`` whose operand is a ReLU or cast compute, whose
    ``B`` is an ``nn.transpose`` compute, or whose two operands are the same tensor
    (``matmul(A, A)``, ``dense(X, X)``); ``dense``'s bias a compute.
``packed``
    ``tecomp.strategy.cpu.matmul_packed`` of a ``B`` that is a compute (a transpose, a
    ReLU) or the same tensor as ``A``, and a hand-written ``"matmul,matmul_packed"``
    compute reading packed weights given as a placeholder ``[N/nr, K, nr]``.
``pool_conv``
    A max / average / global pooling of a convolution (of a ReLU maybe).
``softmax_mm``
    ``softmax`` / ``log_softmax`` of a ``matmul`` or ``batch_matmul`` (axis -1 or 0).
``sdpa``
    ``scaled_dot_product_attention`` with ``q``, ``k`` and ``v`` the same tensor (or two
    of them), ``q`` a scaled compute, the mask a compute or a placeholder.
``convnd``
    (12% of the seeds, from a stream of their own: ``RandomDraw(seed * 7919 + 73)``)
    ``conv1d_ncw`` / ``conv1d_nwc`` / ``conv3d_ncdhw`` / ``conv3d_ndhwc`` of a computed
    input (ReLU, pad, cast, strided view, broadcast) or of scaled weights; stride,
    padding, dilation, groups (depthwise too).

In 15% of the cases (a stream of their own, ``RandomDraw(seed * 7919 + 74)``) one knob of
the schedule (``tc.autoschedule.default_config``) is set by hand to its default written
another way (:data:`KNOB_TWISTS`): a numpy integer must be taken (``apply_config``, then
built and compared as any case); a float equal to an int choice, an int for a bool, a
string, ``2**40`` or ``-1`` must be refused by ``Config.set`` with an ``AutoScheduleError``
naming the knob (session 25: ``2.0`` reached a template, which split by it).

In every kind, a third of the cases also return a second output that reads the
templated operator's output (``Y`` used twice: ``Y`` and ``relu(Y) + Y``), the
arguments ``[inputs..., Y, Z]``; and a third (``expose``) return the producers of its
inputs too (the ReLU, cast, pad, view, transpose or scaled weights: a stage a template
would inline into the operator is also an output).  A stream of its own
(``RandomDraw(seed * 7919 + 72)``) makes the batch (the rows of a GEMM, the batch of a
convolution, a batch_matmul or attention) a ``tc.var`` in a fifth of the cases (passed last;
not for one tensor used as both operands).

Every DAG here is legal: a kind may meet only the refusals :func:`expected_refusals` lists
for its draws (the class and a phrase of the message: ``algorithm="winograd"`` of a
depthwise grouping or of a symbolic batch, a ``ShapeError``).  Outcomes: ``ok``,
``refused`` (one of those), ``mismatch`` (a wrong value) or ``crash`` (any other exception:
an :class:`~tecomp.errors.InternalError`, a Python error, or a TecompError the kind does not
expect -- a legal DAG refused, e.g. a ``ScheduleError`` or ``LowerError`` from a template).

    python -m tecomp.testing.fuzz --only producers --cases 300 --case-timeout 200
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass

import numpy as np

import tecomp as tc
from .. import nn
from ..autoschedule import apply_config, default_config
from ..errors import InternalError, ShapeError, TecompError
from ..strategy.cpu import matmul_packed
from ..te.tensor import PlaceholderOp
from .diff import Outcome, SpecCase
from .draw import RandomDraw
from .machines import drawn_machine, machine_line, maybe_machine

FAMILY = "producers"
KINDS = ("winograd_pre", "winograd", "conv", "gemm", "packed", "pool_conv", "softmax_mm",
         "sdpa")
#: kinds drawn from a stream of their own (the seeds of KINDS keep their cases otherwise)
LATE_KINDS = ("convnd",)
#: how a knob of the schedule is set by hand (``tc.autoschedule.default_config(...).set``):
#: the default as a numpy integer (legal), or as a float, an int for a bool (or a bool for
#: an int), a string, 2**40 or -1 (each refused with an AutoScheduleError naming the knob)
KNOB_TWISTS = ("np_int", "float", "int_bool", "string", "huge", "negative")


@dataclass
class ProducerCase(SpecCase):
    """One case: ``spec`` (JSON-able: the kind and its draws) and the seed of its data."""

    family: str = FAMILY

    def source(self) -> str:
        sp = self.spec
        return "\n".join([
            f"# producers family: {sp['kind']} {sp}",
            *([machine_line(sp["machine"])] if sp.get("machine") else []),
            *self.replay_lines("tecomp.testing.fuzz --only producers", "producers",
                               "run_producer_case")])


def draw_producer_case(seed: int, target: str = "llvm") -> ProducerCase:
    """Case ``seed`` of the family (its own random stream)."""
    d = RandomDraw(seed * 7919 + 71)
    kind = d.choice(KINDS)
    sp = _DRAW[kind](d)
    late = RandomDraw(seed * 7919 + 73)
    if late.bool(0.12):      # (the draws of d above and below stay what they were)
        kind = late.choice(LATE_KINDS)
        sp = _DRAW[kind](late)
    sp["kind"] = kind
    sp["twice"] = d.bool(1 / 3)
    data_seed = d.int(0, 2**16)
    sp["expose"] = d.bool(1 / 3)
    # (a stream of its own: the draws above stay what they were) a symbolic batch
    e = RandomDraw(seed * 7919 + 72)
    sp["sym"] = e.bool(0.2) and not (sp.get("same") or sp.get("data") == "same"
                                     or sp.get("how") == "same" or sp.get("share") == "all")
    # (another stream) a knob of the schedule set by hand, as a careless user writes it
    kn = RandomDraw(seed * 7919 + 74)
    if kn.bool(0.15):
        sp["knob"] = {"how": kn.choice(KNOB_TWISTS), "pick": kn.int(0, 999)}
    # (another) a drawn machine model of small caches and thresholds: the templates'
    # big-shape paths for these small shapes (tecomp.testing.machines)
    m = maybe_machine(seed, 75)
    if m is not None:
        sp["machine"] = m
    return ProducerCase(sp, data_seed, target, f"fuzz seed {seed} (producers: {kind})",
                        fuzz_seed=seed, twist={"kind": kind})


def expected_refusals(sp) -> tuple:
    """The refusals a case may meet, ``((TecompError subclass, a phrase of its message),
    ...)``: the documented ones of its kind for its draws.  Every other TecompError is a
    crash (a legal DAG refused)."""
    out = []
    if sp["kind"] in ("winograd", "winograd_pre"):
        if sp["c"] == sp["groups"]:      # one input channel per group: no Winograd
            out.append((ShapeError, "depthwise grouping"))
        if sp.get("sym"):
            out.append((ShapeError, "symbolic batch"))
    if sp["kind"] in ("conv", "pool_conv") and sp["data"] == "same" and \
            not sp["depthwise"] and sp["layout"] == "NHWC" and \
            sp["c"] + 2 * sp["pad"] < sp["k"]:
        # one tensor [k, k, c, c] as data and HWIO weights: its width c (padded) is
        # narrower than the kernel (seed 9065)
        out.append((ShapeError, "the kernel does not fit"))
    return tuple(out)


def _expected(sp, e) -> bool:
    msg = str(e)
    return any(isinstance(e, cls) and phrase in msg for cls, phrase in expected_refusals(sp))


# ---------------------------------------------------------------------------------
# drawing: small shapes (each case is an auto_schedule and a build)

def _draw_winograd_pre(d):
    g = d.choice((1, 1, 2))
    return {"layout": d.choice(("NCHW", "NHWC")), "tile": d.choice((2, 4)), "groups": g,
            "n": d.int(1, 2), "c": g * d.int(1, 4), "o": g * d.int(1, 4),
            "hw": [d.int(3, 9), d.int(3, 9)], "pad": d.choice((0, 1)),
            "data": d.choice(("ph", "relu", "cast", "view")), "epi": d.bool(0.4),
            "u": d.choice(("ph", "ph", "scaled"))}


def _draw_winograd(d):
    sp = _draw_winograd_pre(d)
    sp["data"] = d.choice(("relu", "pad", "cast", "ph", "view", "bcast"))
    sp["weight"] = d.choice(("ph", "scaled", "transposed"))
    sp.pop("tile")
    return sp


def _draw_conv(d):
    layout = d.choice(("NCHW", "NHWC"))
    dw = d.bool(0.25) and layout == "NCHW"
    g = 1 if dw else d.choice((1, 1, 2))
    c = g * d.int(1, 4)
    k = d.choice((1, 3, 3, 5))
    return {"layout": layout, "depthwise": dw, "groups": g, "n": d.int(1, 2), "c": c,
            "o": c if dw else g * d.int(1, 4), "k": k,
            "hw": [d.int(k, 9), d.int(k, 9)], "stride": d.choice((1, 1, 2)),
            "pad": d.int(0, k // 2),
            "data": d.choice(("relu", "pad", "cast", "ph", "view", "bcast", "same")),
            "weight": d.choice(("ph", "scaled", "transposed")),
            "algorithm": "direct" if dw else d.choice(("direct", "auto"))}


def _draw_gemm(d):
    op = d.choice(("matmul", "dense", "batch_matmul"))
    m, n, k = d.int(1, 24), d.int(1, 24), d.int(1, 24)
    same = d.bool(0.3)
    if same:       # the same tensor as both operands: square where it must be
        if op == "matmul":
            n = k = m
        elif op == "dense":
            n = m
        else:
            n = k = m
    return {"op": op, "m": m, "n": n, "k": k, "b": d.int(1, 3), "same": same,
            "a": d.choice(("ph", "relu", "cast")),
            "bop": "ph" if same else d.choice(("ph", "transposed", "relu")),
            "bias": d.choice(("none", "ph", "computed")) if op == "dense" else "none",
            "tb": d.bool() if op == "batch_matmul" else False}


def _draw_packed(d):
    m, n, k = d.int(1, 24), d.int(1, 40), d.int(1, 24)
    how = d.choice(("ph_packed", "transposed", "relu", "same"))
    if how == "same":
        n = k = m
    return {"m": m, "n": n, "k": k, "how": how, "nr": d.choice((4, 8, 16))}


def _draw_pool_conv(d):
    sp = _draw_conv(d)
    sp["pool"] = d.choice(("max", "avg", "global_avg", "global_max"))
    sp["pk"] = d.choice((1, 2, 3))
    sp["ps"] = d.choice((1, 2))
    sp["relu"] = d.bool()
    return sp


def _draw_softmax_mm(d):
    return {"op": d.choice(("matmul", "batch_matmul")),
            "sm": d.choice(("softmax", "log_softmax")), "axis": d.choice((-1, -1, 0)),
            "m": d.int(1, 20), "n": d.int(1, 20), "k": d.int(1, 20), "b": d.int(1, 3)}


def _draw_sdpa(d):
    L = d.int(1, 12)
    return {"b": d.int(1, 2), "h": d.int(1, 2), "lq": L, "d": d.choice((1, 4, 8, 16)),
            "share": d.choice(("qkv", "kv", "qk", "none", "all")),
            "q": d.choice(("ph", "scaled")), "mask": d.choice(("none", "ph", "computed",
                                                               "bool")),
            "scale": d.choice((None, 0.5, 2.0))}


def _draw_convnd(d):
    nd = d.choice((1, 3))
    first = d.bool()
    kind = d.choice(("plain", "plain", "grouped", "depthwise"))
    g = d.choice((2, 3)) if kind != "plain" else 1
    c = g if kind == "depthwise" else g * d.int(1, 3)
    o = g * d.int(1, 3)
    k = [d.choice((1, 2, 3)) for _ in range(nd)]
    dil = [d.choice((1, 1, 2)) for _ in range(nd)]
    size = [d.int(dd * (kk - 1) + 1, (9 if nd == 3 else 20)) for kk, dd in zip(k, dil)]
    return {"nd": nd, "first": first, "groups": g, "n": d.int(1, 2), "c": c, "o": o,
            "k": k, "size": size, "stride": [d.choice((1, 1, 2)) for _ in range(nd)],
            "dil": dil, "pad": [d.int(0, kk // 2) for kk in k],
            "data": d.choice(("relu", "pad", "cast", "ph", "view", "bcast")),
            "weight": d.choice(("ph", "ph", "scaled"))}


_DRAW = {"winograd_pre": _draw_winograd_pre, "winograd": _draw_winograd, "conv": _draw_conv,
         "gemm": _draw_gemm, "packed": _draw_packed, "pool_conv": _draw_pool_conv,
         "softmax_mm": _draw_softmax_mm, "sdpa": _draw_sdpa, "convnd": _draw_convnd}


# ---------------------------------------------------------------------------------
# building: the TE DAG and its float64 reference from the same draws

class _Inputs:
    """The placeholders and their data, in argument order."""

    def __init__(self, seed: int, sym: bool = False):
        self.rng = np.random.default_rng(seed)
        self.tensors, self.arrays = [], []
        self.stages = []    # (a producer compute, its float64 value): outputs too with expose
        self.var = tc.var("n") if sym else None     # the symbolic batch, passed last
        self.n = None                               # its value (the first batched shape's)

    def te(self, shape, batch: bool = True):
        """``shape`` as a TE shape: its first extent the symbolic batch where there is one
        (and ``batch``)."""
        if self.var is None or not batch:
            return tuple(shape)
        if self.n is None:
            self.n = int(shape[0])
        assert self.n == shape[0], (self.n, shape)   # (a fuzzer bug: one batch)
        return (self.var,) + tuple(shape[1:])

    def stage(self, t, value):
        if not isinstance(t.op, PlaceholderOp):
            self.stages.append((t, np.asarray(value, np.float64)))

    def add(self, shape, dtype="float32", name="I", data=None, batch=False):
        t = tc.placeholder(self.te(shape, batch), dtype, name=name)
        if data is None:
            data = (self.rng.standard_normal(tuple(shape))).astype(dtype)
        self.tensors.append(t)
        self.arrays.append(np.asarray(data, dtype))
        return t, self.arrays[-1].astype(np.float64)


def _data_producer(ins, how, shape, pad_dims, name="X"):
    t, v, extra = _data_producer_(ins, how, shape, pad_dims, name)
    ins.stage(t, v)
    return t, v, extra


def _data_producer_(ins, how, shape, pad_dims, name="X"):
    """The data of a convolution as ``how`` produces it: (the tensor, its float64 value,
    the extra padding an ``nn.pad`` added on each of ``pad_dims``)."""
    if how == "cast":
        X, x = ins.add(shape, "float16", name, batch=True)
        return nn.cast(X, "float32", name=f"{name}.cast"), x, 0
    if how == "view":    # every other row of a taller tensor (a strided view compute)
        Xb, xb = ins.add((shape[0], 2 * shape[1]) + tuple(shape[2:]), name=name, batch=True)
        V = tc.compute(ins.te(shape), lambda a, b, *r: Xb(a, 2 * b + 1, *r),
                       name=f"{name}.view")
        return V, xb[:, 1::2], 0
    if how == "bcast":   # one image broadcast along the batch
        X1, x1 = ins.add((1,) + tuple(shape[1:]), name=f"{name}1")
        V = tc.compute(ins.te(shape), lambda a, *r: X1(0, *r), name=f"{name}.bcast")
        return V, np.broadcast_to(x1, shape), 0
    X, x = ins.add(shape, name=name, batch=True)
    if how == "relu":
        return nn.relu(X, name=f"{name}.relu"), np.maximum(x, 0), 0
    if how == "pad":
        before = [1 if i in pad_dims else 0 for i in range(len(shape))]
        xp = np.pad(x, [(b, b) for b in before], constant_values=0.5)
        return nn.pad(X, before, value=0.5, name=f"{name}.pad"), xp, 1
    return X, x, 0


def _conv_ref(x, w, stride, pad, groups, nchw=True):
    """A float64 convolution: ``x`` NCHW, ``w`` OIHW (converted for NHWC by the caller)."""
    if not nchw:
        x = x.transpose(0, 3, 1, 2)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    N, C, H, W = x.shape
    O, I, KH, KW = w.shape
    OH, OW = (H - KH) // stride + 1, (W - KW) // stride + 1
    out = np.zeros((N, O, OH, OW))
    og = O // groups
    for g in range(groups):
        xs = x[:, g * I:(g + 1) * I]
        for dy in range(KH):
            for dx in range(KW):
                patch = xs[:, :, dy:dy + stride * (OH - 1) + 1:stride,
                           dx:dx + stride * (OW - 1) + 1:stride]
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, dy, dx])
    return out if nchw else out.transpose(0, 2, 3, 1)


def _weights(ins, sp, O, I, K, nchw):
    W, w = _weights_(ins, sp, O, I, K, nchw)
    ins.stage(W, w if nchw else w.transpose(2, 3, 1, 0))
    return W, w


def _weights_(ins, sp, O, I, K, nchw):
    """Weights OIHW (NCHW) or HWIO (NHWC) as ``sp["weight"]`` produces them: (the tensor,
    the float64 OIHW value)."""
    how = sp.get("weight", "ph")
    shape = (O, I, K, K) if nchw else (K, K, I, O)
    if how == "transposed":    # stored in the other layout, transposed by a compute
        other = (K, K, I, O) if nchw else (O, I, K, K)
        Wo, wo = ins.add(other, name="Wt")
        W = nn.transpose(Wo, (3, 2, 0, 1) if nchw else (2, 3, 1, 0), name="W.t")
        w = wo.transpose(3, 2, 0, 1) if nchw else wo
        return W, w
    W, w = ins.add(shape, name="W")
    if how == "scaled":
        W = tc.compute(shape, lambda *i: W(*i) * tc.const(0.5, "float32"), name="W.scaled")
        w = w * 0.5
    return W, (w if nchw else w.transpose(3, 2, 0, 1))


def _build_winograd_pre(ins, sp):
    nchw = sp["layout"] == "NCHW"
    n, c, o, g, (h, w_) = sp["n"], sp["c"], sp["o"], sp["groups"], sp["hw"]
    shape = (n, c, h, w_) if nchw else (n, h, w_, c)
    X, x, _ = _data_producer(ins, sp["data"], shape, ())
    wshape = (o, c // g, 3, 3) if nchw else (3, 3, c // g, o)
    wdata = ins.rng.standard_normal(wshape).astype("float32")
    Wp = tc.placeholder(wshape, name="W")
    U = nn.winograd_weight_transform(Wp, sp["layout"], tile=sp["tile"], groups=g)
    # the weight transform as its own kernel, run once (what the docs say to do)
    wt = tc.build(tc.auto_schedule([Wp, U]), [Wp, U])
    u = np.zeros(tc.utils.get_const_tuple(U.shape), "float32")
    wt(wdata, u)
    if sp.get("u") == "scaled":     # U a compute of a placeholder, not the transform's stage
        Up, _ = ins.add(u.shape, name="U2", data=u * 2)
        Ut = tc.compute(u.shape, lambda *i: Up(*i) * tc.const(0.5, "float32"), name="U.half")
    else:
        Ut, _ = ins.add(u.shape, name="U", data=u)
    Y = nn.conv2d_winograd(X, Ut, sp["layout"], padding=sp["pad"], groups=g)
    w64 = wdata.astype(np.float64)
    ref = _conv_ref(x, w64 if nchw else w64.transpose(3, 2, 0, 1), 1, sp["pad"], g, nchw)
    if sp["epi"]:
        Y, ref = nn.relu(Y, name="epi"), np.maximum(ref, 0)
    return Y, ref, 1e-3


def _build_winograd(ins, sp):
    nchw = sp["layout"] == "NCHW"
    n, c, o, g, (h, w_) = sp["n"], sp["c"], sp["o"], sp["groups"], sp["hw"]
    shape = (n, c, h, w_) if nchw else (n, h, w_, c)
    X, x, _ = _data_producer(ins, sp["data"], shape, (2, 3) if nchw else (1, 2))
    W, w = _weights(ins, sp, o, c // g, 3, nchw)
    conv = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
    Y = conv(X, W, padding=sp["pad"], groups=g, algorithm="winograd")
    ref = _conv_ref(x, w, 1, sp["pad"], g, nchw)
    if sp["epi"]:
        Y, ref = nn.relu(Y, name="epi"), np.maximum(ref, 0)
    return Y, ref, 1e-3


def _conv_of(ins, sp):
    if sp["data"] == "same" and not sp["depthwise"]:
        # one tensor as data and weights: X [c, c, k, k] (NCHW) / [k, k, c, c] (NHWC, HWIO)
        nchw = sp["layout"] == "NCHW"
        c, k = sp["c"], sp["k"]
        shape = (c, c, k, k) if nchw else (k, k, c, c)
        X, x = ins.add(shape, name="X")
        conv = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
        Y = conv(X, X, stride=sp["stride"], padding=sp["pad"], algorithm=sp["algorithm"])
        w = x if nchw else x.transpose(3, 2, 0, 1)
        return Y, _conv_ref(x, w, sp["stride"], sp["pad"], 1, nchw)
    if sp["data"] == "same":
        sp = dict(sp, data="ph")
    nchw = sp["layout"] == "NCHW"
    n, c, o, g, k, (h, w_) = sp["n"], sp["c"], sp["o"], sp["groups"], sp["k"], sp["hw"]
    shape = (n, c, h, w_) if nchw else (n, h, w_, c)
    X, x, _ = _data_producer(ins, sp["data"], shape, (2, 3) if nchw else (1, 2))
    if sp["depthwise"]:
        W, w = ins.add((c, 1, k, k), name="W")
        if sp["weight"] == "scaled":
            W = tc.compute((c, 1, k, k), lambda *i: W(*i) * tc.const(0.5, "float32"),
                           name="W.scaled")
            w = w * 0.5
        Y = nn.depthwise_conv2d_nchw(X, W, stride=sp["stride"], padding=sp["pad"])
        return Y, _conv_ref(x, w, sp["stride"], sp["pad"], c, True)
    W, w = _weights(ins, sp, o, c // g, k, nchw)
    conv = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
    Y = conv(X, W, stride=sp["stride"], padding=sp["pad"], groups=g,
             algorithm=sp["algorithm"])
    return Y, _conv_ref(x, w, sp["stride"], sp["pad"], g, nchw)


def _build_conv(ins, sp):
    Y, ref = _conv_of(ins, sp)
    return Y, ref, 1e-4


def _operand(ins, how, shape, name, batch=False):
    A, a = _operand_(ins, how, shape, name, batch)
    ins.stage(A, a)
    return A, a


def _operand_(ins, how, shape, name, batch):
    if how == "cast":
        A, a = ins.add(shape, "float16", name, batch=batch)
        return nn.cast(A, "float32", name=f"{name}.cast"), a
    A, a = ins.add(shape, name=name, batch=batch)
    if how == "relu":
        return nn.relu(A, name=f"{name}.relu"), np.maximum(a, 0)
    return A, a


def _build_gemm(ins, sp):
    op, m, n, k, b = sp["op"], sp["m"], sp["n"], sp["k"], sp["b"]
    ash = {"matmul": (m, k), "dense": (m, k), "batch_matmul": (b, m, k)}[op]
    A, a = _operand(ins, sp["a"], ash, "A", batch=True)   # (its rows or batch symbolic)
    # B as the op reads it: matmul [K, N], dense [N, K], batch_matmul [b, K, N] or [b, N, K]
    bsh = {"matmul": (k, n), "dense": (n, k),
           "batch_matmul": (b, n, k) if sp["tb"] else (b, k, n)}[op]
    if sp["same"]:
        B, bv = A, a
    elif sp["bop"] == "transposed":
        perm = (1, 0) if len(bsh) == 2 else (0, 2, 1)
        Bs, bs = ins.add(tuple(bsh[p] for p in perm), name="Bt", batch=op == "batch_matmul")
        B, bv = nn.transpose(Bs, perm, name="B.t"), bs.transpose(perm)
        ins.stage(B, bv)
    else:
        B, bv = _operand(ins, sp["bop"], bsh, "B", batch=op == "batch_matmul")
    if op == "matmul":
        return nn.matmul(A, B), a @ bv, 1e-4
    if op == "batch_matmul":
        bt = bv.transpose(0, 2, 1) if sp["tb"] else bv
        return nn.batch_matmul(A, B, transpose_b=sp["tb"]), a @ bt, 1e-4
    bias, bb = None, 0.0
    if sp["bias"] != "none":
        bias, bb = ins.add((n,), name="bias")
        if sp["bias"] == "computed":
            bias, bb = nn.relu(bias, name="bias.relu"), np.maximum(bb, 0)
    return nn.dense(A, B, bias), a @ bv.T + bb, 1e-4


def _build_packed(ins, sp):
    m, n, k, nr, how = sp["m"], sp["n"], sp["k"], sp["nr"], sp["how"]
    A, a = ins.add((m, k), name="A", batch=True)
    if how == "ph_packed":
        # weights packed once, apart, into [N/nr, K, nr] panels (zeros past N)
        nb = -(-n // nr)
        bv = ins.rng.standard_normal((k, n))
        pk = np.zeros((nb, k, nr))
        for j in range(n):
            pk[j // nr, :, j % nr] = bv[:, j]
        P, _ = ins.add(pk.shape, name="packB", data=pk.astype("float32"))
        bv = bv.astype("float32").astype(np.float64)
        r = tc.reduce_axis((0, k), name="k")
        Y = tc.compute(ins.te((m, n)),
                       lambda i, j: tc.sum(A[i, r] * P[j // nr, r, j % nr], axis=r),
                       name="matmul", tag="matmul,matmul_packed", attrs={"nr": nr})
        return Y, a @ bv, 1e-4
    if how == "same":
        B, bv = A, a
    elif how == "transposed":
        Bs, bs = ins.add((n, k), name="Bt")
        B, bv = nn.transpose(Bs, (1, 0), name="B.t"), bs.T
        ins.stage(B, bv)
    else:
        B, bv = _operand(ins, "relu", (k, n), "B")
    return matmul_packed(A, B, nr=nr), a @ bv, 1e-4


def _build_pool_conv(ins, sp):
    Y, ref = _conv_of(ins, sp)
    if sp["relu"]:
        Y, ref = nn.relu(Y, name="conv.relu"), np.maximum(ref, 0)
    layout = sp["layout"]
    nchw = layout == "NCHW"
    r = ref if nchw else ref.transpose(0, 3, 1, 2)
    if sp["pool"].startswith("global"):
        kind = sp["pool"].split("_")[1]
        P = (nn.global_avg_pool2d if kind == "avg" else nn.global_max_pool2d)(Y, layout)
        pr = r.mean((2, 3), keepdims=True) if kind == "avg" else r.max((2, 3), keepdims=True)
    else:
        pk, ps = min(sp["pk"], r.shape[2], r.shape[3]), sp["ps"]
        fn = nn.max_pool2d if sp["pool"] == "max" else nn.avg_pool2d
        P = fn(Y, pk, ps, layout=layout)
        oh, ow = (r.shape[2] - pk) // ps + 1, (r.shape[3] - pk) // ps + 1
        win = np.stack([r[:, :, dy:dy + ps * (oh - 1) + 1:ps, dx:dx + ps * (ow - 1) + 1:ps]
                        for dy in range(pk) for dx in range(pk)])
        pr = win.max(0) if sp["pool"] == "max" else win.mean(0)
    return P, (pr if nchw else pr.transpose(0, 2, 3, 1)), 1e-4


def _build_softmax_mm(ins, sp):
    m, n, k, b = sp["m"], sp["n"], sp["k"], sp["b"]
    if sp["op"] == "matmul":
        A, a = ins.add((m, k), name="A", batch=True)
        B, bv = ins.add((k, n), name="B")
        Y = nn.matmul(A, B)
    else:
        A, a = ins.add((b, m, k), name="A", batch=True)
        B, bv = ins.add((b, k, n), name="B", batch=True)
        Y = nn.batch_matmul(A, B)
    y = a @ bv
    ax = sp["axis"]
    e = np.exp(y - y.max(ax, keepdims=True))
    s = e / e.sum(ax, keepdims=True)
    if sp["sm"] == "softmax":
        return nn.softmax(Y, axis=ax), s, 1e-4
    return nn.log_softmax(Y, axis=ax), np.log(s), 1e-4


def _build_sdpa(ins, sp):
    b, h, L, dd = sp["b"], sp["h"], sp["lq"], sp["d"]
    if sp["share"] == "all":    # q, k, v and the mask one tensor [1, 1, L, L]
        Q, q = ins.add((1, 1, L, L), name="Q")
        Y = nn.scaled_dot_product_attention(Q, Q, Q, Q, scale=sp["scale"])
        s = q @ q.transpose(0, 1, 3, 2) * (sp["scale"] or 1 / np.sqrt(L)) + q
        e = np.exp(s - s.max(-1, keepdims=True))
        return Y, e / e.sum(-1, keepdims=True) @ q, 1e-4
    shape = (b, h, L, dd)
    Q, q = ins.add(shape, name="Q", batch=True)
    share = sp["share"]
    K, k = (Q, q) if share in ("qkv", "qk") else ins.add(shape, name="K", batch=True)
    if share == "qkv":
        V, v = Q, q
    elif share == "kv":
        V, v = K, k
    else:
        V, v = ins.add(shape, name="V", batch=True)
    if sp["q"] == "scaled":
        Q = tc.compute(ins.te(shape), lambda *i: Q(*i) * tc.const(0.5, "float32"), name="Q.scaled")
        q = q * 0.5
        ins.stage(Q, q)
    mask, mv = None, 0.0
    if sp["mask"] == "bool":
        keep = ins.rng.random((L, L)) < 0.7
        mask, _ = ins.add((L, L), "bool", name="M", data=keep)
        mv = np.where(keep, 0.0, -np.inf)
    elif sp["mask"] != "none":
        mask, mv = ins.add((L, L), name="M")
        if sp["mask"] == "computed":
            mask, mv = nn.relu(mask, name="M.relu"), np.maximum(mv, 0)
    scale = sp["scale"] if sp["scale"] is not None else 1 / np.sqrt(dd)
    Y = nn.scaled_dot_product_attention(Q, K, V, mask, scale=sp["scale"])
    s = q @ k.transpose(0, 1, 3, 2) * scale + mv
    with np.errstate(invalid="ignore"):
        mx = s.max(-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
        p = e / e.sum(-1, keepdims=True)
    p = np.where(np.isnan(p), 0.0, p)       # a row with no key left is 0
    return Y, p @ v, 1e-4


def _convnd_ref(x, w, stride, pads, dil, groups):
    """A float64 N-d convolution: ``x`` [N, C, *S], ``w`` [O, C / groups, *K] (channels
    first; the caller moves them)."""
    nd = x.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pads])
    O, I = w.shape[:2]
    K = w.shape[2:]
    outs = [(x.shape[2 + j] - dil[j] * (K[j] - 1) - 1) // stride[j] + 1 for j in range(nd)]
    out = np.zeros((x.shape[0], O, *outs))
    og = O // groups
    for g in range(groups):
        xs = x[:, g * I:(g + 1) * I]
        for taps in np.ndindex(*K):
            sl = tuple(slice(t * dd, t * dd + s_ * (n - 1) + 1, s_)
                       for t, dd, s_, n in zip(taps, dil, stride, outs))
            out[:, g * og:(g + 1) * og] += np.einsum(
                "nc...,oc->no...", xs[(slice(None), slice(None)) + sl],
                w[(slice(g * og, (g + 1) * og), slice(None)) + tuple(taps)])
    return out


def _build_convnd(ins, sp):
    nd, first, g = sp["nd"], sp["first"], sp["groups"]
    n, c, o, k, size = sp["n"], sp["c"], sp["o"], sp["k"], sp["size"]
    shape = (n, c, *size) if first else (n, *size, c)
    spatial = tuple(range(2, nd + 2)) if first else tuple(range(1, nd + 1))
    X, x, _ = _data_producer(ins, sp["data"], shape, spatial)
    wshape = (o, c // g, *k) if first else (*k, c // g, o)
    W, w = ins.add(wshape, name="W")
    if sp["weight"] == "scaled":
        W = tc.compute(wshape, lambda *i: W(*i) * tc.const(0.5, "float32"), name="W.scaled")
        w = w * 0.5
        ins.stage(W, w)
    if not first:   # to channels first: x [N, *S, C] -> [N, C, *S], w [*K, I, O] -> [O, I, *K]
        x = np.moveaxis(x, -1, 1)
        w = np.moveaxis(np.moveaxis(w, -1, 0), -1, 1)
    op = {(1, True): nn.conv1d_ncw, (1, False): nn.conv1d_nwc,
          (3, True): nn.conv3d_ncdhw, (3, False): nn.conv3d_ndhwc}[nd, first]
    Y = op(X, W, stride=sp["stride"], padding=sp["pad"], dilation=sp["dil"], groups=g)
    # (an nn.pad data producer added one row of 0.5 on each spatial side: in x already)
    ref = _convnd_ref(x, w, sp["stride"], sp["pad"], sp["dil"], g)
    return Y, (ref if first else np.moveaxis(ref, 1, -1)), 1e-4


_BUILD = {"winograd_pre": _build_winograd_pre, "winograd": _build_winograd,
          "conv": _build_conv, "gemm": _build_gemm, "packed": _build_packed,
          "pool_conv": _build_pool_conv, "softmax_mm": _build_softmax_mm,
          "sdpa": _build_sdpa, "convnd": _build_convnd}


def build_case(case: ProducerCase):
    """``(inputs, their arrays, outputs, float64 references, tolerance, the symbolic
    batch's ``(var, value)`` or None)`` of a case."""
    sp = case.spec
    ins = _Inputs(case.seed, sp.get("sym", False))
    Y, ref, tol = _BUILD[sp["kind"]](ins, sp)
    outs, refs = [Y], [np.asarray(ref, np.float64)]
    if sp.get("twice"):     # Y used twice: an output and read by a second one
        Z = tc.compute(Y.shape, lambda *i: tc.maximum(Y(*i), tc.const(0, Y.dtype)) + Y(*i),
                       name="twice")
        outs.append(Z)
        refs.append(np.maximum(refs[0], 0) + refs[0])
    if sp.get("expose"):    # the producers are outputs too (computed, not only inlined)
        for t, v in ins.stages:
            outs.append(t)
            refs.append(v)
    sym = (ins.var, ins.n) if ins.var is not None and ins.n is not None else None
    return ins.tensors, ins.arrays, outs, refs, tol, sym


# ---------------------------------------------------------------------------------
# running

def run_producer_case(case: ProducerCase) -> Outcome:
    """Run a case (see the module doc): never raises for a finding."""
    with drawn_machine(case.spec.get("machine")):
        return _run_producer_case(case)


def _run_producer_case(case: ProducerCase) -> Outcome:
    stage = "dag"
    try:
        tensors, arrays, outs, refs, tol, sym = build_case(case)
        args = tensors + outs + ([sym[0]] if sym else [])
        stage = "auto_schedule"
        if case.spec.get("knob"):
            stage = "knob"
            s, bad = _knob_schedule(case, args, sym)
            if bad:
                return Outcome("mismatch", case, stage, bad)
        else:
            s = tc.auto_schedule(args, target=case.target, trials=0)
        stage = "build"
        f = tc.build(s, args, target=case.target)
        stage = "call"
        got = [np.zeros(r.shape, o.dtype) for o, r in zip(outs, refs)]
        f(*arrays, *got, *([sym[1]] if sym else []))
    except InternalError as e:
        return Outcome("crash", case, stage, _exc(e))
    except TecompError as e:
        if _expected(case.spec, e):
            return Outcome("refused", case, stage, f"{type(e).__name__}: {e}")
        return Outcome("crash", case, stage, "a legal DAG refused (not a refusal this kind "
                       f"expects: {expected_refusals(case.spec)!r}):\n" + _exc(e))
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, stage, _exc(e))
    for k, (g, w) in enumerate(zip(got, refs)):
        bad = _differs(g, w, tol)
        if bad:
            return Outcome("mismatch", case, "compare", f"output {k}: {bad}")
    return Outcome("ok", case, "compare")


def _knob_value(c, how):
    """The default choice ``c`` of a knob written as ``how`` says: ``(value, legal)``."""
    num = isinstance(c, int) and not isinstance(c, bool)
    if how == "np_int" and num:
        return np.int64(c), True
    if how == "float" and isinstance(c, (int, bool)):
        return float(c), False
    if how == "int_bool" and isinstance(c, bool):
        return int(c), False
    if how == "int_bool" and num and c in (0, 1):
        return bool(c), False
    if how == "huge":
        return 2**40, False
    if how == "negative" and num:
        return -1, c == -1
    return (c + " " if isinstance(c, str) else str(c)), False


def _knob_schedule(case, args, sym):
    """``(schedule, what went wrong or "")`` with one knob set by hand (``spec["knob"]``)."""
    shapes = {sym[0].name: sym[1]} if sym else None
    cfg = default_config(args, case.target, shapes)
    names = sorted(cfg.space)
    if not names:
        return tc.auto_schedule(args, target=case.target, trials=0), ""
    name = names[case.spec["knob"]["pick"] % len(names)]
    value, legal = _knob_value(cfg[name], case.spec["knob"]["how"])
    if legal:
        return apply_config(args, cfg.set(name, value)), ""
    try:
        cfg.set(name, value)
    except tc.AutoScheduleError as e:
        if name not in str(e):
            return None, f"the refusal of {name} = {value!r} does not name it: {e}"
        return tc.auto_schedule(args, target=case.target, trials=0), ""
    return None, f"Config.set({name!r}, {value!r}) taken; its choices: {cfg.space[name]!r}"


def _differs(got, want, tol) -> str:
    if got.shape != want.shape:
        return f"output shape {got.shape}, the reference's {want.shape}"
    scale = max(1.0, float(np.nanmax(np.abs(want))) if want.size else 1.0)
    g = got.astype(np.float64)
    bad = ~((np.abs(g - want) <= tol * scale) | (np.isnan(g) & np.isnan(want)))
    if not bad.any():
        return ""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {first}: got "
            f"{got[first]!r}, want {want[first]!r}")


def _exc(e) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))

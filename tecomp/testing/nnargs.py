"""The fuzzer's ``nnargs`` family: one ``tecomp.nn`` call whose arguments a careless user or
an attacker wrote.

The ``ops`` family (:mod:`tecomp.testing.ops`) draws the *parameters* of pooling,
reduction and grouped convolutions over hostile data; this one draws the *arguments*
themselves from pools that mix legal values with the mistakes a user makes: ``True``,
``1.5``, ``"2"``, ``None``, a ``tc.var`` or ``2**31`` for a stride; ``0`` and negative
strides, dilations and groups; paddings of the wrong length, ``"SAMEE"``, ``-1``;
``NaN``, ``inf`` and ``1e40`` scalars (an ``eps``, a slope, a clip bound, a padding
value); ``300`` for an int8 tensor's bound; axes out of range, repeated, ``True`` or
``"0"``; ``1`` or ``"yes"`` for a flag; numpy integers and floats (legal).  Each case is
drawn from its own random stream (``RandomDraw(seed * 7919 + 61)``) and is one of:

``scalar``
    ``clip``, ``leaky_relu``, ``elu``, ``softplus``, ``hardtanh`` or ``pad`` (its
    ``value``) over float16/float32/float64 data (and int8/uint8/int32 for ``clip`` and
    ``pad``).
``window``
    ``conv2d_nchw`` or ``conv1d_ncw``: ``stride``, ``padding`` (every form ``Args.padding``
    reads), ``dilation`` and ``groups``, a kernel that may not fit.
``axis``
    ``softmax``, ``log_softmax`` (``axis=``), ``sum``, ``max``, ``argmax`` (``axis``,
    ``keepdims``), ``transpose`` (``axes``), ``concatenate`` and ``bias_add``
    (``axis``), ranks 0-4.
``flag``
    ``batch_matmul``'s ``transpose_a`` / ``transpose_b``.
``norm``
    ``batch_norm`` (``training``, ``eps``, ``momentum``), ``batch_norm_train`` and
    ``layer_norm`` (``eps``).
``shape``
    ``reshape`` (a new shape), ``adaptive_avg_pool1d`` (``output_size``, ``2**30``
    among them) and ``mse_loss`` (0-d inputs too).
``pool``
    ``max_pool{1,2}d`` / ``avg_pool{1,2}d``: ``kernel``, ``stride`` (None too),
    ``padding``, ``dilation`` (max), the flags ``ceil_mode`` and ``count_include_pad``
    (avg; ``1``, ``"yes"``, ``np.bool_``), ``layout`` (either layout, ``"nchw"``, a 1-d
    layout for a 2-d pooling); against PyTorch.
``attention``
    ``scaled_dot_product_attention`` (``scale``: 0, negative, NaN, ``True``, a string;
    the ``mask``'s shape and dtype -- ``(Lq, Lk)``, ``(b, 1, 1, Lk)``, ``(1, Lk)``, bool,
    transposed, int32 --; head dims of q, k and v that differ), ``flash_attention``
    (``causal`` as a flag, ``scale``, head dims that are no multiple of 16, float32 q)
    and ``dropout`` (``p`` out of [0, 1], NaN, a numpy float; ``seed`` a numpy int,
    ``2**23``, ``True``).
``quant``
    ``quantize`` / ``dequantize`` / ``requantize``: scales (0, negative, NaN, inf,
    ``1e-45`` and ``1e39`` past float32's normal range, ``True``, a string) and zero
    points (out of the dtype's range, ``True``, ``2.0``, numpy ints) and the dtypes;
    against ``torch.quantize_per_tensor`` (exactly).
``qdense``
    (8% of the seeds, from a stream of their own: ``RandomDraw(seed * 7919 + 62)``)
    ``quantized_dense``: the dtypes of ``x`` and ``w`` (``int32`` and ``float32``
    among them), the three scales (the bad ones, and pairs whose product or ratio leaves
    float32's normal range: ``1e-20 * 1e-20``), the zero points, ``out_dtype`` (``int32``,
    ``"int16"``, None), the bias (None, float32, int32, the wrong length or rank);
    against the exact int64 accumulator requantized in float32 as fbgemm does.

A legal ``argmax`` of the axis kind is, in 60% of those seeds (a stream of its own,
``RandomDraw(seed * 7919 + 63)``), widened: the reduced axis (or the first, for
``axis=None``) given more than 2**31 - 1 constant positions, with the int32 index (the
default, or ``dtype="int32"``): illegal, ``dtype`` must be named (never run).

Every drawn value is labelled, by the documented rules of the operator, ``legal`` or
``illegal``.  An illegal call must raise a :class:`~tecomp.errors.TecompError` whose
message begins with the operator's name and names the argument; a legal one is built
(``tc.create_schedule``, ``tc.build``) and its output compared with numpy's (PyTorch's
for the convolutions): exactly for maxima, argmax, clips, paddings, reshapes and
transposes, within a few ulps of the dtype otherwise.  Outcomes: ``ok``, ``refused``
(an illegal call refused as it must be), ``mismatch`` (a wrong value or shape, an
illegal call accepted, or a refusal that does not name the argument) and ``crash``
(any other exception: a Python ``TypeError``, ``IndexError``, ``ZeroDivisionError``...,
or a legal call refused).

    python -m tecomp.testing.fuzz --only nnargs --cases 500
"""
from __future__ import annotations

import math
import numbers
import traceback
import warnings
from dataclasses import dataclass

import numpy as np

import tecomp as tc
from .. import nn
from ..errors import TecompError
from ..nn import quant
from .diff import Outcome, SpecCase
from .draw import RandomDraw

FAMILY = "nnargs"
KINDS = ("scalar", "window", "axis", "flag", "norm", "shape", "pool", "attention", "quant")
#: kinds drawn from a stream of their own (the seeds of KINDS keep their cases otherwise)
LATE_KINDS = ("qdense",)
NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------
# the values: JSON-able in the spec, decoded at the call

def _np(kind: str, v):
    return {"$": kind, "v": v}


VAR = {"$": "var"}


def decode(v):
    """A spec value as the call gets it: ``{"$": "int64", "v": 2}`` is ``np.int64(2)``,
    ``{"$": "float", "v": "nan"}`` a float, ``{"$": "var"}`` a ``tc.var``, a list of two
    or more a tuple (one ``[x]`` stays a list, as a user writes it)."""
    if isinstance(v, dict):
        k = v["$"]
        if k == "var":
            return tc.var("s")
        if k == "float":
            return float(v["v"])
        if k == "tuple":
            return tuple(decode(x) for x in v["v"])
        return getattr(np, k)(v["v"])
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


def _f(x: float):
    """A float as the spec holds it (JSON has no NaN or inf)."""
    return x if math.isfinite(x) else {"$": "float", "v": repr(x)}


def _T(*xs):
    return {"$": "tuple", "v": list(xs)}


def _real(v) -> bool:
    v = decode(v)
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _fl(v) -> float:
    """A real spec value as a float (an int past float64's range is +-inf)."""
    v = decode(v)
    try:
        return float(v)
    except OverflowError:
        return INF if v > 0 else -INF


def _is_int(v) -> bool:
    v = decode(v)
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _round(dtype: str, x: float) -> float:
    """``x`` rounded to the float ``dtype`` (inf past its range)."""
    with np.errstate(over="ignore"):
        return float(np.dtype(dtype).type(x))


def _holds(dtype: str, v) -> bool:
    """Whether a tensor of ``dtype`` holds the scalar ``v`` (``Args.scalar``'s rule)."""
    if not _real(v):
        return False
    x, f = decode(v), _fl(v)
    if math.isnan(f):
        return False
    if dtype.startswith("float"):
        return (not math.isfinite(f) and not _is_int(v)) or math.isfinite(_round(dtype, f))
    info = np.iinfo(dtype)
    return (_is_int(v) or (math.isfinite(f) and f == int(f))) and \
        info.min <= int(x) <= info.max


# ---------------------------------------------------------------------------------
# the case

@dataclass
class ArgsCase(SpecCase):
    """One case: ``spec`` (JSON-able: the operator, its inputs, its arguments as drawn,
    which argument is illegal if one is) and the seed of its data."""

    family: str = FAMILY

    def call_source(self) -> str:
        sp = self.spec
        ins = ", ".join(f"I{k}" for k in range(len(sp["inputs"])))
        kw = ", ".join(f"{k}={decode(v)!r}" for k, v in sp["kwargs"].items())
        if sp["op"] == "concatenate":
            ins = f"[{ins}]"
        return f"Y = nn.{sp['op']}({ins}{', ' if kw else ''}{kw})"

    def source(self) -> str:
        sp = self.spec
        return "\n".join([
            f"# nnargs family: {self.call_source()}",
            "# inputs: " + ", ".join(f"I{k} {tuple(s)} {d}" for k, (s, d) in
                                     enumerate(sp["inputs"]))
            + (f"; illegal: must raise a TecompError naming {sp['illegal']!r}"
               if sp.get("illegal") else ""),
            *self.replay_lines("tecomp.testing.fuzz --only nnargs", "nnargs",
                               "run_nnargs_case")])


def draw_nnargs_case(seed: int, target: str = "llvm") -> ArgsCase:
    """Case ``seed`` of the family (its own random stream)."""
    d = RandomDraw(seed * 7919 + 61)
    kind = d.choice(KINDS)
    sp = {"scalar": _draw_scalar, "window": _draw_window, "axis": _draw_axis,
          "flag": _draw_flag, "norm": _draw_norm, "shape": _draw_shape, "pool": _draw_pool,
          "attention": _draw_attention, "quant": _draw_quant}[kind](d)
    late = RandomDraw(seed * 7919 + 62)
    if late.bool(0.08):     # (a stream of its own: d's draws stay what they were)
        kind = late.choice(LATE_KINDS)
        sp = {"qdense": _draw_qdense}[kind](late)
    wide = RandomDraw(seed * 7919 + 63)   # (a stream of its own: the other draws stay)
    if sp["op"] == "argmax" and not sp.get("illegal") and wide.bool(0.6):
        _widen_argmax(sp, wide)
    sp["kind"] = kind
    return ArgsCase(sp, d.int(0, 2**16), target, f"fuzz seed {seed} (nnargs: {sp['op']})",
                    fuzz_seed=seed, twist={"op": sp["op"]})


def _widen_argmax(sp, d) -> None:
    """A legal argmax made to reduce more than 2**31 - 1 constant positions with its int32
    index (the default, or given): the positions would be truncated, so ``dtype`` is
    illegal (never run: the shapes are only declared)."""
    shape = sp["inputs"][0][0]
    axis = decode(sp["kwargs"].get("axis"))
    if axis is None:
        shape[0] = -(-(2**31 + d.int(0, 99)) // max(1, int(np.prod(shape[1:]))))
    else:
        shape[axis % len(shape)] = 2**31 + d.int(0, 99)
    if d.bool(0.5):
        sp["kwargs"]["dtype"] = "int32"
    _illegal(sp, "dtype")


def _illegal(sp, arg: str) -> None:
    """Mark ``arg`` illegal: ``sp["illegal"]`` is the first one marked, ``sp["illegal_any"]``
    all of them (a refusal names one of them)."""
    sp.setdefault("illegal", arg)
    sp.setdefault("illegal_any", []).append(arg)


# ---------------------------------------------------------------------------------
# drawing

_SCALARS = (0.5, -1.25, 3, -3, 100, 300, -300, 1e6, _f(1e40), _f(INF), _f(-INF), _f(NAN),
            True, "1", _np("float32", 0.25), _np("int64", 2), 2**40, 0.0, None, -10**400)


def _draw_scalar(d):
    op = d.choice(("clip", "clip", "leaky_relu", "elu", "softplus", "hardtanh", "pad"))
    ints = op in ("clip", "pad")
    dtype = d.choice(("float32", "float16", "float64") + (("int8", "uint8", "int32")
                                                         if ints else ()))
    shape = [d.int(1, 4), d.int(1, 6)]
    sp = {"op": op, "inputs": [[shape, dtype]], "kwargs": {}}
    kw = sp["kwargs"]
    if op == "clip":
        kw["a_min"], kw["a_max"] = d.choice(_SCALARS), d.choice(_SCALARS)
        if kw["a_min"] is None and kw["a_max"] is None:
            _illegal(sp, "a_min")
        for arg in ("a_min", "a_max"):
            if kw[arg] is not None and not _holds(dtype, kw[arg]):
                _illegal(sp, arg)
    elif op == "pad":
        kw["pad_before"] = [d.int(0, 2), d.int(0, 2)]
        kw["value"] = d.choice(_SCALARS)
        if not _holds(dtype, kw["value"]):
            _illegal(sp, "value")
    elif op in ("leaky_relu", "elu"):
        kw["alpha"] = d.choice((0.01, 0.2, 1.0, -0.5, 0.0, 3, _np("float32", 0.1), _f(NAN),
                                _f(INF), _f(-INF), True, "0.1", None, 10**400))
        if not (_real(kw["alpha"]) and math.isfinite(_fl(kw["alpha"]))):
            _illegal(sp, "alpha")
    elif op == "softplus":
        kw["beta"] = d.choice((1.0, 2.0, 0.5, 0.0, -1.0, _f(NAN), _f(INF), True, 2))
        kw["threshold"] = d.choice((20.0, 1.0, -5.0, 3, _f(NAN), _f(INF), "20"))
        b, t = (_fl(kw[a]) if _real(kw[a]) else 0.0 for a in ("beta", "threshold"))
        if not (_real(kw["beta"]) and math.isfinite(b) and b > 0):
            _illegal(sp, "beta")
        if not (_real(kw["threshold"]) and math.isfinite(t)):
            _illegal(sp, "threshold")
    else:   # hardtanh
        pool = (-1.0, 0.5, 2, -2, 1.0, _f(NAN), _f(INF), True, "x")
        kw["min_val"], kw["max_val"] = d.choice(pool), d.choice(pool)
        ok = {a: _real(kw[a]) and math.isfinite(_fl(kw[a])) for a in ("min_val", "max_val")}
        for a in ("min_val", "max_val"):
            if not ok[a]:
                _illegal(sp, a)
        if all(ok.values()) and decode(kw["min_val"]) > decode(kw["max_val"]):
            _illegal(sp, "min_val")
    return sp


def _draw_window(d):
    nd = d.choice((1, 2))
    op = "conv1d_ncw" if nd == 1 else "conv2d_nchw"
    g = d.choice((1, 1, 2))
    c, o = g * d.int(1, 3), g * d.int(1, 2)
    size = [d.int(2, 9) for _ in range(nd)]
    k = [d.int(1, 4) for _ in range(nd)]
    sp = {"op": op, "nd": nd, "inputs": [[[d.int(1, 2), c] + size, "float32"],
                                         [[o, c // g] + k, "float32"]], "kwargs": {}}
    kw = sp["kwargs"]
    vals = {"stride": [d.int(1, 3) for _ in range(nd)], "dilation": [d.int(1, 2)] * nd,
            "groups": g}
    if g > 1 or d.bool(0.2):
        kw["groups"] = g
    for arg in ("stride", "dilation"):
        v = vals[arg]
        if d.bool(0.6) or nd == 1:
            kw[arg], vals[arg] = v[0], [v[0]] * nd
        else:
            kw[arg] = _T(*v)
        if d.bool(0.3):
            bad = d.choice((0, -1, True, 2.0, "2", None, VAR, 2**31, _T(*([1] * (nd + 1))),
                            _np("int64", 2), [2] * nd if nd > 1 else _np("int32", 1)))
            kw[arg] = bad
            if isinstance(bad, dict) and bad["$"] in ("int64", "int32"):
                vals[arg] = [bad["v"]] * nd
            elif isinstance(bad, list):
                vals[arg] = bad
            else:
                _illegal(sp, arg)
    if d.bool(0.25):
        bad = d.choice((0, -1, True, 1.5, None, c + 1 if c > 1 else 0))
        kw["groups"] = bad
        if bad is None or not _is_int(bad) or bad < 1 or c % bad or o % bad:
            _illegal(sp, "groups")
        else:
            vals["groups"] = bad
            if bad != g:     # (the weight holds c // g input channels)
                _illegal(sp, "weight")
                sp["illegal_any"].append("groups")
    # padding, in any form (pairs: (before, after) per dimension)
    form = d.choice(("int", "dims", "pairs", "ba", "SAME", "same", "VALID", "valid", "bad"))
    pairs = [[d.int(0, 2), d.int(0, 2)] for _ in range(nd)]
    if form == "int":
        p = d.int(0, 3)
        kw["padding"], pairs = p, [[p, p]] * nd
    elif form == "dims":
        kw["padding"] = _T(*[b for b, _ in pairs]) if nd > 1 else [pairs[0][0]]
        pairs = [[b, b] for b, _ in pairs]
        if nd == 1:
            kw["padding"], pairs = pairs[0][0], [pairs[0]]
    elif form == "pairs":
        kw["padding"] = _T(*[_T(*p) for p in pairs])
    elif form == "ba":
        kw["padding"] = _T(*([b for b, _ in pairs] + [a for _, a in pairs]))
    elif form in ("SAME", "same", "VALID", "valid"):
        kw["padding"], pairs = form, None
    else:
        kw["padding"] = d.choice((-1, "SAMEE", "", 1.5, True, None, _T(1, 1, 1),
                                  _T(_T(1, 2, 3), _T(1, 2)), _T(-1, 1)))
        _illegal(sp, "padding")
        pairs = None
    sp["vals"] = vals
    # (the kernel's fit depends on the stride, dilation and padding alone: where they are
    # legal it is checked, and a refusal may name it or another illegal argument)
    if not {"stride", "dilation", "padding"} & set(sp.get("illegal_any", [])):
        st, dil = vals["stride"], vals["dilation"]
        if pairs is None:
            if form.upper() == "VALID":
                pairs = [[0, 0]] * nd
            else:
                pairs = []
                for n, kk, s_, dd in zip(size, k, st, dil):
                    tot = max((-(-n // s_) - 1) * s_ + (kk - 1) * dd + 1 - n, 0)
                    pairs.append([tot // 2, tot - tot // 2])
        sp["pairs"] = pairs
        outs = [(n + b + a - dd * (kk - 1) - 1) // s_ + 1
                for n, (b, a), kk, s_, dd in zip(size, pairs, k, st, dil)]
        if min(outs) <= 0:
            _illegal(sp, "kernel")
    return sp


def _draw_axis(d):
    op = d.choice(("softmax", "log_softmax", "sum", "max", "argmax", "transpose",
                   "concatenate", "bias_add"))
    rank = d.int(0, 4) if op in ("sum", "max", "argmax", "concatenate") else d.int(1, 4)
    shape = [d.int(1, 4) for _ in range(rank)]
    sp = {"op": op, "inputs": [[shape, "float32"]], "kwargs": {}}
    kw = sp["kwargs"]
    pool = [r for r in range(-rank, rank)] + [rank, -rank - 1, True, 1.5, "0",
                                              _np("int64", 0), None]
    if op == "transpose":
        perm = d.sample(range(rank), rank)
        how = d.choice(("perm", "perm", "none", "dup", "short", "range", "neg"))
        if how == "perm":
            kw["axes"] = _T(*perm)
        elif how == "none":
            kw["axes"] = None
        elif how == "neg":
            kw["axes"] = _T(*[p - rank for p in perm])
        else:
            kw["axes"] = _T(*({"dup": [0] * rank, "short": perm[:-1] or [5],
                               "range": perm[:-1] + [rank]}[how]))
            if rank == 1 and how == "dup":
                kw["axes"] = _T(0, 0)
            _illegal(sp, "axes")
        return sp
    ax = d.choice(pool)
    if op in ("sum", "max") and d.bool(0.3) and rank:
        ax = _T(*d.sample(range(-rank, rank), d.int(1, rank)))
    kw["axis"] = ax
    axes = decode(ax)
    if op in ("sum", "max", "argmax") and (axes is None or (op != "argmax"
                                                             and isinstance(axes, tuple))):
        if isinstance(axes, tuple) and len({a % rank for a in axes}) != len(axes):
            _illegal(sp, "axis")
    elif not (_is_int(ax) and -rank <= decode(ax) < rank):
        _illegal(sp, "axis")
    if op in ("sum", "max", "argmax"):
        kw["keepdims"] = d.choice((False, True, False, 1, "yes", None))
        if not isinstance(kw["keepdims"], bool):
            _illegal(sp, "keepdims")
        if op == "argmax" and axes is None and not rank:
            _illegal(sp, "axis")     # (no axis to take the index along)
    if op == "concatenate":
        sp["inputs"].append([shape, "float32"])
        if not rank:
            sp["illegal"] = "0-d"
            sp["illegal_any"] = ["0-d"]
    if op == "bias_add" and not sp.get("illegal"):
        sp["inputs"].append([[shape[decode(ax) % rank]], "float32"])
    elif op == "bias_add":
        sp["inputs"].append([[shape[0]], "float32"])
    if op in ("softmax", "log_softmax") and not rank:
        _illegal(sp, "x")
    return sp


def _draw_flag(d):
    b, m, k, n = d.int(1, 3), d.int(1, 4), d.int(1, 5), d.int(1, 4)
    sp = {"op": "batch_matmul", "kwargs": {}}
    pool = (False, True, False, True, 1, 0, "yes", None)
    ta, tb = d.choice(pool), d.choice(pool)
    sp["kwargs"] = {"transpose_a": ta, "transpose_b": tb}
    for arg, v in (("transpose_a", ta), ("transpose_b", tb)):
        if not isinstance(v, bool):
            _illegal(sp, arg)
    ta, tb = ta is True, tb is True
    sp["inputs"] = [[[b, k, m] if ta else [b, m, k], "float32"],
                    [[d.choice((b, 1)), n, k] if tb else [d.choice((b, 1)), k, n], "float32"]]
    return sp


def _draw_norm(d):
    op = d.choice(("batch_norm", "batch_norm_train", "layer_norm"))
    eps = d.choice((1e-5, 1e-3, 0.0, -1e-5, _f(NAN), _f(INF), True, "1e-5",
                    _np("float32", 1e-3), 1, 10**400))
    sp = {"op": op, "kwargs": {"eps": eps}}
    e = _fl(eps) if _real(eps) else 0.0
    if not (_real(eps) and math.isfinite(e) and e >= 0):
        _illegal(sp, "eps")
    if op == "layer_norm":
        shape = [d.int(1, 3), d.int(1, 4), d.int(2, 6)]
        sp["inputs"] = [[shape, "float32"], [[shape[-1]], "float32"],
                        [[shape[-1]], "float32"]]
        return sp
    shape = [d.int(2, 3), d.int(1, 3), d.int(1, 3), d.int(1, 3)]
    c = shape[1]
    sp["inputs"] = [[shape, "float32"], [[c], "float32"], [[c], "float32"]]
    training = True
    if op == "batch_norm":
        training = d.choice((True, False))
        mom = d.choice((0.1, 0.0, 1.0, -0.1, 1.5, _f(NAN), "0.1", None))
        sp["kwargs"].update(training=training, momentum=mom)
        m = _fl(mom) if _real(mom) else 0.0
        if not (_real(mom) and math.isfinite(m) and 0 <= m <= 1):
            _illegal(sp, "momentum")
        if not training:   # the running statistics (the variance positive)
            sp["inputs"] += [[[c], "float32"], [[c], "var"]]
    if training and _real(eps) and e == 0:
        _illegal(sp, "eps")
    return sp


def _draw_shape(d):
    op = d.choice(("reshape", "reshape", "adaptive_avg_pool1d", "mse_loss"))
    if op == "mse_loss":
        shape = [d.int(1, 3) for _ in range(d.int(0, 3))]
        return {"op": op, "inputs": [[shape, "float32"], [shape, "float32"]], "kwargs": {}}
    if op == "adaptive_avg_pool1d":
        n = d.int(2, 9)    # (2**30 outputs of one element would be legal: 8 GiB)
        sp = {"op": op, "inputs": [[[1, 2, n], "float32"]], "kwargs": {}}
        o = d.choice((1, 2, 3, n, n + 3, 0, -1, 2**30, 2**31, True, 2.5, _np("int64", 3),
                      [2], _T(2, 2)))
        sp["kwargs"]["output_size"] = o
        v = decode(o)
        v = v[0] if isinstance(v, list) and len(v) == 1 else v
        if not (_is_int(v) if not isinstance(v, list) else False) or v < 1 or \
                v * (n + 1) - 1 > 2**31 - 1:
            _illegal(sp, "output_size")
        return sp
    dims = [d.int(1, 4) for _ in range(d.int(1, 3))]
    total = math.prod(dims)
    sp = {"op": op, "inputs": [[dims, "float32"]], "kwargs": {}}
    good = list(reversed(dims))
    how = d.choice(("good", "minus", "np", "int", "empty", "wrong", "two", "zero", "str",
                    "float"))
    if how == "good":
        new = _T(*good)
    elif how == "minus":
        new = _T(*([-1] + good[1:]))
    elif how == "np":
        new = _T(*[_np("int64", x) for x in good])
    elif how == "int":
        new = total
    elif how == "empty":
        new = _T()
        if total != 1:
            _illegal(sp, "shape")
    else:
        new = {"wrong": _T(total + 1), "two": _T(-1, -1), "zero": _T(0, total),
               "str": str(total), "float": _T(float(total))}[how]
        _illegal(sp, "shape")
    sp["kwargs"]["shape"] = new
    return sp


def _draw_pool(d):
    nd = d.choice((1, 2))
    kind = d.choice(("max", "avg"))
    op = f"{kind}_pool{nd}d"
    first, last = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC")}[nd]
    layout = d.choice((first, last))
    n, c = d.int(1, 2), d.int(1, 3)
    size = [d.int(5, 9) for _ in range(nd)]
    k = [d.int(1, 3) for _ in range(nd)]
    dil = [d.int(1, 2)] * nd if kind == "max" else [1] * nd
    st = [d.int(1, 3) for _ in range(nd)]
    pd = [d.int(0, kk // 2) for kk in k]
    shape = [n, c] + size if layout == first else [n] + size + [c]
    sp = {"op": op, "nd": nd, "pool": kind, "inputs": [[shape, "float32"]], "kwargs": {},
          "layout": layout, "first": first}
    kw = sp["kwargs"]

    def one_or_all(v):
        return v[0] if (len(set(v)) == 1 and d.bool(0.5)) or nd == 1 else _T(*v)

    if nd == 1:
        k, st, pd, dil = k[:1], st[:1], pd[:1], dil[:1]
    kw["kernel"] = one_or_all(k)
    if d.bool(0.2):
        kw["stride"], st = None, k
    else:
        kw["stride"] = one_or_all(st)
    kw["padding"] = one_or_all(pd)
    if kind == "max" and (dil[0] > 1 or d.bool(0.3)):
        kw["dilation"] = dil[0]
    flags = (False, True) * 6 + (1, 0, "yes", None, _np("bool_", True))
    kw["ceil_mode"] = d.choice(flags)
    if kind == "avg":
        kw["count_include_pad"] = d.choice(flags)
    for arg in ("ceil_mode", "count_include_pad"):
        if arg in kw and not isinstance(kw[arg], bool):
            _illegal(sp, arg)
    if d.bool(0.25):
        bad = d.choice((0, -1, True, 2.0, "2", None, 2**31, _T(*([2] * (nd + 1))),
                        _np("int64", 2)))
        kw["kernel"] = bad
        if isinstance(bad, dict) and bad["$"] == "int64":
            k = [2] * nd
            pd = [min(p, 1) for p in pd]
            kw["padding"] = one_or_all(pd)
            if kw["stride"] is None:
                st = k
        else:
            _illegal(sp, "kernel")
    if d.bool(0.15):
        kw["stride"] = d.choice((0, -1, True, 1.5, "1"))
        _illegal(sp, "stride")
    if d.bool(0.15):
        kw["padding"] = d.choice((-1, "SAMEE", True, 1.5, None, _T(-1, 0)))
        _illegal(sp, "padding")
    if kind == "max" and d.bool(0.1):
        kw["dilation"] = d.choice((0, True, -1, 1.5))
        _illegal(sp, "dilation")
    if d.bool(0.15):
        kw["layout"] = d.choice(("nchw", None, "NCDHW", {1: "NCHW", 2: "NCW"}[nd], "NHCW"))
        _illegal(sp, "layout")
    elif layout != first or d.bool(0.3):
        kw["layout"] = layout
    sp.update(k=k, s=st, p=pd, dil=dil)
    return sp


def _draw_attention(d):
    op = d.choice(("scaled_dot_product_attention", "scaled_dot_product_attention",
                   "flash_attention", "dropout"))
    if op == "dropout":
        shape = [d.int(1, 4), d.int(1, 40)]
        sp = {"op": op, "inputs": [[shape, d.choice(("float32", "float64"))]], "kwargs": {}}
        p = d.choice((0.0, 0.5, 0.25, 1.0, 0.9, -0.1, 1.5, _f(NAN), _f(INF), True, "0.5",
                      None, _np("float32", 0.5), _np("float64", 0.25), 1, 0, 10**400))
        sp["kwargs"]["p"] = p
        if not (_real(p) and 0 <= _fl(p) <= 1):
            _illegal(sp, "p")
        if d.bool(0.6):
            seed = d.choice((0, 7, -5, 2**23 - 1, -2**23, 2**23, 2**40, True, 1.5, "3",
                             _np("int64", 3), _np("int32", -2)))
            sp["kwargs"]["seed"] = seed
            if not (_is_int(seed) and -2**23 <= decode(seed) < 2**23):
                _illegal(sp, "seed")
        return sp
    b, h, lq, lk = d.int(1, 2), d.int(1, 2), d.int(1, 6), d.int(1, 6)
    flash = op == "flash_attention"
    dt = "float16" if flash and d.bool(0.85) else "float32"
    dq = d.choice((16, 32)) if flash else d.choice((1, 3, 8))
    dv = d.choice((16, 32)) if flash else d.choice((1, 2, 8))
    sp = {}
    if flash and d.bool(0.15):
        dq = dv = d.choice((8, 24, 12))
        _illegal(sp, "q")
    if flash and dt != "float16":
        _illegal(sp, "q")
    kq = dq
    if d.bool(0.1):
        kq = dq + 1
        _illegal(sp, "k")
    lv = lk
    if d.bool(0.1):
        lv = lk + 1
        _illegal(sp, "v")
    sp.update({"op": op, "inputs": [[[b, h, lq, dq], dt], [[b, h, lk, kq], dt],
                                    [[b, h, lv, dv], dt]], "kwargs": {}})
    kw = sp["kwargs"]
    scale = d.choice((None, None, 0.5, 2, 0.0, -1.0, _f(NAN), _f(INF), True, "0.5",
                      _np("float32", 0.25), 10**400))
    if scale is not None or d.bool(0.3):
        kw["scale"] = scale
    if not (scale is None or (_real(scale) and math.isfinite(_fl(scale)))):
        _illegal(sp, "scale")
    if flash:
        kw["causal"] = d.choice((False, True, True, 1, "yes", None))
        if not isinstance(kw["causal"], bool):
            _illegal(sp, "causal")
    mk = d.choice(("none", "none", "qk", "pad4", "keys", "bool", "transposed", "int32",
                   "f64", "rank1"))
    if flash and mk not in ("none", "pad4", "keys", "int32", "rank1"):
        mk = "pad4"
    if mk != "none":
        mshape = {"qk": [lq, lk], "pad4": [b, 1, 1, lk], "keys": [1, lk], "bool": [lq, lk],
                  "transposed": [lk, lq], "int32": [lq, lk], "f64": [lq, lk],
                  "rank1": [lk]}[mk]
        mdt = {"bool": "bool", "int32": "int32", "f64": "float64"}.get(mk, dt)
        sp["inputs"].append([mshape, mdt])
        sp["mask"] = True
        # (the shape aligned on the right with (b, h, Lq, Lk): each extent the full one or 1)
        fits = all(e in (want, 1) for e, want in zip(reversed(mshape), (lk, lq, h, b)))
        if mk in ("int32", "rank1") or (mk == "f64" and dt != "float64") or not fits:
            _illegal(sp, "mask")
    return sp


_SCALES = (0.1, 0.02, 1.0, 3, 1e-3, _np("float32", 0.05), _np("float64", 0.2))
_BAD_SCALES = (0.0, -0.5, _f(NAN), _f(INF), True, "0.1", None, 1e-45, 1e39, 10**400)
_ZPS = (0, 3, 10, 127, -1, -128, 128, 255, _np("int64", 5), _np("uint8", 7))
_BAD_ZPS = (256, -129, True, 2.0, "0", None, 2**31)


def _scale_arg(d):
    """A scale: one of the bad ones a time in six."""
    return d.choice(_BAD_SCALES if d.bool(1 / 6) else _SCALES)


def _zp_arg(d):
    return d.choice(_BAD_ZPS if d.bool(1 / 6) else _ZPS)


def _legal_scale(v) -> bool:
    if not _real(v):
        return False
    f = _fl(v)
    if not (math.isfinite(f) and f > 0):
        return False
    with np.errstate(over="ignore"):
        f32 = abs(float(np.float32(f)))
    return float(np.finfo(np.float32).tiny) <= f32 <= float(np.finfo(np.float32).max)


def _legal_zp(v, dtype) -> bool:
    lo, hi = {"uint8": (0, 255), "int8": (-128, 127), "int32": (-2**31, 2**31 - 1)}[dtype]
    return _is_int(v) and lo <= int(decode(v)) <= hi


_QD_SCALES = _SCALES + (1e-20, 1e20, 1e-30, 1e30)


def _f32_normal(v: float) -> bool:
    with np.errstate(over="ignore", under="ignore"):
        f = abs(float(np.float32(v)))
    return float(np.finfo(np.float32).tiny) <= f <= float(np.finfo(np.float32).max)


def _draw_qdense(d):
    b, k, o = d.int(1, 3), d.int(1, 40), d.int(1, 12)
    xd = d.choice(("uint8",) * 6 + ("int8", "int8", "int32", "float32"))
    wd = d.choice(("int8",) * 6 + ("uint8", "int32"))
    sp = {"op": "quantized_dense", "kwargs": {}}
    kw = sp["kwargs"]
    kw["x_scale"], kw["w_scale"], kw["out_scale"] = (
        d.choice(_BAD_SCALES if d.bool(1 / 8) else _QD_SCALES) for _ in range(3))
    kw["x_zp"], kw["w_zp"], kw["out_zp"] = (
        d.choice(_BAD_ZPS if d.bool(1 / 8) else _ZPS) for _ in range(3))
    od = d.choice(("uint8",) * 4 + ("int8", "int32", "int32", "int16", None))
    if od != "uint8" or d.bool(0.5):
        kw["out_dtype"] = od
    bias = d.choice(("none", "float32", "float32", "int32", "long", "2d"))
    sp["inputs"] = [[[b, k], xd], [[o, k], wd]]
    if bias != "none":
        sp["inputs"].append([[o + 1] if bias == "long" else [o, 1] if bias == "2d" else [o],
                             "int32" if bias == "int32" else "float32"])
    for arg, dt in (("x", xd), ("w", wd)):
        if dt not in ("uint8", "int8"):
            _illegal(sp, arg)
    if od not in ("uint8", "int8", "int32"):
        _illegal(sp, "out_dtype")
    scales_ok = True
    for arg in ("x_scale", "w_scale", "out_scale"):
        if not _legal_scale(kw[arg]):
            _illegal(sp, arg)
            scales_ok = False
    for arg, dt in (("x_zp", xd), ("w_zp", wd), ("out_zp", od)):
        if dt in ("uint8", "int8", "int32") and not _legal_zp(kw[arg], dt):
            _illegal(sp, arg)
    if bias in ("long", "2d"):
        _illegal(sp, "bias")
    if scales_ok:   # the accumulator's scale and the multiplier: normal float32 too
        with np.errstate(over="ignore", under="ignore"):
            s32 = np.float32(_fl(kw["x_scale"])) * np.float32(_fl(kw["w_scale"]))
            m32 = s32 / np.float32(_fl(kw["out_scale"]))
        if not _f32_normal(float(s32)) or not _f32_normal(float(m32)):
            _illegal(sp, "x_scale")      # (the message names "x_scale * w_scale")
    sp["qdtype"] = od
    sp["bias"] = bias
    return sp


def _draw_quant(d):
    op = d.choice(("quantize", "dequantize", "requantize"))
    shape = [d.int(1, 3), d.int(1, 20)]
    qd = ("uint8", "int8", "int32")
    sp = {"op": op, "kwargs": {}}
    kw = sp["kwargs"]
    if op == "quantize":
        dtype = d.choice(qd * 4 + ("float32", "uint16", None, "UINT8"))
        sp["inputs"] = [[shape, "float32"]]
        kw["scale"], kw["zero_point"] = _scale_arg(d), _zp_arg(d)
        if dtype != "uint8" or d.bool(0.5):
            kw["dtype"] = dtype
        if dtype not in qd:
            _illegal(sp, "dtype")
        if not _legal_scale(kw["scale"]):
            _illegal(sp, "scale")
        if dtype in qd and not _legal_zp(kw["zero_point"], dtype):
            _illegal(sp, "zero_point")
        sp["qdtype"] = dtype
        return sp
    dtype = d.choice(qd + ("float32",) if op == "dequantize" else qd)
    sp["inputs"] = [[shape, dtype]]
    if dtype == "float32":
        _illegal(sp, "q")
    if op == "dequantize":
        kw["scale"], kw["zero_point"] = _scale_arg(d), _zp_arg(d)
        if not _legal_scale(kw["scale"]):
            _illegal(sp, "scale")
        if dtype != "float32" and not _legal_zp(kw["zero_point"], dtype):
            _illegal(sp, "zero_point")
        return sp
    out = d.choice((None, None, None, "uint8", "int8", "int32", "int16"))
    kw.update(in_scale=_scale_arg(d), in_zp=_zp_arg(d), out_scale=_scale_arg(d),
              out_zp=_zp_arg(d))
    if out is not None or d.bool(0.3):
        kw["out_dtype"] = out
    od = out or dtype
    if od not in qd:
        _illegal(sp, "out_dtype")
    for arg in ("in_scale", "out_scale"):
        if not _legal_scale(kw[arg]):
            _illegal(sp, arg)
    if not _legal_zp(kw["in_zp"], dtype):
        _illegal(sp, "in_zp")
    if od in qd and not _legal_zp(kw["out_zp"], od):
        _illegal(sp, "out_zp")
    sp["qdtype"] = od
    return sp


# ---------------------------------------------------------------------------------
# running

def _data(case: ArgsCase):
    rng = np.random.default_rng(case.seed)
    out = []
    for shape, dtype in case.spec["inputs"]:
        shape = tuple(shape)
        if dtype == "var":    # a variance: positive
            out.append((rng.random(shape) + 0.5).astype(np.float32))
        elif dtype in ("int8", "uint8", "int32"):
            info = np.iinfo(dtype)
            lo, hi = max(info.min, -200), min(info.max, 200)
            out.append(np.asarray(rng.integers(lo, hi + 1, shape), dtype))
        else:
            out.append(np.asarray(rng.standard_normal(shape) * 3, dtype))
    return out


def _call(sp, phs):
    fn = getattr(nn, sp["op"], None)
    kw = {k: decode(v) for k, v in sp["kwargs"].items()}
    if sp["op"] == "flash_attention":
        return fn(*phs[:3], mask=phs[3] if len(phs) > 3 else None, **kw)[0]
    if sp["op"] in ("quantize", "dequantize", "requantize"):
        return getattr(quant, sp["op"])(*phs, **kw)
    if sp["op"] == "quantized_dense":
        return quant.quantized_dense(phs[0], w=phs[1], bias=phs[2] if len(phs) > 2 else None,
                                     **kw)
    if sp["op"] == "concatenate":
        return fn(phs, **kw)
    if sp["op"] == "batch_norm":
        return fn(*phs[:3], *(phs[3:5] if len(phs) > 3 else ()), **kw)
    return fn(*phs, **kw)


def _names(msg: str, sp) -> bool:
    """Whether the refusal names one of the illegal arguments (``0-d``: says so)."""
    low = msg.lower()
    return any(a.lower() in low for a in sp.get("illegal_any", [sp["illegal"]]))


def run_nnargs_case(case: ArgsCase) -> Outcome:
    """Run a case (see the module doc): never raises for a finding."""
    sp = case.spec
    illegal = sp.get("illegal")
    try:
        phs = [tc.placeholder(tuple(s), "float32" if t == "var" else t, name=f"I{k}")
               for k, (s, t) in enumerate(sp["inputs"])]
        Y = _call(sp, phs)
    except TecompError as e:
        msg = str(e)
        if not illegal:
            return Outcome("crash", case, "call", "a legal call refused:\n" + _exc(e))
        if not msg.startswith(sp["op"] + " ") or not _names(msg, sp):
            return Outcome("mismatch", case, "call", f"the refusal does not begin with "
                           f"{sp['op']!r} or does not name {illegal!r}:\n"
                           f"{type(e).__name__}: {msg}")
        return Outcome("refused", case, "call", msg)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, "call", _exc(e))
    if illegal:
        return Outcome("mismatch", case, "call", f"an illegal call ({illegal!r}) accepted: "
                       f"{case.call_source()}")
    stage = "build"
    try:
        args = phs + [Y]
        f = tc.build(tc.create_schedule(Y.op), args, target=case.target)
        stage = "call"
        arrays = _data(case)
        shape = tuple(int(e.value) for e in Y.shape)
        out = np.zeros(shape, Y.dtype)
        f(*arrays, out)
        stage = "reference"
        want, exact = _reference(sp, arrays, Y.dtype)
        stage = "compare"
        if want is None:
            return Outcome("ok", case, "compare", "no reference here (torch missing)")
        if sp["op"] == "dropout":   # each element dropped (0) or kept (x / (1 - p))
            kept = _differs(out, np.asarray(want), False, Y.dtype)
            if kept and not (p1 := float(decode(sp["kwargs"]["p"]))) == 0.0:
                g = out.astype(np.float64)
                ok = (g == 0) | np.isclose(g, want, rtol=2e-6, atol=0)
                kept = "" if ok.all() and (p1 < 1 or not g.any()) else kept
            bad = kept
        else:
            bad = _differs(out, np.asarray(want), exact, Y.dtype)
        if bad:
            return Outcome("mismatch", case, "compare", bad)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", case, stage, _exc(e))
    return Outcome("ok", case, "compare")


def _exc(e) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


def _differs(got, want, exact: bool, dtype: str) -> str:
    if got.shape != want.shape:
        return f"output shape {got.shape}, the reference's {want.shape}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if exact:
        w = want.astype(got.dtype).astype(np.float64)
        bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
    else:
        rel = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-5}.get(dtype, 1e-10)
        with np.errstate(invalid="ignore"):
            bad = ~(np.isclose(g, w, rtol=rel, atol=rel, equal_nan=True) | (g == w))
    if not bad.any():
        return ""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {first}: got "
            f"{got[first]!r}, want {want[first]!r}")


def _pool_reference(sp, kw, x):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None, False
    nd, first = sp["nd"], sp["layout"] == sp["first"]
    if not first:     # channels last: to channels first and back
        x = np.moveaxis(x, -1, 1)
    t = torch.from_numpy(np.ascontiguousarray(x))
    k, s, p = tuple(sp["k"]), tuple(sp["s"]), tuple(sp["p"])
    cm = kw.get("ceil_mode", False)
    if sp["pool"] == "max":
        fn = F.max_pool1d if nd == 1 else F.max_pool2d
        y = fn(t, k, s, p, dilation=tuple(sp["dil"]), ceil_mode=cm)
    else:
        fn = F.avg_pool1d if nd == 1 else F.avg_pool2d
        y = fn(t, k, s, p, ceil_mode=cm, count_include_pad=kw.get("count_include_pad", True))
    y = y.numpy()
    return (y if first else np.moveaxis(y, 1, -1)), sp["pool"] == "max"


def _attention_reference(sp, kw, xs, arrays):
    q, k, v = (a.astype(np.float64) for a in xs[:3])
    scale = kw.get("scale")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if len(xs) > 3:
        m = arrays[3]
        s = s + (np.where(m, 0.0, -np.inf) if m.dtype == bool else m.astype(np.float64))
    if kw.get("causal"):
        s = np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
        p = e / e.sum(-1, keepdims=True)
    return np.where(np.isnan(p), 0.0, p) @ v


def _quant_reference(sp, kw, arrays):
    try:
        import torch
    except ImportError:
        return None, True
    tq = {"uint8": torch.quint8, "int8": torch.qint8, "int32": torch.qint32}

    def quantize(t, scale, zp):
        # (PyTorch deprecates its quantized tensors, saying so once a process; its
        # rounding is still the reference tecomp's quantize matches)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*quantized tensor creation")
            return torch.quantize_per_tensor(t, scale, zp, tq[sp["qdtype"]]).int_repr()

    op, x = sp["op"], torch.from_numpy(arrays[0])
    if op == "quantized_dense":
        return _qdense_reference(sp, kw, arrays), True
    if op == "quantize":
        return quantize(x, float(kw["scale"]), int(kw["zero_point"])).numpy(), True
    if op == "dequantize":
        s, z = float(kw["scale"]), int(kw["zero_point"])
        return ((arrays[0].astype(np.int64) - z).astype(np.float32) * np.float32(s)), True
    s, z = float(kw["in_scale"]), int(kw["in_zp"])
    deq = (arrays[0].astype(np.int64) - z).astype(np.float32) * np.float32(s)
    return quantize(torch.from_numpy(deq), float(kw["out_scale"]),
                    int(kw["out_zp"])).numpy(), True


def _qdense_reference(sp, kw, arrays):
    """The exact accumulator (int64), requantized in float32 as fbgemm does (the module
    docstring of tecomp.nn.quant): ``clamp(rint((acc + bias / s) * m) + out_zp)``, an int32
    bias added to ``acc``; clamped to the output dtype's range as a whole number."""
    xq, wq = arrays[0].astype(np.int64), arrays[1].astype(np.int64)
    acc = (xq - int(kw["x_zp"])) @ (wq - int(kw["w_zp"])).T
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        s = np.float32(float(kw["x_scale"])) * np.float32(float(kw["w_scale"]))
        m = np.float32(s / np.float32(float(kw["out_scale"])))
        if len(arrays) > 2 and arrays[2].dtype == np.int32:
            v = (acc + arrays[2].astype(np.int64)).astype(np.float32) * m
        elif len(arrays) > 2:
            v = (acc.astype(np.float32) + arrays[2] / s) * m
        else:
            v = acc.astype(np.float32) * m
        lo, hi = quant.QDTYPES[sp["qdtype"] or "uint8"]
        return np.clip(np.rint(v.astype(np.float64)) + int(kw["out_zp"]), lo, hi)


def _softmax(x, ax):
    e = np.exp(x - x.max(ax, keepdims=True))
    return e / e.sum(ax, keepdims=True)


def _reference(sp, arrays, dtype):
    """``(the expected output, whether it is exact)``; ``(None, _)`` without torch."""
    op = sp["op"]
    kw = {k: decode(v) for k, v in sp["kwargs"].items()}
    xs = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    x = xs[0]
    dt = arrays[0].dtype
    if op == "clip":
        lo = -np.inf if kw["a_min"] is None else _round(str(dt), float(kw["a_min"])) \
            if dt.kind == "f" else int(kw["a_min"])
        hi = np.inf if kw["a_max"] is None else _round(str(dt), float(kw["a_max"])) \
            if dt.kind == "f" else int(kw["a_max"])
        return np.minimum(np.maximum(x, lo), hi), True
    if op == "pad":
        before = kw["pad_before"]
        v = kw["value"]
        v = _round(str(dt), float(v)) if dt.kind == "f" else int(v)
        return np.pad(x, [(b, b) for b in before], constant_values=v), True
    if op == "leaky_relu":
        return np.where(x > 0, x, float(kw["alpha"]) * x), False
    if op == "elu":
        return np.where(x > 0, x, float(kw["alpha"]) * np.expm1(x)), False
    if op == "softplus":
        b, t = float(kw["beta"]), float(kw["threshold"])
        with np.errstate(over="ignore"):
            return np.where(b * x > t, x, np.log1p(np.exp(b * x)) / b), False
    if op == "hardtanh":
        return np.clip(x, float(kw["min_val"]), float(kw["max_val"])), True
    if op in ("conv1d_ncw", "conv2d_nchw"):
        try:
            import torch
            import torch.nn.functional as F
        except ImportError:
            return None, False
        pad = [v for b, a in reversed(sp["pairs"]) for v in (b, a)]
        xt = F.pad(torch.from_numpy(x), pad)
        conv = F.conv1d if sp["nd"] == 1 else F.conv2d
        v = sp["vals"]
        y = conv(xt, torch.from_numpy(xs[1]), stride=tuple(v["stride"]),
                 dilation=tuple(v["dilation"]), groups=v["groups"])
        return y.numpy(), False
    if op in ("softmax", "log_softmax"):
        y = _softmax(x, kw["axis"])
        return (y if op == "softmax" else np.log(y)), False
    if op in ("sum", "max"):
        ax = kw["axis"]
        ax = tuple(ax) if isinstance(ax, (tuple, list)) else ax
        if isinstance(ax, tuple) and not ax:
            return x, True
        return getattr(np, op)(x, axis=ax, keepdims=kw["keepdims"]), op == "max"
    if op == "argmax":
        ax = kw["axis"]
        if ax is None:
            return np.argmax(x.reshape(-1)).reshape((1,) * x.ndim if kw["keepdims"]
                                                    else ()), True
        return np.argmax(x, axis=ax, keepdims=kw["keepdims"]), True
    if op == "transpose":
        return np.transpose(x, kw["axes"]), True
    if op == "concatenate":
        return np.concatenate(xs, axis=kw["axis"]), True
    if op == "bias_add":
        ax = kw["axis"] % x.ndim
        shape = [1] * x.ndim
        shape[ax] = -1
        return x + xs[1].reshape(shape), False
    if op == "batch_matmul":
        a, b = xs
        a = a.transpose(0, 2, 1) if kw["transpose_a"] else a
        b = b.transpose(0, 2, 1) if kw["transpose_b"] else b
        return a @ b, False
    if op in ("batch_norm", "batch_norm_train"):
        g, bta = xs[1][None, :, None, None], xs[2][None, :, None, None]
        if op == "batch_norm" and not kw["training"]:
            m, v = xs[3][None, :, None, None], xs[4][None, :, None, None]
        else:
            m, v = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
        return (x - m) / np.sqrt(v + float(kw["eps"])) * g + bta, False
    if op == "layer_norm":
        m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - m) / np.sqrt(v + float(kw["eps"])) * xs[1] + xs[2], False
    if op == "reshape":
        s = kw["shape"]
        return x.reshape(tuple(int(v) for v in s) if isinstance(s, (tuple, list))
                         else int(s)), True
    if op == "adaptive_avg_pool1d":
        o = kw["output_size"]
        o = int(o[0] if isinstance(o, list) else o)
        n = x.shape[-1]
        return np.stack([x[..., i * n // o: -(-(i + 1) * n // o)].mean(-1) for i in range(o)],
                        -1), False
    if op == "mse_loss":
        return np.array([((x - xs[1]) ** 2).mean()]), False
    if op in ("max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"):
        return _pool_reference(sp, kw, x)
    if op in ("scaled_dot_product_attention", "flash_attention"):
        return _attention_reference(sp, kw, xs, arrays), False
    if op == "dropout":
        p = float(kw["p"])
        return (x * 0 if p == 1 else x / (1 - p)), False
    if op in ("quantize", "dequantize", "requantize", "quantized_dense"):
        return _quant_reference(sp, kw, arrays)
    raise AssertionError(f"no reference for {op}")   # (a fuzzer bug: a crash)

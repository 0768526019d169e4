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
from dataclasses import dataclass

import numpy as np

import tecomp as tc
from .. import nn
from ..errors import TecompError
from .diff import Outcome, SpecCase
from .draw import RandomDraw

FAMILY = "nnargs"
KINDS = ("scalar", "window", "axis", "flag", "norm", "shape")
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
            f"# replay: python -m tecomp.testing.fuzz --only nnargs --replay {self.fuzz_seed}",
            "from tecomp.testing.nnargs import ArgsCase, run_nnargs_case",
            f"case = ArgsCase(spec={sp!r}, seed={self.seed}, target={self.target!r})",
            "o = run_nnargs_case(case)",
            "print(o.kind, o.stage, o.detail)"])


def draw_nnargs_case(seed: int, target: str = "llvm") -> ArgsCase:
    """Case ``seed`` of the family (its own random stream)."""
    d = RandomDraw(seed * 7919 + 61)
    kind = d.choice(KINDS)
    sp = {"scalar": _draw_scalar, "window": _draw_window, "axis": _draw_axis,
          "flag": _draw_flag, "norm": _draw_norm, "shape": _draw_shape}[kind](d)
    sp["kind"] = kind
    return ArgsCase(sp, d.int(0, 2**16), target, f"fuzz seed {seed} (nnargs: {sp['op']})",
                    fuzz_seed=seed, twist={"op": sp["op"]})


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
    fn = getattr(nn, sp["op"])
    kw = {k: decode(v) for k, v in sp["kwargs"].items()}
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
    raise AssertionError(f"no reference for {op}")   # (a fuzzer bug: a crash)

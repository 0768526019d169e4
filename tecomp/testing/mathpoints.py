"""The elementwise math functions at their special points: gradients against PyTorch's,
NaN bits of a vectorized build against a serial one.

Two checks, each over one function and one dtype (the ``ops`` family's ``mathpoint`` kind
draws them; ``tests/test_fuzz_mathpoints.py`` runs each function once):

``grad``
    ``tc.gradient`` of ``Y = f(X)`` (or ``f(X, Z)`` for :data:`BINARY`, over every pair of
    the points) with a head of ones, at :data:`POINTS` (+-0, +-inf, NaN, +-tiny, +-huge,
    1, -2.5), against ``torch.autograd`` in the same dtype.  Compared: NaN-ness, each
    infinity, and the sign of a zero or of a finite value (a *class*:
    :func:`value_class`); magnitudes are the accuracy tests' business.  Session 25 found
    atan2's gradient NaN at (0, 0) where PyTorch gives 0.  The differences tecomp means
    are listed in :data:`KNOWN_GRAD` (function, argument, point: what tecomp gives, and
    why), each a line of ``tecomp/autodiff/rules.py``'s table or of docs/numerics.md.
``nan_bits``
    ``Y = f(X)`` (or ``f(X, Z)``) built twice, serial and vectorized (split by 16 / 8
    lanes), run on NaN inputs of both signs, quiet and signalling, with and without
    payloads (the other operand ordinary, or NaN too): the bits of every NaN result must
    be the same in both builds (docs/numerics.md, "NaN bits": one NaN operand; which of
    two NaN operands a result carries is not promised for ``maximum``/``minimum``, so
    those pairs are compared for NaN-ness only).  Session 25 found LLVM swapping the
    operands of ``x + y`` in one build only.
"""
from __future__ import annotations

import itertools

import numpy as np

import tecomp as tc

#: one-argument functions and PyTorch's (None: PyTorch has none; the gradient is
#: compared with :data:`NO_TORCH`'s formula instead)
UNARY = {
    "exp": "exp", "fast_exp": "exp", "log": "log", "fast_log": "log", "log1p": "log1p",
    "log2": "log2", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "sigmoid": "sigmoid",
    "erf": "erf", "erfc": "erfc", "fast_erfc": "erfc", "sin": "sin", "cos": "cos",
    "tan": "tan", "atan": "atan", "abs": "abs", "floor": "floor", "ceil": "ceil",
    "round": "round", "exp2": "exp2", "expm1": "expm1", "softplus": "softplus",
    "trunc": "trunc", "cbrt": None,
}
#: two-argument functions (``tc.<name>``, else the operator) and PyTorch's
BINARY = {"atan2": "atan2", "pow": "pow", "add": "add", "sub": "sub", "mul": "mul",
          "div": "div", "maximum": "maximum", "minimum": "minimum"}
#: the differentiable two-argument functions the ``grad`` check covers (the operators'
#: rules are the engine's own, checked elsewhere)
GRAD_BINARY = ("atan2", "pow")
#: the points (each dtype's tiny: a subnormal of float32, 1e-310 for float64)
POINTS = (0.0, -0.0, float("inf"), float("-inf"), float("nan"), "tiny", "-tiny", 1e30,
          -1e30, 1.0, -2.5)
#: where tecomp's gradient is meant to differ from PyTorch's (``(function, argument,
#: point)``: tecomp's class, why).  ``argument`` is 0 or 1; ``point`` a value or a pair.
KNOWN_GRAD = {
    # PyTorch has no cbrt; the reference is x.sign() * |x|**(1/3), whose gradient at 0
    # is NaN; tecomp's table: 1 / (3 cbrt(x)**2), +inf at 0
    ("cbrt", 0, 0.0): ("+inf", "rules.py: cbrt's gradient is inf at 0"),
    ("cbrt", 0, -0.0): ("+inf", "rules.py: cbrt's gradient is inf at 0"),
}
#: where only a zero's sign may differ: none (session 25: tecomp's unary minus was
#: ``0 - x``, +0 for x = +0, so ``d cos / dx`` at +0 and atan2's ``d / dx`` at y = +0
#: were +0 where PyTorch's are -0; fixed)
ZERO_SIGN_FROM_NEGATION = ()

_F32_TINY, _F64_TINY = 1e-40, 1e-310


def points(dtype: str) -> list:
    tiny = _F32_TINY if dtype == "float32" else _F64_TINY
    return [tiny if p == "tiny" else -tiny if p == "-tiny" else p for p in POINTS]


def value_class(v) -> str:
    """``nan``, ``+inf``, ``-inf``, ``+0``, ``-0``, ``+f`` or ``-f`` (finite, not zero)."""
    v = float(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return ("-" if np.signbit(v) else "+") + ("0" if v == 0 else "f")


def _point_key(p):
    return tuple(float(q) for q in p) if isinstance(p, tuple) else float(p)


def _known(name, k, p):
    """KNOWN_GRAD's entry of a point (NaN and the tiny points never listed)."""
    if isinstance(p, tuple) or np.isnan(p):
        return KNOWN_GRAD.get((name, k, p if isinstance(p, tuple) else None))
    return KNOWN_GRAD.get((name, k, float(p)))


def _tc_fn(name):
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
           "mul": lambda a, b: a * b, "div": lambda a, b: a / b}
    return ops.get(name) or getattr(tc, name)


def _torch_fn(name):
    import torch
    if name == "cbrt":
        return lambda x: torch.sign(x) * torch.abs(x) ** (1.0 / 3.0)
    if name == "softplus":
        return torch.nn.functional.softplus
    return getattr(torch, (UNARY.get(name) or BINARY[name]))


def _inputs(name, dtype):
    pts = points(dtype)
    if name in UNARY:
        return [np.asarray(pts, dtype)], pts
    pairs = list(itertools.product(pts, pts))
    return ([np.asarray([a for a, _ in pairs], dtype), np.asarray([b for _, b in pairs], dtype)],
            pairs)


def _compute(name, dtype, n):
    X = tc.placeholder((n,), dtype, name="X")
    ins = [X]
    f = _tc_fn(name)
    if name in UNARY:
        Y = tc.compute((n,), lambda i: f(X[i]), name="Y")
    else:
        Z = tc.placeholder((n,), dtype, name="Z")
        ins.append(Z)
        Y = tc.compute((n,), lambda i: f(X[i], Z[i]), name="Y")
    return ins, Y


def grad_differences(name: str, dtype: str = "float32", target: str = "llvm",
                     zero_sign: bool = True) -> list:
    """Where ``tc.gradient`` of ``name`` differs in class (:func:`value_class`) from
    PyTorch's at the points, beyond :data:`KNOWN_GRAD` (and, unless ``zero_sign``, a
    zero's sign in :data:`ZERO_SIGN_FROM_NEGATION`): a list of lines (empty: none)."""
    import torch
    arrays, pts = _inputs(name, dtype)
    n = len(pts)
    ins, Y = _compute(name, dtype, n)
    H = tc.placeholder((n,), dtype, name="H")
    grads = tc.gradient(Y, ins, head=H)
    s = tc.create_schedule([g.op for g in grads])
    f = tc.build(s, ins + [H] + list(grads), target=target)
    got = [np.zeros(n, dtype) for _ in grads]
    f(*arrays, np.ones(n, dtype), *got)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = _torch_fn(name)(*ts)
    out.backward(torch.ones_like(out))
    want = [t.grad.numpy() for t in ts]
    bad = []
    for k, (g, w) in enumerate(zip(got, want)):
        for p, a, b in zip(pts, g, w):
            ca, cb = value_class(a), value_class(b)
            if ca == cb:
                continue
            known = _known(name, k, p)
            if known is not None and known[0] == ca:
                continue
            if not zero_sign and (name, k) in ZERO_SIGN_FROM_NEGATION and \
                    {ca, cb} == {"+0", "-0"}:
                continue
            bad.append(f"d {name}({', '.join(['x', 'y'][:len(arrays)])}) / d arg {k} at "
                       f"{p} ({dtype}): tecomp {a!r} ({ca}), PyTorch {b!r} ({cb})")
    return bad


def nans(dtype: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` NaNs of ``dtype``: both signs, quiet and signalling, with and without a
    payload."""
    it, bits = (np.uint32, 32) if dtype == "float32" else (np.uint64, 64)
    mant = 23 if bits == 32 else 52
    exp = ((1 << (bits - mant - 1)) - 1) << mant
    q = 1 << (mant - 1)
    rng = np.random.default_rng(seed)
    vals = []
    for k in range(n):
        payload = int(rng.integers(1, q)) if k % 3 else 0
        quiet = q if k % 2 == 0 else 0
        if not quiet and not payload:
            payload = 1
        sign = (1 << (bits - 1)) if k % 4 >= 2 else 0
        vals.append(sign | exp | quiet | payload)
    return np.asarray(vals, dtype=it).view(dtype)


#: two-argument functions whose choice between two NaN operands is not promised
EITHER_NAN = ("maximum", "minimum")


def nan_bit_differences(name: str, dtype: str = "float32", target: str = "llvm",
                        n: int = 64, seed: int = 0) -> list:
    """Where a vectorized and a serial build of ``name`` give NaN results of different
    bits (docs/numerics.md, "NaN bits"): a list of lines (empty: none)."""
    it = np.uint32 if dtype == "float32" else np.uint64
    lanes = 16 if dtype == "float32" else 8
    x = nans(dtype, n, seed)
    other = np.tile(np.asarray([1.5, -2.0, 0.0, np.inf], dtype), n // 4 + 1)[:n]
    calls = [("x NaN", [x])] if name in UNARY else [
        ("x NaN", [x, other]), ("y NaN", [other, x]), ("both NaN", [x, x[::-1].copy()])]
    res = []
    for vec in (False, True):
        ins, Y = _compute(name, dtype, n)
        s = tc.create_schedule(Y.op)
        if vec:
            _, i = s[Y].split(Y.op.axis[0], factor=lanes)
            s[Y].vectorize(i)
        f = tc.build(s, ins + [Y], target=target)
        outs = []
        for _, args in calls:
            y = np.zeros(n, dtype)
            f(*args, y)
            outs.append(y.view(it).copy())
        res.append(outs)
    bad = []
    for (what, _), a, b in zip(calls, *res):
        na, nb = np.isnan(a.view(dtype)), np.isnan(b.view(dtype))
        if what == "both NaN" and name in EITHER_NAN:
            diff = na != nb
        else:
            diff = (na | nb) & (a != b)
        if diff.any():
            j = int(np.argmax(diff))
            bad.append(f"{name} ({dtype}, {what}): {int(diff.sum())} of {n} NaN results "
                       f"differ; at {j}: serial {int(a[j]):#x}, vectorized {int(b[j]):#x}")
    return bad

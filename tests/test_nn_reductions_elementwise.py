"""tecomp.nn's reductions (sum, mean, max, min, prod, argmax, argmin, all, any) and
elementwise math operators against numpy/torch references, over TOPI-like parameter lists
(axes, keepdims, odd shapes, dtypes, NaN/inf inputs), compiled with tc.auto_schedule on
llvm and, for a sample, in the CUDA emulation; gradients with gradcheck."""
import numpy as np
import pytest
import torch

import tecomp as tc
from tecomp import autodiff as ad
from tecomp import nn

rng = np.random.default_rng(52)


def run(ins, out, values, target="llvm"):
    """Build ``ins + [out]`` with the auto-scheduler's rules and run it on ``values``."""
    args = list(ins) + [out]
    f = tc.build(tc.auto_schedule(args, target=target, trials=0), args, target=target)
    res = np.zeros(out_shape(out, ins, values), dtype=out.dtype)
    f(*values, res)
    return res


def out_shape(out, ins, values):
    """The output's shape: constant extents, symbolic ones bound from the inputs."""
    binding = {}
    for t, v in zip(ins, values):
        for e, n in zip(t.shape, v.shape):
            if isinstance(e, tc.Var):
                binding[e] = n
    return tuple(int(e.value) if isinstance(e, tc.ir.Const) else binding[e] for e in out.shape)


def data(shape, dtype):
    if dtype == "bool":
        return rng.random(shape) > 0.3
    if dtype.startswith("int"):
        return rng.integers(-5, 6, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------
# reductions (TOPI's test_topi_reduce parameter list, shrunk)

REDUCE_CASES = [
    # shape, axis, keepdims, op, dtype
    ((1, 3, 2, 1), None, True, "sum", "float32"),
    ((3, 6, 5), (0, 2), False, "sum", "float32"),
    ((3, 6, 5), -1, True, "sum", "int32"),
    ((17,), 0, False, "argmax", "float32"),
    ((5, 12, 4, 3), (1, 2, 3), True, "sum", "float64"),
    ((2, 3), None, True, "all", "bool"),
    ((4, 7 * 5), (1,), False, "max", "float32"),
    ((6, 8, 5), None, True, "sum", "float32"),
    ((6, 8, 5), None, True, "all", "bool"),
    ((5, 4, 6, 3), (0, 2), False, "min", "float32"),
    ((7, 9), 1, True, "argmax", "float32"),
    ((6, 4, 5, 3), 2, False, "argmin", "float32"),
    ((7, 5, 3), None, True, "argmax", "float32"),
    ((7, 5, 3), None, False, "sum", "float32"),
    ((5, 4, 6, 3), (1, 2, 3), True, "any", "bool"),
    ((5, 4, 6, 3), (-3, -1), False, "mean", "float32"),
    ((9,), None, False, "mean", "float64"),
    ((4, 5), (0, 1), False, "prod", "float32"),
    ((4, 3), 0, True, "prod", "int32"),
    ((6, 7), 0, False, "max", "int32"),
    ((6, 7), -2, True, "argmin", "int32"),
    ((3, 4, 5), (0, 2), False, "argmax", "float32"),
    ((3, 4, 5), (-1, 0), True, "argmin", "float64"),
    ((2, 5, 3), 1, False, "any", "bool"),
    ((8, 6), (0, 1), False, "all", "bool"),
]


def np_reduce(op, x, axis, keepdims):
    if op in ("argmax", "argmin"):
        axes = tuple(range(x.ndim)) if axis is None else \
            tuple(sorted(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,))))
        rest = [d for d in range(x.ndim) if d not in axes]
        moved = np.transpose(x, rest + list(axes))
        flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
        r = getattr(np, op)(flat, axis=-1)
        if keepdims:
            r = r.reshape(tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)))
        return r
    return getattr(np, op)(x, axis=axis, keepdims=keepdims).astype(x.dtype)


@pytest.mark.parametrize("shape,axis,keepdims,op,dtype", REDUCE_CASES)
def test_reduce_llvm(shape, axis, keepdims, op, dtype):
    X = tc.placeholder(shape, dtype, name="X")
    Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims)
    x = data(shape, dtype)
    if op.startswith("arg") and dtype.startswith("float"):
        x.flat[rng.integers(0, x.size, 2)] = x.max() if op == "argmax" else x.min()  # ties
    got = run([X], Y, [x])
    want = np_reduce(op, x, axis, keepdims)
    assert got.shape == want.shape
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,axis,keepdims,op,dtype", REDUCE_CASES[::3])
def test_reduce_cuda_emu(shape, axis, keepdims, op, dtype):
    X = tc.placeholder(shape, dtype, name="X")
    Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims)
    x = data(shape, dtype)
    got = run([X], Y, [x], target="cuda-emu")
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(got, np_reduce(op, x, axis, keepdims), rtol=tol, atol=tol)


def test_full_reduction_with_keepdims_in_cuda_emu():
    """The 0-d results with a second stage build for CUDA with keepdims=True."""
    H = tc.placeholder((9, 3), "float16", name="H")
    h = rng.random((9, 3)).astype("float16")
    for op in ("mean", "sum", "argmin"):
        got = run([H], getattr(nn, op)(H, keepdims=True), [h], target="cuda-emu")
        want = np_reduce(op, h.astype("float32"), None, True)
        np.testing.assert_allclose(got.astype("float64"), want, rtol=2e-3)


def test_full_reduction_to_0d_in_cuda_emu():
    """A 0-d stage (after a reduction of every axis without keepdims) has no axis to
    bind to a GPU thread: it runs as a kernel of one thread (it was a BuildError)."""
    H = tc.placeholder((9, 3), "float16", name="H")
    X = tc.placeholder((7, 5, 3), name="X")
    h = rng.random((9, 3)).astype("float16")
    x = data((7, 5, 3), "float32")
    for op in ("mean", "sum", "argmin", "argmax"):
        got = run([H], getattr(nn, op)(H), [h], target="cuda-emu")
        assert got.shape == ()
        want = np_reduce(op, h.astype("float32"), None, False)
        np.testing.assert_allclose(got.astype("float64"), want, rtol=2e-3)
    for op in ("mean", "argmax", "argmin"):
        np.testing.assert_allclose(run([X], getattr(nn, op)(X), [x], target="cuda-emu"),
                                   np_reduce(op, x, None, False), rtol=1e-5)


def test_reduce_every_axis_is_0d_as_numpy():
    X = tc.placeholder((3, 4), name="X")
    for op in ("sum", "mean", "max", "argmax"):
        Y = getattr(nn, op)(X)
        assert Y.shape == () or tuple(Y.shape) == ()
        x = data((3, 4), "float32")
        np.testing.assert_allclose(run([X], Y, [x]), getattr(np, op)(x), rtol=1e-5)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_nan_inf_ties_and_last_index(op):
    X = tc.placeholder((5, 6), name="X")
    x = rng.integers(0, 3, (5, 6)).astype("float32")      # many ties
    x[1, 4] = np.nan
    x[1, 5] = np.nan
    x[2, :] = -np.inf if op == "argmax" else np.inf
    x[3, 2] = np.inf if op == "argmax" else -np.inf
    got = run([X], getattr(nn, op)(X, axis=1), [x])
    np.testing.assert_array_equal(got, getattr(np, op)(x, axis=1))
    # the last index among ties (TOPI's select_last_index), int64 as torch
    y = rng.integers(0, 3, (5, 6)).astype("float32")
    Y = getattr(nn, op)(X, axis=1, dtype="int64", select_last_index=True)
    assert Y.dtype == "int64"
    flip = y[:, ::-1].copy()
    want = 5 - getattr(np, op)(flip, axis=1)
    np.testing.assert_array_equal(run([X], Y, [y]), want)
    np.testing.assert_array_equal(run([X], Y, [y]),
                                  getattr(torch, op)(T(flip), 1).numpy()
                                  * -1 + 5)


def test_reduce_nan_propagates_and_float16_accumulates_in_float32():
    X = tc.placeholder((3, 4), name="X")
    x = data((3, 4), "float32")
    x[1, 2] = np.nan
    for op in ("max", "min", "sum"):
        np.testing.assert_array_equal(np.isnan(run([X], getattr(nn, op)(X, axis=1), [x])),
                                      [False, True, False])
    H = tc.placeholder((2, 4096), "float16", name="H")
    S = nn.sum(H, axis=1)
    assert S.op.input_tensors[0].name == "sum.acc" and S.op.input_tensors[0].dtype == "float32"
    h = np.full((2, 4096), 0.1, "float16")
    want = h.astype("float32").sum(1).astype("float16")
    np.testing.assert_array_equal(run([H], S, [h]), want)      # a float16 sum stalls at 256


def test_reduce_symbolic_batch():
    n = tc.var("n")
    X = tc.placeholder((n, 5, 3), name="X")
    for op, axis in (("sum", (0, 2)), ("mean", 0), ("max", None), ("argmax", 0),
                     ("prod", -1)):
        Y = getattr(nn, op)(X, axis=axis, keepdims=op == "mean")
        for size in (1, 4):
            x = data((size, 5, 3), "float32")
            np.testing.assert_allclose(run([X], Y, [x]),
                                       np_reduce(op, x, axis, op == "mean"), rtol=1e-5)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis,keepdims", [((0, 2), False), (-1, True), (None, False)])
def test_reduce_gradcheck(op, axis, keepdims):
    X = tc.placeholder((2, 3, 4), name="X")
    assert ad.gradcheck(getattr(nn, op)(X, axis=axis, keepdims=keepdims), [X],
                        target="reference")


def test_reduce_gradcheck_compiled_and_symbolic():
    X = tc.placeholder((3, 5), name="X")
    assert ad.gradcheck(nn.mean(X, axis=0), [X])
    assert ad.gradcheck(nn.max(X, axis=1, keepdims=True), [X])


# ---------------------------------------------------------------------------------
# elementwise

T = torch.from_numpy
SELU = torch.nn.functional.selu

# name, call, reference (numpy array -> numpy array), input domain, dtypes
ELEM_CASES = [
    ("exp", nn.exp, np.exp, "any", ("float32", "float64")),
    ("exp2", nn.exp2, np.exp2, "any", ("float32",)),
    ("expm1", nn.expm1, np.expm1, "any", ("float32", "float64")),
    ("log", nn.log, np.log, "pos", ("float32", "float64")),
    ("log2", nn.log2, np.log2, "pos", ("float32",)),
    ("log1p", nn.log1p, np.log1p, "pos", ("float32",)),
    ("sqrt", nn.sqrt, np.sqrt, "pos", ("float32", "float64")),
    ("rsqrt", nn.rsqrt, lambda x: 1 / np.sqrt(x), "pos", ("float32",)),
    ("erf", nn.erf, lambda x: torch.erf(T(x)).numpy(), "any", ("float32", "float64")),
    ("sin", nn.sin, np.sin, "any", ("float32",)),
    ("cos", nn.cos, np.cos, "any", ("float32",)),
    ("tan", nn.tan, np.tan, "any", ("float32", "float64")),
    ("atan", nn.atan, np.arctan, "wide", ("float32", "float64")),
    ("cbrt", nn.cbrt, np.cbrt, "wide", ("float32", "float64")),
    ("erfc", nn.erfc, lambda x: torch.erfc(T(x)).numpy(), "wide", ("float32", "float64")),
    ("tanh", nn.tanh, np.tanh, "any", ("float32",)),
    ("sigmoid", nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), "any", ("float32",)),
    ("reciprocal", nn.reciprocal, np.reciprocal, "pos", ("float32",)),
    ("abs", nn.abs, np.abs, "any", ("float32", "int32")),
    ("sign", nn.sign, np.sign, "any", ("float32", "int32")),
    ("negative", nn.negative, np.negative, "any", ("float64", "int32")),
    ("square", nn.square, np.square, "any", ("float32", "int32")),
    ("floor", nn.floor, np.floor, "half", ("float32", "int32")),
    ("ceil", nn.ceil, np.ceil, "half", ("float32",)),
    ("round", nn.round, np.round, "half", ("float32", "int32")),
    ("trunc", nn.trunc, np.trunc, "half", ("float32", "float64")),
    ("isnan", nn.isnan, np.isnan, "special", ("float32", "float64", "int32")),
    ("isinf", nn.isinf, np.isinf, "special", ("float32", "int32")),
    ("isfinite", nn.isfinite, np.isfinite, "special", ("float32", "int32")),
    ("clip", lambda x: nn.clip(x, -0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75), "special",
     ("float32",)),
    ("clip_int", lambda x: nn.clip(x, None, 2), lambda x: np.clip(x, None, 2), "any",
     ("int32",)),
    ("cast", lambda x: nn.cast(x, "int32"), lambda x: x.astype("int32"), "half",
     ("float32",)),
    ("cast_bool", lambda x: nn.cast(x, "bool"), lambda x: x.astype("bool"), "any",
     ("int32",)),
    ("leaky_relu", lambda x: nn.leaky_relu(x, 0.1),
     lambda x: torch.nn.functional.leaky_relu(T(x), 0.1).numpy(), "any", ("float32",)),
    ("elu", lambda x: nn.elu(x, 0.7), lambda x: torch.nn.functional.elu(T(x), 0.7).numpy(),
     "any", ("float32", "float64")),
    ("selu", nn.selu, lambda x: SELU(T(x)).numpy(), "any", ("float32",)),
    ("hardswish", nn.hardswish, lambda x: torch.nn.functional.hardswish(T(x)).numpy(),
     "wide", ("float32",)),
    ("hardsigmoid", nn.hardsigmoid, lambda x: torch.nn.functional.hardsigmoid(T(x)).numpy(),
     "wide", ("float32",)),
    ("hardtanh", lambda x: nn.hardtanh(x, -0.5, 1.5),
     lambda x: torch.nn.functional.hardtanh(T(x), -0.5, 1.5).numpy(), "wide", ("float32",)),
    ("silu", nn.silu, lambda x: torch.nn.functional.silu(T(x)).numpy(), "any", ("float32",)),
    ("mish", nn.mish, lambda x: torch.nn.functional.mish(T(x)).numpy(), "wide", ("float32",)),
    ("softplus", nn.softplus, lambda x: torch.nn.functional.softplus(T(x)).numpy(), "wide",
     ("float32",)),
    ("softplus_beta", lambda x: nn.softplus(x, beta=2.0, threshold=3.0),
     lambda x: torch.nn.functional.softplus(T(x), 2.0, 3.0).numpy(), "wide",
     ("float32", "float64")),
]


def elem_data(domain, shape, dtype):
    if dtype.startswith("int"):
        return rng.integers(-9, 10, shape).astype(dtype)
    x = {"any": lambda: rng.standard_normal(shape) * 1.5,
         "pos": lambda: rng.uniform(0.05, 4.0, shape),
         "half": lambda: rng.integers(-8, 9, shape) * 0.5 + rng.choice([0, 0.25], shape),
         "wide": lambda: rng.uniform(-8, 8, shape)}.get(domain, lambda: rng.standard_normal(
             shape))().astype(dtype)
    if domain == "special":
        x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    return x


def _close(got, want, dtype):
    if got.dtype == bool or dtype.startswith("int"):
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-6 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, want.astype(got.dtype), rtol=tol, atol=tol)


ELEM_PARAMS = [(c[0], c[1], c[2], c[3], d) for c in ELEM_CASES for d in c[4]]


@pytest.mark.parametrize("name,call,ref,domain,dtype", ELEM_PARAMS,
                         ids=[f"{p[0]}-{p[4]}" for p in ELEM_PARAMS])
def test_elementwise_llvm(name, call, ref, domain, dtype):
    shape = (3, 7, 5)                               # odd extents: vector tails
    X = tc.placeholder(shape, dtype, name="X")
    Y = call(X)
    x = elem_data(domain, shape, dtype)
    _close(run([X], Y, [x]), ref(x), dtype)


@pytest.mark.parametrize("name,call,ref,domain,dtype", ELEM_PARAMS[::5],
                         ids=[f"{p[0]}-{p[4]}" for p in ELEM_PARAMS[::5]])
def test_elementwise_cuda_emu(name, call, ref, domain, dtype):
    X = tc.placeholder((37,), dtype, name="X")
    x = elem_data(domain, (37,), dtype)
    _close(run([X], call(X), [x], target="cuda-emu"), ref(x), dtype)


def test_special_values_in_cuda_emu():
    X = tc.placeholder((6,), name="X")
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 2.0, -3.0], "float32")
    for op, ref in ((nn.isnan, np.isnan), (nn.isinf, np.isinf), (nn.isfinite, np.isfinite),
                    (nn.sign, np.sign), (lambda t: nn.clip(t, -1, 1), lambda v: np.clip(v, -1, 1))):
        np.testing.assert_array_equal(run([X], op(X), [x], target="cuda-emu"), ref(x))


def test_prelu_nchw_nhwc_and_shared_slope():
    x = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    w = rng.uniform(0.1, 0.5, 3).astype("float32")
    X = tc.placeholder((2, 3, 4, 5), name="X")
    W = tc.placeholder((3,), name="W")
    want = torch.nn.functional.prelu(T(x), T(w)).numpy()
    np.testing.assert_allclose(run([X, W], nn.prelu(X, W), [x, w]), want, rtol=1e-6)
    H = tc.placeholder((2, 4, 5, 3), name="H")
    np.testing.assert_allclose(run([H, W], nn.prelu(H, W, axis=-1),
                                   [x.transpose(0, 2, 3, 1).copy(), w]),
                               want.transpose(0, 2, 3, 1), rtol=1e-6)
    W1 = tc.placeholder((1,), name="W1")
    np.testing.assert_allclose(run([X, W1], nn.prelu(X, W1), [x, w[:1].copy()]),
                               torch.nn.functional.prelu(T(x), T(w[:1])).numpy(), rtol=1e-6)


def test_elementwise_symbolic_and_float16():
    n = tc.var("n")
    X = tc.placeholder((n, 3), name="X")
    x = rng.standard_normal((5, 3)).astype("float32")
    np.testing.assert_allclose(run([X], nn.silu(X), [x]),
                               torch.nn.functional.silu(T(x)).numpy(), rtol=2e-6)
    H = tc.placeholder((4, 9), "float16", name="H")
    h = rng.standard_normal((4, 9)).astype("float16")
    for op, ref in ((nn.exp, torch.exp), (nn.hardswish, torch.nn.functional.hardswish),
                    (nn.elu, torch.nn.functional.elu)):
        want = ref(T(h).float()).half().numpy()
        np.testing.assert_allclose(run([H], op(H), [h]).astype("float32"),
                                   want.astype("float32"), rtol=1e-3, atol=1e-3)


def test_bfloat16_reductions_and_elementwise():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    X = tc.placeholder((3, 300), "bfloat16", name="X")
    x = rng.uniform(0.5, 1.5, (3, 300)).astype(bf)
    xf = x.astype("float32")
    S = nn.sum(X, axis=1)
    assert S.dtype == "bfloat16" and S.op.input_tensors[0].dtype == "float32"
    np.testing.assert_allclose(run([X], S, [x]).astype("float32"),
                               xf.sum(1).astype(bf).astype("float32"), rtol=1e-2)
    np.testing.assert_allclose(run([X], nn.mean(X, axis=1), [x]).astype("float32"),
                               xf.mean(1), rtol=1e-2)
    for op, ref in ((nn.exp, np.exp), (nn.silu, lambda v: v / (1 + np.exp(-v)))):
        # within one bfloat16 ulp of the float32 result rounded once
        np.testing.assert_allclose(run([X], op(X), [x]).astype("float32"),
                                   ref(xf).astype(bf).astype("float32"), rtol=2 ** -7)


GRAD_CASES = [
    ("exp", nn.exp, "any"), ("log", nn.log, "pos"), ("sqrt", nn.sqrt, "pos"),
    ("rsqrt", nn.rsqrt, "pos"), ("erf", nn.erf, "any"), ("tan", nn.tan, "any"),
    ("atan", nn.atan, "any"), ("cbrt", nn.cbrt, "pos"), ("erfc", nn.erfc, "any"),
    ("reciprocal", nn.reciprocal, "pos"), ("abs", nn.abs, "any"),
    ("exp2", nn.exp2, "any"), ("expm1", nn.expm1, "any"), ("log2", nn.log2, "pos"),
    ("log1p", nn.log1p, "pos"), ("sin", nn.sin, "any"), ("cos", nn.cos, "any"),
    ("square", nn.square, "any"), ("negative", nn.negative, "any"),
    ("clip", lambda x: nn.clip(x, -0.5, 0.5), "any"),
    ("leaky_relu", nn.leaky_relu, "any"), ("elu", nn.elu, "any"), ("selu", nn.selu, "any"),
    ("hardswish", nn.hardswish, "any"), ("hardsigmoid", nn.hardsigmoid, "any"),
    ("hardtanh", nn.hardtanh, "any"), ("silu", nn.silu, "any"), ("mish", nn.mish, "any"),
    ("softplus", lambda x: nn.softplus(x, 2.0, 3.0), "any"),
    ("sign", nn.sign, "any"), ("floor", nn.floor, "any"), ("trunc", nn.trunc, "any"),
    ("ceil", nn.ceil, "any"), ("round", nn.round, "any"),
    ("cast", lambda x: nn.cast(x, "float64"), "any"),
]


def _away_from_kinks(x):
    """Points at least 0.05 away from every kink (0, +-0.5, +-1, +-3, integers)."""
    frac = x - np.round(x * 2) / 2
    return np.where(np.abs(frac) < 0.05, x + 0.1, x)


@pytest.mark.parametrize("name,call,domain", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_elementwise_gradcheck(name, call, domain):
    X = tc.placeholder((3, 4), name="X")
    x = _away_from_kinks(elem_data(domain, (3, 4), "float64"))
    assert ad.gradcheck(call(X), [X], {X: x}, target="reference")


def test_prelu_gradcheck_in_both_inputs():
    X = tc.placeholder((2, 3, 2, 2), name="X")
    W = tc.placeholder((3,), name="W")
    x = _away_from_kinks(rng.standard_normal((2, 3, 2, 2)))
    assert ad.gradcheck(nn.prelu(X, W), [X, W], {X: x, W: np.array([0.1, 0.2, 0.3])})


# the older operators the operator table (docs/operators.md) marks differentiable
@pytest.mark.parametrize("name", ["pad", "reshape", "transpose", "concatenate", "split",
                                  "batch_matmul", "dropout", "sdpa", "relu"])
def test_table_gradients_of_the_data_movement_operators(name):
    X = tc.placeholder((2, 3, 4), name="X")
    Y = tc.placeholder((2, 4, 3), name="Y")
    ins = [X]
    if name == "pad":
        out = nn.pad(X, (0, 1, 2), (1, 0, 1))
    elif name == "reshape":
        out = nn.reshape(X, (4, -1))
    elif name == "transpose":
        out = nn.transpose(X, (2, 0, 1))
    elif name == "concatenate":
        out = nn.concatenate([X, X], axis=-1)
    elif name == "split":
        out = nn.split(X, 2, axis=2)[1]
    elif name == "batch_matmul":
        out, ins = nn.batch_matmul(X, Y), [X, Y]
    elif name == "dropout":
        out = nn.dropout(X, 0.3, seed=5)
    elif name == "sdpa":
        Q = tc.placeholder((1, 2, 3, 4), name="Q")
        out, ins = nn.scaled_dot_product_attention(Q, Q, Q), [Q]
    else:
        out = nn.relu(X)
    assert ad.gradcheck(out, ins, target="reference")


def test_zero_extents_at_call_time():
    """A symbolic extent may be 0 when the kernel is called (docs/operators.md, shapes):
    an empty batch gives an empty result, a reduction over an empty axis its identity."""
    n, k = tc.var("n"), tc.var("k")
    A = tc.placeholder((3, k), name="A")
    B = tc.placeholder((k, 4), name="B")
    outs = [nn.sum(A, axis=1), nn.prod(A, axis=1), nn.mean(A, axis=1), nn.max(A, axis=1),
            nn.min(A, axis=1), nn.argmax(A, axis=1), nn.argmin(A, axis=1), nn.matmul(A, B),
            nn.softmax(A)]
    args = [A, B] + outs
    f = tc.build(tc.auto_schedule(args), args)
    empty = np.zeros((3, 0), "float32")
    res = [np.full((3,), 7, o.dtype) for o in outs[:7]] + [np.full((3, 4), 7, "float32"),
                                                            np.zeros((3, 0), "float32")]
    f(empty, np.zeros((0, 4), "float32"), *res)
    want = [0, 1, np.nan, -np.inf, np.inf, -1, -1]
    for got, w in zip(res[:7], want):
        np.testing.assert_array_equal(got, np.full(3, w, got.dtype))
    np.testing.assert_array_equal(res[7], np.zeros((3, 4), "float32"))
    X = tc.placeholder((n, 3, 8, 8), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    g, b = tc.placeholder((8,), name="g"), tc.placeholder((8,), name="b")
    L = tc.placeholder((n, 8), name="L")
    outs = [nn.conv2d_nchw(X, W, padding=1), nn.layer_norm(L, g, b), nn.relu(L)]
    args = [X, W, L, g, b] + outs
    f = tc.build(tc.auto_schedule(args), args)
    f(np.zeros((0, 3, 8, 8), "float32"), np.ones((4, 3, 3, 3), "float32"),
      np.zeros((0, 8), "float32"), np.ones(8, "float32"), np.ones(8, "float32"),
      np.zeros((0, 4, 8, 8), "float32"), np.zeros((0, 8), "float32"),
      np.zeros((0, 8), "float32"))
    with pytest.raises(tc.ShapeError, match="extents must be positive"):
        tc.placeholder((0, 5), name="Z")

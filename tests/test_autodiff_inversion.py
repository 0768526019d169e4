"""The index-inversion solver (tecomp.autodiff.inversion): exact gather forms.

Each rule has a structural test (which variables stay free, which conditions remain), and
a brute-force check: for every target p, the points u(p, f) over the free box where the
conditions hold are exactly the domain points with h(u) == p, each once.
"""
import itertools

import pytest
from hypothesis import given, settings, strategies as st

import tecomp as tc
from tecomp.autodiff.inversion import invert
from tecomp.ir.expr import Const, IterVar, Range, Var
from tecomp.autodiff.reference import _Eval


def eval_expr(e, env):
    return _Eval({}, env).ev(e)


def dom(name, ext, kind="data_par", lo=0):
    e = Const(ext) if isinstance(ext, int) else ext
    return IterVar(Var(name), Range(Const(lo), e), kind)


def solve(fn, domain, shape):
    ps = [Var(f"p{k}") for k in range(len(shape))]
    idx = fn(*[d.var for d in domain])
    idx = idx if isinstance(idx, tuple) else (idx,)
    inv = invert(idx, domain, ps, [Const(s) if isinstance(s, int) else s for s in shape])
    return inv, idx, ps


def brute_check(fn, domain, shape):
    """The inversion is exact: same points, no duplicates, for every target."""
    inv, idx, ps = solve(fn, domain, shape)
    ranges = [range(d.dom.min.value, d.dom.min.value + d.dom.extent.value) for d in domain]
    want = {}
    for u in itertools.product(*ranges):
        env = {d.var: x for d, x in zip(domain, u)}
        p = tuple(int(eval_expr(h, env)) for h in idx)
        want.setdefault(p, []).append(u)
    franges = [range(a.dom.min.value, a.dom.min.value + a.dom.extent.value) for a in inv.axes]
    for p in itertools.product(*[range(s) for s in shape]):
        got = []
        for f in itertools.product(*franges):
            env = dict(zip(ps, p))
            env.update({a.var: x for a, x in zip(inv.axes, f)})
            if all(bool(eval_expr(c, env)) for c in inv.conditions):
                got.append(tuple(int(eval_expr(inv.subst[d.var], env)) for d in domain))
        assert sorted(got) == sorted(want.get(p, [])), (p, inv.describe())
    return inv


def names(inv):
    return [(a.var.name, a.dom.extent.value) for a in inv.axes]


# --- structure -------------------------------------------------------------------


def conv_domain():
    return [dom("n", 1), dom("co", 2), dom("y", 4), dom("x", 3), dom("ci", 1, "reduce"),
            dom("ky", 3, "reduce"), dom("kx", 3, "reduce")]


def test_conv_data_gradient_keeps_the_kernel_free():
    """Stride 1: the image coordinates are solved, the small axes (co, ky, kx) stay free."""
    inv = brute_check(lambda n, co, y, x, ci, ky, kx: (n, ci, y + ky, x + kx),
                      conv_domain(), [1, 1, 6, 5])
    assert names(inv) == [("co", 2), ("ky", 3), ("kx", 3)]
    assert "y = p2 - ky" in inv.describe()


def test_conv_weight_gradient_sums_over_the_image():
    inv = brute_check(lambda n, co, y, x, ci, ky, kx: (co, ci, ky, kx), conv_domain(),
                      [2, 1, 3, 3])
    assert names(inv) == [("y", 4), ("x", 3)]
    assert inv.conditions == []


def test_stride_two_iterates_the_lattice_only():
    """y*2 + ky == p: ky = p % 2 + 2t, t in [0, 2), and y = p // 2 - t; no divisibility test."""
    inv = brute_check(lambda n, co, y, x, ci, ky, kx: (n, ci, y * 2 + ky, x * 2 + kx),
                      conv_domain(), [1, 1, 9, 7])
    assert names(inv) == [("co", 2), ("ky.t", 2), ("kx.t", 2)]
    text = inv.describe()
    assert "y = p2 // 2 - ky.t" in text and "ky = p2 % 2 + ky.t*2" in text
    assert "% 2 == 0" not in text


def test_stride_with_dilation_and_padding_offset():
    brute_check(lambda n, co, y, x, ci, ky, kx: (n, ci, y * 2 + ky * 2 + 1, x * 3 + kx),
                conv_domain(), [1, 1, 12, 9])


def test_stride_sharing_a_factor_with_the_coefficient_keeps_a_condition():
    """2*y + 2*ky: gcd(2, 2) != 1, no lattice; exactness by the divisibility condition."""
    inv = brute_check(lambda y, k: y * 4 + k * 2, [dom("y", 3), dom("k", 3, "reduce")], [13])
    assert any("% 2" in str(c) or "% 4" in str(c) for c in inv.conditions) or inv.axes


def test_diagonal_gives_a_consistency_condition():
    """A[i, i] (Halide's propagate_adjoints gets this wrong): p0 == p1, nothing to loop."""
    inv = brute_check(lambda i: (i, i), [dom("i", 4)], [4, 4])
    assert inv.axes == []
    assert [str(c) for c in inv.conditions] == ["p1 == p0"]


def test_transpose_is_a_permutation():
    inv = brute_check(lambda i, j: (j, i), [dom("i", 3), dom("j", 4)], [4, 3])
    assert inv.axes == [] and inv.conditions == []


def test_upsample_floor_division_frees_the_remainder():
    """Y[i] = X[i // 2]: X.grad[p] = sum over m in [0, 2) of Y.grad[2p + m]."""
    inv = brute_check(lambda i: i // 2, [dom("i", 8)], [4])
    assert names(inv) == [("m0", 2)]
    assert inv.conditions == []


def test_flatten_inverts_with_no_loop():
    inv = brute_check(lambda b, f: (b, f // 12, (f // 4) % 3, f % 4),
                      [dom("b", 2), dom("f", 24)], [2, 2, 3, 4])
    assert inv.axes == [] and inv.conditions == []
    assert "f = p3 + p2*4 + p1*12" in inv.describe()


def test_unflatten_extracts_mixed_radix_digits():
    """Y[b, c, h, w] = X[b, 12c + 4h + w]: c = p // 12, h = p // 4 % 3, w = p % 4."""
    inv = brute_check(lambda b, c, h, w: (b, c * 12 + h * 4 + w),
                      [dom("b", 2), dom("c", 2), dom("h", 3), dom("w", 4)], [2, 24])
    assert inv.axes == [] and inv.conditions == []


def test_incomplete_digits_keep_a_bound():
    """w has range 3 but stride-4 digits: w = p % 4 needs w < 3."""
    inv = brute_check(lambda h, w: h * 4 + w, [dom("h", 3), dom("w", 3)], [12])
    assert inv.axes == []
    assert len(inv.conditions) == 1


def test_modulo_wraparound():
    brute_check(lambda i: (i + 3) % 5, [dom("i", 7)], [5])


def test_nonzero_reduce_minimum():
    brute_check(lambda i, k: i + k, [dom("i", 4), dom("k", 3, "reduce", lo=2)], [8])


def test_opaque_index_is_a_condition():
    """X[i*j] is not affine: i and j stay free and i*j == p is checked (the fallback)."""
    inv = brute_check(lambda i, j: i * j, [dom("i", 3), dom("j", 4)], [12])
    assert names(inv) == [("i", 3), ("j", 4)]
    assert [str(c) for c in inv.conditions] == ["i*j == p0"]


def test_symbolic_extents_are_proven_too():
    n = tc.var("n")
    inv, _, _ = solve(lambda i, j, k: (i, k), [dom("i", n), dom("j", 7), dom("k", 5, "reduce")],
                      [n, 5])
    assert names(inv) == [("j", 7)]
    assert inv.conditions == []


def test_guards_are_rewritten_through_the_solution():
    """A padding's bounds test 2*y + ky >= 1 becomes p + 1 >= 1: proven, dropped."""
    ps = [Var("p0")]
    y, ky = dom("y", 4), dom("ky", 3, "reduce")
    inv = invert((y.var * 2 + ky.var - 1,), [y, ky], ps, [Const(7)],
                 guards=[tc.all(y.var * 2 + ky.var >= 1, y.var * 2 + ky.var < 8)])
    text = " && ".join(str(c) for c in inv.conditions)
    assert ">= 1" not in text and "< 8" not in text, text
    assert len(inv.conditions) == 2  # ky < 3 on the lattice, y >= 0


def test_determinism():
    texts = {solve(lambda n, co, y, x, ci, ky, kx: (n, ci, y * 2 + ky, x * 2 + kx),
                   conv_domain(), [1, 1, 9, 7])[0].describe() for _ in range(3)}
    assert len(texts) == 1


# --- property: random affine maps with // and % ----------------------------------------


@st.composite
def affine_maps(draw):
    nd = draw(st.integers(1, 3))
    exts = [draw(st.integers(1, 4)) for _ in range(nd)]
    ncomp = draw(st.integers(1, 2))
    comps = []
    for _ in range(ncomp):
        coefs = [draw(st.integers(-3, 3)) for _ in range(nd)]
        const = draw(st.integers(-2, 2))
        wrap = draw(st.sampled_from([None, None, "div", "mod"]))
        d = draw(st.integers(2, 3))
        comps.append((coefs, const, wrap, d))
    return exts, comps


@settings(max_examples=60, deadline=None)
@given(affine_maps())
def test_random_affine_maps_invert_exactly(case):
    exts, comps = case
    domain = [dom(f"u{k}", e, "reduce" if k == len(exts) - 1 else "data_par")
              for k, e in enumerate(exts)]
    ranges = [range(e) for e in exts]

    def raw(vars_, c):
        coefs, const, wrap, d = c
        e = Const(const)
        for v, a in zip(vars_, coefs):
            e = e + v * a
        if wrap == "div":
            e = e // d
        elif wrap == "mod":
            e = e % d
        return e

    # shift every component to start at 0 and size the target to its range
    lows, shape = [], []
    for c in comps:
        vals = [int(eval_expr(raw([Const(x) for x in u], c), {}))
                for u in itertools.product(*ranges)]
        lows.append(min(vals))
        shape.append(max(vals) - min(vals) + 1)
    if any(s > 12 for s in shape):
        return

    def fn(*vs):
        return tuple(raw(vs, c) - lo for c, lo in zip(comps, lows))

    brute_check(fn, domain, shape)


def test_the_parser_rolls_back_opaque_atoms():
    """(i // 2) * j is opaque: the i // 2 atom must not leave a stray loop behind."""
    inv = brute_check(lambda i, j: ((i // 2) * j, i), [dom("i", 4), dom("j", 3)], [6, 4])
    assert names(inv) == [("j", 3)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_window_sum_with_stride(k):
    brute_check(lambda y, r: y * k + r, [dom("y", 4), dom("r", 3, "reduce")], [3 * k + 3])

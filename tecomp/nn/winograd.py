"""Winograd convolution: 3x3 kernels, stride 1, dilation 1, as three stages around a
batched GEMM (Lavin and Gray's minimal filtering, F(m x m, 3 x 3)).

A ``m x m`` tile of outputs needs an ``a x a`` tile of inputs (``a = m + 2``).  With the
transforms ``B^T`` (``a x a``), ``G`` (``a x 3``) and ``A^T`` (``m x a``):

* the weight transform ``U[xi, nu, g, c, k] = (G w G^T)[xi, nu]`` of each (input
  channel, output channel) pair (the stage ``<name>.wt``; :func:`winograd_weight_transform`
  gives it alone, to run once for fixed weights);
* the input transform ``V[xi, nu, p, c] = (B^T d B)[xi, nu]`` of each input tile ``p``
  (``<name>.vt``);
* per ``(xi, nu)`` point and group, a GEMM over the channels
  ``M[xi, nu, p, g, k] = sum_c V[xi, nu, p, g*I + c] * U[xi, nu, g, c, k]`` (``<name>.gemm``);
* the output transform ``Y = A^T M A`` of each tile, cropped to the output (``<name>``).

A tile of ``m x m`` outputs costs ``a * a`` products per (input, output) channel pair
where the direct convolution costs ``9 m^2``: 2.25x fewer for ``m = 2`` (``a = 4``), 4x
fewer for ``m = 4``; the transforms add work per tile and channel that does not grow with
the other channel count.  The transforms' entries come from the interpolation points
``0, 1, -1, 2, -2, 1/2, -1/2`` (Cook-Toom), computed exactly (fractions) and rounded once;
the error against the direct convolution is in docs/numerics.md.

Its gradient (``tc.gradient``) is the direct convolution's: the output's tag has that
convolution registered as its equivalent (:func:`tecomp.autodiff.register_tag_equivalent`),
differentiated in its place (a convolution for the data, a ``conv2d_*_wgrad`` for the
weight) instead of the transforms' adjoints.

The stages carry tags the CPU template (:mod:`tecomp.strategy.cpu.winograd`) finds:
``winograd_vt``, ``winograd_gemm``, ``winograd_conv2d_nchw`` / ``winograd_conv2d_nhwc``.
"""
from __future__ import annotations

import numbers
from fractions import Fraction
from functools import lru_cache
from typing import Sequence

from .. import te as _te
from ..ir.expr import Const
from ..target import cpu_model
from ..te.tensor_intrin import transpose_intrin
from ..te.tensor import Tensor
from ._check import Args
from .transform import _padded

__all__ = ["winograd_matrices", "winograd_weight_transform", "conv2d_winograd",
           "WINOGRAD_TILES", "winograd_unsupported"]

#: the output tile sizes ``m`` of F(m x m, 3 x 3) tecomp builds.  F(6x6, 3x3) is left
#: out of the convolutions (its matrices are :func:`winograd_matrices`'s): its float32 error,
#: 1.7x F(4x4)'s in a numpy emulation (docs/numerics.md), is acceptable, but its 64 points
#: unrolled make transforms and builds about twice F(4x4)'s, not measured yet
WINOGRAD_TILES = (2, 4)

#: the interpolation points of F(m, 3): the first ``m + 1`` (and the point at infinity)
_POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2),
           Fraction(1, 2), Fraction(-1, 2))

#: the dtypes the Winograd stages compute in (float16/bfloat16 would lose too much in the
#: transforms: use the direct convolution)
WINOGRAD_DTYPES = ("float32", "float64")


def _poly_mul(p, q):
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] += a * b
    return out


@lru_cache(maxsize=None)
def _exact(m: int, r: int = 3):
    """``(AT, G, BT)`` of F(m, r) as tuples of rows of Fractions."""
    a = m + r - 1
    pts = _POINTS[:a - 1]
    # A^T[i, j] = p_j ** i; the point at infinity picks the last output's top coefficient
    AT = tuple(tuple(p ** i for p in pts) + (Fraction(int(i == m - 1)),) for i in range(m))
    # G[j, k] = p_j ** k / prod_{l != j} (p_j - p_l); infinity: the filter's last tap
    G = []
    for j, p in enumerate(pts):
        f = Fraction(1)
        for l, q in enumerate(pts):
            if l != j:
                f *= p - q
        G.append(tuple(p ** k / f for k in range(r)))
    G.append(tuple(Fraction(int(k == r - 1)) for k in range(r)))
    # B^T row j: the coefficients of prod_{l != j} (x - p_l) (Lagrange's numerators);
    # the last row: those of prod_l (x - p_l) (the point at infinity), in ascending powers
    BT = []
    for j in range(a - 1):
        poly = [Fraction(1)]
        for l, q in enumerate(pts):
            if l != j:
                poly = _poly_mul(poly, [-q, Fraction(1)])
        BT.append(tuple(poly) + (Fraction(0),))
    full = [Fraction(1)]
    for q in pts:
        full = _poly_mul(full, [-q, Fraction(1)])
    BT.append(tuple(full))
    return tuple(AT), tuple(G), tuple(BT)


def winograd_matrices(m: int) -> tuple:
    """The transforms ``(AT, G, BT)`` of F(m x m, 3 x 3) as lists of rows of floats:
    ``AT`` is ``m x a``, ``G`` is ``a x 3``, ``BT`` is ``a x a`` (``a = m + 2``); the
    1-d convolution of ``d`` (``a`` values) with ``g`` (3 taps) is
    ``AT @ ((G @ g) * (BT @ d))``.

    Parameters
    ----------
    m : {2, 4, 6}
        The output tile.

    Returns
    -------
    tuple of list
        ``(AT, G, BT)``.

    Examples
    --------
    >>> import numpy as np
    >>> from tecomp.nn.winograd import winograd_matrices
    >>> AT, G, BT = (np.array(x) for x in winograd_matrices(2))
    >>> d, g = np.arange(4.0), np.array([1.0, 2.0, 3.0])
    >>> np.allclose(AT @ ((G @ g) * (BT @ d)), np.correlate(d, g, "valid"))
    True
    """
    if not _is_int(m) or m not in (2, 4, 6):
        Args("winograd_matrices", "F(m x m, 3 x 3)").fail(
            f"m={m!r:.20} is not one tecomp builds; give 2, 4 or 6")
    return tuple([[float(v) for v in row] for row in mat] for mat in _exact(int(m)))


def _combine(terms, dtype):
    """``sum coef * value`` over ``terms`` (``(Fraction, Expr)`` pairs, zero coefficients
    left out; 1 and -1 without a product), in ``dtype``; 0 where none is left."""
    out = None
    for coef, v in terms:
        if coef == 0:
            continue
        if coef == 1:
            t, neg = v, False
        elif coef == -1:
            t, neg = v, True
        else:
            t, neg = v * Const(float(coef), dtype), False
        if out is None:
            out = -t if neg else t
        else:
            out = out - t if neg else out + t
    return out if out is not None else Const(0.0, dtype)


def _pick(index, leaves):
    """``leaves[index]`` for the index expression ``index`` (a chain of selects that
    folds to one leaf where the loop over ``index`` is unrolled)."""
    out = leaves[-1]
    for i in range(len(leaves) - 2, -1, -1):
        out = _te.select(index == i, leaves[i], out)
    return out


def _transform2(mat, load, dtype, rows: int, inner: int):
    """``(mat X mat^T)[i, j]`` as an expression per ``(i, j)`` (a list of rows), ``X[r1,
    r2] = load(r1, r2)`` (``inner x inner``), computed as ``mat`` applied to the rows of
    ``mat X`` (the partial sums shared by every ``j``)."""
    half = [[_combine([(mat[i][r1], load(r1, r2)) for r1 in range(inner)], dtype)
             for r2 in range(inner)] for i in range(rows)]
    return [[_combine([(mat[j][r2], half[i][r2]) for r2 in range(inner)], dtype)
             for j in range(rows)] for i in range(rows)]


def winograd_unsupported(khw, stride, dilation) -> str:
    """Why a convolution with a ``khw`` kernel, ``stride`` and ``dilation`` cannot be a
    Winograd one, or "" when it can."""
    why = []
    if tuple(khw) != (3, 3):
        why.append(f"a {khw[0]}x{khw[1]} kernel")
    if tuple(stride) != (1, 1):
        why.append(f"stride {tuple(stride)}")
    if tuple(dilation) != (1, 1):
        why.append(f"dilation {tuple(dilation)}")
    return " and ".join(why)


def winograd_weight_transform(weight: Tensor, layout: str = "NCHW", tile: int = 4,
                              groups: int = 1, name: str = "winograd_weight") -> Tensor:
    """The Winograd transform ``U = G w G^T`` of 3x3 convolution weights, the stage
    ``name`` of shape ``[a, a, groups, I, O // groups]`` (``a = tile + 2``, ``I`` input
    channels per group): what :func:`conv2d_winograd` takes.  Build it as its own kernel
    and run it once for weights that do not change.

    Parameters
    ----------
    weight : Tensor
        ``[O, I, 3, 3]`` (``layout="NCHW"``: OIHW) or ``[3, 3, I, O]`` (``"NHWC"``: HWIO).
    layout : {"NCHW", "NHWC"}
        The convolution's layout (it decides the weight's).
    tile : {2, 4}
        ``m`` of F(m x m, 3 x 3).
    groups : int
        As :func:`tecomp.nn.conv2d_nchw`'s.
    name : str, optional
        The stage's name.

    Returns
    -------
    Tensor
        ``[a, a, groups, I, O // groups]``.

    Examples
    --------
    >>> import tecomp as tc, tecomp.nn as nn
    >>> W = tc.placeholder((8, 4, 3, 3), name="W")
    >>> tc.utils.get_const_tuple(nn.winograd_weight_transform(W, tile=2).shape)
    (4, 4, 1, 4, 8)
    """
    a = Args("winograd_weight_transform", name)
    nchw = _layout(a, layout)
    tile = _tile(a, tile)
    groups = a.ints("groups", groups, 1, count=1)
    a.tensor("weight", weight, 4, "OIHW [out, in // groups, 3, 3]" if nchw else
             "HWIO [3, 3, in // groups, out]", WINOGRAD_DTYPES)
    O = a.constant("weight", weight, 0 if nchw else 3, "output channels")
    I = a.constant("weight", weight, 1 if nchw else 2, "input channels")
    khw = tuple(a.constant("weight", weight, d, "kernel extent")
                for d in ((2, 3) if nchw else (0, 1)))
    if khw != (3, 3):
        a.fail(f"weight ({weight.name}) is a {khw[0]}x{khw[1]} kernel; the Winograd "
               "transform is for 3x3 kernels")
    if O % groups:
        a.fail(f"groups={groups} must divide the {O} output channels of weight "
               f"({weight.name})")
    return _weight_transform(nchw, weight, tile, groups, O // groups, I, name)


def _layout(a: Args, layout) -> bool:
    if layout not in ("NCHW", "NHWC"):
        a.fail(f"layout {layout!r:.40} is not one tecomp reads; give \"NCHW\" or \"NHWC\"")
    return layout == "NCHW"


def _is_int(x) -> bool:
    """An integer (a numpy one too), not a bool and not a float that equals one (4.0 is
    not a tile: it would slice the transforms' rows)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _tile(a: Args, tile) -> int:
    if not _is_int(tile) or tile not in WINOGRAD_TILES:
        a.fail(f"tile {tile!r:.20} is not one tecomp builds; give "
               f"{' or '.join(map(str, WINOGRAD_TILES))} (F(m x m, 3 x 3)'s m)")
    return int(tile)


def _weight_transform(nchw: bool, weight, m: int, groups: int, kg: int, I: int, name: str):
    _, G, _ = _exact(m)
    al = m + 2
    dt = weight.dtype

    def w(g, c, k):
        if nchw:
            return lambda r1, r2: weight[g * kg + k, c, r1, r2]
        return lambda r1, r2: weight[r1, r2, c, g * kg + k]

    def f(xi, nu, g, c, k):
        leaves = _transform2(G, w(g, c, k), dt, al, 3)
        return _pick(xi, [_pick(nu, row) for row in leaves])

    return _te.compute((al, al, groups, I, kg), f, name=name,
                       tag="winograd_weight,injective", attrs={"winograd": m})


def conv2d_winograd(data: Tensor, transformed: Tensor, layout: str = "NCHW",
                    padding: int | str | Sequence = 0, name: str = "conv2d_winograd",
                    groups: int = 1, tile: int | None = None) -> Tensor:
    """A 3x3, stride-1 convolution of ``data`` with weights already transformed by
    :func:`winograd_weight_transform` (``[a, a, groups, I, O // groups]``).

    :func:`tecomp.nn.conv2d_nchw` / ``conv2d_nhwc`` with ``algorithm="winograd"`` build
    the same stages with the weight transform in the DAG; this one reads it as an input.

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]`` (``layout="NCHW"``) or ``[N, H, W, C]`` (``"NHWC"``), float32
        or float64.
    transformed : Tensor
        ``[a, a, groups, C // groups, O // groups]``, ``a`` = tile + 2.
    layout : {"NCHW", "NHWC"}
        The data's layout (and the output's).
    name : str, optional
        The output stage's name; the others are ``<name>.vt``, ``<name>.gemm``,
        ``<name>.pad``.
    padding, groups
        As :func:`tecomp.nn.conv2d_nchw`'s.
    tile : int, optional
        ``m`` of F(m x m, 3 x 3); None reads it from ``transformed`` (``a - 2``).

    Returns
    -------
    Tensor
        ``[N, O, OH, OW]`` or ``[N, OH, OW, O]``, the stage ``name`` (tag
        ``winograd_conv2d_nchw`` / ``_nhwc``).

    Examples
    --------
    >>> import tecomp as tc, tecomp.nn as nn
    >>> X = tc.placeholder((1, 9, 9, 8), name="X"); W = tc.placeholder((3, 3, 8, 16), name="W")
    >>> U = nn.winograd_weight_transform(W, "NHWC", tile=2)
    >>> tc.utils.get_const_tuple(nn.conv2d_winograd(X, U, "NHWC", padding=1).shape)
    (1, 9, 9, 16)
    """
    a = Args("conv2d_winograd", name)
    nchw = _layout(a, layout)
    groups = a.ints("groups", groups, 1, count=1)
    a.tensor("data", data, 4, "NCHW [batch, channels, height, width]" if nchw else
             "NHWC [batch, height, width, channels]", WINOGRAD_DTYPES)
    a.tensor("transformed", transformed, 5, "[a, a, groups, in // groups, out // groups]",
             like=("data", data))
    al = a.constant("transformed", transformed, 0, "transform size")
    if tile is None and al - 2 not in WINOGRAD_TILES:
        a.fail(f"transformed ({transformed.name}) is {al}x{transformed.shape[1]} per channel "
               "pair, which no tile gives: give the output of winograd_weight_transform ("
               + " or ".join(f"{m + 2}x{m + 2} for tile {m}" for m in WINOGRAD_TILES) + ")")
    m = _tile(a, al - 2 if tile is None else tile)
    if al != m + 2 or a.constant("transformed", transformed, 1, "transform size") != al:
        a.fail(f"transformed ({transformed.name}) is {al}x"
               f"{transformed.shape[1]} per channel pair but tile {m} needs {m + 2}x{m + 2}; "
               "give the output of winograd_weight_transform with the same tile")
    if a.constant("transformed", transformed, 2, "groups") != groups:
        a.fail(f"transformed ({transformed.name}) has {transformed.shape[2]} groups but "
               f"groups={groups}; give the groups it was transformed with")
    cd = 1 if nchw else 3
    C = a.constant("data", data, cd, "channels")
    I = a.constant("transformed", transformed, 3, "input channels")
    if I * groups != C:
        a.fail(f"transformed ({transformed.name}) has {I} input channels per group but "
               f"data ({data.name}) has {C} channels in {groups} groups")
    hw = tuple(a.constant("data", data, d, what)
               for d, what in zip((2, 3) if nchw else (1, 2), ("height", "width")))
    pads = a.padding(padding, hw, (3, 3), (1, 1), (1, 1))
    out_hw = a.window(hw, (3, 3), (1, 1), pads, (1, 1), "data")
    return _winograd_stages(nchw, data, transformed, pads, out_hw, m, groups, name)


def _winograd_stages(nchw: bool, data, U, pads, out_hw, m: int, groups: int, name: str,
                     attrs=None):
    """The input transform, the GEMM and the output transform of a Winograd convolution
    of ``data`` (padded by ``pads``) with the transformed weights ``U``."""
    AT, _, BT = _exact(m)
    al = m + 2
    dt = data.dtype
    OH, OW = out_hw
    tH, tW = -(-OH // m), -(-OW // m)
    (pt, pb), (pl, pr) = pads
    # pad on to whole tiles: the last tile's rows and columns past the output read zeros
    src = _padded(nchw, data, ((pt, pb + tH * m - OH), (pl, pr + tW * m - OW)), name)
    N = data.shape[0]
    C = int(data.shape[1 if nchw else 3].value)
    I, kg = int(U.shape[3].value), int(U.shape[4].value)
    P = N * tH * tW if isinstance(N, Const) else N * (tH * tW)
    per = tH * tW

    def tile_of(p):
        return p // per, p % per // tW, p % tW

    def vt(xi, nu, p, c):
        n, th, tw = tile_of(p)
        if nchw:
            def load(r1, r2):
                return src[n, c, th * m + r1, tw * m + r2]
        else:
            def load(r1, r2):
                return src[n, th * m + r1, tw * m + r2, c]
        leaves = _transform2(BT, load, dt, al, al)
        return _pick(xi, [_pick(nu, row) for row in leaves])

    V = _te.compute((al, al, P, C), vt, name=f"{name}.vt", tag="winograd_vt",
                    attrs={"winograd": m, "winograd_padded": src is not data})
    c = _te.reduce_axis(I, name="c")
    M = _te.compute((al, al, P, groups, kg),
                    lambda xi, nu, p, g, k: _te.sum(V[xi, nu, p, g * I + c] *
                                                    U[xi, nu, g, c, k], axis=[c]),
                    name=f"{name}.gemm", tag="winograd_gemm", attrs={"winograd": m})

    def out(n, o, y, x):
        p = (n * tH + y // m) * tW + x // m
        g, k = (o // kg, o % kg) if groups > 1 else (0, o)
        leaves = _transform2(AT, lambda r1, r2: M[r1, r2, p, g, k], dt, m, al)
        return _pick(y % m, [_pick(x % m, row) for row in leaves])

    conv_attrs = {"winograd": m, "conv2d": ((1, 1), pads, (1, 1)), **(attrs or {})}
    O = groups * kg
    if nchw:
        return _te.compute((N, O, OH, OW), out, name=name, tag="winograd_conv2d_nchw",
                           attrs=conv_attrs)
    return _te.compute((N, OH, OW, O), lambda n, y, x, o: out(n, o, y, x), name=name,
                       tag="winograd_conv2d_nhwc", attrs=conv_attrs)


def _tags(t: Tensor):
    return [x.strip() for x in (getattr(t.op, "tag", "") or "").split(",")]


#: the fewest input and output channels (per group) for which ``algorithm="auto"``
#: considers Winograd
WINOGRAD_MIN_CHANNELS = 32


#: whether ``algorithm="auto"`` weighs Winograd F(2x2) for grouped convolutions
#: (:func:`_grouped_tile`); off, grouped convolutions stay direct, as before
#: (``benchmarks/depthwise_conv.py --ab GROUPED_WINOGRAD``)
GROUPED_WINOGRAD = True

#: vector operations per value that a grouped Winograd convolution's transforms make in
#: its cache (each value of ``V`` and ``M``: the transform's additions, its store, the
#: next stage's load), one a cycle, by tile size ``m``.  F(2x2): fitted to Zen 4's
#: ResNeXt 512x14x14 (F(2x2) 1.25x and 1.41x faster than direct at batch 8 and 1, one
#: thread) and 1024x7x7 (1.00x).  F(4x4) (6-point transforms, about 3 operations per
#: value and dimension where F(2x2)'s take 1): fitted to Zen 4's 1024x7x7 at batch 8
#: (1.10-1.41x faster than direct over 7 runs under load, one thread: 9.5-16 operations)
#: and 512x14x14 at batch 8 (1.05x, F(2x2) 1.35x: 12.7); 10, not 12: at 12 the rule
#: put NCHW 1024x7x7 at batch 8 (channels last, its copies counted) 1.12x faster than
#: direct, under :data:`GROUPED_GAIN`, where it ran 1.26x faster (one thread, under
#: load); no NHWC choice on the named machine models differs between 9.5 and 12
GROUPED_TRANSFORM_OPS = {2: 5, 4: 10}

#: whether ``algorithm="auto"`` weighs F(4x4) for grouped convolutions beside F(2x2)
#: (:func:`_grouped_tile`); off, F(2x2) or direct, as before
#: (``benchmarks/depthwise_conv.py --ab GROUPED_WINOGRAD_F4``)
GROUPED_WINOGRAD_F4 = True

#: whether ``algorithm="auto"`` weighs Winograd for grouped NCHW convolutions too, read
#: and written channels last through register transposes
#: (:func:`tecomp.strategy.cpu.winograd.winograd_into`); off, they stay direct, as before
#: (``benchmarks/depthwise_conv.py --ab GROUPED_WINOGRAD_NCHW``)
GROUPED_WINOGRAD_NCHW = True

#: how much faster than the direct convolution the model must expect a grouped
#: Winograd convolution to be before ``algorithm="auto"`` takes it
GROUPED_GAIN = 1.15


def _nchw_channels_last(m: int, N: int, C: int, O: int, groups: int, out_hw, in_w, dtype,
                        info) -> bool:
    """Whether the CPU schedule runs a grouped NCHW Winograd convolution with tile ``m``
    channels last (its stages fused per group, the input copied into pixels x channels
    and the output stored back through register transposes): float32, a group's input
    and output channels whole vectors, rows (``in_w`` and the output's) of 2 to
    ``lanes`` pixels, the target's register transposes of such rows, and a group's
    transformed input and products (``2 a^2`` values per tile of an image and channel)
    within half of L2.  Where it does not, the transforms run one channel at a time on
    the planes (0.44-0.52x the direct template)."""
    L, I, kg = info.lanes, C // groups, O // groups
    al = m + 2
    tiles = (-(-out_hw[0] // m)) * (-(-out_hw[1] // m))
    return (GROUPED_WINOGRAD_NCHW and dtype == "float32" and in_w is not None
            and I % L == 0 and kg % L == 0 and 2 <= min(in_w, out_hw[1])
            and max(in_w, out_hw[1]) <= L
            and 2 * al * al * tiles * max(I, kg) * 4 <= info.l2_bytes // 2
            and transpose_intrin(info.target, L, "float32", out_hw[1]) is not None)


def _grouped_tile(nchw: bool, N: int, C: int, O: int, groups: int, out_hw, info,
                  skipped: float, in_w=None, dtype: str = "float32") -> int:
    """:func:`winograd_tile` for ``groups > 1``: 4 (F(4x4)), 2 (F(2x2)) or 0 (direct).
    A group's GEMM per point is small (``C / groups`` input channels), and the stages
    run per group with their transforms in cache, so the rule weighs time in cycles:
    the direct sum's products (less the ``skipped`` share on the padding, which the
    direct template leaves out) at the FMA rate (``fma_ports x fma_lanes``) against
    each tile's products at that rate plus its transforms,
    :data:`GROUPED_TRANSFORM_OPS` vector operations (``lanes`` wide, one a cycle) per
    value of ``V`` and ``M`` (``a^2`` per tile and channel), and the weight transform;
    the faster tile where it comes out :data:`GROUPED_GAIN` times faster than direct.
    Half-width FMA units (Zen 4: 8 of 16 lanes) make the products twice as dear as the
    transforms: there ResNeXt's 512x14x14 (16 channels a group) takes F(2x2) and
    1024x7x7 at batch 8 (32 a group, its 7x7 plane in 4 tiles of 4x4: 144 products
    per channel pair where the direct sum makes 361 on the taps inside) F(4x4); at batch
    1 the weight transform (36 values per channel pair, every call) outweighs the
    products saved and 1024x7x7 stays direct.  With full-width FMAs (Zen 5: F(2x2) 0.97x
    and 0.81x the direct template there) every grouped convolution stays direct.
    NCHW is weighed where the schedule runs it channels last
    (:func:`_nchw_channels_last`), the two copies added: every input and output value
    once through register transposes, at the machine model's ``transpose_cost``
    (``in_w``: the input's width; ResNeXt's 1024x7x7 at batch 8 then takes F(4x4) on
    ``znver4``, 1.26x faster than direct under load, one thread, where NHWC's ran 1.48x);
    elsewhere its transforms would run one channel at a time on the planes (0.44-0.52x
    the direct template on Zen 4) and it stays direct."""
    if not GROUPED_WINOGRAD or C % groups or O % groups:
        return 0
    fma_per_cycle = info.fma_ports * info.fma_lanes
    pairs = (C // groups) * (O // groups) * groups
    direct = 9 * N * out_hw[0] * out_hw[1] * pairs * (1 - skipped) / fma_per_cycle
    # the two copies of an NCHW convolution (in_w: the input's width, the height taken
    # as the output's plus 2, the padding of a same-size convolution)
    copies = ((out_hw[0] + 2) * (in_w or 0) * C + out_hw[0] * out_hw[1] * O) * N \
        * info.transpose_cost * info.lanes / fma_per_cycle if nchw else 0
    best, best_cycles = 0, direct / GROUPED_GAIN
    for m in (2, 4) if GROUPED_WINOGRAD_F4 else (2,):
        if nchw and not _nchw_channels_last(m, N, C, O, groups, out_hw, in_w, dtype, info):
            continue
        al = m + 2
        tiles = N * (-(-out_hw[0] // m)) * (-(-out_hw[1] // m))
        cycles = (al * al * tiles * pairs / fma_per_cycle
                  + GROUPED_TRANSFORM_OPS[m] * al * al * tiles * (C + O) / info.lanes
                  + al * al * 6 * pairs / fma_per_cycle + copies)
        if cycles <= best_cycles:
            best, best_cycles = m, cycles
    return best


def winograd_tile(nchw: bool, N: int, C: int, O: int, groups: int, out_hw,
                  target="llvm", skipped: float = 0.0, in_w=None,
                  dtype: str = "float32") -> int:
    """``algorithm="auto"``'s choice for a 3x3 stride-1 convolution (``N`` images, ``C``
    input and ``O`` output channels, ``out_hw`` outputs): the Winograd tile ``m`` (4 or
    2), or 0 for the direct convolution.

    Per tile size, the rule weighs the products Winograd saves (``9 m^2`` per output tile
    and channel pair for the direct sum against ``a^2``, at the FMA rate of the target's machine
    model, ``fma_ports`` x ``fma_lanes``) against what it adds: the transforms' passes
    over memory (``V`` and ``M``, ``a^2`` values per tile and channel, written and read;
    the transformed weights, ``a^2`` per channel pair, written and read at every call) at
    its ``stream_bytes`` per cycle, and the weight transform's arithmetic; it picks the
    tile whose saving is largest past 3x that cost.  ``target``: the CPU the convolution
    is for (the host by default).  On Zen 5 (benchmarks/history/2026-11-30.md) it
    keeps batch 1's 256x14 on F(2x2) and 512x7 direct (F(4x4) ran 0.80x and 0.09x the
    direct template there, the weight transform of 37 MB per call at 512x7), and takes
    F(4x4) elsewhere on ResNet's layers (1.1-3x).  NCHW's transforms run on vectors of
    channels whose elements lie a plane apart: each value the input transform reads,
    the output transform writes and the weight transform reads (``a^2`` per tile and
    input channel, ``m^2`` per tile and output channel, 9 per channel pair) is a gather
    or scatter lane, charged once at the machine model's ``gather_cost``.  Measured
    exception: grouped convolutions, weighed by :func:`_grouped_tile` (``skipped``:
    the share of the direct sum's products on the padding, which its template skips;
    ``in_w`` and ``dtype``: the input's width and dtype, which decide whether an NCHW
    one can run channels last)."""
    info = cpu_model(target)
    if groups != 1:
        return _grouped_tile(nchw, N, C, O, groups, out_hw, info, skipped, in_w, dtype)
    if min(C, O) < WINOGRAD_MIN_CHANNELS:
        return 0
    fma_per_cycle = info.fma_ports * info.fma_lanes
    # one element gathered, in cycles (gather_cost is in full-vector FMAs)
    gather = info.gather_cost * info.lanes / fma_per_cycle
    direct = 9 * N * out_hw[0] * out_hw[1] * C * O
    best, best_net = 0, 0.0
    for m in (4, 2):
        al = m + 2
        tiles = N * (-(-out_hw[0] // m)) * (-(-out_hw[1] // m))
        saved = (direct - al * al * tiles * C * O) / fma_per_cycle
        moved = (4 * al * al * tiles * (C + O) + 2 * al * al * C * O) * 4 / info.stream_bytes
        weights = al * al * 6 * C * O / fma_per_cycle
        net = saved - 3 * (moved + weights)
        if nchw:
            net -= (al * al * tiles * C + m * m * tiles * O + 9 * C * O) * gather
        if net > best_net:
            best, best_net = m, net
    return best

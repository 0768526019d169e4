"""The fuzzer's ops family (tecomp.testing.ops): one tecomp.nn operator call (pooling,
reductions, depthwise and grouped convolutions) with random parameters, auto-scheduled,
built and called with views and misaligned outputs, against PyTorch.  One seed of each
kind by default; TECOMP_LONG_TESTS=1 runs 400.  The campaign is ``python -m
tecomp.testing.fuzz --only ops --cases 2000``."""
import numbers
import os

import numpy as np
import pytest

from tecomp.testing import ops
from tecomp.testing.fuzz import case_for_seed
from tecomp.testing.ops import KINDS, OpCase, draw_op_case, run_op_case

LONG = os.environ.get("TECOMP_LONG_TESTS") == "1"


def _first_seed(pred, start=0):
    seed = start
    while not pred(draw_op_case(seed).spec):
        seed += 1
    return seed


# the first legal case of each kind of at most 2,000 input elements (cheap to build)
_DEFAULT = sorted({_first_seed(lambda sp, k=k: sp["kind"] == k and not sp.get("illegal")
                               and np.prod(sp["shape"]) <= 2_000) for k in KINDS})


@pytest.mark.parametrize("seed", _DEFAULT)
def test_one_case_of_each_kind_agrees_with_pytorch(seed):
    out = run_op_case(draw_op_case(seed))
    assert out.kind in ("ok", "refused"), out.report()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20_000, 20_400))
def test_ops_campaign(seed):
    out = run_op_case(draw_op_case(seed))
    assert out.ok, out.report()


def test_illegal_calls_are_refused_naming_the_parameter():
    """An illegal pooling call and an illegal reduction: a TecompError naming the
    parameter (the runner checks the name)."""
    for kind in ("pool", "reduce"):
        seed = _first_seed(lambda sp: sp["kind"] == kind and sp.get("illegal"))
        out = run_op_case(draw_op_case(seed))
        assert out.kind == "refused", out.report()


def test_misaligned_output_and_nan_inputs():
    """A max pooling and an argmax over NaN, +-inf and -0.0 (PyTorch's NaN semantics),
    their outputs one element off a 64-byte line."""
    pool = OpCase({"op": "max_pool2d", "nd": 2, "pool": "max", "shape": [1, 3, 9, 17],
                   "dtype": "float32", "kwargs": {"kernel": [3, 2], "stride": [2, 3],
                                                  "padding": [[1, 0], [1, 1]],
                                                  "ceil_mode": True, "layout": "NCHW"},
                   "k": [3, 2], "s": [2, 3], "dil": [1, 1], "pairs": [[1, 0], [1, 1]],
                   "may_refuse": False, "layout": "NCHW", "specials": True, "ties": True,
                   "kind": "pool", "in_view": "offset", "out_view": "offset"}, seed=5)
    arg = OpCase({"op": "argmax", "shape": [5, 33, 3], "dtype": "float32",
                  "kwargs": {"axis": (-1, 1), "keepdims": True}, "specials": True,
                  "ties": True, "kind": "reduce", "in_view": "torch_view",
                  "out_view": "offset"}, seed=7)
    for case in (pool, arg):
        out = run_op_case(case)
        assert out.kind == "ok", out.report()


def test_the_checker_sees_a_wrong_value():
    want = np.array([1.0, np.nan, -np.inf, 0.0], np.float64)
    assert ops._compare(want.astype(np.float32), want, None) == ""
    assert ops._compare(np.array([1, np.nan, -np.inf, -0.0], np.float32), want, None) == ""
    assert ops._compare(np.array([1, 0, -np.inf, 0], np.float32), want, None)
    assert ops._compare(np.array([1, np.nan, np.inf, 0], np.float32), want, None)
    assert ops._compare(np.array([1.001, np.nan, -np.inf, 0], np.float32), want,
                        np.ones(4))
    # a reference past float32's range is an infinity there; an infinity is not close
    # to a finite number whatever the tolerance
    big = np.array([-6.7e87, 1.0])
    assert ops._compare(np.array([-np.inf, 1], np.float32), big, np.ones(2)) == ""
    assert ops._compare(np.array([-3e38, 1], np.float32), big, np.ones(2))
    assert ops._compare(np.array([np.inf, 1], np.float32), np.array([1e30, 1.0]), np.ones(2))


def test_the_family_draws_the_space():
    """Drawn, not run (cheap): every operator, layout, stride above / equal to the
    kernel, asymmetric padding, ceil_mode, dilation, adaptive outputs larger than the
    input, reductions with every axis form, views and misaligned outputs."""
    seen = set()
    for seed in range(600):
        sp = draw_op_case(seed).spec
        if sp["kind"] == "mathpoint":     # (tests/test_fuzz_mathpoints.py)
            seen.add(("mathpoint", sp["check"]))
            continue
        seen.add(("op", sp["op"]))
        seen.add(("in", sp["in_view"]))
        seen.add(("out", sp["out_view"]))
        kw = sp["kwargs"]
        seen.update({("symbolic batch",)} if sp["sym_batch"] else set())
        seen.add(("dtype", sp["dtype"]))
        seen.update({("careless", sp["lenient"])} if sp.get("lenient") else set())
        if sp.get("illegal"):
            seen.add(("illegal", sp["kind"]))
            continue
        if sp["kind"] == "pool":
            seen.add(("layout", kw["layout"]))
            if any(s > k for s, k in zip(sp["s"], sp["k"])):
                seen.add(("stride > kernel",))
            if any(b != e for b, e in sp["pairs"]):
                seen.add(("asymmetric",))
            if kw["ceil_mode"]:
                seen.add(("ceil",))
            if "dilation" in kw:
                seen.add(("dilation",))
        if sp["kind"] == "adaptive":
            axes = [i for i, c in enumerate(sp["layout"]) if c in "DHW"]
            if any(o > sp["shape"][a] for o, a in zip(sp["out_hw"], axes)):
                seen.add(("adaptive up",))
        if sp["kind"] == "reduce":
            ax = kw["axis"]
            seen.add(("axis", "none" if ax is None else
                      "int" if isinstance(ax, numbers.Integral) else
                      "tuple" if len(ax) else "empty"))
    want = {("op", o) for o in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d",
                                "avg_pool2d", "avg_pool3d", "adaptive_max_pool2d",
                                "adaptive_avg_pool3d", "global_max_pool2d",
                                "global_avg_pool2d", "depthwise_conv2d_nchw",
                                "depthwise_conv2d_nhwc", "conv2d_nchw", "conv2d_nhwc")
            + ops.REDUCERS}
    want |= {("layout", lay) for lay in ("NCW", "NWC", "NCHW", "NHWC", "NCDHW", "NDHWC")}
    want |= {("stride > kernel",), ("asymmetric",), ("ceil",), ("dilation",),
             ("adaptive up",), ("in", "strided"), ("in", "offset"), ("in", "torch_view"),
             ("out", "offset"), ("out", "torch")}
    want |= {("axis", a) for a in ("none", "empty", "int", "tuple")}
    want |= {("illegal", k) for k in ("pool", "reduce")}
    want |= {("symbolic batch",), ("in", "broadcast")}
    want |= {("dtype", t) for t in ("float16", "float32", "float64", "int32", "bool")}
    want |= {("careless", a) for a in ("kernel", "axis", "keepdims", "output_size", "stride")}
    assert want <= seen, want - seen


def test_the_fuzzer_draws_the_family_only_when_asked():
    assert isinstance(case_for_seed(6, 0, op_every=1), OpCase)
    assert isinstance(case_for_seed(6, 0, op_every=3), OpCase)
    assert not isinstance(case_for_seed(7, 0, op_every=3), OpCase)
    assert not isinstance(case_for_seed(6, 0), OpCase)


def test_max_pooling_gradients_are_checked():
    """Half the family's max poolings also check their data gradient against the
    family's reference of PyTorch's rule (the first data maximum, never the padding, a
    window's last NaN); seed 30847 (NHWC, dilated, windows past the data) was refused
    at its call by the index checks before the gradient compared its positions in
    int64, and seed 30884's window on padding only (-inf) was refused at definition."""
    for seed in (30847, 30884):
        case = draw_op_case(seed)
        out = run_op_case(case)
        assert out.kind == "ok", out.report()
    assert draw_op_case(30847).spec["grad"]
    assert sum(bool(draw_op_case(s).spec.get("grad")) for s in range(30800, 30900)) >= 3


def test_gradient_reference_follows_pytorchs_rule():
    """The reference the gradient check uses: ties to the first data element, a window
    with NaNs to its last NaN, nothing from a window on padding only."""
    sp = {"layout": "NCW", "k": [3], "s": [3], "dil": [1], "pairs": [[1, 1]]}
    x = np.array([[[-np.inf, -np.inf, 2.0, 2.0, np.nan, 1.0, np.nan]]])
    h = np.array([[[1.0, 10.0, 100.0]]])
    g, _ = ops._max_pool_grad_ref(sp, x, h)
    np.testing.assert_array_equal(g, [[[1.0, 0, 0, 0, 10.0, 0, 100.0]]])
    sp = {"layout": "NCW", "k": [2], "s": [1], "dil": [2], "pairs": [[1, 1]]}
    g, _ = ops._max_pool_grad_ref(sp, np.array([[[5.0]]]), np.array([[[7.0]]]))
    np.testing.assert_array_equal(g, [[[0.0]]])


def _huge_stride_seeds(count):
    """The first ``count`` seeds whose stride or dilation the fourth stream made past int32."""
    out, seed = [], 0
    while len(out) < count:
        sp = draw_op_case(seed).spec
        if sp.get("illegal") in ("stride", "dilation") and sp["kwargs"][sp["illegal"]] >= 2**31:
            out.append(seed)
        seed += 1
    return out


def test_strides_past_int32_are_refused_naming_them(monkeypatch):
    """A stride or dilation past 2**31 - 1 is refused naming it; with the check of its
    int32 range taken away (tecomp.nn._check.Args.ints's ``high``), the family finds the
    DTypeError about the index arithmetic that named nothing."""
    from tecomp.nn import _check

    seeds = _huge_stride_seeds(3)
    assert all(run_op_case(draw_op_case(s)).kind == "refused" for s in seeds)
    ints = _check.Args.ints
    monkeypatch.setattr(_check.Args, "ints", lambda self, arg, v, low, count=2, high=None:
                        ints(self, arg, v, low, count, None))
    assert "mismatch" in {run_op_case(draw_op_case(s)).kind for s in seeds}


def test_max_min_lines_with_one_nan_each():
    """The max/min/argmax/argmin cases' data with one NaN a line along the first
    reduced axis (first, second, middle, second-to-last, last element or anywhere; a
    column max's NaN test of rows in pairs must catch either row): drawn among the
    first seeds, every such line finite but for its one NaN or infinity, and a column
    max over such data (rows read in pairs on AVX-512) agrees with PyTorch."""
    placed = []
    for seed in range(4000):
        case = draw_op_case(seed)
        sp = case.spec
        if sp["op"] not in ("max", "min", "argmax", "argmin") or not sp.get("specials") \
                or sp.get("illegal"):
            continue
        x, _ = ops._data(case)
        axes = ops._norm_axes(sp["kwargs"]["axis"], x.ndim) if x.ndim else ()
        if not axes or not x.size:
            continue
        lines = np.moveaxis(np.asarray(x, "float64"), axes[0], -1).reshape(
            -1, x.shape[axes[0]])
        bad = ~np.isfinite(lines)
        if bad.sum(1).max() <= 1 and np.isnan(lines).any() and lines.shape[-1] > 2:
            placed.append(seed)
    assert len(placed) >= 5, placed
    rng = np.random.default_rng(0)
    x = ops._one_nan_a_line(rng, rng.standard_normal((64, 48)).astype("float32"), 0)
    assert (np.isnan(x).sum(0) <= 1).all() and np.isnan(x).any()
    spec = {"op": "max", "shape": [256, 64], "dtype": "float32",
            "kwargs": {"axis": 0, "keepdims": False}, "specials": True, "ties": False,
            "kind": "reduce", "in_view": "contig", "out_view": "offset", "sym_batch": False}
    for seed in range(100):              # a seed whose columns hold one NaN at most
        x, _ = ops._data(OpCase(spec, seed=seed))
        if (~np.isfinite(x)).sum(0).max() <= 1 and np.isnan(x).any():
            break
    else:
        raise AssertionError("no seed of 100 placed one NaN a column")
    out = run_op_case(OpCase(spec, seed=seed))
    assert out.kind == "ok", out.report()

def test_a_grouped_case_as_winograd():
    """The fifth stream: a grouped convolution rewritten as a 3x3 stride-1 Winograd one
    (algorithm="winograd", groups as drawn), against PyTorch."""
    case = draw_op_case(424)
    assert case.spec.get("winograd") and case.spec["kwargs"]["algorithm"] == "winograd"
    out = run_op_case(case)
    assert out.kind == "ok", out.report()
    assert not any(draw_op_case(s).spec.get("winograd") and
                   draw_op_case(s).spec["kind"] != "grouped" for s in range(200))


def test_a_symbolic_batch_scheduled_with_a_hint():
    """Session 28: half the symbolic batches are scheduled with a hint of the batch
    (``shapes={"n": hint}``), half of those reductions over a batch of rows.  Seed 1858:
    argmin along rows of 64 over ``n`` rows, the hint 8 -- the rules took the hint for
    the rows' extent, blocked them by 4 and unrolled a loop of ``min(n - i*4, 4)``
    rows: tc.build refused the rules' own schedule (a ScheduleError; a crash of the
    case).  Now the answers of PyTorch."""
    sp = draw_op_case(1858).spec
    assert sp["sym_batch"] and sp["batch_hint"] == 8 and sp["op"] == "argmin" and \
        sp["shape"][-1] == 64 and sp["kwargs"]["axis"] == -1
    out = run_op_case(draw_op_case(1858))
    assert out.kind == "ok", out.report()


def test_integer_selections_of_other_widths_and_signs(monkeypatch):
    """Session 28: a third of the int32 max/min/argmax/argmin are drawn over int8, uint8
    or int64 data of a few values, each type's ends among them (their lanes are matched,
    the integer max/min signed or not).  Seed 26943: argmin along rows of 256 over uint8,
    PyTorch's answers; with the lanes' minimum taken as signed (a mutant of
    emit_control's unsigned match) a mismatch."""
    from tecomp.codegen.llvm import emit_control

    sp = draw_op_case(26943).spec
    assert sp["dtype"] == "uint8" and sp["op"] == "argmin" and sp["shape"][-1] == 256
    out = run_op_case(draw_op_case(26943))
    assert out.kind == "ok", out.report()
    match = emit_control._ControlEmitter._selection_match

    def signed(self, *args, **kwargs):
        kwargs["unsigned"] = False
        return match(self, *args[:7], **kwargs)

    monkeypatch.setattr(emit_control._ControlEmitter, "_selection_match", signed)
    out = run_op_case(draw_op_case(26943))
    assert out.kind == "mismatch", out.report()


def test_drawn_models_with_stream_loads_take_the_narrow_rows():
    """Session 29: half the drawn machine models read memory fastest with 32-byte loads
    (``stream_load_bytes``; ``RandomDraw(seed * 7919 + 54)``).  Seed 4832: a float32 row
    sum of 31 x 64 with keepdims, past the drawn 2 KiB L2: its kernel is compiled for
    256-bit registers (``pragma vector_bytes``, four accumulators of 8 lanes), and
    PyTorch's answers."""
    import tecomp as tc
    from tecomp import nn
    from tecomp.testing.machines import drawn_machine

    sp = draw_op_case(4832).spec
    assert sp["machine"]["stream_load_bytes"] == 32 and sp["op"] == "sum" and \
        sp["shape"] == [31, 64] and sp["kwargs"]["axis"] == 1
    X = tc.placeholder((31, 64), "float32", name="X")
    with drawn_machine(sp["machine"]):
        Y = nn.sum(X, axis=1, keepdims=True)
        assert "pragma_vector_bytes = 32" in str(tc.lower(tc.auto_schedule([X, Y]), [X, Y]))
    out = run_op_case(draw_op_case(4832))
    assert out.kind == "ok", out.report()

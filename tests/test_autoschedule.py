"""tc.auto_schedule: the analytic rules (trials=0) on the workloads it is meant for, its
knobs drawn at random, the fallback of schedule_backward and tecomp.nn, a short measured
search with its log.  Correctness only: speed is in benchmarks/tune.py."""
import dataclasses
import random

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
import tecomp.strategy.cpu.softmax as cpu_softmax
from tecomp.strategy import Knobs, apply_rules
from tecomp.strategy.cpu import cpu_model
from tecomp.schedule.trace import replay


def _pad_nchw(X, p):
    n, c, h, w = (int(e.value) for e in X.shape)
    return tc.compute((n, c, h + 2 * p, w + 2 * p), lambda a, b, y, x: tc.if_then_else(
        tc.all(y >= p, y < h + p, x >= p, x < w + p), X[a, b, y - p, x - p], 0.0), name="P")


def bmm_scores(B=3, M=40, N=36, D=20):
    Q = tc.placeholder((B, M, D), name="Q")
    K = tc.placeholder((B, N, D), name="K")
    k = tc.reduce_axis((0, D), name="k")
    S = tc.compute((B, M, N), lambda b, i, j: tc.sum(Q[b, i, k] * K[b, j, k], axis=k), name="S")
    return [Q, K, S], lambda q, kk: np.einsum("bik,bjk->bij", q, kk)


def bmm_av(B=2, M=33, N=48, D=40):
    P = tc.placeholder((B, M, N), name="P")
    V = tc.placeholder((B, N, D), name="V")
    j = tc.reduce_axis((0, N), name="j")
    O = tc.compute((B, M, D), lambda b, i, d: tc.sum(P[b, i, j] * V[b, j, d], axis=j), name="O")
    return [P, V, O], lambda p, v: p @ v


def atb(M=50, N=70, K=30):
    A = tc.placeholder((K, M), name="A")
    B = tc.placeholder((K, N), name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[k, i] * B[k, j], axis=k), name="C")
    return [A, B, C], lambda a, b: a.T @ b


def gemm_relu(M=45, N=70, K=33):
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    bias = tc.placeholder((N,), name="bias")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = tc.compute((M, N), lambda i, j: tc.max(C[i, j] + bias[j], 0.0), name="D")
    return [A, B, bias, D], lambda a, b, bi: np.maximum(a @ b + bi, 0)


def row_sum(R=37, C=100):
    X = tc.placeholder((R, C), name="X")
    k = tc.reduce_axis((0, C), name="k")
    S = tc.compute((R,), lambda i: tc.sum(X[i, k], axis=k), name="S")
    return [X, S], lambda x: x.sum(1)


def row_mean_max(R=20, C=70):
    X = tc.placeholder((R, C), name="X")
    k = tc.reduce_axis((0, C), name="k")
    M = tc.compute((R,), lambda i: tc.max(X[i, k], axis=k), name="M")
    k2 = tc.reduce_axis((0, C), name="k2")
    S = tc.compute((R,), lambda i: tc.sum(X[i, k2] * (1.0 / C), axis=k2), name="S")
    return [X, M, S], lambda x: (x.max(1), x.mean(1))


def layer_norm(R=19, C=72):
    X = tc.placeholder((R, C), name="X")
    g = tc.placeholder((C,), name="g")
    b = tc.placeholder((C,), name="b")
    Y = nn.layer_norm(X, g, b)

    def ref(x, g, b):
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * g + b
    return [X, g, b, Y], ref


def depthwise(C=6, H=13, W=21):
    X = tc.placeholder((1, C, H, W), name="X")
    Wt = tc.placeholder((C, 3, 3), name="W")
    P = _pad_nchw(X, 1)
    ry = tc.reduce_axis((0, 3), name="ry")
    rx = tc.reduce_axis((0, 3), name="rx")
    O = tc.compute((1, C, H, W), lambda n, c, y, x: tc.sum(P[n, c, y + ry, x + rx] * Wt[c, ry, rx],
                                                           axis=[ry, rx]), name="O")

    def ref(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        o = np.zeros((1, C, H, W))
        for a in range(3):
            for b in range(3):
                o += xp[:, :, a:a + H, b:b + W] * w[None, :, a, b, None, None]
        return o
    return [X, Wt, O], ref


def conv1x1(C=24, K=20, H=7, W=9):
    X = tc.placeholder((1, C, H, W), name="X")
    Wt = tc.placeholder((K, C), name="W")
    c = tc.reduce_axis((0, C), name="c")
    O = tc.compute((1, K, H, W), lambda n, k, y, x: tc.sum(X[n, c, y, x] * Wt[k, c], axis=c),
                   name="O")
    return [X, Wt, O], lambda x, w: np.einsum("ncyx,kc->nkyx", x, w)


def conv_epilogue():
    X = tc.placeholder((1, 8, 10, 10), name="X")
    Wt = tc.placeholder((16, 8, 3, 3), name="W")
    b = tc.placeholder((16,), name="b")
    Y = nn.relu(nn.bias_add(nn.conv2d_nchw(X, Wt, padding=1), b))

    def ref(x, w, b):
        import torch

        return torch.relu(torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w),
                                                     torch.tensor(b), padding=1)).numpy()
    return [X, Wt, b, Y], ref


def matmul_tpl(M=61, N=77, K=40):
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    return [A, B, nn.matmul(A, B)], lambda a, b: a @ b


WORKLOADS = {f.__name__: f for f in (bmm_scores, bmm_av, atb, gemm_relu, row_sum, row_mean_max,
                                     layer_norm, depthwise, conv1x1, conv_epilogue,
                                     matmul_tpl)}


def _run(s, args, seed=0):
    f = tc.build(s, args)
    rng = np.random.default_rng(seed)
    ins, outs = [], []
    for a in args:
        shape = [int(d.value) for d in a.shape]
        if isinstance(a.op, tc.te.tensor.ComputeOp):
            outs.append(np.full(shape, np.nan, "float32"))
        else:
            ins.append(rng.uniform(-1, 1, shape).astype("float32"))
    f(*ins, *outs)
    return ins, outs


def _check(s, args, ref):
    ins, outs = _run(s, args)
    want = ref(*[x.astype("float64") for x in ins])
    want = want if isinstance(want, tuple) else (want,)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_analytic_schedule_is_correct(name):
    args, ref = WORKLOADS[name]()
    s = tc.auto_schedule(args)
    _check(s, args, ref)
    # an ordinary, replayable schedule that prints as Python
    assert s.trace.replayable
    s2 = replay(s.trace.to_json(), [a for a in args if isinstance(a.op, tc.te.tensor.ComputeOp)])
    assert str(tc.lower(s2, args)) == str(tc.lower(s, args))


def test_analytic_schedule_blocks_registers_and_packs():
    """The batched matmul of attention: a register block accumulated in a local buffer,
    the operand strided along the vector (K[b, j, k]) packed into a panel stored j
    innermost, the outer loops parallel."""
    args, _ = bmm_scores(B=12, M=128, N=128, D=64)
    s = tc.auto_schedule(args)
    src = s.trace.python(args)
    assert "S_local = s.cache_write(S, 'local')" in src
    assert "K_local = s.cache_read(K, 'local', [s[S_local]])" in src
    assert "s[K_local].storage_order(" in src
    ir = str(tc.lower(s, args))
    assert "parallel (" in ir and "vectorized (" in ir and "unrolled (" in ir


@pytest.mark.parametrize("name", ["bmm_scores", "atb", "gemm_relu", "depthwise", "layer_norm",
                                  "row_sum", "conv1x1", "matmul_tpl"])
@pytest.mark.parametrize("seed", range(4))
def test_random_knobs_are_correct(name, seed):
    """Every knob value the search may try gives a correct schedule."""
    args, ref = WORKLOADS[name]()
    k = Knobs(rng=random.Random(seed))
    s = apply_rules(args, k, cpu_model())
    try:
        tc.lower(s, args)
    except tc.ScheduleError:
        # refused at lowering (the search checks every candidate this way before
        # measuring it): only the GEMM template's blockings may be refused
        assert name == "matmul_tpl"
        return
    _check(s, args, ref)


def test_knobs_record_their_space_and_replay_a_choice():
    args, _ = atb()
    k = Knobs()
    apply_rules(args, k, cpu_model())
    assert set(k.space) >= {"C.nr", "C.mr", "C.order"} and k.values == k.defaults
    pick = dict(k.values, **{"C.mr": 2, "C.order": "uv"})
    k2 = Knobs(pick)
    s = apply_rules(args, k2, cpu_model())
    assert k2.values["C.mr"] == 2 and k2.values["C.order"] == "uv"
    assert "split(i, factor=2)" in s.trace.python(args)


def test_symbolic_extent_with_shapes():
    n = tc.var("n")
    A = tc.placeholder((n, 64), name="A")
    B = tc.placeholder((64, 48), name="B")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((n, 48), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    args = [A, B, C]
    s = tc.auto_schedule(args, shapes={"n": 1000})
    f = tc.build(s, args)
    for rows in (1, 37, 200):
        a = np.random.rand(rows, 64).astype("float32")
        b = np.random.rand(64, 48).astype("float32")
        c = np.zeros((rows, 48), "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4)


def test_schedule_backward_uses_the_rules_for_stages_without_template():
    args, _ = bmm_scores()
    Q, K, S = args
    dS = tc.placeholder(S.shape, name="dS")
    dQ, dK = tc.gradient(S, [Q, K], head=dS)
    s = tc.schedule_backward([dQ, dK])
    assert "cache_write" in s.trace.python([Q, K, dS, dQ, dK])
    ins, (gq, gk) = _run(s, [Q, K, dS, dQ, dK])
    q, kk, ds = (x.astype("float64") for x in ins)
    np.testing.assert_allclose(gq, np.einsum("bij,bjk->bik", ds, kk), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(gk, np.einsum("bij,bik->bjk", ds, q), rtol=2e-4, atol=2e-4)
    # auto=False keeps the plain scheme
    s2 = tc.schedule_backward([dQ, dK], auto=False)
    assert "cache_write" not in s2.trace.python([Q, K, dS, dQ, dK])


def test_nn_schedule_falls_back_to_the_rules():
    args, ref = bmm_scores()
    from tecomp.strategy import cpu as sc

    s = sc.schedule_matmul(args[-1])        # no matmul stage: the rules
    _check(s, args, ref)
    assert "cache_write" in s.trace.python(args)


def test_a_producer_every_task_reads_whole_stays_at_the_root():
    """An elementwise producer read by a GEMM whose tasks are column blocks (the GELU
    between BERT's two FFN GEMMs): each task reads all of it, so it is computed once at
    the root, not at the task loop, once per task (it was: BERT-base's layer forward
    took 18.0 ms, then 10.5 ms, batch 1, seq 128, 2 threads)."""
    import tecomp.nn as nn

    X = tc.placeholder((32, 48), name="X")
    W1 = tc.placeholder((96, 48), name="W1")
    b1 = tc.placeholder((96,), name="b1")
    W2 = tc.placeholder((64, 96), name="W2")
    b2 = tc.placeholder((64,), name="b2")
    G = nn.gelu(nn.dense(X, W1, b1, name="up"), name="g")
    D = nn.dense(G, W2, b2, name="down")
    args = [X, W1, b1, W2, b2, D]
    s = tc.auto_schedule(args)
    assert s[G.op].attach_type == "root"
    rng = np.random.default_rng(0)
    vals = [rng.standard_normal([int(e) for e in t.shape]).astype(np.float32) for t in args[:-1]]
    d = np.empty((32, 64), np.float32)
    tc.build(s, args)(*vals, d)
    from math import erf
    x, w1, bb1, w2, bb2 = vals
    h = x @ w1.T + bb1
    g = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(d, g @ w2.T + bb2, rtol=1e-4, atol=1e-4)


def test_conv_1x1_as_gemm_copies_no_operand_twice():
    """A 1x1 convolution written as a GEMM (the torch.compile backend's lowering) at
    batch 1: the weights' ``[1, K, C]`` view is read in place (every task of the
    column blocks copied all of it: the batch of one was taken for an axis that
    narrows it), and the flattened pixels, computed per task, are the panel itself
    (they were copied once more into a packed panel); the values are unchanged."""
    from tecomp.dynamo import lowering_nn

    x = tc.placeholder((1, 64, 14, 14), name="x")
    w = tc.placeholder((48, 64, 1, 1), name="w")
    y = lowering_nn._conv_1x1_as_gemm(x, w, [1, 1], [0, 0], "conv")
    assert y is not None
    out = tc.compute(y.shape, lambda n, k, i, j: tc.max(y[n, k, i, j], tc.const(0.0)),
                     name="relu")
    args = [x, w, out]
    s = tc.auto_schedule(args)
    ir = str(tc.lower(s, args))
    assert "conv.weights" not in ir and "conv.pixels.local" not in ir, ir
    assert "conv.pixels[" in ir
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 64, 14, 14)).astype(np.float32)
    wv = rng.standard_normal((48, 64, 1, 1)).astype(np.float32)
    o = np.empty((1, 48, 14, 14), np.float32)
    tc.build(s, args)(xv, wv, o)
    ref = np.maximum(np.einsum("kc,nchw->nkhw", wv[:, :, 0, 0], xv), 0)
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-4)


def test_dense_template_only_for_few_rows():
    """The dense_nopack template (vectors along the reduction) for a dense of few rows; the
    register-blocked rules from DENSE_NOPACK_MAX_ROWS + 1 rows on (1024x768 -> 768: 3.9
    against 10.3 ms); a knob either way, so the search can flip it."""
    import tecomp.nn as nn
    from tecomp.strategy.rules import Knobs
    from tecomp.strategy.cpu.gemm import DENSE_NOPACK_MAX_ROWS

    for rows, template in ((61, True), (DENSE_NOPACK_MAX_ROWS + 1, False)):
        X = tc.placeholder((rows, 96), name="X")
        W = tc.placeholder((64, 96), name="W")
        D = nn.dense(X, W)
        args = [X, W, D]
        s = tc.auto_schedule(args)
        assert ("rfactor" in s.trace.python(args)) == template, rows
        x = np.random.default_rng(0).random((rows, 96), dtype=np.float32)
        w = np.random.default_rng(1).random((64, 96), dtype=np.float32)
        d = np.empty((rows, 64), np.float32)
        tc.build(s, args)(x, w, d)
        np.testing.assert_allclose(d, x @ w.T, rtol=1e-4)
    from tecomp.strategy.cpu.gemm import _dense_rows_for_generic_rules

    knobs = Knobs({"dense.generic_rules": True})   # what a search may try
    assert _dense_rows_for_generic_rules(D.op, knobs) is True  # D: the dense, no bias
    assert knobs.space["dense.generic_rules"] == [True, False]


@pytest.mark.parametrize("K,mr", [(768, 14), (3072, 8)])
def test_register_block_leaves_its_panel_in_l2(K, mr):
    """A dense layer's block on Zen 4 (1 MiB L2, 32 registers): a panel of 32 columns of
    W and the block's rows of X, each over the whole reduction, take at most half of L2:
    14 rows at K = 768, 10 at K = 3072 (14 rows there evicted the panel: 86 against 109
    GFLOP/s on one Zen 4 core), and of those at most 8, X's rows being 12 KiB apart (one
    L1 set; 8 and 10 rows ran alike there: 107.1 / 107.0 and 101.4 / 102.8 GFLOP/s).  The
    result is right either way."""
    import tecomp.nn as tnn

    target = "llvm -mcpu=znver4 -num-cores=1"
    X = tc.placeholder((1024, K), name="X")
    W = tc.placeholder((768, K), name="W")
    b = tc.placeholder((768,), name="b")
    Y = tnn.dense(X, W, b)
    cfg = tc.autoschedule.default_config([X, W, b, Y], target=target)
    assert (cfg["dense.matmul.mr"], cfg["dense.matmul.nr"]) == (mr, 32)
    assert (32 + mr) * K * 4 <= tc.Target(target).l2_bytes // 2


@pytest.mark.parametrize("width,block", [(56, (6, 16)), (28, (2, 28))])
def test_register_blocks_on_avx2(width, block):
    """The generic rules' block for a 3x3 conv (64 channels, rows of ``width``) on an AVX2
    target (16 registers, no masks): 12 accumulators where the registers allow (6 output
    channels x 2 vectors, the 56-wide rows' last 8 lanes a narrower block), and a 28-wide
    row as one block of 8 + 8 + 8 + 4 lanes rather than 16-lane blocks whose 12-lane tail
    would run lane by lane.  The results are right where the target runs."""
    import tecomp.nn as tnn
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model

    target = "llvm -mcpu=haswell"
    X = tc.placeholder((1, 64, width, width), name="X")
    W = tc.placeholder((64, 64, 3, 3), name="W")
    Y = tnn.conv2d_nchw(X, W, padding=1)
    knobs = Knobs({"template": False})   # the generic rules, as a search may try them
    s = apply_rules([X, W, Y], knobs, cpu_model(target), {})
    assert (knobs.values["conv2d_nchw.mr"], knobs.values["conv2d_nchw.nr"]) == block
    if tc.Target(target).runs_here() is not None:
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, width, width)).astype("float32")
    w = rng.standard_normal((64, 64, 3, 3)).astype("float32")
    y = np.empty((1, 64, width, width), "float32")
    tc.build(s, [X, W, Y], target=target)(x, w, y)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target,window,generic", [
    ("llvm -mcpu=haswell", 3, True), ("llvm -mcpu=haswell", 1, False),
    ("llvm -mcpu=skylake-avx512", 3, False)])
def test_nchw_conv_template_or_generic_rules(target, window, generic):
    """On a CPU without AVX-512's masks the auto-scheduler gives a 3x3 NCHW conv (with its
    epilogue) the generic rules by default, a 1x1 the template; with AVX-512 the template.
    The knob is in the space, so a search tries the other."""
    import tecomp.nn as tnn
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model

    X = tc.placeholder((1, 16, 12, 12), name="X")
    W = tc.placeholder((16, 16, window, window), name="W")
    b = tc.placeholder((16,), name="b")
    Y = tnn.relu(tnn.bias_add(tnn.conv2d_nchw(X, W, padding=window // 2), b))
    knobs = Knobs()
    s = apply_rules([X, W, b, Y], knobs, cpu_model(target), {})
    assert knobs.values["conv2d_nchw.generic_rules"] is generic
    assert knobs.space["conv2d_nchw.generic_rules"] == [True, False]
    assert ("conv2d_nchw.mr" in knobs.values) is generic   # the generic rules' block knob
    if tc.Target(target).runs_here() is not None:
        return
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    w = rng.standard_normal((16, 16, window, window)).astype("float32")
    bb = rng.standard_normal(16).astype("float32")
    y = np.empty((1, 16, 12, 12), "float32")
    tc.build(s, [X, W, b, Y], target=target)(x, w, bb, y)
    torch = pytest.importorskip("torch")
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                                 torch.from_numpy(bb), padding=window // 2))
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mattr=+avx2,+fma",
                                    "llvm -mcpu=skylake-avx512"])
def test_block_vector_covers_a_short_row_unguarded(target):
    """A 1x1 conv over rows of 14 pixels: with AVX2 (8 lanes) the register block's vector
    is the whole row (14 lanes), not 16 lanes guarded past the row's end (run lane by
    lane); with AVX-512 the row fits one register.  Run where the target runs."""
    args = _conv1x1_nchw(32, 24, 14)
    s, _ = _rows_schedule(args, target)
    text = str(tc.lower(s, args, target=target))
    assert "vectorized (x.inner, 0, 14)" in text and "x.inner < 14" not in text, text
    _check_conv1x1(s, args, target)


def _rows_schedule(args, target):
    """The schedule with the row as the block's vector (the plane knob off where there
    is one: with AVX-512 the plane is the default) and its knobs."""
    knobs = Knobs({"O.plane": False})
    s = apply_rules(args, knobs, cpu_model(target), {})
    return s, knobs.values


def _conv1x1_nchw(C, K, H):
    X = tc.placeholder((1, C, H, H), name="X")
    W = tc.placeholder((K, C), name="W")
    c = tc.reduce_axis((0, C), name="c")
    O = tc.compute((1, K, H, H), lambda n, k, y, x: tc.sum(X[n, c, y, x] * W[k, c], axis=c),
                   name="O")
    return [X, W, O]


def _check_conv1x1(s, args, target):
    """Run ``s`` where ``target`` runs here and compare with numpy."""
    if tc.Target(target).runs_here() is not None:
        return
    X, W, O = args
    rng = np.random.default_rng(0)
    x = rng.standard_normal([int(d.value) for d in X.shape]).astype("float32")
    w = rng.standard_normal([int(d.value) for d in W.shape]).astype("float32")
    o = np.empty([int(d.value) for d in O.shape], "float32")
    tc.build(s, args, target=target)(x, w, o)
    np.testing.assert_allclose(o, np.einsum("ncyx,kc->nkyx", x, w), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"])
def test_short_rows_are_a_masked_vector_and_channel_blocks_the_tasks(target):
    """A 1x1 conv over a 7x7 image, 2048 channels in: the row of 7 is the block's vector
    (AVX-512 too, where it is less than half a register: it used to fall back to scalar
    loops), the channel blocks are the tasks (one panel covers the row) in the order of
    the output's axes (the weights, 2 MiB, are more than half of L2), and the block has
    at most 8 rows: the weights' rows, 8 KiB apart, share one L1 set."""
    args = _conv1x1_nchw(2048, 256, 7)
    s, cfg = _rows_schedule(args, target)
    assert cfg["O.nr"] == 7 and cfg["O.order"] == "uv" and cfg["O.mr"] <= 8, str(cfg)
    assert cfg["O.task_order"] == "axes", str(cfg)
    text = str(tc.lower(s, args, target=target))
    assert "vectorized (x.inner, 0, 7)" in text and "parallel (n.k.outer.fused" in text, text
    _check_conv1x1(s, args, target)


@pytest.mark.parametrize("C,K,H", [(32, 24, 14), (64, 13, 7), (16, 8, 12)])
def test_a_short_image_plane_is_the_vector_axis(C, K, H):
    """A 1x1 conv over a 14x14, 7x7 or 12x12 image with AVX-512: the plane (y and x
    fused, 196 / 49 / 144 pixels) is the block's vector axis, split into 16-lane vectors
    with a narrower last one and no guard; each vector is loaded once per reduction step
    (the vectors outside the block's rows). Off (the knob), the row is the vector.  Both
    compute the convolution, including a channel tail (K not a multiple of the rows)."""
    args = _conv1x1_nchw(C, K, H)
    target = "llvm -mcpu=skylake-avx512"
    cfg = tc.autoschedule.default_config(args, target=target)
    assert cfg["O.plane"] is True, str(cfg)
    s = tc.auto_schedule(args, target=target)
    text = str(tc.lower(s, args, target=target))
    F = H * H
    assert f"unrolled (y.x.fused.outer, 0, {F // 16})" in text, text
    if F % 16:
        assert f"vectorized (y.x.fused.inner, 0, {F % 16})" in text, text
    assert f"< {F})" not in text, text          # (no guard on the plane's lanes)
    body = text.split("for (c, 0, ")[1]
    assert body.index("unrolled (y.x.fused.outer") < body.index("unrolled (k.inner"), text
    _check_conv1x1(s, args, target)
    rows, _ = _rows_schedule(args, target)
    assert "y.x.fused" not in str(tc.lower(rows, args, target=target))
    _check_conv1x1(rows, args, target)


@pytest.mark.parametrize("seed", range(10))
def test_plane_blocks_with_random_knobs_and_epilogues(seed):
    """Random 1x1 convolutions with short planes (not square, batches, a bias and ReLU
    epilogue or a residual add, channel counts with tails), scheduled with the plane and
    random values of the other knobs: all compute what numpy computes."""
    r = random.Random(seed)
    target = "llvm -mcpu=skylake-avx512"
    N, C, K = r.choice([1, 2]), r.randint(1, 40), r.randint(1, 30)
    H, Wd = r.choice([(7, 7), (5, 9), (3, 6), (14, 14), (6, 10), (4, 12)])
    X = tc.placeholder((N, C, H, Wd), name="X")
    W = tc.placeholder((K, C), name="W")
    c = tc.reduce_axis((0, C), name="c")
    O = tc.compute((N, K, H, Wd), lambda n, k, y, x: tc.sum(X[n, c, y, x] * W[k, c], axis=c),
                   name="O")
    epi = r.choice(["none", "bias_relu", "residual"])
    ins = [X, W]
    if epi == "bias_relu":
        b = tc.placeholder((K,), name="b")
        ins.append(b)
        Y = tc.compute(O.shape, lambda n, k, y, x: tc.max(O[n, k, y, x] + b[k], 0.0), name="Y")
    elif epi == "residual":
        R = tc.placeholder((N, K, H, Wd), name="R")
        ins.append(R)
        Y = tc.compute(O.shape, lambda n, k, y, x: O[n, k, y, x] + R[n, k, y, x], name="Y")
    else:
        Y = O
    args = ins + [Y]
    knobs = Knobs({"O.plane": True}, rng=random.Random(seed + 100))
    s = apply_rules(args, knobs, cpu_model(target), {})
    assert any(k.endswith(".plane") and v is True for k, v in knobs.values.items()), \
        knobs.values
    rng = np.random.default_rng(seed)
    vals = [rng.standard_normal([int(d.value) for d in t.shape]).astype("float32") for t in ins]
    out = np.empty([int(d.value) for d in Y.shape], "float32")
    tc.build(s, args, target=target)(*vals, out)
    want = np.einsum("ncyx,kc->nkyx", vals[0], vals[1])
    if epi == "bias_relu":
        want = np.maximum(want + vals[2][None, :, None, None], 0)
    elif epi == "residual":
        want = want + vals[2]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("H", [28, 56])
def test_row_tails_accumulate_in_unmasked_vectors(H):
    """A 1x1 conv over rows of 28 or 56 pixels (not whole vectors of 16, the plane too
    large): no statement of the reduction loop is under a guard (an accumulator under a
    per-lane mask went through memory: 28x28 ran 14 GFLOP/s), and it computes the
    convolution."""
    target = "llvm -mcpu=skylake-avx512"
    args = _conv1x1_nchw(8, 12, H)
    s = tc.auto_schedule(args, target=target)
    text = str(tc.lower(s, args, target=target))
    loops = text.split("for (c, 0, 8)")[1:]
    assert loops and all("if (" not in body.split("O[")[0] for body in loops), text
    _check_conv1x1(s, args, target)


def test_the_plane_needs_contiguous_operands():
    """No plane where an operand's rows are not the image's (a strided 1x1 conv reads
    every other pixel) or where the row already fills the vectors (rows of 16)."""
    target = "llvm -mcpu=skylake-avx512"
    X = tc.placeholder((1, 8, 14, 14), name="X")
    W = tc.placeholder((8, 8), name="W")
    c = tc.reduce_axis((0, 8), name="c")
    O = tc.compute((1, 8, 7, 7), lambda n, k, y, x: tc.sum(X[n, c, 2 * y, 2 * x] * W[k, c],
                                                           axis=c), name="O")
    assert "O.plane" not in tc.autoschedule.default_config([X, W, O], target=target).space
    assert "O.plane" not in tc.autoschedule.default_config(
        _conv1x1_nchw(8, 8, 16), target=target).space


def test_default_config_is_the_analytic_schedule_and_a_set_knob_is_applied():
    """AutoTVM's template shape: default_config records every knob with its choices and
    the heuristic's value; apply_config builds what a config says, and only that."""
    A = tc.placeholder((96, 80), name="A")
    B = tc.placeholder((80, 72), name="B")
    C = nn.matmul(A, B)
    args = [A, B, C]
    target = "llvm -mcpu=haswell"
    cfg = tc.autoschedule.default_config(args, target)
    assert cfg.values == cfg.defaults and cfg["gemm.nr"] == 16
    assert set(cfg.space) >= {"gemm.nr", "gemm.mr", "gemm.kc", "gemm.par"}
    assert apply_config_trace(args, cfg) == tc.auto_schedule(args, target).trace.python(args)
    mr = [m for m in cfg.space["gemm.mr"] if m != cfg["gemm.mr"]][0]
    cfg2 = cfg.set("gemm.mr", mr)
    assert "* gemm.mr" in str(cfg2) and cfg2["gemm.mr"] == mr
    s = tc.autoschedule.apply_config(args, cfg2)
    assert s.trace.python(args) != apply_config_trace(args, cfg)
    a = np.random.default_rng(0).random((96, 80), dtype=np.float32)
    b = np.random.default_rng(1).random((80, 72), dtype=np.float32)
    c = np.zeros((96, 72), np.float32)
    tc.build(s, args, target=target)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def apply_config_trace(args, cfg):
    return tc.autoschedule.apply_config(args, cfg).trace.python(args)


def test_inlined_padding_is_partitioned_and_correct():
    """A padded input read by a blocked reduction is computed per task, or (knob
    ``P.inline_padding``) inlined into the reduction with the block loops under
    ``pragma partition``: the blocks inside the image read X with no test, the border
    blocks keep it; both compute the same, at several block sizes."""
    args, ref = depthwise(C=16, H=19, W=37)
    cfg = tc.autoschedule.default_config(args)
    assert cfg["P.inline_padding"] is True        # no output axis reuses the padding
    assert "pragma(y_o, 'partition')" in tc.autoschedule.apply_config(
        args, cfg.set("P.inline_padding", True)).trace.python(args)
    # register blocks from the machine's choices (nr: multiples of its vector width),
    # narrow enough for blocks inside the image's 37 columns
    mrs = cfg.space["O.mr"]
    nrs = [nr for nr in cfg.space["O.nr"] if nr <= 17]
    for mr, nr in ((mrs[0], nrs[0]), (mrs[len(mrs) // 2], nrs[-1]), (mrs[-1], nrs[-1])):
        c = cfg.set("P.inline_padding", True).set("O.mr", mr).set("O.nr", nr)
        s = tc.autoschedule.apply_config(args, c)
        text = str(tc.lower(s, args))
        assert "allocate P" not in text
        inner = [line for line in text.splitlines() if "O.local[" in line and "X[" in line]
        assert any("select(" not in line for line in inner)     # the inside blocks
        assert any("select(" in line for line in inner)         # the border blocks
        _check(s, args, ref)
    s = tc.autoschedule.apply_config(args, cfg.set("P.inline_padding", False))
    assert "allocate P" in str(tc.lower(s, args))
    _check(s, args, ref)
    # a convolution over input channels: every output channel reads the padded input
    # again, so it keeps its copy per task by default
    X = tc.placeholder((1, 4, 12, 20), name="X")
    Wt = tc.placeholder((8, 4, 3, 3), name="W")
    c, ry, rx = (tc.reduce_axis((0, e), name=n) for e, n in ((4, "c"), (3, "ry"), (3, "rx")))
    P = _pad_nchw(X, 1)
    O = tc.compute((1, 8, 12, 20), lambda n, k, y, x: tc.sum(
        P[n, c, y + ry, x + rx] * Wt[k, c, ry, rx], axis=[c, ry, rx]), name="O")
    # (an NCHW convolution written as a plain compute: the template by default, the
    # rules with the knob "template" off)
    knobs = Knobs({"template": False})
    apply_rules([X, Wt, O], knobs, cpu_model("llvm"), {})
    assert knobs.values["P.inline_padding"] is False
    assert tc.autoschedule.default_config([X, Wt, O])["template"] is True


def test_small_window_is_unrolled_whole_and_correct():
    """A depthwise 3x3 convolution: the rules unroll the whole window (both kernel axes)
    so the taps share their row loads; the knob turns it off; both compute the same."""
    C, H = 8, 13
    X = tc.placeholder((C, H + 2, H + 2), name="X")
    Wt = tc.placeholder((C, 3, 3), name="W")
    ry, rx = tc.reduce_axis((0, 3), name="ry"), tc.reduce_axis((0, 3), name="rx")
    O = tc.compute((C, H, H), lambda c, y, x: tc.sum(X[c, y + ry, x + rx] * Wt[c, ry, rx],
                                                     axis=[ry, rx]), name="O")
    args = [X, Wt, O]

    def ref(x, w):
        return sum(x[:, a:a + H, b:b + H] * w[:, a, b, None, None]
                   for a in range(3) for b in range(3))

    cfg = tc.autoschedule.default_config(args)
    assert cfg["O.unroll_window"] is True
    s = tc.auto_schedule(args)
    text = str(tc.lower(s, args))
    assert "unrolled (ry, 0, 3)" in text and "unrolled (rx, 0, 3)" in text
    _check(s, args, ref)
    off = tc.autoschedule.apply_config(args, cfg.set("O.unroll_window", False))
    assert "for (ry, 0, 3)" in str(tc.lower(off, args))
    _check(off, args, ref)



def _plain_conv(N, C, K, H, W, R, stride, dil, pad, swap):
    """An NCHW convolution written as plain computes (a padding stage when ``pad``), the
    product's factors swapped when ``swap``."""
    X = tc.placeholder((N, C, H, W), name="X")
    Wt = tc.placeholder((K, C, R, R), name="W")
    P = _pad_nchw(X, pad) if pad else X
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (R - 1) - 1) // stride + 1
    c, ky, kx = (tc.reduce_axis((0, e), name=n) for e, n in ((C, "c"), (R, "ky"), (R, "kx")))

    def body(n, o, y, x):
        d = P[n, c, y * stride + ky * dil, x * stride + kx * dil]
        w = Wt[o, c, ky, kx]
        return tc.sum(w * d if swap else d * w, axis=[c, ky, kx])
    return X, Wt, P, tc.compute((N, K, OH, OW), body, name="O")


@pytest.mark.parametrize("case", [
    # N, C, K, H, W, R, stride, dilation, pad, swap, epilogue
    (1, 16, 32, 9, 9, 3, 1, 1, 1, False, False),
    (2, 8, 32, 11, 7, 3, 2, 1, 1, True, True),
    (1, 16, 32, 12, 12, 3, 1, 2, 2, False, True),
    (1, 16, 32, 10, 10, 3, 1, 1, 0, True, False),
    (1, 16, 32, 8, 9, 5, 1, 1, 2, False, False),
], ids=lambda c: "x".join(str(int(v)) for v in c))
def test_plain_nchw_conv_gets_the_conv_template(case):
    """An NCHW convolution written as plain computes (the padding as tc.if_then_else, the
    product's factors in either order, strides, dilations, a bias + relu epilogue) is
    recognized as one and scheduled by tecomp.nn's convolution template, as
    tecomp.nn.conv2d_nchw is, and computes the same as PyTorch's conv2d."""
    from tecomp.strategy.cpu.conv2d import plain_nchw_conv

    torch = pytest.importorskip("torch")
    N, C, K, H, W, R, stride, dil, pad, swap, epi = case
    X, Wt, P, O = _plain_conv(N, C, K, H, W, R, stride, dil, pad, swap)
    assert plain_nchw_conv(O.op) == (P, Wt)
    args = [X, Wt, O]
    if epi:
        b = tc.placeholder((K,), name="b")
        Y = tc.compute(O.shape, lambda n, o, y, x: tc.max(O[n, o, y, x] + b[o], 0.0), name="Y")
        args = [X, Wt, b, Y]
    knobs = Knobs()
    s = apply_rules(args, knobs, cpu_model("llvm"), {})
    assert knobs.values["template"] is True and "conv2d_nchw.generic_rules" in knobs.space
    assert "O.mr" not in knobs.values     # not the generic rules' block
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, C, H, W)).astype("float32")
    w = rng.standard_normal((K, C, R, R)).astype("float32")
    ins = [x, w]
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride,
                                      padding=pad, dilation=dil)
    if epi:
        bb = rng.standard_normal(K).astype("float32")
        ins.append(bb)
        want = torch.relu(want + torch.from_numpy(bb)[None, :, None, None])
    out = np.empty(tuple(want.shape), "float32")
    tc.build(s, args)(*ins, out)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-4)


def test_plain_computes_that_are_not_nchw_convolutions():
    """Near misses are left to the generic rules: the weight read as W[c, o, ky, kx], the
    window flipped (y - ky), a float64 convolution, a product of three factors; and a 1x1
    window, whose image-plane vectors the rules have."""
    from tecomp.strategy.cpu.conv2d import plain_nchw_conv

    X = tc.placeholder((1, 8, 9, 9), name="X")
    P = _pad_nchw(X, 1)
    c, ky, kx = (tc.reduce_axis((0, e), name=n) for e, n in ((8, "c"), (3, "ky"), (3, "kx")))
    Wa = tc.placeholder((8, 16, 3, 3), name="W")
    A = tc.compute((1, 16, 9, 9), lambda n, o, y, x: tc.sum(
        P[n, c, y + ky, x + kx] * Wa[c, o, ky, kx], axis=[c, ky, kx]), name="A")
    Wb = tc.placeholder((16, 8, 3, 3), name="W")
    B = tc.compute((1, 16, 7, 7), lambda n, o, y, x: tc.sum(
        P[n, c, y + 2 - ky, x + kx] * Wb[o, c, ky, kx], axis=[c, ky, kx]), name="B")
    X64 = tc.placeholder((1, 8, 9, 9), "float64", name="X")
    W64 = tc.placeholder((16, 8, 3, 3), "float64", name="W")
    C64 = tc.compute((1, 16, 7, 7), lambda n, o, y, x: tc.sum(
        X64[n, c, y + ky, x + kx] * W64[o, c, ky, kx], axis=[c, ky, kx]), name="C")
    D = tc.compute((1, 16, 9, 9), lambda n, o, y, x: tc.sum(
        P[n, c, y + ky, x + kx] * Wb[o, c, ky, kx] * 2.0, axis=[c, ky, kx]), name="D")
    c1, k1, k2 = (tc.reduce_axis((0, e), name=n) for e, n in ((8, "c"), (1, "ky"), (1, "kx")))
    W1 = tc.placeholder((16, 8, 1, 1), name="W")
    E = tc.compute((1, 16, 9, 9), lambda n, o, y, x: tc.sum(
        X[n, c1, y + k1, x + k2] * W1[o, c1, k1, k2], axis=[c1, k1, k2]), name="E")
    for out in (A, B, C64, D, E):
        assert plain_nchw_conv(out.op) is None, out.name
    knobs = Knobs()
    apply_rules([X, Wb, B], knobs, cpu_model("llvm"), {})
    assert "B.mr" in knobs.values and "conv2d_nchw.generic_rules" not in knobs.space


@pytest.mark.parametrize("size,generic", [(28, True), (27, False), (14, False)])
def test_large_1x1_plane_takes_the_generic_rules(size, generic):
    """With AVX-512, a 1x1 NCHW convolution over a plane of 28x28 pixels or more gets the
    generic rules by default (their rows beat the template's blocks there), a smaller
    one the template."""
    import tecomp.nn as tnn

    X = tc.placeholder((1, 32, size, size), name="X")
    W = tc.placeholder((64, 32, 1, 1), name="W")
    Y = tnn.conv2d_nchw(X, W)
    knobs = Knobs()
    apply_rules([X, W, Y], knobs, cpu_model("llvm -mcpu=skylake-avx512"), {})
    assert knobs.values["conv2d_nchw.generic_rules"] is generic


@pytest.mark.parametrize("seed", range(8))
def test_plain_nchw_convs_with_random_knobs(seed):
    """Random NCHW convolutions written as plain computes (sizes, windows of 1, 3 or 5,
    strides, dilations, padding, factor order), each scheduled with random knobs (the
    template's or, with its knob off, the generic rules'), against PyTorch."""
    torch = pytest.importorskip("torch")
    r = random.Random(7100 + seed)
    R = r.choice([1, 3, 5])
    stride, dil = r.choice([1, 1, 2]), r.choice([1, 1, 2])
    pad = r.choice([0, R // 2, R // 2 + 1])
    N, C, K = r.choice([1, 2]), r.choice([3, 8, 16, 40]), r.choice([16, 32, 48, 64])
    H, W = r.randint(dil * (R - 1) + 1, 15), r.randint(dil * (R - 1) + 1, 15)
    X, Wt, P, O = _plain_conv(N, C, K, H, W, R, stride, dil, pad, r.random() < 0.5)
    args = [X, Wt, O]
    knobs = Knobs(rng=random.Random(seed))
    s = apply_rules(args, knobs, cpu_model("llvm"), {})
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype("float32")
    w = rng.standard_normal((K, C, R, R)).astype("float32")
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride,
                                      padding=pad, dilation=dil).numpy()
    out = np.empty(want.shape, "float32")
    tc.build(s, args)(x, w, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(knobs.values))


# -- compositions of row reductions and elementwise stages: computed a row at a time -----

def _softmax4(M, N):
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis((0, N), name="k")
    mx = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="rowmax")
    E = tc.compute((M, N), lambda i, j: tc.exp(X[i, j] - mx[i]), name="e")
    k2 = tc.reduce_axis((0, N), name="k2")
    S = tc.compute((M,), lambda i: tc.sum(E[i, k2], axis=k2), name="rowsum")
    O = tc.compute((M, N), lambda i, j: E[i, j] / S[i], name="out")

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return [X, O], ref


def _log_softmax3(M, N):
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis((0, N), name="k")
    mx = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="rowmax")
    k2 = tc.reduce_axis((0, N), name="k2")
    S = tc.compute((M,), lambda i: tc.sum(tc.exp(X[i, k2] - mx[i]), axis=k2), name="rowsum")
    O = tc.compute((M, N), lambda i, j: X[i, j] - mx[i] - tc.log(S[i]), name="out")

    def ref(x):
        m = x.max(1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
    return [X, O], ref


def _layer_norm5(M, N):
    X = tc.placeholder((M, N), name="x")
    g, b = tc.placeholder((N,), name="g"), tc.placeholder((N,), name="b")
    k = tc.reduce_axis((0, N), name="k")
    tot = tc.compute((M,), lambda i: tc.sum(X[i, k], axis=k), name="total")
    C = tc.compute((M, N), lambda i, j: X[i, j] - tot[i] / N, name="centered")
    k2 = tc.reduce_axis((0, N), name="k2")
    ss = tc.compute((M,), lambda i: tc.sum(C[i, k2] * C[i, k2], axis=k2), name="sumsq")
    rstd = tc.compute((M,), lambda i: tc.rsqrt(ss[i] / N + 1e-5), name="rstd")
    O = tc.compute((M, N), lambda i, j: C[i, j] * rstd[i] * g[j] + b[j], name="out")

    def ref(x, gg, bb):
        c = x - x.mean(1, keepdims=True)
        return c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-5) * gg + bb
    return [X, g, b, O], ref


def _scaled_softmax(M, N):
    """The same composition written differently: an (M, 1) row max, a temperature inside
    the exp, other axis names, and a multiply by a per-row reciprocal."""
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis((0, N), name="k")
    mx = tc.compute((M, 1), lambda i, _: tc.max(X[i, k], axis=k), name="m")
    E = tc.compute((M, N), lambda r, c: tc.exp((X[r, c] - mx[r, 0]) * 0.5), name="scaled")
    k2 = tc.reduce_axis((0, N), name="k2")
    S = tc.compute((M,), lambda i: tc.sum(E[i, k2], axis=k2), name="z")
    inv = tc.compute((M,), lambda i: 1.0 / S[i], name="inv")
    O = tc.compute((M, N), lambda r, c: E[r, c] * inv[r], name="p")

    def ref(x):
        e = np.exp((x - x.max(1, keepdims=True)) * 0.5)
        return e / e.sum(1, keepdims=True)
    return [X, O], ref


@pytest.mark.parametrize("make", [_softmax4, _log_softmax3, _layer_norm5, _scaled_softmax],
                         ids=["softmax4", "log_softmax3", "layer_norm5", "scaled_softmax"])
@pytest.mark.parametrize("M, N", [(96, 256), (33, 200)])
def test_row_compositions_are_computed_a_row_at_a_time(make, M, N):
    """A user's softmax, log-softmax and layer norm written as several computes: the
    rules compute every stage at the output's row loop, so no intermediate holds more
    than one row (no M x N buffer in the IR, and one parallel loop nest), with the
    results of the composition (float64 reference; float32 tolerance); a whole-row pass
    prefetches the next row of the input, as the softmax template does."""
    import re

    args, ref = make(M, N)
    s = tc.auto_schedule(args)
    ir = str(tc.lower(s, args))
    for name, shape in re.findall(r"allocate (\S+): \w+\[([^\]]*)\]", ir):
        size = int(np.prod([int(d) for d in shape.split(",")]))
        assert size <= N, (name, shape)
    assert ir.count("parallel (") == 1, ir
    assert re.search(rf"prefetch x\[min\(\w+ \+ 1, {M - 1}\), ", ir), ir
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal([int(d) for d in a.shape]).astype("float32") for a in args[:-1]]
    out = np.empty([int(d) for d in args[-1].shape], "float32")
    tc.build(s, args)(*ins, out)
    np.testing.assert_allclose(out, ref(*[a.astype(np.float64) for a in ins]),
                               rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("make", [_softmax4, _log_softmax3, _layer_norm5, _scaled_softmax],
                         ids=["softmax4", "log_softmax3", "layer_norm5", "scaled_softmax"])
def test_row_compositions_equal_the_unfused_form(make):
    """Each composition, auto-scheduled, against the same computes with the default
    schedule (every stage a full-size array, in order, strict division): equal within
    float32 tolerance (rtol 2e-5, atol 2e-6: the row sums are added in another order,
    a division by a row's sum is a multiply by its reciprocal)."""
    M, N = 37, 320
    args, _ = make(M, N)
    rng = np.random.default_rng(7)
    ins = [rng.standard_normal([int(d) for d in a.shape]).astype("float32") for a in args[:-1]]
    got, want = (np.empty([int(d) for d in args[-1].shape], "float32") for _ in range(2))
    tc.build(tc.auto_schedule(args), args)(*ins, got)
    tc.build(tc.create_schedule(args[-1].op), args)(*ins, want)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_row_compositions_fused_like_the_templates():
    """What the softmax and layer norm templates do, from plain computes: layer norm's
    centred values ``x - total / N`` (cheap, read by a row reduction and the output) are
    recomputed by each pass over the row, no row buffer (knob ``inline.centered``); a
    division by a row's sum is one reciprocal per row, multiplied (``pragma
    fp_reciprocal``; knob ``rcp.out``: no vector division left), within 2 ulp of the
    division; an exp (not cheap) keeps its row buffer."""
    M, N = 16, 256
    args, _ = _layer_norm5(M, N)
    knobs = Knobs()
    ir = str(tc.lower(apply_rules(args, knobs, cpu_model("llvm"), {}), args))
    assert knobs.values["inline.centered"] is True
    assert "centered" not in ir and "sumsq" in ir, ir
    off = str(tc.lower(apply_rules(args, Knobs({"inline.centered": False}), cpu_model("llvm"),
                                   {}), args))
    assert "allocate centered: float32[1, 256]" in off, off
    args, _ = _softmax4(M, N)
    knobs = Knobs()
    s_on = apply_rules(args, knobs, cpu_model("llvm"), {})
    assert knobs.values["rcp.out"] is True and "inline.e" not in knobs.values
    ir = str(tc.lower(s_on, args))
    assert "// attr pragma_fp_reciprocal" in ir and "allocate e: float32[1, 256]" in ir, ir
    s_off = apply_rules(args, Knobs({"rcp.out": False}), cpu_model("llvm"), {})
    assert "fp_reciprocal" not in str(tc.lower(s_off, args))
    f_on, f_off = tc.build(s_on, args), tc.build(s_off, args)
    assert "fdiv <" not in f_on.get_source("llvm")
    assert "fdiv <" in f_off.get_source("llvm")
    x = np.random.default_rng(2).standard_normal((M, N)).astype("float32") * 4
    a, b = np.empty_like(x), np.empty_like(x)
    f_on(x, a)
    f_off(x, b)
    np.testing.assert_array_max_ulp(a, b, maxulp=2)
    # a division by a value that moves along the row (x / y[i, j]) stays a division
    Y = tc.placeholder((M, N), name="y")
    Q = tc.compute((M, N), lambda i, j: args[0][i, j] / Y[i, j], name="q")
    knobs = Knobs()
    apply_rules([args[0], Y, Q], knobs, cpu_model("llvm"), {})
    assert "rcp.q" not in knobs.values


@pytest.mark.parametrize("make", [_softmax4, _log_softmax3, _layer_norm5, _scaled_softmax],
                         ids=["softmax4", "log_softmax3", "layer_norm5", "scaled_softmax"])
def test_row_kernels_over_half_the_llc_stream_their_output(make):
    """A row kernel whose input and output take more than half the last-level cache (2 x 1
    MiB against a model's 2 MiB L3) stores its output past the cache (``pragma
    nontemporal``, ``vmovntps`` on x86; knob ``stream.<out>``), one under an 8 MiB L3 does
    not; streamed, the results equal the unfused form's (rtol 2e-5, atol 2e-6) in an
    aligned output (the streamed nest) and a misaligned one (the cached copy)."""
    M, N = 1024, 256
    args, _ = make(M, N)
    target = "llvm -mcpu=skylake-avx512"
    small, large = (dataclasses.replace(cpu_model(target), l3_bytes=b << 20) for b in (2, 8))
    knobs = Knobs()
    s = apply_rules(args, knobs, small, {})
    name = args[-1].op.name
    assert knobs.values[f"stream.{name}"] is True, knobs.values
    assert "// attr pragma_nontemporal" in str(tc.lower(s, args))
    assert "vmovntps" in tc.build(s, args, target=target).get_source("asm")
    knobs = Knobs()
    ir = str(tc.lower(apply_rules(args, knobs, large, {}), args))
    assert knobs.values[f"stream.{name}"] is False and "nontemporal" not in ir
    host = cpu_model()
    f = tc.build(apply_rules(args, Knobs(), dataclasses.replace(host, l3_bytes=2 << 20), {}),
                 args)
    rng = np.random.default_rng(4)
    ins = [tc.aligned(rng.standard_normal([int(d) for d in a.shape]).astype("float32"))
           for a in args[:-1]]
    want = np.empty((M, N), "float32")
    tc.build(tc.create_schedule(args[-1].op), args)(*ins, want)
    got = tc.empty((M, N), "float32")
    f(*ins, got)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    odd = np.empty(M * N + 1, "float32")[1:].reshape(M, N)
    f(*ins, odd)
    np.testing.assert_allclose(odd, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("l3_mib, streamed", [(2, True), (64, False)])
def test_softmax_template_over_half_the_llc_streams_its_output(monkeypatch, l3_mib, streamed):
    """``tecomp.nn.softmax``'s template follows the same rule as the rules' row kernels
    (2 x 1 MiB against a 2 MiB L3: ``pragma nontemporal``; against 64 MiB: none), with
    the values of numpy's softmax in an aligned and a misaligned output."""
    real = cpu_softmax.cpu_model
    monkeypatch.setattr(cpu_softmax, "cpu_model", lambda t="llvm": dataclasses.replace(
        real(t), l3_bytes=l3_mib << 20))
    M, N = 1024, 256
    X = tc.placeholder((M, N), name="x")
    T = nn.softmax(X)
    s = tc.strategy.cpu.schedule_softmax([T])
    assert ("// attr pragma_nontemporal" in str(tc.lower(s, [X, T]))) == streamed
    f = tc.build(s, [X, T])
    x = tc.aligned(np.random.default_rng(1).standard_normal((M, N)).astype("float32"))
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    for out in (tc.empty((M, N), "float32"), np.empty(M * N + 1, "float32")[1:].reshape(M, N)):
        f(x, out)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("shape", [(4, 8, 28, 28), (2, 3, 7, 7), (2, 4, 5, 33), (3, 2, 56, 9)])
def test_plane_reductions_are_vectorized_per_output(shape):
    """A reduction over several axes whose last runs along contiguous memory (a batch
    norm's statistics over n, h, w; a bias gradient) gets one vector of partial results
    per output element along that axis (rfactor), the other reduce axes outside it, the
    outputs in parallel: correct for any extents (a row shorter than a vector, a tail)."""
    N, C, H, W = shape
    X = tc.placeholder(shape, name="x")
    n, h, w = (tc.reduce_axis(e, name=v) for e, v in ((N, "n"), (H, "h"), (W, "w")))
    S = tc.compute((C,), lambda c: tc.sum(X[n, c, h, w] * X[n, c, h, w], axis=[n, h, w]),
                   name="S")
    M = tc.compute((1, C, 1), lambda a, c, b: tc.max(X[n, c, h, w], axis=[n, h, w]), name="M")
    s = tc.auto_schedule([X, S, M], target="llvm -mcpu=skylake-avx512")
    steps = [st[0] for st in s.trace.to_json()]
    assert steps.count("rfactor") == 2 and "vectorize" in steps, steps
    code = str(tc.lower(s, [X, S, M]))
    # (M's partials: a float max is exact in any order, so its row reduction keeps them
    # in a cache of the output, M.local.rf, reduced across the lanes at the end)
    assert "S.rf" in code and ("M.rf" in code or "M.local.rf" in code), code
    f = tc.build(s, [X, S, M], target="llvm -mcpu=skylake-avx512") if \
        tc.Target("llvm").has_feature("avx512f") else tc.build(tc.auto_schedule([X, S, M]),
                                                               [X, S, M])
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    out_s, out_m = np.empty(C, "float32"), np.empty((1, C, 1), "float32")
    f(x, out_s, out_m)
    np.testing.assert_allclose(out_s, (x.astype(np.float64) ** 2).sum((0, 2, 3)), rtol=1e-5)
    np.testing.assert_array_equal(out_m[0, :, 0], x.max((0, 2, 3)))


@pytest.mark.parametrize("K", [4, 9])
def test_depthwise_rows_stream_one_channel_at_a_time(K):
    """A reduction where no operand moves with the vector axis alone (a causal depthwise
    conv1d: x[b, c, t - k] moves with the channels and the time steps) runs the channel
    blocks outside the time blocks (order "uv"), so each channel's row is read as one
    stream rather than a block at a time, a row apart; a GEMM keeps "vu".  The block is
    one channel tall: its rows share no load (issue 49's "never slower than
    parallel(outer) + vectorize(inner)"), while a depthwise 3x3 (``x[c, h + kh, w + kw]``:
    the rows share the window's loads) and a GEMM (``B[r, j]`` is every row's) keep
    several rows."""
    B, C, T = 2, 40, 100
    X = tc.placeholder((B, C, T), name="x")
    W = tc.placeholder((C, K), name="w")
    k = tc.reduce_axis(K, name="k")
    Y = tc.compute((B, C, T), lambda b, c, t: tc.sum(
        tc.if_then_else(t - k >= 0, X[b, c, t - k] * W[c, k], 0.0), axis=k), name="y")
    knobs = Knobs()
    s = apply_rules([X, W, Y], knobs, cpu_model("llvm -mcpu=skylake-avx512"))
    assert knobs.values["y.order"] == "uv" and knobs.values["y.mr"] == 1, knobs.values
    assert "y.stream" not in knobs.values   # (rows of 100: not whole lines)
    f = tc.build(s, [X, W, Y], target="llvm -mcpu=skylake-avx512") if \
        tc.Target("llvm").has_feature("avx512f") else tc.build(tc.auto_schedule([X, W, Y]),
                                                               [X, W, Y])
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((B, C, T), "float32"), rng.standard_normal((C, K), "float32")
    y = np.empty_like(x)
    f(x, w, y)
    want = sum(np.pad(x, ((0, 0), (0, 0), (j, 0)))[:, :, :T] * w[None, :, j, None]
               for j in range(K))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    A, Bm = tc.placeholder((64, 64), name="A"), tc.placeholder((64, 64), name="B")
    r = tc.reduce_axis(64, name="r")
    G = tc.compute((64, 64), lambda i, j: tc.sum(A[i, r] * Bm[r, j], axis=r), name="G")
    knobs = Knobs({"template": False})
    apply_rules([A, Bm, G], knobs, cpu_model("llvm -mcpu=skylake-avx512"))
    assert knobs.values["G.order"] == "vu" and knobs.values["G.mr"] > 1, knobs.values
    Xp, Wd = tc.placeholder((1, 8, 32, 42), name="xp"), tc.placeholder((8, 3, 3), name="wd")
    kh, kw = tc.reduce_axis(3, name="kh"), tc.reduce_axis(3, name="kw")
    D = tc.compute((1, 8, 30, 40), lambda n, c, h, w: tc.sum(
        Xp[n, c, h + kh, w + kw] * Wd[c, kh, kw], axis=[kh, kw]), name="d")
    knobs = Knobs()
    apply_rules([Xp, Wd, D], knobs, cpu_model("llvm -mcpu=skylake-avx512"))
    assert knobs.values["d.mr"] > 1, knobs.values
    # over more than half the last-level cache (a model's 64 KiB) and in rows of whole
    # lines, the one-row blocks store their output past the cache; the same values
    X2 = tc.placeholder((B, C, 128), name="x2")
    Y2 = tc.compute((B, C, 128), lambda b, c, t: tc.sum(
        tc.if_then_else(t - k >= 0, X2[b, c, t - k] * W[c, k], 0.0), axis=k), name="y2")
    knobs = Knobs()
    small = dataclasses.replace(cpu_model("llvm -mcpu=skylake-avx512"), l3_bytes=64 << 10)
    s2 = apply_rules([X2, W, Y2], knobs, small)
    assert knobs.values["y2.stream"] is True, knobs.values
    assert "// attr pragma_nontemporal" in str(tc.lower(s2, [X2, W, Y2]))
    f = tc.build(apply_rules([X2, W, Y2], Knobs(), dataclasses.replace(
        cpu_model(), l3_bytes=64 << 10)), [X2, W, Y2])
    x2, y2 = tc.aligned(rng.standard_normal((B, C, 128), "float32")), tc.empty((B, C, 128))
    f(x2, w, y2)
    want = sum(np.pad(x2, ((0, 0), (0, 0), (j, 0)))[:, :, :128] * w[None, :, j, None]
               for j in range(K))
    np.testing.assert_allclose(y2, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (2, 4, 14, 14), (1, 2, 28, 28), (2, 3, 56, 9),
                                   (3, 5, 9)])
def test_short_rows_of_a_plane_are_one_contiguous_run(shape):
    """An elementwise stage whose rows leave a vector tail (7x7, 14x14, 28x28 feature
    maps) and whose reads take the last two axes whole (or not at all: a per-channel
    scale) runs them fused, one contiguous run vectorized: contiguous vector loads, no
    gathers; the same values."""
    X = tc.placeholder(shape, name="x")
    R = tc.placeholder(shape, name="res")
    g = tc.placeholder((shape[1],), name="g")
    Y = tc.compute(shape, lambda *i: tc.max(X[i] * g[i[1]] + R[i], tc.const(0.0, "float32")),
                   name="y")
    target = "llvm -mcpu=skylake-avx512"
    s = tc.auto_schedule([X, R, g, Y], target=target)
    assert ("fuse", ) == tuple(st[0] for st in s.trace.to_json())[:1], s.trace.python([X, R, g, Y])
    f = tc.build(s, [X, R, g, Y], target=target)
    assert "gather" not in f.get_source("asm")
    if not tc.Target("llvm").has_feature("avx512f"):
        f = tc.build(tc.auto_schedule([X, R, g, Y]), [X, R, g, Y])
    rng = np.random.default_rng(2)
    x, r = rng.standard_normal(shape, "float32"), rng.standard_normal(shape, "float32")
    gv = rng.standard_normal(shape[1], "float32")
    y = np.empty_like(x)
    f(x, r, gv, y)
    bshape = (1, shape[1]) + (1,) * (len(shape) - 2)
    np.testing.assert_allclose(y, np.maximum(x * gv.reshape(bshape) + r, 0), rtol=1e-6)


def test_rules_do_not_vectorize_a_fused_run_of_symbolic_extent():
    """Campaign seed 131047: an elementwise ``[2, n]`` output whose reads use neither axis,
    scheduled with the shape estimate ``n = 1``: the rules took the estimate for a
    constant, fused the last two axes as one contiguous run of 2 and vectorized it whole
    (extent ``n*2``): a ScheduleError from the auto-scheduler's own schedule.  A
    symbolic pair is not fused; the kernel is right at every size."""
    n = tc.var("n", "int64")
    A = tc.placeholder((n,), dtype="uint8", name="A")
    B = tc.compute((8,), lambda i: A[0] + tc.const(1, "uint8"), name="B")
    C = tc.compute((2, n), lambda i, j: B[3], name="C")
    info = cpu_model()
    s = apply_rules([A, C], Knobs(values={"coalesce.C": True, "vec.C": info.lanes}), info,
                    {"n": 1})
    f = tc.build(s, [A, C])
    for size in (1, 3, 40):
        a = np.arange(size, dtype="uint8") + 5
        c = np.zeros((2, size), "uint8")
        f(a, c)
        np.testing.assert_array_equal(c, np.full((2, size), 6, "uint8"))


def _flat_gemm_with_epilogue(N, C, K, H, Wd, read="own"):
    """A 1x1 convolution as ``tecomp.dynamo`` writes it for a GEMM (the plane flattened,
    ``batch_matmul`` of the weights over it, the product read back as ``[N, K, H, W]``),
    then a per-channel scale and shift and ReLU (inlined stages): the arguments.
    ``read``: ``"own"``, ``"residual"`` (a residual added before the ReLU) or
    ``"transposed"`` (the product read back transposed)."""
    X = tc.placeholder((N, C, H, Wd), name="X")
    Wt = tc.placeholder((1, K, C), name="W")
    a = tc.placeholder((K,), name="a")
    R = tc.placeholder((N, K, H, Wd), name="R")
    flat = tc.compute((N, C, H * Wd), lambda n, c, p: X[n, c, p // Wd, p % Wd], name="pixels")
    g = nn.batch_matmul(Wt, flat, name="gemm")
    if read == "transposed":
        y = tc.compute((N, K, H, Wd), lambda n, k, i, j: g[n, k, j * H + i], name="conv")
    else:
        y = tc.compute((N, K, H, Wd), lambda n, k, i, j: g[n, k, i * Wd + j], name="conv")
    bn = tc.compute(y.shape, lambda n, k, i, j: y[n, k, i, j] * a[k] + 1.0, name="bn")
    if read == "residual":
        out = tc.compute(y.shape, lambda n, k, i, j: tc.max(bn[n, k, i, j] + R[n, k, i, j],
                                                            0.0), name="out")
        return [X, Wt, a, R, out]
    out = tc.compute(y.shape, lambda n, k, i, j: tc.max(bn[n, k, i, j], 0.0), name="out")
    return [X, Wt, a, out]


@pytest.mark.parametrize("N,C,K,H,Wd,read", [(2, 24, 20, 7, 5, "own"),
                                             (1, 16, 32, 6, 6, "transposed"),
                                             (1, 8, 16, 3, 6, "residual")])
def test_an_epilogue_over_a_flattened_plane_is_applied_per_block(monkeypatch, N, C, K, H, Wd,
                                                                 read):
    """The batch norm and ReLU of a 1x1 convolution written as a GEMM over the flattened
    plane (``[N, K, H*W]`` read back as ``[N, K, H, W]`` through inlined stages) are
    applied to each register block of the GEMM on its way out: the product never goes
    to memory (``rules.FUSE_FLAT_EPILOGUES``; off, it does).  Read back at other
    indices (transposed), or with a residual added (read a block at a time it was
    slower than a second pass), the epilogue is a pass of its own.  All as numpy."""
    from tecomp.strategy import rules

    args = _flat_gemm_with_epilogue(N, C, K, H, Wd, read)
    rng = np.random.default_rng(0)
    vals = [rng.standard_normal([int(d.value) for d in t.shape]).astype("float32")
            for t in args[:-1]]
    x, w, a = vals[:3]
    prod = np.einsum("kc,ncp->nkp", w[0], x.reshape(N, C, H * Wd))
    prod = prod.reshape(N, K, Wd, H).transpose(0, 1, 3, 2) if read == "transposed" else \
        prod.reshape(N, K, H, Wd)
    want = prod * a[None, :, None, None] + 1.0 + (vals[3] if read == "residual" else 0.0)
    want = np.maximum(want, 0.0)
    for fuse in (True, False):
        monkeypatch.setattr(rules, "FUSE_FLAT_EPILOGUES", fuse)
        s = tc.auto_schedule(args)
        text = str(tc.lower(s, args))
        alloc = [ln for ln in text.splitlines() if "allocate gemm:" in ln]
        assert len(alloc) == 1, text
        assert alloc[0].endswith("(local)" if fuse and read == "own" else "(global)"), text
        out = np.empty(want.shape, "float32")
        tc.build(s, args)(*vals, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_an_epilogue_at_the_reductions_own_indices_is_applied_per_block():
    """A batched GEMM whose ReLU reads it at its own indices: the product stays in the
    register block (a local buffer), and the result is numpy's."""
    Wt = tc.placeholder((1, 12, 8), name="W")
    X = tc.placeholder((2, 8, 20), name="X")
    g = nn.batch_matmul(Wt, X, name="gemm")
    out = tc.compute(g.shape, lambda n, k, p: tc.max(g[n, k, p], 0.0), name="out")
    args = [Wt, X, out]
    s = tc.auto_schedule(args)
    text = str(tc.lower(s, args))
    assert [ln for ln in text.splitlines() if "allocate gemm:" in ln][0].endswith("(local)"), \
        text
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1, 12, 8)).astype("float32")
    x = rng.standard_normal((2, 8, 20)).astype("float32")
    o = np.empty((2, 12, 20), "float32")
    tc.build(s, args)(w, x, o)
    np.testing.assert_allclose(o, np.maximum(np.einsum("kc,ncp->nkp", w[0], x), 0.0),
                               rtol=1e-4, atol=1e-4)


def _small_cache(target="llvm", l3=16 << 10):
    """The machine model of ``target`` with a last-level cache of ``l3`` bytes and two
    threads: small passes over more than half of it."""
    import dataclasses
    return dataclasses.replace(cpu_model(target), l3_bytes=l3, threads=2)


def _line_view(shape, shift, dtype="float32"):
    """An array of ``shape`` starting ``shift`` elements past a 64-byte line."""
    size, item = int(np.prod(shape)), np.dtype(dtype).itemsize
    raw = np.zeros(size + 128, dtype)
    start = (-raw.ctypes.data // item) % (64 // item) + shift
    return raw[start:start + size].reshape(shape)


@pytest.mark.parametrize("shape, op, want", [
    ((4, 64, 64), "floor", True),           # rows of 256 bytes: whole lines
    ((8, 16, 8, 24), "clip", True),         # 8x24 fused: runs of 768 bytes
    ((3, 7, 1001), "hardsigmoid", False),   # 7x1001 fused: runs of part lines
    ((256, 5, 9), "floor", False),          # 5x9 fused: runs of 180 bytes
    ((4, 64, 64), "isnan", True),           # bool: 64 bytes a row, 16 KiB
    ((4, 64, 64), "cast16", True),          # float16: 128 bytes a row
])
def test_elementwise_outputs_stream_past_half_the_cache(shape, op, want):
    """An elementwise output of more than half the last-level cache of the machine model,
    in runs of whole cache lines, is stored past the cache (``pragma nontemporal``, knob ``stream.<stage>``); the same
    values, into an output on a line (streamed) and off it (the nest as it is)."""
    X = tc.placeholder(shape, name="X")
    Y = {"floor": nn.floor, "clip": lambda x: nn.clip(x, -0.5, 0.5),
         "hardsigmoid": nn.hardsigmoid, "isnan": nn.isnan,
         "cast16": lambda x: nn.cast(x, "float16")}[op](X)
    knobs = Knobs()
    s = apply_rules([X, Y], knobs, _small_cache())
    assert knobs.values[f"stream.{Y.op.name}"] is want
    assert ("pragma_nontemporal" in str(tc.lower(s, [X, Y]))) is want
    f = tc.build(s, [X, Y])
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype("float32")
    x.flat[::7] = np.nan
    ref = {"floor": np.floor, "clip": lambda v: np.clip(v, -0.5, 0.5),
           "hardsigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1), "isnan": np.isnan,
           "cast16": lambda v: v.astype("float16")}[op](x)
    for shift in (0, 1):
        out = _line_view(shape, shift, ref.dtype)
        f(x, out)
        np.testing.assert_allclose(out.astype("float32"), ref.astype("float32"), rtol=1e-6,
                                   atol=1e-6)


def test_elementwise_outputs_stay_in_the_cache_when_small_symbolic_or_switched_off(
        monkeypatch):
    """An output within half the last-level cache keeps its stores cached (it is read
    again soon), even where its input makes the pass larger (a float16 cast), so does an
    output another output reads, a symbolic shape and ``rules.STREAM_OUTPUTS = False``;
    the knob can still stream one."""
    from tecomp.strategy import rules
    X = tc.placeholder((4, 64, 64), name="X")
    Y = nn.floor(X)
    for info, want in ((_small_cache(l3=1 << 20), False), (_small_cache(), True)):
        knobs = Knobs()
        apply_rules([X, Y], knobs, info)
        assert knobs.values[f"stream.{Y.op.name}"] is want
    H = nn.cast(X, "float16")    # 32 KiB out of a 64 KiB input
    for l3, want in ((64 << 10, False), ((64 << 10) - 2, True)):
        knobs = Knobs()
        apply_rules([X, H], knobs, _small_cache(l3=l3))
        assert knobs.values[f"stream.{H.op.name}"] is want
    Z = tc.compute(Y.shape, lambda *i: Y[i] * 2.0, name="z")   # Y read again: cached
    knobs = Knobs()
    apply_rules([X, Y, Z], knobs, _small_cache())
    assert knobs.values[f"stream.{Y.op.name}"] is False
    assert knobs.values["stream.z"] is True
    n = tc.var("n")
    Xn = tc.placeholder((n, 64, 64), name="X")
    Yn = nn.floor(Xn)
    knobs = Knobs()
    apply_rules([Xn, Yn], knobs, _small_cache(), shapes=None)
    assert knobs.values.get(f"stream.{Yn.op.name}", False) is False
    monkeypatch.setattr(rules, "STREAM_OUTPUTS", False)
    knobs = Knobs()
    apply_rules([X, Y], knobs, _small_cache())
    assert knobs.values[f"stream.{Y.op.name}"] is False
    knobs = Knobs({f"stream.{Y.op.name}": True})
    s = apply_rules([X, Y], knobs, _small_cache(l3=1 << 30))
    assert "pragma_nontemporal" in str(tc.lower(s, [X, Y]))


def test_small_output_of_a_wide_pass_is_streamed(monkeypatch):
    """An output within half the last-level cache is stored past it where its pass moves
    more than twice that cache with what it reads (``isnan`` of float32: a byte out for
    every 4 in; ``rules.STREAM_WIDE_PASSES``), and stays cached at twice exactly or with
    the switch off."""
    from tecomp.strategy import rules
    X = tc.placeholder((4, 64, 64), name="X")      # 64 KiB in, 16 KiB of bools out
    Y = nn.isnan(X)
    for l3, want in ((36 << 10, True), (40 << 10, False), (1 << 20, False)):
        knobs = Knobs()
        apply_rules([X, Y], knobs, _small_cache(l3=l3))
        assert knobs.values[f"stream.{Y.op.name}"] is want, l3
    monkeypatch.setattr(rules, "STREAM_WIDE_PASSES", False)
    knobs = Knobs()
    apply_rules([X, Y], knobs, _small_cache(l3=36 << 10))
    assert knobs.values[f"stream.{Y.op.name}"] is False
    monkeypatch.setattr(rules, "STREAM_WIDE_PASSES", True)
    s = apply_rules([X, Y], Knobs(), _small_cache(l3=36 << 10))
    f = tc.build(s, [X, Y])
    x = np.random.default_rng(0).standard_normal((4, 64, 64)).astype("float32")
    x[0, 1, 2] = x[3, 63, 63] = np.nan
    out = tc.empty((4, 64, 64), "bool")
    f(tc.aligned(x), out)
    np.testing.assert_array_equal(out, np.isnan(x))


def test_streamed_elementwise_output_is_vmovntps_on_x86():
    """On x86 the streamed stores are ``vmovntps`` (an AVX-512 target, compiled, not run),
    fenced before the call returns."""
    target = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
    X = tc.placeholder((4, 64, 64), name="X")
    Y = nn.floor(X)
    s = apply_rules([X, Y], Knobs(), _small_cache(target))
    asm = tc.build(s, [X, Y], target=target).get_source("asm")
    assert "vmovntps" in asm and "fence" in asm


def _depthwise_channels_last(T, C, two_d):
    """A channels-last depthwise convolution: 1-d (5 taps over t, "same" padding) or 2-d
    (3x3, valid) with C channels."""
    if two_d:
        X, W = tc.placeholder((2, T, T, C), name="x"), tc.placeholder((3, 3, C), name="w")
        kh, kw = tc.reduce_axis(3, name="kh"), tc.reduce_axis(3, name="kw")
        Y = tc.compute((2, T - 2, T - 2, C), lambda n, h, w, c: tc.sum(
            X[n, h + kh, w + kw, c] * W[kh, kw, c], axis=[kh, kw]), name="y")
        return [X, W, Y]
    X, W = tc.placeholder((2, T, C), name="x"), tc.placeholder((5, C), name="w")
    k = tc.reduce_axis(5, name="k")
    Y = tc.compute((2, T, C), lambda b, t, c: tc.sum(tc.if_then_else(
        tc.all(t + k >= 2, t + k < T + 2), X[b, t + k - 2, c] * W[k, c], 0.0), axis=k),
        name="y")
    return [X, W, Y]


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=sapphirerapids",
                                    "llvm -mcpu=haswell"])
@pytest.mark.parametrize("T,C,two_d,order", [
    (512, 256, False, "uv"),   # x over t: 512 KiB, w's panels 5 KiB: the rows outside
    (8, 256, False, "vu"),     # x over t: 8 KiB (in L1 anyway): a panel's rows outside
    (58, 96, True, "vu"),      # x's row 56 x 96: 21 KiB
])
def test_small_panels_put_the_rows_outside_where_the_rows_pass_l1(target, T, C, two_d,
                                                                   order):
    """The register block's order: where the panels of the operand that moves with the
    vector axis alone (w) fit in half of L1 for the whole axis, and what moves with both
    (x) takes more than twice L1 along the rows, the blocks of rows go outside the panels
    (each panel would walk all the rows a block at a time, a row apart); else a panel
    stays while the rows go by.  Decided from the target's L1, not the host's; the
    schedule is correct either way."""
    args = _depthwise_channels_last(T, C, two_d)
    knobs = Knobs({})
    s = apply_rules(args, knobs, cpu_model(target), {})
    assert knobs.values["y.order"] == order, str(knobs.values)
    info = cpu_model(target)
    big_l1 = dataclasses.replace(info, l1_bytes=1 << 20)   # x's rows fit: a panel outside
    k2 = Knobs({})
    apply_rules(args, k2, big_l1, {})
    assert k2.values["y.order"] == "vu", str(k2.values)
    X, W, Y = args
    rng = np.random.default_rng(1)
    x = rng.standard_normal([int(d.value) for d in X.shape]).astype("float32")
    w = rng.standard_normal([int(d.value) for d in W.shape]).astype("float32")
    y = np.full([int(d.value) for d in Y.shape], np.nan, "float32")
    tc.build(s, args, target="llvm")(x, w, y)
    if two_d:
        want = sum(x[:, i:i + T - 2, j:j + T - 2, :].astype(np.float64) * w[i, j]
                   for i in range(3) for j in range(3))
    else:
        xp = np.pad(x.astype(np.float64), ((0, 0), (2, 2), (0, 0)))
        want = sum(xp[:, j:j + T, :] * w[j] for j in range(5))
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("C,K,H,target,plane", [
    (256, 256, 14, "llvm -mcpu=skylake-avx512", False),   # 2 rows a block, 200 KiB plane
    (256, 256, 14, "llvm -mcpu=sapphirerapids", False),
    (256, 256, 14, "llvm -mcpu=znver4", True),            # half-width FMAs: 2 cycles
    (16, 64, 14, "llvm -mcpu=skylake-avx512", True),      # the plane over C in L1
    (256, 512, 7, "llvm -mcpu=skylake-avx512", True),     # 6 rows a block: 3 cycles
])
def test_a_plane_from_l2_needs_rows_enough_for_the_fma_ports(C, K, H, target, plane):
    """The image plane as the vector axis where each plane vector, read from L2 at every
    reduction step (the plane over the whole reduction is larger than L1), feeds more
    than one cycle of the target's FMA ports: 2 rows of 512-bit FMAs on two full-width
    ports are one cycle (the rows' blocks instead), on Zen 4's half-width datapath two;
    6 rows (a 7x7 plane) three.  From the target's model, not the host's; correct
    either way."""
    args = _conv1x1_nchw(C, K, H)
    cfg = tc.autoschedule.default_config(args, target=target)
    assert cfg["O.plane"] is plane, str(cfg)
    info = cpu_model(target)
    slow = dataclasses.replace(info, fma_lanes=info.lanes // 2)   # half-width FMAs
    k2 = Knobs({})
    apply_rules(args, k2, slow, {})
    assert k2.values["O.plane"] is True, str(k2.values)
    _check_conv1x1(tc.auto_schedule(args, target=target), args, target)

"""tecomp.nn.scaled_dot_product_attention: the forward against PyTorch's
F.scaled_dot_product_attention (float32 and float64; masks, scales, odd and unequal
lengths), its gradient through tc.gradient against torch.autograd in float64, and the
fused CPU schedule (schedule_attention, what tc.auto_schedule gives the op): per-task
scratch of a block of rows, never a (Lq x Lk) buffer, blocked for the target's vectors."""
import math

import numpy as np
import pytest

import tecomp as tc
from tecomp import nn
from tecomp.ir import Allocate
from tecomp.ir.functor import collect
from tecomp.strategy.cpu import attention_params, cpu_model, schedule_attention

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _placeholders(b, h, lq, lk, d, dv, dtype, mask=None, mask_dtype=None):
    q = tc.placeholder((b, h, lq, d), dtype, name="q")
    k = tc.placeholder((b, h, lk, d), dtype, name="k")
    v = tc.placeholder((b, h, lk, dv), dtype, name="v")
    m = None if mask is None else tc.placeholder(mask, mask_dtype or dtype, name="mask")
    return q, k, v, m


def _values(rng, b, h, lq, lk, d, dv, dtype, mask=None, mask_dtype=None):
    vals = [rng.standard_normal(s).astype(dtype)
            for s in ((b, h, lq, d), (b, h, lk, d), (b, h, lk, dv))]
    if mask is not None:
        if mask_dtype == "bool":
            mv = rng.random(mask) > 0.3
        else:
            mv = rng.standard_normal(mask).astype(dtype)
            mv[rng.random(mask) < 0.2] = -np.inf   # excluded keys, as a padding mask has
        vals.append(mv)
    return vals


def _torch_sdpa(vals, scale=None, masked=False):
    ts = [torch.tensor(x) for x in vals]
    return F.scaled_dot_product_attention(ts[0], ts[1], ts[2],
                                          attn_mask=ts[3] if masked else None, scale=scale)


def _run(schedule_fn, b, h, lq, lk, d, dv, dtype="float32", mask=None, mask_dtype=None,
         scale=None, seed=0):
    q, k, v, m = _placeholders(b, h, lq, lk, d, dv, dtype, mask, mask_dtype)
    out = nn.scaled_dot_product_attention(q, k, v, m, scale=scale)
    args = [q, k, v] + ([m] if m is not None else []) + [out]
    f = tc.build(schedule_fn(args, out), args)
    vals = _values(np.random.default_rng(seed), b, h, lq, lk, d, dv, dtype, mask, mask_dtype)
    res = np.empty((b, h, lq, dv), dtype)
    f(*vals, res)
    return res, _torch_sdpa(vals, scale, m is not None).numpy()


def _nn_schedule(args, out):
    return schedule_attention(out)


FORWARD = [  # b, h, Lq, Lk, d, dv, mask shape, mask dtype, scale
    (1, 2, 13, 37, 24, 24, None, None, None),              # odd lengths, Lq != Lk
    (2, 3, 37, 13, 24, 20, (2, 1, 1, 13), None, None),    # a padding mask, dv != d
    (2, 2, 40, 29, 16, 16, (40, 29), None, 0.3),          # a (Lq, Lk) mask, a custom scale
    (1, 3, 17, 33, 8, 8, (1, 3, 17, 33), "bool", None),   # a boolean mask: True attends
    (2, 1, 5, 70, 16, 8, (1, 70), None, -0.25),           # a key mask, a negative scale
]


@pytest.mark.parametrize("case", FORWARD, ids=lambda c: "x".join(map(str, c[:6])))
def test_forward_matches_torch_float32(case):
    *shape, mask, mdt, scale = case
    got, want = _run(_nn_schedule, *shape, mask=mask, mask_dtype=mdt, scale=scale)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_forward_matches_torch_float64_with_a_row_mask():
    got, want = _run(_nn_schedule, 2, 3, 37, 130, 64, 48, "float64", mask=(37, 130),
                     scale=0.2)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_fully_masked_rows_are_zero_as_torch():
    """A row with every key masked out is 0 (PyTorch's; exp(-inf - -inf) would be NaN)."""
    q, k, v, m = _placeholders(1, 1, 2, 3, 4, 4, "float32", (2, 3), "bool")
    out = nn.scaled_dot_product_attention(q, k, v, m)
    f = tc.build(schedule_attention(out), [q, k, v, m, out])
    vals = _values(np.random.default_rng(3), 1, 1, 2, 3, 4, 4, "float32")
    mask = np.array([[True, False, True], [False, False, False]])
    res = np.empty((1, 1, 2, 4), "float32")
    f(*vals, mask, res)
    want = _torch_sdpa(vals + [mask], masked=True).numpy()
    assert not np.isnan(res).any()
    np.testing.assert_allclose(res, want, rtol=2e-6, atol=1e-7)
    assert (res[0, 0, 1] == 0).all()


def test_symbolic_lengths():
    """Symbolic lengths: a symbolic query alone keeps the row-block scratch; symbolic
    keys too are computed correctly (the scratch of scores is then not bounded to the
    block: see schedule_attention)."""
    n, m = tc.var("n"), tc.var("m")
    for keys in (37, m):
        q = tc.placeholder((2, 3, n, 24), name="q")
        k = tc.placeholder((2, 3, keys, 24), name="k")
        v = tc.placeholder((2, 3, keys, 16), name="v")
        out = nn.scaled_dot_product_attention(q, k, v)
        s = schedule_attention(out)
        if keys == 37:
            allocs = _allocations(s, [q, k, v, out])
            rows = attention_params(out, cpu_model())["rows"] * cpu_model().lanes
            assert allocs["sdpa.scores"] == (1, 1, rows, 37)
        f = tc.build(s, [q, k, v, out])
        rng = np.random.default_rng(1)
        for lq, lk in ((13, 37), (40, 37)) if keys == 37 else ((13, 37), (40, 5), (1, 1)):
            vals = _values(rng, 2, 3, lq, lk, 24, 16, "float32")
            res = np.empty((2, 3, lq, 16), "float32")
            f(*vals, res)
            np.testing.assert_allclose(res, _torch_sdpa(vals).numpy(), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_gradient_matches_torch_autograd_float64(masked):
    """d(out)/d(q, k, v) from tc.gradient (the forward's stages differentiated, the row
    maximum a constant) against torch.autograd, contracted with a random head."""
    b, h, lq, lk, d, dv = 2, 2, 13, 37, 24, 20
    mshape = (b, 1, lq, lk) if masked else None
    q, k, v, m = _placeholders(b, h, lq, lk, d, dv, "float64", mshape)
    out = nn.scaled_dot_product_attention(q, k, v, m, scale=0.3 if masked else None)
    head = tc.placeholder(out.shape, "float64", name="head")
    grads = tc.gradient(out, [q, k, v], head=head)
    params = [q, k, v] + ([m] if masked else []) + [head]
    s = tc.create_schedule([out.op] + [g.op for g in grads])
    f = tc.build(s, params + [out] + grads)
    rng = np.random.default_rng(5)
    vals = _values(rng, b, h, lq, lk, d, dv, "float64", mshape)
    hv = rng.standard_normal((b, h, lq, dv))
    res = [np.empty((b, h, lq, dv))] + [np.empty(x.shape) for x in vals[:3]]
    f(*vals, hv, *res)
    ts = [torch.tensor(x, requires_grad=i < 3) for i, x in enumerate(vals)]
    ref = F.scaled_dot_product_attention(ts[0], ts[1], ts[2],
                                         attn_mask=ts[3] if masked else None,
                                         scale=0.3 if masked else None)
    ref.backward(torch.tensor(hv))
    want = [ref.detach().numpy()] + [t.grad.numpy() for t in ts[:3]]
    for label, g, w in zip(["output", "dq", "dk", "dv"], res, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11, err_msg=label)


def _allocations(s, args):
    func = tc.lower(s, args)
    return {a.buffer.name: tuple(int(e.value) for e in a.buffer.shape)
            for a in collect(func.body, lambda n: isinstance(n, Allocate))}


@pytest.mark.parametrize("how", ["schedule_attention", "auto_schedule"])
def test_no_lq_by_lk_buffer(how):
    """The fused schedule allocates a block of rows of scores and exps per task (inside
    the parallel loop), nothing of Lq x Lk elements: the op's default schedule
    (tc.auto_schedule uses it) and schedule_attention itself."""
    lq = lk = 512
    q, k, v, m = _placeholders(1, 12, lq, lk, 64, 64, "float32", (1, 1, 1, lk))
    out = nn.scaled_dot_product_attention(q, k, v, m)
    args = [q, k, v, m, out]
    s = schedule_attention(out) if how == "schedule_attention" else tc.auto_schedule(args)
    allocs = _allocations(s, args)
    rows = attention_params(out, cpu_model())["rows"] * cpu_model().lanes
    assert allocs["sdpa.scores"] == (1, 1, rows, lk)
    assert allocs["sdpa.exp"] == (1, 1, rows, lk)
    assert max(math.prod(sh) for sh in allocs.values()) < lq * lk
    # and it computes the right thing
    f = tc.build(s, args)
    vals = _values(np.random.default_rng(2), 1, 12, lq, lk, 64, 64, "float32", (1, 1, 1, lk))
    res = np.empty((1, 12, lq, 64), "float32")
    f(*vals, res)
    np.testing.assert_allclose(res, _torch_sdpa(vals, masked=True).numpy(), rtol=2e-5,
                               atol=2e-6)


@pytest.mark.parametrize("target,lanes", [("llvm -mcpu=haswell", 8),
                                          ("llvm -mcpu=skylake-avx512", 16)])
def test_blocking_follows_the_target(target, lanes):
    """The vector width comes from the target: rows of the scratch and the vectors of
    the lowered loops are the target's lanes (lowered only: this CPU may lack AVX-512)."""
    q, k, v, _ = _placeholders(1, 2, 100, 64, 32, 32, "float32")
    out = nn.scaled_dot_product_attention(q, k, v)
    info = cpu_model(target)
    assert info.lanes == lanes
    p = attention_params(out, info)
    allocs = _allocations(schedule_attention(out, target), [q, k, v, out])
    assert allocs["sdpa.scores"] == (1, 1, p["rows"] * lanes, 64)
    # the register block of the scores fits the registers: rows x keys accumulators,
    # the row vectors and a broadcast
    assert p["rows"] * p["keys"] + p["rows"] + 1 <= info.vregs


def test_float64_rows_are_float64_vectors():
    q, k, v, _ = _placeholders(1, 1, 40, 16, 8, 8, "float64")
    out = nn.scaled_dot_product_attention(q, k, v)
    info = cpu_model("llvm -mcpu=haswell")
    assert attention_params(out, info)["lanes"] == 4   # 256-bit vectors of float64


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_attention_blocks_by_its_float32_stages(dtype):
    """A float16/bfloat16 attention computes in float32 (only its output is rounded):
    its row vectors are float32 vectors (a 16-bit vector's rows, two registers each,
    made the register block of the scores twice the registers)."""
    q, k, v, _ = _placeholders(1, 1, 40, 16, 8, 8, dtype)
    out = nn.scaled_dot_product_attention(q, k, v)
    info = cpu_model("llvm -mcpu=haswell")
    p = attention_params(out, info)
    assert p["lanes"] == 8 and p["rows"] * p["keys"] + p["rows"] + 1 <= info.vregs


def test_attention_inside_a_larger_dag_keeps_its_fused_schedule():
    """tc.auto_schedule of a DAG with an attention between other stages (the projections
    and the head split of a transformer layer): the attention template schedules its part
    (strategy.cpu.templates.PART_TEMPLATES), so no Lq x Lk buffer there either."""
    hidden, heads, seq = 64, 4, 96
    dh = hidden // heads
    X = tc.placeholder((seq, hidden), name="X")
    W = [tc.placeholder((hidden, hidden), name=f"w{c}") for c in "qkv"]

    def split(t, name):
        return tc.compute((1, heads, seq, dh), lambda b, h, s, d: t[s, h * dh + d], name=name)

    q, k, v = (split(nn.dense(X, w, name=f"{c}.proj"), c) for w, c in zip(W, "qkv"))
    ctx = nn.scaled_dot_product_attention(q, k, v)
    merged = tc.compute((seq, hidden), lambda s, c: ctx[0, c // dh, s, c % dh], name="merged")
    args = [X, *W, merged]
    s = tc.auto_schedule(args)
    allocs = _allocations(s, args)
    assert allocs["sdpa.scores"][-1] == seq and math.prod(allocs["sdpa.scores"]) < seq * seq
    rng = np.random.default_rng(3)
    x = rng.standard_normal((seq, hidden)).astype("float32")
    ws = [(rng.standard_normal((hidden, hidden)) / 8).astype("float32") for _ in range(3)]
    out = np.empty((seq, hidden), "float32")
    tc.build(s, args)(x, *ws, out)
    import torch

    qq, kk, vv = (torch.from_numpy(x @ w.T).view(seq, heads, dh).transpose(0, 1) for w in ws)
    ref = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv).transpose(0, 1)
    np.testing.assert_allclose(out, ref.reshape(seq, hidden).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("how", ["schedule_attention", "auto_schedule"])
def test_one_tensor_as_query_key_and_value(how):
    """Attention of a tensor with itself (``sdpa(x, x, x)``, as a graph captured by
    torch.compile hands over): the scores read one tensor, where the template looked for
    two (ValueError: not enough values to unpack; the dynamo fuzzer's seed 293).  The
    template, whose copy of the query's rows would also serve the keys, leaves it to the
    rules."""
    x = tc.placeholder((2, 3, 5, 8), name="x")
    out = nn.scaled_dot_product_attention(x, x, x)
    s = schedule_attention(out) if how == "schedule_attention" else tc.auto_schedule([x, out])
    f = tc.build(s, [x, out])
    xv = np.random.default_rng(0).standard_normal((2, 3, 5, 8)).astype("float32")
    got = np.empty((2, 3, 5, 8), "float32")
    f(xv, got)
    t = torch.from_numpy(xv)
    np.testing.assert_allclose(got, F.scaled_dot_product_attention(t, t, t).numpy(),
                               rtol=2e-5, atol=2e-6)


def test_schedule_attention_applies_a_config():
    """schedule_attention(out, config=...): the blocking given (here the auto-scheduler's
    other choices) is what is built, and computes the same; the heuristic's own values
    give the default schedule."""
    q, k, v, m = _placeholders(1, 2, 40, 29, 16, 16, "float32", (40, 29))
    out = nn.scaled_dot_product_attention(q, k, v, m)
    args = [q, k, v, m, out]
    p = attention_params(out, cpu_model())
    default = str(tc.lower(schedule_attention(out), args))
    same = {n: p[n] for n in ("rows", "keys", "values", "chunk")}
    assert str(tc.lower(schedule_attention(out, config=same), args)) == default
    cfg = {"rows": 1, "keys": 4, "values": 8, "chunk": 32}
    res, want = _run(lambda a, o: schedule_attention(o, config=cfg), 1, 2, 40, 29, 16, 16,
                     mask=(40, 29))
    np.testing.assert_allclose(res, want, rtol=2e-5, atol=2e-5)
    assert str(tc.lower(schedule_attention(out, config=cfg), args)) != default

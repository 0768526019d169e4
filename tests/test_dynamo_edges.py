"""torch.compile(backend="tecomp") at the edges (the session 7 attack campaign): values
where tecomp's own semantics differ from PyTorch's (sign of NaN), ids outside an
embedding's table, a disk-cache entry that holds another kernel, float sums over more
elements than float32 counts exactly -- each compared with eager PyTorch."""
import pytest

torch = pytest.importorskip("torch")

from tecomp.dynamo import STATS  # noqa: E402
from test_dynamo import _fresh_dynamo, disk_cache  # noqa: E402,F401  (fixtures)

NAN, INF = float("nan"), float("inf")


def _compiled(f, *args):
    """``f`` compiled and called on ``args``, with every region built by tecomp (a
    region that fell back to eager fails the test)."""
    failed, built = STATS["failed"], STATS["built"] + STATS["memory"]
    got = torch.compile(f, backend="tecomp", options={"cache": False})(*args)
    assert STATS["failed"] == failed, "a region could not be compiled (see the log)"
    assert STATS["built"] + STATS["memory"] > built, "nothing ran through tecomp"
    return got


def test_sign_matches_torch():
    """PyTorch's sign is 0 at NaN and +0 at -0.0 (tc.sign keeps NaN, as numpy does: the
    backend returned NaN); a bool tensor is its own sign (a DTypeError before: the
    region ran eagerly, logged as a failure)."""
    x = torch.tensor([0.5, -0.5, 2.0, 0.0, -0.0, NAN, INF, -INF])
    xs = [x, x.double(), x[:6].long(), x.bool()]
    got = _compiled(lambda *v: [torch.sign(t) for t in v], *xs)
    for g, t in zip(got, xs):
        want = torch.sign(t)
        assert g.dtype == want.dtype and torch.equal(g, want), (t.dtype, g, want)
        if t.dtype.is_floating_point:  # +0 at -0.0 and at NaN, as PyTorch
            assert torch.equal(torch.signbit(g), torch.signbit(want))


def test_negation_flips_the_sign_of_zero():
    """torch.neg(+0.0) is -0.0 (IEEE's negation); tecomp's -x was 0 - x, +0.0 there.
    0.0 - x stays a subtraction (+0.0 at +0.0), as in eager."""
    x = torch.tensor([0.0, -0.0, 1.5, -INF, NAN])
    for t in (x, x.double()):
        got = _compiled(lambda v: (-v, torch.neg(v) * 1.0, 0.0 - v, v.neg().exp()), t)
        want = (-t, torch.neg(t) * 1.0, 0.0 - t, t.neg().exp())
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=True)
            assert torch.equal(torch.signbit(g[:4]), torch.signbit(w[:4])), (g, w)


def test_cache_entry_holding_another_kernel_is_rebuilt(tmp_path, monkeypatch, caplog, disk_cache):
    """A library in the disk cache under one kernel's name that holds another kernel of
    the same signature (copied over it, with a matching sha256 sidecar): loaded and run
    before (tanh's kernel computed sigmoid's values, silently); now refused, rebuilt and
    replaced."""
    import logging
    import shutil

    from tecomp.dynamo import cache as dcache
    from tecomp.runtime.libfiles import digest_bytes

    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    x = torch.randn(4, 8)
    paths = []
    for f in (torch.tanh, torch.sigmoid):
        dcache.clear_memory()
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(lambda t, f=f: f(t) * 2, backend="tecomp")(x)
        dcache.flush()
        paths.append(next(p for p in (tmp_path / "dynamo").glob("*.so") if p not in paths))
    tanh_lib, sigmoid_lib = paths
    shutil.copyfile(sigmoid_lib, tanh_lib)
    tanh_lib.with_name(tanh_lib.name + ".sha256").write_text(
        f"{digest_bytes(tanh_lib.read_bytes())}  {tanh_lib.name}\n")
    dcache.clear_memory()
    torch._dynamo.reset()
    before = dict(STATS)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"), torch.no_grad():
        got = torch.compile(lambda t: torch.tanh(t) * 2, backend="tecomp")(x)
    torch.testing.assert_close(got, torch.tanh(x) * 2)
    assert STATS["disk"] == before["disk"] and STATS["built"] == before["built"] + 1
    assert any("holds kernel 'tecomp_dynamo_" in r.getMessage() for r in caplog.records)
    dcache.flush()  # the rebuilt kernel replaced the entry
    assert dcache.load_module(tanh_lib).name != dcache.load_module(sigmoid_lib).name


def test_embedding_ids_checked_only_where_read():
    """Ids in range run through tecomp's kernel: those of a slice are checked as the
    slice (an id past the table outside it is no error, as in eager); ids computed by
    the same kernel leave the embedding to run eagerly (eager PyTorch checks them).
    Out-of-range ids raise BoundsError (tests/must_fail/test_dynamo_edge_errors.py);
    before, their rows were zeros."""
    w = torch.randn(5, 3)

    def f(ids, w):
        return (torch.nn.functional.embedding(ids[:, :2], w) * 2,
                torch.nn.functional.embedding(ids[:, :2] + 1, w))

    ids = torch.tensor([[0, 3, 99], [2, 1, -5]])
    with torch.no_grad():
        got = _compiled(f, ids, w)
    for g, want in zip(got, f(ids, w)):
        torch.testing.assert_close(g, want, rtol=0, atol=0)


def test_long_float32_sum_accumulates_in_float64():
    """A sum of 2**25 ones was 2**24 (a float32 running sum stops growing there), one of
    2**20 squares off by 0.1 %: sums of at least LONG_SUM float32 terms per output
    accumulate in float64 (eager PyTorch sums in a cascade).  Inputs broadcast with
    stride 0: nothing of their size is allocated."""
    ones = torch.ones(1).expand(2 ** 25)
    sq = torch.rand(2 ** 20, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = _compiled(lambda a, b: (a.sum(), (b * b).sum(), (b * b).mean()), ones, sq)
    assert float(got[0]) == 2.0 ** 25
    want = (sq.double() * sq.double()).sum()
    assert abs(float(got[1]) - float(want)) <= 1e-6 * float(want)
    assert abs(float(got[2]) * 2 ** 20 - float(want)) <= 1e-6 * float(want)


def test_tensor_subclass_inputs_are_read_as_tensors():
    """A torch.Tensor subclass defined outside torch (no __torch_dispatch__ of its own) as
    an input of a compiled model: its memory is read as a plain tensor's (it went through
    DLPack, whose export dispatches under the AOT runtime's mode and raised an
    ArgumentError); outside torch.compile the checks of a tensor apply to it too."""
    import tecomp as tc

    class Sub(torch.Tensor):
        pass

    m = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8).as_subclass(Sub)
    with torch.no_grad():
        got = _compiled(m, x)
        torch.testing.assert_close(got, m(x).as_subclass(torch.Tensor))
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 2.0, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B])
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\): the torch tensor "
                                               r"requires grad"):
        f(torch.ones(4).as_subclass(Sub).requires_grad_(), torch.zeros(4))
    out = torch.zeros(4).as_subclass(Sub)
    f(torch.ones(4).as_subclass(Sub), out)
    assert type(out) is Sub and (out == 2).all()

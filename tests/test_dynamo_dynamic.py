"""torch.compile(backend="tecomp") of graphs with symbolic sizes (mark_dynamic): kernels
built once with tecomp's symbolic extents and run for every size (STATS counts one
build), against eager PyTorch at odd sizes and sizes past the first call's; the
fallback to a kernel per size for what symbolic extents cannot express; a size bound
inconsistently refused by the kernel."""
import logging
import os

import pytest

torch = pytest.importorskip("torch")

import tecomp.dynamo as td  # noqa: E402
from tecomp.dynamo import cache as dcache  # noqa: E402
from tecomp.errors import ArgumentError  # noqa: E402
from test_dynamo import _fresh_dynamo, disk_cache  # noqa: E402,F401  (fixtures)

OPTS = {"cache": False}
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def _run(c, f, sizes, dim=0, make=lambda n: torch.randn(n, 8)):
    """Call the compiled ``c`` at each size (the dimension marked dynamic) against ``f``;
    the STATS built after the first call."""
    builds = []
    for n in sizes:
        x = make(n)
        torch._dynamo.mark_dynamic(x, dim)
        with torch.no_grad():
            torch.testing.assert_close(c(x), f(x), rtol=1e-4, atol=1e-5)
        builds.append(td.STATS["built"])
    return builds


def test_mlp_with_a_dynamic_batch_builds_each_kernel_once():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    dcache.clear_memory()
    before, mem = td.STATS["built"], td.STATS["memory"]
    c = torch.compile(mlp, backend="tecomp", options=OPTS)
    builds = _run(c, mlp, (5, 2, 7, 33, 130))
    assert builds[0] - before >= 1
    assert builds[-1] == builds[0], "a new size built a kernel again"
    assert td.STATS["memory"] - mem >= 4
    # size 1 (TorchDynamo specialises 0 and 1): a static graph, still PyTorch's results
    x = torch.randn(1, 8)
    with torch.no_grad():
        torch.testing.assert_close(c(x), mlp(x), rtol=1e-4, atol=1e-5)


class _Layer(torch.nn.Module):
    """A BERT-like encoder layer, cut short: fused QKV projection, heads, softmax
    attention, a residual, a layer norm, a GELU feed-forward projection."""

    def __init__(self, d=16, h=2):
        super().__init__()
        self.h = h
        self.qkv, self.f1 = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, 2 * d)
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) * (d // self.h) ** -0.5, dim=-1) @ v
        x = self.ln(x + a.transpose(1, 2).reshape(b, n, d))
        return torch.nn.functional.gelu(self.f1(x))


@pytest.mark.skipif(not LONG, reason="slow (20 s of builds): set TECOMP_LONG_TESTS=1")
def test_bert_like_layer_with_a_symbolic_sequence_length(caplog):
    """Every kernel of the layer (projections whose extents are only ``2*n0``, taken as
    a scalar parameter; the attention's batched GEMMs; the norms) built once."""
    torch.manual_seed(0)
    layer = _Layer().eval()
    dcache.clear_memory()
    c = torch.compile(layer, backend="tecomp", options=OPTS)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        builds = _run(c, layer, (5, 8, 13), dim=1, make=lambda n: torch.randn(2, n, 16))
    assert builds[-1] == builds[0]
    assert not [r for r in caplog.records if "built for each size" in r.getMessage()]


def test_what_symbolic_extents_cannot_express_is_built_per_size(caplog):
    """A float computed from a size (a SymFloat) has no tecomp counterpart: that kernel
    is built for each size (said in the log), the others once; results are PyTorch's."""
    def f(x):
        return torch.tanh(x) * 2 + x / x.shape[0] ** 0.5
    dcache.clear_memory()
    before = td.STATS["built"]
    c = torch.compile(f, backend="tecomp", options=OPTS)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        builds = _run(c, f, (3, 6, 9))
    first = builds[0] - before
    assert first >= 2 and [b - before for b in builds] == [first, first + 1, first + 2]
    assert any("built for each size" in r.getMessage() for r in caplog.records)


def test_option_dynamic_false_builds_per_size():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    dcache.clear_memory()
    before = td.STATS["built"]
    c = torch.compile(lin, backend="tecomp", options={"cache": False, "dynamic": False})
    builds = _run(c, lin, (3, 6))
    assert builds[1] - before == 2 * (builds[0] - before)


def test_symbolic_kernel_refuses_inconsistent_sizes():
    """Two inputs of one symbolic size: TorchDynamo guards the graph, and the kernel
    itself refuses tensors whose sizes disagree (an ArgumentError, no access past an
    array); consistent new sizes reuse it."""
    def f(x, y):
        return torch.relu(x) * y
    dcache.clear_memory()
    c = torch.compile(f, backend="tecomp", options=OPTS)
    before = td.STATS["built"]
    for n in (4, 11):
        x, y = torch.randn(n, 8), torch.randn(n, 8)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        torch.testing.assert_close(c(x, y), f(x, y))
    assert td.STATS["built"] - before == 1
    mods = [m for k, m in dcache._MEMORY.items()]
    mod = mods[-1]
    with pytest.raises(ArgumentError):
        mod(torch.randn(5, 8), torch.randn(6, 8), torch.empty(5, 8))
    with pytest.raises(ArgumentError):
        mod(torch.randn(5, 8), torch.randn(5, 8), torch.empty(7, 8))


def test_norm_and_projection_with_a_symbolic_sequence_length():
    """A layer norm, a projection and GELU over ``[2, n, 8]``: the GEMM's rows are
    ``2*n0`` only (n0 passed to the kernel as a scalar argument)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.GELU())
    dcache.clear_memory()
    c = torch.compile(m, backend="tecomp", options=OPTS)
    builds = _run(c, m, (3, 10, 17), dim=1, make=lambda n: torch.randn(2, n, 8))
    assert builds[-1] == builds[0]


@pytest.mark.skipif(not LONG, reason="slow (a GEMM of two symbolic extents: 7 s to build)")
def test_attention_with_a_symbolic_sequence_length():
    """Scores, softmax and their product with the values over a symbolic sequence length
    (batched GEMMs of extents n0 x n0), the projection's extent only ``2*n0``."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(8, 8)

    def f(x):
        q = proj(x)
        return torch.softmax(q @ x.transpose(1, 2), dim=-1) @ x
    dcache.clear_memory()
    c = torch.compile(f, backend="tecomp", options=OPTS)
    builds = _run(c, f, (3, 10, 17), dim=1, make=lambda n: torch.randn(2, n, 8))
    assert builds[-1] == builds[0]


def test_symbolic_kernel_from_the_disk_cache_at_another_size(tmp_path, monkeypatch, disk_cache):
    """A kernel with symbolic extents is one library on disk, keyed by its symbolic
    signature: after the process forgets its kernels, a new size loads it (no build)."""
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    f = lambda t: torch.tanh(t) * 3  # noqa: E731
    dcache.clear_memory()
    c = torch.compile(f, backend="tecomp")
    before = dict(td.STATS)
    _run(c, f, (5,))
    dcache.flush()
    assert td.STATS["built"] - before["built"] == 1
    assert len(list((tmp_path / "dynamo").glob("*.so"))) == 1
    dcache.clear_memory()
    torch._dynamo.reset()
    c = torch.compile(f, backend="tecomp")
    _run(c, f, (12, 7))
    assert td.STATS["built"] - before["built"] == 1
    assert td.STATS["disk"] - before["disk"] == 1


def test_cat_along_a_symbolic_extent():
    """Concatenations along the symbolic batch (of two computed parts and a constant
    one, each read at an index clamped into it) and across it, one kernel for every
    size."""
    p = torch.randn(3, 4)

    def f(x, y):
        return torch.tanh(torch.cat([x, x * 2, p], dim=0)) + 1, torch.cat([y, x[:, :2]], 1) * 3
    dcache.clear_memory()
    c = torch.compile(f, backend="tecomp", options=OPTS)
    before = td.STATS["built"]
    with torch.no_grad():
        for n in (5, 2, 9):
            x, y = torch.randn(n, 4), torch.randn(n, 7)
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(y, 0)
            for g, w in zip(c(x, y), f(x, y)):
                torch.testing.assert_close(g, w)
    assert td.STATS["built"] - before == 1


def test_static_kernel_of_a_view_of_a_symbolic_tensor_built_once():
    """A kernel of static shapes whose input is a view of a tensor of symbolic size (a
    BERT pooler on the first token): the view's strides change with the size, the kernel
    (keyed without them) does not."""
    torch.manual_seed(0)
    lin, norm = torch.nn.Linear(8, 4), torch.nn.LayerNorm(8)

    def f(x):
        y = norm(x)
        return y, torch.tanh(lin(y[:, 0]))
    dcache.clear_memory()
    c = torch.compile(f, backend="tecomp", options=OPTS)
    before = td.STATS["built"]
    with torch.no_grad():
        for n in (5, 9):
            x = torch.randn(2, n, 8)
            torch._dynamo.mark_dynamic(x, 1)
            for g, w in zip(c(x), f(x)):
                torch.testing.assert_close(g, w)
            if n == 5:
                first = td.STATS["built"] - before
    assert td.STATS["built"] - before == first

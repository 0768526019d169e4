"""torch.compile(model, backend="tecomp"): small models (an MLP, a CNN, a transformer
encoder layer) compiled against eager PyTorch, outputs and gradients; the eager
fallback of unsupported operators and dtypes; shape specialisation; the disk cache
reused by a second process; in inference, convolution weights packed once and packed
again whenever they change, and strided 1x1 convolutions as a subsampled GEMM.

The autouse fixture turns the backend's disk cache off where a test gives no ``cache``
option (here and in the test_dynamo_* files that import it): the tests of the disk cache
ask for the ``disk_cache`` fixture, which keeps the default (on)."""
import copy
import logging
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import tecomp.dynamo as td  # noqa: E402
from tecomp.dynamo import cache as dcache  # noqa: E402
from tecomp.dynamo import lowering_nn, prepack  # noqa: E402
from tecomp.target import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
RTOL = 1e-4


_OPTIONS = td._options


def _options_without_disk_cache(kwargs):
    """The backend's options, with ``cache`` False where the test gave none: exporting a
    library costs about twice its build (in a background thread, which a fork waits for),
    and a test loads nothing back from the disk unless it asks for ``disk_cache``."""
    nested = kwargs.get("options")
    opts = _OPTIONS(kwargs)
    if "cache" not in kwargs and not (isinstance(nested, dict) and "cache" in nested):
        opts.cache = False
    return opts


@pytest.fixture(autouse=True)
def _fresh_dynamo(request, monkeypatch):
    """A fresh TorchDynamo; the disk cache off unless the test asks for ``disk_cache``."""
    if "disk_cache" not in request.fixturenames:
        monkeypatch.setattr(td, "_options", _options_without_disk_cache)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def disk_cache():
    """The backend's default: its kernels written to (and read from) the disk cache."""
    assert td._options is _OPTIONS


def _close(got, want, what):
    """Within RTOL of the largest magnitude of ``want`` (a gradient that is nearly zero
    everywhere is compared at the scale of its largest element)."""
    got, want = got.detach(), want.detach()
    scale = max(float(want.abs().max()), 1e-6)
    err = float((got.double() - want.double()).abs().max())
    assert err <= RTOL * scale, f"{what}: max error {err:.3g} at scale {scale:.3g}"


def _check_model(model, x, train=True, eval_=True, options=None):
    """The compiled model's outputs (train and eval) and parameter gradients against
    eager PyTorch's, from the same weights.  The kernels are not written to the disk
    cache unless ``options`` says ``cache``: exporting a library costs about twice its
    build, in a background thread, and these tests load nothing back (the disk cache's
    own tests below do)."""
    torch.manual_seed(1)
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tecomp", options={"cache": False, **(options or {})})
    if train:
        w = torch.randn_like(copy.deepcopy(ref)(x))  # a random head: no zero gradient
        y = compiled(x)
        (y * w).sum().backward()
        yr = ref(x)
        (yr * w).sum().backward()
        _close(y, yr, "training output")
        for (n, p), (_, pr) in zip(model.named_parameters(), ref.named_parameters()):
            _close(p.grad, pr.grad, f"gradient of {n}")
    if eval_:
        model.eval()
        ref.eval()
        with torch.no_grad():
            _close(compiled(x), ref(x), "inference output")
    return compiled


def test_registered_as_tecomp():
    assert "tecomp" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("tecomp") is td.backend


def test_mlp_train_and_inference(caplog):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8),
                              torch.nn.Tanh(), torch.nn.Linear(8, 4))
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        _check_model(mlp, torch.randn(6, 16))
    # every operator of these graphs is lowered, none eager; the forward and inference
    # graphs are one kernel per linear layer (its GEMM, the activation its epilogue)
    summaries = {m.split(":")[1].strip().split()[0]: m for m in
                 (r.getMessage() for r in caplog.records) if re.search(r" graph: \d", m)}
    assert set(summaries) == {"forward", "backward", "inference"}
    for role, m in summaries.items():
        assert m.endswith(", 0 eager ATen nodes"), m
        if role != "backward":
            assert re.search(r"graph: 3 tecomp kernels \(", m), m


def test_cnn_train_and_inference(caplog):
    """Batch norm in training, the convolution's and max pooling's backward are lowered:
    the backward graph is all tecomp kernels."""
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(), torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 2 * 2, 10))
    with caplog.at_level(logging.DEBUG, logger="tecomp.dynamo"):
        _check_model(cnn, torch.randn(2, 3, 8, 8))
    msgs = [r.getMessage() for r in caplog.records]
    bw = [m for m in msgs if m.startswith("tecomp.dynamo: backward graph:")]
    assert bw and bw[0].endswith(" 0 eager ATen nodes"), msgs
    assert not any("batch_norm" in m or "convolution" in m or "max_pool" in m for m in msgs
                   if "runs eagerly" in m), msgs
    # the activations the forward saves for the backward are views of the kernels'
    # outputs, not copies written by a kernel
    fw = [m for m in msgs if re.search(r"forward graph: kernel \d+ ", m)]
    assert fw and not any("alias" in m for m in fw), fw


class _OneByOne(torch.nn.Module):
    """A 1x1 convolution with a residual on a 14x14 plane (written as a GEMM), then a
    stride-2 one onto 7x7 with fewer output channels (the convolution template)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(8, 8, 1)
        self.down = torch.nn.Conv2d(8, 6, 1, stride=2, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.a(x) + x))


def test_1x1_convolutions_as_gemms():
    """The 1x1 convolutions whose plane lowering_nn writes as a GEMM (batch_matmul of
    the weights over the flattened plane) and those it leaves to the convolution
    template: inference outputs against eager (the backward's convolution gradients do
    not use the forward's lowering)."""
    lo, hi = lowering_nn.GEMM_1X1_PLANES
    assert lo <= 14 * 14 <= hi and not lo <= 7 * 7 <= hi
    assert lowering_nn._gemm_1x1_plane((2, 8, 14, 14), (6, 8, 1, 1), [2, 2], [0, 0],
                                       "float32") is None
    torch.manual_seed(0)
    _check_model(_OneByOne(), torch.randn(2, 8, 14, 14), train=False)


class _OneByOneByChannels(torch.nn.Module):
    """1x1 convolutions the lowering writes as GEMMs for their channels, on planes
    outside GEMM_1X1_PLANES: on 30x30 (900 pixels) one with as many output channels as
    input channels (with a batch norm and a residual); on 8x8 one with more, and a
    stride-2 one from 15x15 with more (a subsampled GEMM)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(8, 8, 1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c = torch.nn.Conv2d(8, 16, 1)
        self.e = torch.nn.Conv2d(8, 16, 1, stride=2, bias=False)

    def forward(self, x):
        h = torch.relu(self.bn(self.a(x)) + x)
        pool = torch.nn.functional.max_pool2d
        return torch.relu(self.c(pool(h, 4, padding=1))) + self.e(pool(h, 2))


def test_1x1_convolutions_as_gemms_by_channels():
    """Outside GEMM_1X1_PLANES, the lowering takes the GEMM where the channels favour it
    (GEMM_1X1_BY_CHANNELS), and not where they do not: the inference output against
    eager."""
    plane = lowering_nn._gemm_1x1_plane
    if lowering_nn.GEMM_1X1_BY_CHANNELS is not None:
        assert plane((2, 8, 30, 30), (8, 8, 1, 1), [1, 1], [0, 0], "float32") == (30, 30)
        assert plane((2, 8, 8, 8), (16, 8, 1, 1), [1, 1], [0, 0], "float32") == (8, 8)
        assert plane((2, 8, 15, 15), (16, 8, 1, 1), [2, 2], [0, 0], "float32") == (8, 8)
    assert plane((2, 8, 30, 30), (12, 8, 1, 1), [1, 1], [0, 0], "float32") is None
    assert plane((2, 16, 8, 8), (16, 16, 1, 1), [1, 1], [0, 0], "float32") is None
    assert plane((2, 8, 60, 60), (8, 8, 1, 1), [2, 2], [0, 0], "float32") is None
    torch.manual_seed(0)
    model = _OneByOneByChannels()
    with torch.no_grad():
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 2.0)
    _check_model(model, torch.randn(2, 8, 30, 30), train=False)


class _OneByOneTail(torch.nn.Module):
    """A 1x1 convolution onto a 7x7 plane with more output channels than input channels
    (a GEMM for its channels), then a batch norm, a residual and ReLU."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(8, 24, 1, bias=False)
        self.bn = torch.nn.BatchNorm2d(24)

    def forward(self, x, r):
        return torch.relu(self.bn(self.c(x)) + r)


@pytest.mark.parametrize("fold", [True, False])
def test_1x1_gemm_plane_tail_folds_over_the_images(monkeypatch, fold):
    """From a batch of GEMM_1X1_FOLD_TAIL the pixels of the plane past its last whole
    vector, in every image, are one GEMM of their own (``<name>.tail_gemm``); with or without it,
    the inference output as eager's."""
    import tecomp as tc
    monkeypatch.setattr(lowering_nn, "GEMM_1X1_FOLD_TAIL", 2 if fold else None)
    x = tc.placeholder((3, 8, 7, 7), name="x")
    w = tc.placeholder((24, 8, 1, 1), name="w")
    y = lowering_nn._conv_1x1_as_gemm(x, w, [1, 1], [0, 0], "c")
    reads = {t.op.name for t in y.op.input_tensors}
    assert ("c.tail_gemm" in reads) == (fold and 49 % cpu_model().lanes != 0), reads
    torch.manual_seed(0)
    model = _OneByOneTail().eval()
    with torch.no_grad():
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 2.0)
    dcache.clear_memory()
    f = torch.compile(model, backend="tecomp", options={"cache": False})
    a, r = torch.randn(3, 8, 7, 7), torch.randn(3, 24, 7, 7)
    with torch.no_grad():
        _close(f(a, r), model(a, r), f"fold {fold}")
    dcache.clear_memory()


class _SameShapes(torch.nn.Module):
    """Blocks of one shape (a later kernel output can take a released one's memory),
    and the first block's output, transposed, read last by an eager node (cumsum)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        h = torch.relu(self.lin[0](x))
        v = h.t()
        for lin in self.lin[1:]:
            h = torch.relu(lin(h)) + h
        return h, torch.cumsum(v, 0)


def _count_reuse(monkeypatch) -> list:
    """A list that gets, for each kernel output a plan allocates, whether a released
    tensor of its layout was there to reuse."""
    from tecomp.dynamo import graph

    reused = []
    allocate = graph._allocate

    def counting(free, spec):
        reused.append(bool(free.get(spec)))
        return allocate(free, spec)

    monkeypatch.setattr(graph, "_allocate", counting)
    return reused


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_kernel_outputs_reuse_released_memory(mode, monkeypatch):
    """A plan gives a later kernel output the memory of a released intermediate of the
    same layout, never one a live view still reads (under inference_mode a view holds
    only the memory, not its base tensor): outputs as eager's, call after call."""
    from tecomp.dynamo import graph

    reused = _count_reuse(monkeypatch)
    torch.manual_seed(0)
    model = _SameShapes()
    compiled = torch.compile(model, backend="tecomp")
    ctx = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with ctx():
        for _ in range(2):
            x = torch.randn(16, 16)
            for got, want in zip(compiled(x), model(x)):
                _close(got, want, f"output under {mode}")
    assert any(reused), reused
    # what decides whether a released tensor's memory may be reused
    with ctx():
        t = torch.empty(8)
        assert graph._unshared(t)
        view = t[::2]  # under inference_mode it holds t's memory, not t
        assert not graph._unshared(t)
        del view
        assert not graph._unshared(t, {"another node": t})   # (an in-place op's value)
        assert graph._unshared(t, {"another node": torch.empty(8)})


def test_released_intermediates_kept_for_the_next_call(monkeypatch):
    """A plan keeps the intermediates released at the end of a call for its next call
    (a training step's backward took fresh pages for them at every step): the next call
    takes its kernels' outputs from them, never from a tensor a caller still holds;
    ``tc.release_workspace()`` frees them, and a workspace limit of 0 keeps none."""
    import tecomp as tc
    from tecomp import threads
    from tecomp.dynamo import graph

    reused = _count_reuse(monkeypatch)
    torch.manual_seed(0)
    # (test_mlp_train_and_inference's model and shapes: its kernels, from the cache)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tecomp")
    try:
        outs = []
        for k in range(3):
            x = torch.randn(6, 16)
            reused.clear()
            y = compiled(x)
            y.square().sum().backward()
            if k:
                assert any(reused), "a second call allocated every output anew"
            yr = ref(x)
            yr.square().sum().backward()
            outs.append((y, yr))
            for p, pr in zip(model.parameters(), ref.parameters()):
                _close(p.grad, pr.grad, f"gradient, call {k}")
            model.zero_grad()
            ref.zero_grad()
        for y, want in outs:  # earlier calls' outputs, held: none overwritten by later calls
            _close(y, want, "output")
        compiled(torch.randn(6, 16)).sum().backward()
        assert tc.release_workspace() > 0  # (the pools' caches and the plans' buffers)
        assert graph._Spare._total == 0
        threads.set_workspace_limit(0)
        compiled(torch.randn(6, 16)).sum().backward()
        assert graph._Spare._total == 0
    finally:
        threads.set_workspace_limit(threads.workspace_limit_from_env())


def test_release_workspace_while_a_plan_keeps_in_another_thread(monkeypatch):
    """``tc.release_workspace()`` walks every plan's kept intermediates while a compiled
    graph's call ends in another thread and keeps its own (threads family of the fuzzer):
    the walk raised "Set changed size during iteration".  Forced here: the walk pauses
    after its first plan until the other thread's keep() has added one, or 1 s has
    passed (the fix: the keep waits for the walk)."""
    import threading
    import weakref

    import tecomp as tc
    from tecomp.dynamo import graph

    spec = ((4,), (1,), torch.float32)
    walking, added = threading.Event(), threading.Event()

    class Paused(weakref.WeakSet):
        def __iter__(self):
            for k, sp in enumerate(super().__iter__()):
                yield sp
                if k == 0:
                    walking.set()
                    added.wait(1.0)

    monkeypatch.setattr(graph._Spare, "_all", Paused())
    plans = [graph._Spare() for _ in range(3)]
    for p in plans:
        p.keep({spec: [torch.empty(4)]})
    late = graph._Spare()
    errors = []

    def other_call_ends():
        walking.wait(10)
        late.keep({spec: [torch.empty(4)]})
        added.set()

    t = threading.Thread(target=other_call_ends)
    t.start()
    try:
        freed = tc.release_workspace()
    except RuntimeError as e:
        errors.append(str(e))
    finally:
        added.set()
        t.join(10)
    assert not errors, errors
    assert freed >= 3 * 16 and not any(p.nbytes for p in plans)
    assert late.nbytes == 16   # kept after the walk: the next release frees it
    assert tc.release_workspace() >= 16 and late.nbytes == 0


def _parallel_kernel():
    """A tecomp kernel with a parallel loop (B = A + 1 over 4096 elements)."""
    import tecomp as tc
    from tecomp.ir import Buffer, BufferLoad, BufferStore, Const, For, PrimFunc, Var
    from tecomp.ir.expr import as_expr

    A, B = (Buffer(n, (Const(4096),), "float32") for n in "AB")
    i = Var("i")
    return tc.build(PrimFunc("plus1", (A, B), For(
        i, as_expr(0), as_expr(4096), "parallel",
        BufferStore(B, BufferLoad(A, (i,), "float32") + 1.0, (i,)))))


def _ran_on_tecomps_pool(f) -> bool:
    """Whether ``f``'s parallel loop, called now by this thread, ran on tecomp's JIT
    pool: its workers, stopped first, are started again only by a region run on it."""
    import numpy as np

    from tecomp.codegen.llvm import threadpool

    pool = threadpool.pool()
    pool.shutdown()
    assert pool.num_workers() == 0
    a = np.arange(4096, dtype="float32")
    b = np.zeros(4096, "float32")
    f(a, b)
    assert (b == a + 1).all()
    return pool.num_workers() > 0


@pytest.fixture
def _two_threads():
    import tecomp as tc
    from tecomp.dynamo import openmp

    if openmp.parallel_for_address() is None:
        pytest.skip("PyTorch does not run on libgomp's OpenMP here")
    old = torch.get_num_threads(), tc.get_num_threads()
    torch.set_num_threads(2)
    tc.set_num_threads(2)
    yield
    torch.set_num_threads(old[0])
    tc.set_num_threads(old[1])


def test_kernels_on_pytorchs_threads(_two_threads):
    """threads='torch': the kernels' parallel loops run on PyTorch's OpenMP team while
    the graph runs, with the same results and a kernel's error reported as before; a
    plain tecomp kernel called after the graph (or beside it, by another thread) runs on
    tecomp's pool."""
    import threading

    import numpy as np

    import tecomp as tc
    from tecomp.dynamo import openmp
    from tecomp.ir import Buffer, BufferLoad, BufferStore, Const, For, PrimFunc, Var
    from tecomp.ir.expr import as_expr

    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))
    _check_model(cnn, torch.randn(4, 3, 8, 8), eval_=False, options={"threads": "torch"})
    assert openmp.active() == "tecomp"
    f = _parallel_kernel()
    assert _ran_on_tecomps_pool(f)
    with openmp.scope("torch"):
        assert openmp.active() == "torch"
        assert not _ran_on_tecomps_pool(f)
        with openmp.scope("tecomp"):  # nested: the inner setting, then the outer's again
            assert _ran_on_tecomps_pool(f)
        assert not _ran_on_tecomps_pool(f)
        # a bounds error in a parallel loop run by the team is the serial run's
        A, B = (Buffer(n, (Const(64),), "float32") for n in "AB")
        i = Var("i")
        g = tc.build(PrimFunc("oob", (A, B), For(
            i, as_expr(0), as_expr(64), "parallel",
            BufferStore(B, BufferLoad(A, (i + 3,), "float32"), (i,)))), checks=True)
        with pytest.raises(tc.BoundsError, match="index 64 is outside"):
            g(np.zeros(64, "float32"), np.zeros(64, "float32"))
        # another thread at the same time: on tecomp's pool
        seen = []
        t = threading.Thread(target=lambda: seen.append(_ran_on_tecomps_pool(f)))
        t.start()
        t.join()
        assert seen == [True]
    assert openmp.active() == "tecomp" and _ran_on_tecomps_pool(f)


def test_threads_auto_chooses_by_the_times_measured():
    """threads="auto" (openmp.Chooser): the two settings in turn until each has its
    samples, then the one of the lower median; the other tried once the best has run
    ``period`` times the other's last time (or MAX_CALLS calls), ``period`` doubling
    while the tries lose, back to the first where one wins; the other takes over once
    its median is the lower."""
    from tecomp.dynamo.openmp import Chooser

    c = Chooser()
    first = []
    for _ in range(2 * Chooser.MIN_SAMPLES):
        m = c.pick()
        first.append(m)
        c.record(m, 2.0 if m == "tecomp" else 1.0)
    assert first == ["tecomp", "torch"] * Chooser.MIN_SAMPLES
    assert c.best == "torch"
    runs = 0
    while c.pick() == "torch":                     # torch (1 s a call) for 8 x 2 s
        c.record("torch", 1.0)
        runs += 1
    assert runs == 2 * Chooser.FIRST_PERIOD
    c.record("tecomp", 3.0)                         # the try lost: tried half as often
    assert c.best == "torch" and c.period == 2 * Chooser.FIRST_PERIOD
    assert c.pick() == "torch"
    c.calls = Chooser.MAX_CALLS                     # (however cheap the best's calls)
    assert c.pick() == "tecomp"
    c.period = Chooser.LAST_PERIOD
    c.record("tecomp", 3.0)
    assert c.period == Chooser.LAST_PERIOD          # (no further than the last period)
    c.record("tecomp", 0.5)                         # a try won: tried soon again
    assert c.best == "torch" and c.period == Chooser.FIRST_PERIOD
    for _ in range(Chooser.WINDOW // 2):            # the other got faster: it takes over
        c.record("tecomp", 0.5)
    assert c.best == "tecomp" and c.period == Chooser.FIRST_PERIOD and c.spent == 0


def test_threads_auto_in_a_training_step(_two_threads, monkeypatch):
    """By default (threads="auto") a training step's forward and backward graphs each
    time both settings and run on the faster; the gradients are eager's whichever ran,
    the inference graph runs on tecomp's pool, and the calling thread is back on
    tecomp's pool after every call."""
    from tecomp.dynamo import openmp

    made = []

    class Recording(openmp.Chooser):
        __slots__ = ()
        MIN_SAMPLES = 1  # (each setting once: fewer steps)

        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(openmp, "Chooser", Recording)
    torch.manual_seed(0)
    # (test_mlp_train_and_inference's model and shapes: its kernels, from the cache)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tecomp")
    for k in range(2 * Recording.MIN_SAMPLES + 1):  # (the first call is not timed)
        x = torch.randn(6, 16)
        compiled(x).square().sum().backward()
        ref(x).square().sum().backward()
        assert openmp.active() == "tecomp"
        for p, pr in zip(model.parameters(), ref.parameters()):
            _close(p.grad, pr.grad, f"gradient, step {k}")
        model.zero_grad()
        ref.zero_grad()
    assert len(made) == 2                           # the forward's and the backward's
    for c in made:
        assert all(len(t) >= Recording.MIN_SAMPLES for t in c.times.values()), c.times
    with torch.no_grad():
        _close(compiled(x), ref(x), "inference output")
    assert len(made) == 2                           # (no chooser for inference)


def test_pytorchs_threads_restored_after_an_exception(_two_threads):
    """A graph with threads='torch' that raises (an embedding index out of range, found
    by the region's guard) leaves the calling thread on tecomp's pool."""
    from tecomp.dynamo import openmp

    emb = torch.nn.Embedding(10, 4)
    compiled = torch.compile(emb, backend="tecomp", options={"threads": "torch"})
    with torch.no_grad():
        compiled(torch.tensor([[1, 2, 3]]))
        assert openmp.active() == "tecomp"
        with pytest.raises(Exception, match="out of range|outside"):
            compiled(torch.tensor([[1, 2, 30]]))
    assert openmp.active() == "tecomp"
    assert _ran_on_tecomps_pool(_parallel_kernel())


def test_pytorchs_threads_in_a_forked_child(_two_threads):
    """After fork() (PyTorch's OpenMP team did not survive it; a region on it would wait
    forever) a graph compiled with threads='torch' and a plain kernel run in the child,
    on tecomp's pool, with the parent's results."""
    import time
    import warnings

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 8))
    # (not written to the disk cache: fork() would first wait for the background writer
    # to export the kernels, most of this test's time; test_a_fork_waits_for_the_disk_writer
    # tests that wait)
    compiled = torch.compile(mlp, backend="tecomp", options={"threads": "torch", "cache": False})
    x = torch.randn(64, 64)
    with torch.no_grad():
        want = compiled(x)
    f = _parallel_kernel()
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        ok = False
        try:
            with torch.no_grad():
                ok = torch.equal(compiled(x), want) and _ran_on_tecomps_pool(f)
        finally:
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish in 60 s (a region waiting for "
                        "the parent's OpenMP team?)")
        time.sleep(0.05)
    got = os.read(r, 1)
    os.close(r)
    assert got == b"1"


def test_max_pool_indices_lowered_for_training(caplog):
    """Max pooling whose indices the backward reads is a kernel, not eager: the values
    and PyTorch's indices (the first of tied maxima, the last NaN, a window of -inf,
    padding), and the input gradient through them."""
    x = torch.randn(2, 3, 9, 9)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = float("nan")
    x[0, 1, :4, :4] = float("-inf")
    x[1, 2, 4, 4] = x[1, 2, 4, 5] = 5.0
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        for k, s, p in [(2, 2, 0), (3, 2, 1)]:
            def pool(t, k=k, s=s, p=p):
                return torch.ops.aten.max_pool2d_with_indices(t, [k, k], [s, s], [p, p])
            got, want = torch.compile(pool, backend="tecomp")(x), pool(x)
            assert torch.equal(got[1], want[1]), (k, s, p)
            assert torch.equal(got[0].nan_to_num(), want[0].nan_to_num()), (k, s, p)

        def net(t):  # overlapping windows: an element can be the maximum of several
            return torch.nn.functional.max_pool2d(t * 2, 3, 2, 1).square()
        xs = [x.nan_to_num(0.0, 0.0, -9.0).requires_grad_() for _ in range(2)]
        torch.compile(net, backend="tecomp")(xs[0]).sum().backward()
        net(xs[1]).sum().backward()
        _close(xs[0].grad, xs[1].grad, "input gradient")
    assert not any("max_pool2d_with_indices.default runs eagerly" in r.getMessage()
                   for r in caplog.records)


def test_transformer_encoder_layer_train_and_inference():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    _check_model(layer, torch.randn(2, 5, 32))


def test_transformer_attention_lowered_for_inference(caplog):
    """In inference (no fast path: need_weights) the attention is a tecomp kernel."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha
            self.norm = torch.nn.LayerNorm(32)

        def forward(self, x):
            return self.norm(x + self.mha(x, x, x, need_weights=False)[0])

    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        with torch.no_grad():
            _check_model(Attn(), torch.randn(2, 6, 32), train=False)
    eager = [r.getMessage() for r in caplog.records if "runs eagerly" in r.getMessage()]
    assert not any("scaled_dot_product" in m for m in eager), eager


def test_attention_through_composed_views_stays_in_kernels(caplog):
    """MultiheadAttention's inference graph reads its projections through views whose
    indices compose (``x[i2*2 + ((i0*4 + i1)*16 + i3) // 64]``), where a template's
    align_bounds cannot be proved to stay inside memory: the auto-scheduler leaves that
    part to its rules instead of returning a schedule lowering refuses, so the views
    stay in the kernels (no region split at its views): the input projection with its
    views, the attention, the output projection."""
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(2, 10, 64)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        with torch.no_grad():
            y = torch.compile(m, backend="tecomp")(x, x, x, need_weights=False)[0]
            _close(y, m(x, x, x, need_weights=False)[0], "attention output")
    msgs = [r.getMessage() for r in caplog.records]
    assert not any("splitting it at its views" in t for t in msgs), msgs
    assert any("3 tecomp kernels (" in t and "0 eager ATen" in t for t in msgs), msgs


class _Middle(torch.nn.Module):
    """Linear -> an operator tecomp does not lower -> Linear."""

    def __init__(self, middle):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)
        self.middle = middle

    def forward(self, x):
        return self.b(torch.relu(self.middle(torch.relu(self.a(x)))))


@pytest.mark.parametrize("name,middle", [
    ("cumsum", lambda h: torch.cumsum(h, dim=1)),
    ("sort", lambda h: torch.sort(h, dim=1)[0]),
])
def test_unsupported_operator_runs_eagerly_between_kernels(caplog, name, middle):
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        _check_model(_Middle(middle), torch.randn(5, 8))
    msgs = [r.getMessage() for r in caplog.records]
    lines = [m for m in msgs if f"aten.{name}" in m and "runs eagerly in the forward" in m]
    assert len(lines) == 1, msgs  # one line per operator and graph
    assert "no tecomp lowering" in lines[0]
    # the forward graph: a kernel before the operator and one after it
    fw = [m for m in msgs if m.startswith("tecomp.dynamo: forward graph:")]
    assert fw and re.search(r"graph: 2 tecomp kernels", fw[0]), fw


def test_unsupported_dtype_runs_eagerly(caplog):
    """float16 tensors: the operators run eagerly (logged), the results are PyTorch's."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4).to(torch.float16)
    x = torch.randn(3, 8, dtype=torch.float16)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        with torch.no_grad():
            got = torch.compile(lambda t: torch.relu(lin(t)) * 2, backend="tecomp")(x)
    assert torch.equal(got, torch.relu(lin(x)) * 2)
    msgs = [r.getMessage() for r in caplog.records if "runs eagerly" in r.getMessage()]
    assert msgs and all("dtype torch.float16" in m for m in msgs), msgs


def test_pow_with_a_tensor_exponent(caplog):
    """``x ** y`` with a tensor exponent (``aten.pow.Tensor_Tensor``, broadcast) is a tecomp
    kernel, not an eager fallback, and agrees with eager's ``pow`` (within its float32
    bound, docs/numerics.md); a number exponent too."""
    def f(x, y):
        return x.abs() ** y + x ** 3, torch.pow(x.abs() + 1, y[0])
    torch.manual_seed(0)
    x = torch.randn(6, 40)
    y = torch.rand(3, 6, 40) * 6 - 3
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        with torch.no_grad():
            got = torch.compile(f, backend="tecomp")(x, y)
    msgs = [r.getMessage() for r in caplog.records]
    assert not [m for m in msgs if "aten.pow" in m and "runs eagerly" in m], msgs
    for g, w in zip(got, f(x, y)):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=2e-6, atol=1e-6)


def test_atan2_and_a_number_base_pow(caplog):
    """``torch.atan2`` (``aten.atan2.default``, broadcast; an integer operand promoted) and
    ``2 ** x`` (``aten.pow.Scalar``) are tecomp kernels, not eager fallbacks, and agree
    with eager (within their float32 bounds, docs/numerics.md), special values included."""
    def f(y, x, k):
        return torch.atan2(y, x), torch.atan2(y[0], x), 2.0 ** x, torch.atan2(k, x[0])
    torch.manual_seed(0)
    y = torch.randn(3, 6, 40)
    x = torch.randn(6, 40) * 4
    y[0, 0, :6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0])
    x[0, :6] = torch.tensor([-0.0, 0.0, -float("inf"), 3.0, 1.0, float("nan")])
    k = torch.arange(40, dtype=torch.int64) - 20
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        with torch.no_grad():
            got = torch.compile(f, backend="tecomp")(y, x, k)
    msgs = [r.getMessage() for r in caplog.records]
    assert not [m for m in msgs if ("aten.atan2" in m or "aten.pow" in m)
                and "runs eagerly" in m], msgs
    for g, w in zip(got, f(y, x, k)):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=2e-6, atol=1e-6, equal_nan=True)


def test_float64_and_integer_ops():
    def f(x, idx):
        e = torch.nn.functional.embedding(idx, x)
        return (e * 2 + 1).sum(dim=1), (idx > 2).sum(), torch.where(e > 0, e, -e).amax(-1)
    x = torch.randn(10, 6, dtype=torch.float64)
    idx = torch.tensor([[1, 3, 5], [0, 9, 2]])
    got = torch.compile(f, backend="tecomp")(x, idx)
    want = f(x, idx)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w)


def test_views_slices_cat():
    def f(x, y):
        a = x[:, 1:5].permute(1, 0).reshape(2, -1)
        b = torch.cat([y.t(), y[:2].t()], dim=1).unsqueeze(0).expand(3, -1, -1)
        return a.exp() + 1, b * x[0, 0], x.select(1, 2) - x.mean(0)[:3].sum()
    x, y = torch.randn(3, 6), torch.randn(4, 2)
    got = torch.compile(f, backend="tecomp")(x, y)
    for g, w in zip(got, f(x, y)):
        torch.testing.assert_close(g, w)


def test_outputs_that_eager_returns_as_broadcast_or_strided_views():
    """A region's output that eager PyTorch returns as a view with zero strides (an
    expand) or with gaps (a slice): the kernel writes it to dense memory (it was handed
    the broadcast view's strides, and the call refused to write overlapping elements)."""
    def f(x):
        y = x * 2
        return y.expand(3, 4, 5), y.t()[1:4:2], (x + 1)[:, 1:3]
    x = torch.randn(4, 1)
    got = torch.compile(f, backend="tecomp")(x)
    for g, w in zip(got, f(x)):
        torch.testing.assert_close(g, w)
    x = torch.randn(4, 5)
    g = torch.compile(lambda t: (t * 2)[:, 1:3], backend="tecomp")(x)
    torch.testing.assert_close(g, (x * 2)[:, 1:3])


def test_kernel_outputs_read_only_by_kernels_are_row_major(monkeypatch):
    """Eager PyTorch computes attention's query as a permuted view (strides of
    ``view(b, s, h, d).permute(0, 2, 1, 3)``); the kernel that computes it for the
    attention kernel writes it row-major (both then run their contiguous variants),
    while the same values returned by the graph keep eager's strides."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)

    def f(x):
        q = lin(x).view(2, 6, 4, 8).permute(0, 2, 1, 3)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return a.transpose(1, 2).reshape(2, 6, 32), q + 1

    specs = []
    compile_region = td.graph._cache.compile_region

    def record(region, vals, options, *sym):
        err = compile_region(region, vals, options, *sym)
        specs.extend(region.out_specs)
        return err

    monkeypatch.setattr(td.graph._cache, "compile_region", record)
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        got = torch.compile(f, backend="tecomp")(x)
        want = f(x)
    for g, w in zip(got, want):
        _close(g, w, "output")
    assert got[1].stride() == want[1].stride() == (192, 8, 32, 1)
    heads = {st for shape, st, _ in specs if shape == (2, 4, 6, 8)}
    assert heads == {(192, 48, 8, 1), (192, 8, 32, 1)}, specs


def test_kernel_output_read_by_a_region_that_runs_eagerly_keeps_eager_strides(
        monkeypatch):
    """When the attention's kernel cannot be compiled, its nodes run eagerly on the
    query, key and value the projections' kernels wrote: with eager's strides (the
    attention's output follows its inputs' layout, and the ``view`` after it needs
    that layout), not the row-major ones kernels exchange."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 96)

    def f(x):
        q, k, v = lin(x).view(2, 6, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return a.transpose(1, 2).reshape(2, 6, 32).view(12, 32) * 2

    lower = dcache.lower_region

    def refuse_attention(region, vals, **kw):
        if any("scaled_dot_product" in str(n.target) for n in region.nodes):
            raise td.graph.InternalError("no attention (for the test)")
        return lower(region, vals, **kw)

    monkeypatch.setattr(dcache, "lower_region", refuse_attention)
    dcache.clear_memory()
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        got = torch.compile(f, backend="tecomp", options={"cache": False})(x)
    _close(got, f(x), "output")


def test_slice_bounds_computed_from_a_dynamic_size(caplog):
    """A slice whose start is a SymInt node of the graph (a dynamic size halved: the
    backward of a channel split, ShuffleNet's training step) is lowered with the
    specialisation's integer (the rule compared the node with 0: TypeError)."""
    def f(x):
        h = x.shape[1] // 2
        return x[:, h:] * 2 + x[:, :h], x.narrow(1, h - 1, 2).exp()
    c = torch.compile(f, backend="tecomp")
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        for n in (8, 6):
            x = torch.randn(3, n)
            torch._dynamo.mark_dynamic(x, 1)
            for g, w in zip(c(x), f(x)):
                torch.testing.assert_close(g, w)
    msgs = [r.getMessage() for r in caplog.records]
    assert not [m for m in msgs if "could not be" in m], msgs
    assert any(re.search(r"graph: [1-9]\d* tecomp kernel", m) for m in msgs), msgs


def test_returned_views_with_dynamic_bounds():
    """Views the graph returns, whose bounds are symbolic (a slice from ``s0 // 2``), of
    an input and of a computed tensor: AOTAutograd rebuilds them with ``as_strided`` of
    the returned tensor's strides and offset on the base, so they run as views (a copy,
    offset 0, gave the first rows: wrong values; fuzz seed 82)."""
    def f(x):
        h = x.shape[0] // 2
        y = x * 2
        return x[h:], y[h:].t(), torch.erf(y[:h] + 1)
    c = torch.compile(f, backend="tecomp")
    for n in (4, 7):
        x = torch.randn(n, 3)
        torch._dynamo.mark_dynamic(x, 0)
        for g, w in zip(c(x), f(x)):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("mark_dynamic", [False, True])
def test_new_shapes_are_specialised(mark_dynamic):
    """New batch sizes: static graphs recompiled by TorchDynamo's guards, or (after
    mark_dynamic, or a second size) a symbolic graph that tecomp specialises per size;
    the results are PyTorch's either way."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    c = torch.compile(mlp, backend="tecomp")
    with torch.no_grad():
        for n in (4, 6, 9):
            x = torch.randn(n, 8)
            if mark_dynamic:
                torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(c(x), mlp(x))


_SECOND = r"""
import sys, torch, tecomp, tecomp.dynamo as td
tecomp.set_num_threads(2)
td.cache.SHARE_POOLS = True
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU())  # one kernel
x = torch.randn(3, 8)
def two(t):  # two kernels with parallel loops (the sort between them runs eagerly)
    return torch.sort(torch.tanh(t) * 3, dim=1)[0].exp() + 1
t = torch.randn(64, 256)
with torch.no_grad():
    y = torch.compile(m, backend="tecomp")(x)
    assert torch.allclose(y, m(x), rtol=1e-4, atol=1e-5)
    got, want = torch.compile(two, backend="tecomp")(t), two(t)
    if not torch.allclose(got, want, rtol=1.3e-6, atol=1e-5):
        # (this failed now and then under load, 2026-12-02, unexplained: say all there is)
        f64 = torch.sort(torch.tanh(t.double()) * 3, dim=1)[0].exp() + 1
        bad = ~torch.isclose(got, want, rtol=1.3e-6, atol=1e-5)
        print("MISMATCH", int(bad.sum()), "rows", sorted(set(bad.nonzero()[:, 0].tolist())),
              "columns", sorted(set(bad.nonzero()[:, 1].tolist())), file=sys.stderr)
        print("max relative error against float64: compiled",
              float(((got.double() - f64).abs() / f64).max()), "eager",
              float(((want.double() - f64).abs() / f64).max()), file=sys.stderr)
        again = torch.compile(two, backend="tecomp")(t)
        print("a second call equal to the first:", torch.equal(again, got), file=sys.stderr)
        th = torch.compile(lambda u: torch.tanh(u) * 3, backend="tecomp")(t)
        print("tanh(t) * 3 compiled alone, max error against float64:",
              float((th.double() - torch.tanh(t.double()) * 3).abs().max()), file=sys.stderr)
    torch.testing.assert_close(got, want)
print("STATS", td.STATS["built"], td.STATS["disk"])
# the libraries loaded from the disk cache run on the first pool: no workers of their own
print("WORKERS", [p.num_workers() for p in tecomp.threads._POOLS])
"""


def test_disk_cache_reused_by_a_second_process(tmp_path):
    env = dict(os.environ, TECOMP_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT)
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _SECOND], env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(tuple(int(v) for v in re.search(r"STATS (\d+) (\d+)", p.stdout).groups()))
    assert runs[0][0] >= 3 and runs[0][1] == 0       # the first process builds
    assert runs[1] == (0, runs[0][0])                # the second loads every kernel
    # the second process's pools: one per library, the first with the workers
    workers = [int(w) for w in re.search(r"WORKERS \[([\d, ]*)\]", p.stdout).group(1).split(",")]
    assert len(workers) == runs[0][0] and workers[0] == 1 and not any(workers[1:]), workers
    assert list((tmp_path / "cache" / "dynamo").glob("*.so"))


def test_kernels_written_to_disk_in_the_background(tmp_path, monkeypatch, disk_cache):
    """The first call returns before its kernels are exported; flush() waits for the
    writer, after which every built kernel is a library on disk."""
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    dcache.clear_memory()
    before = dcache.STATS["built"]
    x = torch.randn(3, 7)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(lambda t: torch.tanh(t) * 3,
                                                 backend="tecomp")(x), torch.tanh(x) * 3)
    dcache.flush()
    assert dcache._WRITER is None and not dcache._PENDING
    built = dcache.STATS["built"] - before
    assert built >= 1 and len(list((tmp_path / "dynamo").glob("*.so"))) == built


def test_a_fork_waits_for_the_disk_writer(tmp_path, monkeypatch):
    """A process forked while the background writer exports a kernel would inherit its
    locks held by a thread it does not have: the fork waits for the writer first."""
    import os
    import threading
    import time

    started = threading.Event()
    done = []

    def slow_save(mod, path):
        started.set()
        time.sleep(0.5)
        done.append(path)

    # (the kernels earlier tests of this process left to the writer are written first:
    # under load they were still queued, and slow_save "wrote" them too)
    dcache.flush()
    monkeypatch.setattr(dcache, "_save", slow_save)
    dcache._save_later(object(), tmp_path / "k.so")
    assert started.wait(10)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert done == [tmp_path / "k.so"] and dcache._WRITER is None


def test_kernels_shared_between_identical_regions():
    """Two identical blocks in one model: one kernel, built once."""
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(),
                                                       torch.nn.Dropout(0.0))
                                   for _ in range(2)])

    def f(x):
        return torch.sort(blocks[1](torch.sort(blocks[0](x), dim=1)[0]), dim=1)[0]
    before = dict(dcache.STATS)
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(f, backend="tecomp")(x), f(x))
    assert dcache.STATS["memory"] - before["memory"] >= 1


class _Bottleneck(torch.nn.Module):
    """ResNet's bottleneck block: 1x1, 3x3 and 1x1 convolutions, each with its batch
    norm, the input added back."""

    def __init__(self, c):
        super().__init__()
        conv = lambda i, o, k: torch.nn.Sequential(  # noqa: E731
            torch.nn.Conv2d(i, o, k, padding=k // 2, bias=False), torch.nn.BatchNorm2d(o))
        self.a, self.b, self.c = conv(4 * c, c, 1), conv(c, c, 3), conv(c, 4 * c, 1)

    def forward(self, x):
        h = torch.relu(self.b(torch.relu(self.a(x))))
        return torch.relu(self.c(h) + x)


def test_each_block_is_a_kernel_and_identical_blocks_build_once(caplog):
    """A ResNet-like network: each convolution is one kernel with its batch norm, ReLU and
    residual addition as epilogue (not the whole network one kernel), and the repeated
    bottlenecks, identical but for their weights, share their kernels: 4 built for 10."""
    torch.manual_seed(0)
    c = 4
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4 * c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4 * c),
        torch.nn.ReLU(), *[_Bottleneck(c) for _ in range(3)]).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 8, 8)
    dcache.clear_memory()
    before = dict(dcache.STATS)
    with caplog.at_level(logging.DEBUG, logger="tecomp.dynamo"), torch.no_grad():
        got = torch.compile(model, backend="tecomp", options={"cache": False})(x)
        _close(got, model(x), "output")
    kernels = [r.getMessage() for r in caplog.records
               if re.search(r"inference graph: kernel \d+ ", r.getMessage())]
    assert len(kernels) == 10, kernels
    assert all(m.count("convolution.default") == 1 for m in kernels), kernels
    assert dcache.STATS["built"] - before["built"] == 4
    assert dcache.STATS["memory"] - before["memory"] == 6


def test_operator_table_lists_every_lowering():
    """docs/torch_compile.md's table names exactly the operators with a lowering rule."""
    from tecomp.dynamo.lowering import RULES

    text = open(os.path.join(ROOT, "docs", "torch_compile.md")).read()
    table = text[text.index("## Supported operators"):]
    table = table[:table.index("\n\nTraining graphs")]
    listed = set(re.findall(r"`(aten\.[\w.]+)`", table))
    assert listed == {str(op) for op in RULES}


def test_kernel_whose_compilation_raises_a_bug_runs_eagerly(caplog, monkeypatch):
    """An exception other than tecomp's own while compiling a kernel (a tecomp bug, as
    the attention template's ValueError was) does not fail torch.compile: the kernel's
    nodes run eagerly, with a WARNING that says it is a tecomp bug."""
    def broken(args, **kw):
        raise ValueError("not enough values to unpack (for the test)")
    monkeypatch.setattr(dcache, "auto_schedule", broken)
    dcache.clear_memory()
    x = torch.randn(3, 4)
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"), torch.no_grad():
        got = torch.compile(lambda t: torch.softmax(t * 3, -1),
                            backend="tecomp", options={"cache": False})(x)
    torch.testing.assert_close(got, torch.softmax(x * 3, -1))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and all("a tecomp bug" in m and "ValueError: not enough values" in m
                          for m in warned), warned


def test_region_that_cannot_be_compiled_runs_eagerly(caplog, monkeypatch):
    """A region the auto-scheduler refuses: first split at its views, then (still
    refused) run eagerly, with a WARNING naming its operators and the error."""
    from tecomp.errors import ScheduleError

    calls = []

    def refuse(args, **kw):
        calls.append(len(args))
        raise ScheduleError("refused for the test")
    monkeypatch.setattr(dcache, "auto_schedule", refuse)

    def f(x, w):
        return (torch.relu(x @ w).t() * 2).reshape(-1).exp()
    x, w = torch.randn(4, 6), torch.randn(6, 5)
    before = dcache.STATS["failed"]
    with caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(f, backend="tecomp")(x, w), f(x, w))
    msgs = [r.getMessage() for r in caplog.records]
    assert any("splitting it at its views" in m for m in msgs), msgs
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and all("could not be compiled and runs eagerly: ScheduleError: refused "
                          "for the test" in m for m in warned), warned
    assert any("aten.mm.default" in m for m in warned)
    assert len(calls) >= 2 and dcache.STATS["failed"] > before
    assert any(re.search(r"graph: 0 tecomp kernels \(0 nodes\), \d+ eager", m) for m in msgs)


# -- inference: constant weights packed once (tecomp.dynamo.prepack); strided 1x1 -----
@pytest.fixture
def blocked(monkeypatch):
    """Every float32 convolution whose output channels make whole blocks of two vectors
    packed (``oihw_blocked``) where the heuristic would not pack it (that depends on
    the machine's vector width): the packed path is exercised on any CPU."""
    ob = 2 * cpu_model().lanes
    decide = lowering_nn._conv_pack

    def force(node, vals):
        name = decide(node, vals)
        if name is None and vals[node.args[1]].dtype == torch.float32 and \
                vals[node.args[1]].shape[0] % ob == 0:
            return f"oihw_blocked{ob}"
        return name

    monkeypatch.setattr(lowering_nn, "_conv_pack", force)
    return ob


def _net():
    torch.manual_seed(0)
    ob = 2 * cpu_model().lanes
    return torch.nn.Sequential(
        torch.nn.Conv2d(8, ob, 3, padding=1, bias=False), torch.nn.BatchNorm2d(ob),
        torch.nn.ReLU(), torch.nn.Conv2d(ob, ob, 3, stride=2, padding=1),
        torch.nn.Conv2d(ob, 8, 1)).eval()


def test_packed_weights_match_eager_and_see_every_update(blocked):
    """The packed copies are made once and reused; an in-place update under no_grad, a
    load_state_dict, a new Parameter and a call under inference_mode each give eager's
    answer (a changed weight is packed again, never read stale)."""
    model = _net()
    f = torch.compile(model, backend="tecomp", options={"cache": False, "prepack": True})
    x = torch.randn(2, 8, 12, 12)
    packed0, reused0 = prepack.STATS["packed"], prepack.STATS["reused"]
    with torch.no_grad():
        _close(f(x), model(x), "first call")
        made = prepack.STATS["packed"] - packed0
        assert made >= 2, made  # the two 3x3 convolutions' weights
        _close(f(x), model(x), "second call")
        assert prepack.STATS["packed"] - packed0 == made
        assert prepack.STATS["reused"] - reused0 >= made
        model[0].weight.add_(0.5)                       # in place: a new version
        _close(f(x), model(x), "after weight.add_")
        assert prepack.STATS["packed"] - packed0 == made + 1
        other = _net()
        with torch.no_grad():
            for p in other.parameters():
                p.mul_(-1.5)
        model.load_state_dict(other.state_dict())      # copy_ into every weight
        _close(f(x), model(x), "after load_state_dict")
        model[3].weight = torch.nn.Parameter(torch.randn_like(model[3].weight))
        _close(f(x), model(x), "after a new Parameter")
    with torch.inference_mode():
        _close(f(x), model(x), "under inference_mode")


def test_packed_copy_dies_with_its_weight(blocked):
    """A packed copy is kept no longer than its weight."""
    model = _net()
    f = torch.compile(model, backend="tecomp", options={"cache": False, "prepack": True})
    with torch.no_grad():
        f(torch.randn(1, 8, 12, 12))
    assert prepack.kept() >= 2
    ids = {id(p) for p in model.parameters()}
    assert any(k[0] in ids for k in prepack._KEPT)
    del f, model
    torch._dynamo.reset()
    import gc
    gc.collect()
    assert not any(k[0] in ids for k in prepack._KEPT)


def test_training_and_prepack_off_read_weights_as_they_are(blocked):
    """A training graph packs nothing (its weights change at every step), even with
    prepack=True; nor does an inference graph by default (prepack=False), which sees
    even a change made through ``weight.data`` (behind the version counter)."""
    torch.manual_seed(0)
    model = torch.nn.Conv2d(4, 2 * cpu_model().lanes, 3, padding=1)
    f = torch.compile(model, backend="tecomp", options={"cache": False, "prepack": True})
    x = torch.randn(2, 4, 6, 6)
    before = prepack.STATS["packed"]
    ref = copy.deepcopy(model)
    f(x).square().sum().backward()
    ref(x).square().sum().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        _close(p.grad, q.grad, f"gradient of {n}")
    assert prepack.STATS["packed"] == before
    torch._dynamo.reset()
    model.eval()
    g = torch.compile(model, backend="tecomp", options={"cache": False})
    with torch.no_grad():
        _close(g(x), model(x), "prepack=False")
        model.weight.data.mul_(2.0)
        _close(g(x), model(x), "prepack=False after weight.data.mul_")
    assert prepack.STATS["packed"] == before


@pytest.mark.parametrize("stride,hw,channels_last", [
    (2, (29, 31), False), (3, (44, 43), True),
    pytest.param(2, (28, 28), True, marks=[pytest.mark.slow, pytest.mark.skipif(
        not _LONG, reason="slow: set TECOMP_LONG_TESTS=1")]),
    pytest.param(3, (43, 44), False, marks=[pytest.mark.slow, pytest.mark.skipif(
        not _LONG, reason="slow: set TECOMP_LONG_TESTS=1")])])
def test_strided_1x1_as_subsampled_gemm(stride, hw, channels_last):
    """A strided 1x1 convolution onto a plane the GEMM path takes is a subsampled copy
    and a GEMM: odd sizes, strides 2 and 3, NCHW and channels-last inputs, with the
    batch norm and ReLU after it, as eager."""
    oh, ow = ((e - 1) // stride + 1 for e in hw)
    assert lowering_nn._gemm_1x1_plane((2, 8) + hw, (12, 8, 1, 1), [stride] * 2, [0, 0],
                                       "float32") == (oh, ow)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 12, 1, stride=stride, bias=False),
                                torch.nn.BatchNorm2d(12), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8, *hw)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    f = torch.compile(model, backend="tecomp", options={"cache": False})
    with torch.no_grad():
        _close(f(x), model(x), f"stride {stride} {hw}")

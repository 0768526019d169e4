"""torch.compile(backend="tecomp") against eager PyTorch on random small programs
(tests/dynamo_fuzz.py: elementwise chains, reductions, views, cat, matrix products,
softmax; outputs returned as views), with static sizes and with dynamic ones
(``torch._dynamo.maybe_mark_dynamic`` on every dimension, two size sets).

A handful of seeds by default (seconds); many with TECOMP_LONG_TESTS=1 (static and
dynamic sizes, inference and training, the edges -- sign, embeddings, long sums --,
special values -- NaN, +-inf, +-0 -- and a disk cache whose entries are swapped), run in
a child process (a kernel that crashed would take pytest with it), which prints every
failing seed's program.  The bugs it found are pinned here and in tests/test_dynamo.py,
test_dynamo_edges.py, test_attention.py and test_autodiff_nn.py."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import dynamo_fuzz as fz  # noqa: E402
from test_dynamo import RTOL, ROOT, _fresh_dynamo, disk_cache  # noqa: E402,F401  (fixtures)

LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


# programs that return a broadcast view (21, 75), a transposed one (65), slices with
# symbolic bounds (74, 75: wrong values before the returned views ran as views), with
# matmuls, bmm, linear layers, softmax, reductions, cat, permute and select
@pytest.mark.parametrize("seed", [21, 30, 65])
def test_random_program_matches_eager(seed):
    prog = fz.make_program(seed)
    err = fz.run(prog, dynamic=False, options={"cache": False})
    assert err <= RTOL, f"max error {err:.3g}\n{prog.describe()}"


@pytest.mark.parametrize("seed", [74, 75])
def test_random_program_with_dynamic_sizes_matches_eager(seed):
    prog = fz.make_program(seed)
    err = fz.run(prog, dynamic=True, options={"cache": False})
    assert err <= RTOL, f"max error {err:.3g}\n{prog.describe()}"


def test_random_program_with_refused_kernels_matches_eager():
    """Some kernels refused (their nodes run eagerly between the others, on tensors the
    kernels wrote: their layouts must be eager's where an eager view reads them)."""
    prog = fz.make_program(30)
    err = fz.run(prog, dynamic=False, options={"cache": False}, refuse_every=2)
    assert err <= RTOL, f"max error {err:.3g}\n{prog.describe()}"


def test_random_training_program_matches_eager():
    """Outputs and input gradients (forward and backward graphs) of a program with a
    convolution whose input is read again, with dynamic sizes: the backward sums the
    convolution's data gradient and another (a ScheduleError before, seed 61)."""
    prog = fz.make_program(61)
    err = fz.run(prog, dynamic=True, options={"cache": False}, grad=True)
    assert err <= RTOL, f"max error {err:.3g}\n{prog.describe()}"


# the edges (make_program(edges=True)): an embedding whose ids are called past the table
# (131: its rows were zeros, no IndexError), sign with NaN among the inputs (258: NaN,
# eager 0), means of 2**19 to 2**21 float32 terms (131, 181: 0.3 % off), neg of +0.0
# (88: +0.0, eager -0.0; the sign of a zero is compared with special values)
@pytest.mark.parametrize("seed,specials", [(131, False), (258, True), (181, True), (88, True)])
def test_random_program_at_the_edges_matches_eager(seed, specials):
    prog = fz.make_program(seed, specials=specials, edges=True)
    err = fz.run(prog, dynamic=False, options={"cache": False})
    assert err <= RTOL, f"max error {err:.3g}\n{prog.describe()}"


# the faults family (fz.run_faults): a SystemExit while the LLVM worker's reply was read
# (0: the worker's next reply was the interrupted module's, and the kernel compiled again
# could not be linked), a disk cache damaged between compilations (26), a
# KeyboardInterrupt in a region's build (36)
@pytest.mark.parametrize("seed", [0, 26, 36])
def test_a_compilation_that_fails_part_way_leaves_a_clean_state(seed, disk_cache):
    prog = fz.make_program(seed)
    err, what = fz.run_faults(prog, seed)
    assert err <= RTOL, f"{what}: max error {err:.3g}\n{prog.describe()}"


def test_a_disk_writer_that_dies_is_replaced(tmp_path, monkeypatch, disk_cache):
    """The disk cache's writer thread ended by a BaseException (a SystemExit a library
    raised) stayed registered: cache.flush() -- and so every fork(), which waits for the
    writer -- looped forever joining the dead thread, and no kernel was written to disk
    again in the process."""
    from tecomp.dynamo import cache

    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    save, calls = cache._save, []

    def dies_once(mod, path):
        calls.append(path)
        if len(calls) == 1:
            raise SystemExit("injected")
        save(mod, path)

    monkeypatch.setattr(cache, "_save", dies_once)
    monkeypatch.setattr(cache.threading, "excepthook", lambda args: None)
    for f in (torch.tanh, torch.sigmoid):
        cache.clear_memory()
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(lambda t, f=f: f(t) * 2, backend="tecomp")(torch.randn(4, 8))
        cache.flush()
    assert cache._WRITER is None and len(calls) == 2
    assert len(list((tmp_path / "dynamo").glob("*.so"))) == 1


@pytest.mark.skipif(not LONG, reason="slow (minutes): set TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("flags", [[], ["--dynamic"], ["--grad"], ["--grad", "--dynamic"],
                                   ["--edges"], ["--edges", "--dynamic"], ["--specials"],
                                   ["--swapped-cache"], ["--refuse-every", "2"],
                                   ["--faults"]])
def test_many_random_programs_match_eager(flags):
    cmd = [sys.executable, os.path.join(ROOT, "tests", "dynamo_fuzz.py"), "--seeds", "0:300"]
    p = subprocess.run(cmd + flags, capture_output=True, text=True, timeout=3600,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]

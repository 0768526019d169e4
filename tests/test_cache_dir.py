"""Where tecomp caches what it compiles: $TECOMP_CACHE_DIR, else $XDG_CACHE_HOME/tecomp,
else ~/.cache/tecomp; and the caches that use it follow."""
import shutil
from pathlib import Path

import pytest

from tecomp.codegen import cuda_emu
from tecomp.runtime.libfiles import cache_root


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.delenv("TECOMP_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_default_is_under_home(env, tmp_path):
    assert cache_root() == tmp_path / "home" / ".cache" / "tecomp"


def test_xdg_cache_home(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "tecomp"
    assert cuda_emu.cache_dir() == tmp_path / "xdg" / "tecomp" / "cuda_emu"


def test_tecomp_cache_dir_wins(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("TECOMP_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


@pytest.mark.parametrize("xdg", ["", "relative/cache"])
def test_empty_or_relative_xdg_is_ignored(env, tmp_path, xdg):
    # the XDG base directory specification: a relative path there is invalid, ignore it
    env.setenv("XDG_CACHE_HOME", xdg)
    env.setenv("TECOMP_CACHE_DIR", "")
    assert cache_root() == tmp_path / "home" / ".cache" / "tecomp"


def test_a_build_fills_the_xdg_cache(env, tmp_path):
    """The CUDA emulation compiles its library into $XDG_CACHE_HOME/tecomp/cuda_emu."""
    if shutil.which("g++") is None:
        pytest.skip("the CUDA emulation needs g++")
    import numpy as np

    import tecomp as tc

    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setattr(cuda_emu, "_LIBS", {})
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target="cuda-emu")
    a, b = np.arange(64, dtype="float32"), np.empty(64, "float32")
    f(a, b)
    assert (b == a + 1).all()
    libs = list(Path(tmp_path / "xdg" / "tecomp" / "cuda_emu").glob("*.so"))
    assert libs, "nothing compiled into $XDG_CACHE_HOME/tecomp/cuda_emu"
    assert not (tmp_path / "home" / ".cache").exists()

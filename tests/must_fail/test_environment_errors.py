"""Environment variables set to what they cannot mean: an error naming the variable, its
legal values and what it sets -- never a Python error deep in a build (``int('abc')``,
a division by zero from ``TECOMP_VECTOR_LANES=0``) or a limit every build fails
(``TECOMP_LLVM_OPT_TIMEOUT=nan`` reported as a crash of LLVM).  docs/environment.md."""
import itertools

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.llvm import jit

_UNIQUE = itertools.count(1)


def _build():
    """A program not built before in this process (its constant differs), so that LLVM's
    optimiser runs."""
    A = tc.placeholder((33,), name="A")
    B = tc.compute((33,), lambda i: A[i] * 2.0 + float(next(_UNIQUE)) / 7.0, name="B")
    return tc.build(tc.create_schedule(B.op), [A, B])


@pytest.mark.parametrize("value", ["abc", "0", "-8", "7", "32", "8.0"])
def test_vector_lanes_not_8_or_16(monkeypatch, value):
    monkeypatch.setenv("TECOMP_VECTOR_LANES", value)
    with pytest.raises(tc.TargetError, match=rf"TECOMP_VECTOR_LANES='{value}' is not 8 or 16: "
                                             r"it sets the vector width .*unset it \(the "
                                             r"host CPU's width\)"):
        tc.Target("llvm").machine


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "abc", "1e400"])
def test_optimiser_time_limit_not_a_positive_number(monkeypatch, value):
    if not jit.worker_enabled():
        pytest.skip("the LLVM optimiser runs in this process (no time limit)")
    monkeypatch.setenv("TECOMP_LLVM_OPT_TIMEOUT", value)
    with pytest.raises(tc.BuildError, match=rf"TECOMP_LLVM_OPT_TIMEOUT='{value}' is not a "
                                            r"number from 0.001 to 1e\+09: it sets the seconds "
                                            r"LLVM's optimiser may take .*default 60"):
        _build()


@pytest.mark.parametrize("value", ["nan", "-1", "0", "abc"])
def test_worker_memory_not_a_positive_number(monkeypatch, value):
    if not jit.worker_enabled():
        pytest.skip("the LLVM optimiser runs in this process (no worker)")
    with tc.target.host.LLVM_LOCK:  # (the next build starts a worker, which reads it)
        jit._stop_worker()
    monkeypatch.setenv("TECOMP_LLVM_WORKER_MAX_MB", value)
    with pytest.raises(tc.BuildError, match=rf"TECOMP_LLVM_WORKER_MAX_MB='{value}' is not a "
                                            r"number from 1 to 1e\+09: it sets the MiB the "
                                            r"LLVM optimiser worker may grow by"):
        _build()


@pytest.mark.parametrize("value", ["lots", "-5", "99999999999", "2.5"])
def test_emulated_thread_stack_not_a_size(monkeypatch, value):
    """(a huge stack was taken, and every launch of the CUDA emulation then failed with
    "could not start 32 threads for one block ... use the 'serial' emulation mode")"""
    from cuda_examples import vector_add
    from tecomp.codegen import cuda_emu
    from tecomp.codegen.cuda import codegen_cuda

    kern = codegen_cuda(vector_add().func).kernels[0]
    monkeypatch.setenv("TECOMP_CUDA_EMU_STACK_KIB", value)
    with pytest.raises(tc.ArgumentError, match=rf"TECOMP_CUDA_EMU_STACK_KIB='{value}' is not an "
                                               r"integer from 0 to 1048576: it sets the KiB of "
                                               r"stack each emulated CUDA thread gets beyond its "
                                               r"kernel's own arrays; .*\(default 256\)"):
        cuda_emu.thread_stack_bytes(kern)


def test_legal_values_still_build(monkeypatch):
    monkeypatch.setenv("TECOMP_VECTOR_LANES", "8")
    monkeypatch.setenv("TECOMP_LLVM_OPT_TIMEOUT", "30")
    monkeypatch.setenv("TECOMP_LLVM_WORKER_MAX_MB", "512")
    assert tc.Target("llvm").machine.lanes == 8
    f = _build()
    a, b = np.arange(33, dtype=np.float32), np.zeros(33, np.float32)
    f(a, b)
    assert np.allclose(b - 2 * a, b[0])


@pytest.mark.parametrize("value", ["bogus", "serial,reverse", "thread"])
def test_cuda_emu_mode_not_a_mode(monkeypatch, value):
    from tecomp.codegen import cuda_emu

    monkeypatch.setenv("TECOMP_CUDA_EMU_MODE", value)
    with pytest.raises(tc.ArgumentError, match=rf"TECOMP_CUDA_EMU_MODE='{value}' is not one "
                                               r"of threads, serial, reverse, "
                                               r"last_block_first: it sets how the CUDA "
                                               r"emulation runs .*unset it \(default: "
                                               r"threads\)"):
        cuda_emu.default_mode()


@pytest.mark.parametrize("value", ["xgb", "x-gboost", "gbdt"])
def test_cost_model_not_a_model(monkeypatch, value):
    """An unknown cost model is ignored with a warning naming it (a debugging or tuning
    setting must not fail a search); once any spelling but ``xgboost`` kept the trees
    silently."""
    from tecomp.autoschedule import cost_model

    monkeypatch.setenv("TECOMP_COST_MODEL", value)
    with pytest.warns(RuntimeWarning, match=rf"TECOMP_COST_MODEL='{value}' is not one of "
                                            r"trees, xgboost: it sets the auto-scheduler's "
                                            r"cost model; ignored \(default: trees\)"):
        m = cost_model.CostModel(seed=0)
        m.update([np.array([float(i), 1.0]) for i in range(8)], [1e-3 * (i + 1) for i in range(8)])
    assert isinstance(m.model, cost_model.GBDT)

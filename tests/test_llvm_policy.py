"""The LLVM code generator's target hook (tecomp/codegen/llvm/policy.py, x86.py): which
policy a target gets, and that the generic policy (no x86 special case) gives correct
code where the x86 one pads lanes, loads strided rows wide and selects min/max."""
import re

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.llvm import jit as llvm_jit
from tecomp.codegen.llvm import module as llvm_module
from tecomp.codegen.llvm.policy import TargetPolicy
from tecomp.codegen.llvm.x86 import X86Policy, is_x86

x86_host = pytest.mark.skipif(not is_x86(llvm_jit.host().triple),
                              reason="the host is not x86")


@x86_host
@pytest.mark.parametrize("target, avx512, fma", [
    ("llvm -mcpu=skylake-avx512", True, True),
    ("llvm -mcpu=haswell", False, True),
    ("llvm -mcpu=x86-64", False, False),
    ("llvm -mattr=+avx2,-fma", False, False),
])
def test_policy_for_x86_targets(target, avx512, fma):
    p = llvm_module.policy_for(tc.Target(target))
    assert isinstance(p, X86Policy)
    assert p.pads_lanes == avx512 and p.register_bytes == (64 if avx512 else 32)
    assert p.has_fma == fma and p.vector_minmax_select


def test_is_x86():
    assert is_x86("x86_64-unknown-linux-gnu") and is_x86("i686-pc-linux-gnu")
    assert not is_x86("aarch64-unknown-linux-gnu") and not is_x86("riscv64-unknown-linux-gnu")


def test_generic_policy_decides_nothing_special():
    p = TargetPolicy(tc.Target("llvm -mcpu=skylake-avx512"))
    assert p.pad_lanes(14, None) == 14 and not p.pads_lanes
    assert not p.strided_wide_load(2, 16, None)
    assert p.register_bytes == 16 and not p.has_fma and not p.vector_minmax_select


def _kernel(lanes):
    """Stride-2 loads, a float max and exp over vectors of ``lanes`` float32."""
    n = lanes * 4
    A = tc.placeholder((2 * n,), name="A")
    B = tc.compute((n,), lambda i: tc.maximum(A[2 * i], A[2 * i + 1]) + tc.exp(A[2 * i]),
                   name="B")
    s = tc.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(xi)
    return s, [A, B], n


@pytest.mark.parametrize("lanes", [14, 16])
def test_generic_policy_gives_correct_code(monkeypatch, lanes):
    """The same kernel with the x86 policy and with the generic one: equal results (the
    vector exp differs by at most 1 ulp between the FMA and non-FMA variants), and the
    generic one gathers the strided lanes and calls llvm.maximum on vectors."""
    s, args, n = _kernel(lanes)
    a = np.random.default_rng(0).standard_normal(2 * n).astype("float32")
    a[3] = np.nan
    want = np.maximum(a[0::2], a[1::2]) + np.exp(a[0::2])

    monkeypatch.setattr(llvm_module, "policy_for",
                        lambda target, vector_bytes=0: TargetPolicy(target))
    f = tc.build(s, args)
    out = np.zeros(n, "float32")
    f(a, out)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert np.isnan(out[1])
    src = f.get_source("llvm-unopt")
    assert "llvm.masked.gather" in src
    assert re.search(r"llvm\.maximum\.v\d+f32", src)
    assert "llvm.fma" not in src

    if is_x86(llvm_jit.host().triple):
        monkeypatch.undo()
        g = tc.build(s, args)
        out2 = np.zeros(n, "float32")
        g(a, out2)
        np.testing.assert_allclose(out2, out, rtol=3e-7)
        src = g.get_source("llvm-unopt")
        assert "llvm.masked.gather" not in src
        assert not re.search(r"llvm\.maximum\.v\d+f32", src)


@x86_host
@pytest.mark.parametrize("lanes", [12, 20, 6])
def test_minmax_of_a_partial_register_is_one_padded_piece(monkeypatch, lanes):
    """``max``/``min`` over vectors that are no whole number of registers (a 28-wide
    pooling row's 12-lane tail): the same values, NaN and infinities included, with the
    last piece padded to a whole register (``PAD_MINMAX_PIECES``) as with narrower
    pieces; with AVX-512, 12 float32 lanes are one zmm ``max``, no ``xmm`` one."""
    from tecomp.codegen.llvm import x86

    n = lanes * 3
    A = tc.placeholder((n,), name="A")
    Bt = tc.placeholder((n,), name="Bt")
    C = tc.compute((n,), lambda i: tc.maximum(A[i], Bt[i]) - tc.minimum(A[i], Bt[i]),
                   name="C")
    rng = np.random.default_rng(6)
    a = rng.standard_normal(n).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    a[::5], b[::7], a[3], b[4] = np.nan, np.nan, np.inf, -np.inf
    got = {}
    for pad in (True, False):
        monkeypatch.setattr(x86, "PAD_MINMAX_PIECES", pad)
        s = tc.create_schedule(C.op)
        _, xi = s[C].split(C.op.axis[0], factor=lanes)
        s[C].vectorize(xi)
        f = tc.build(s, [A, Bt, C])
        out = np.zeros(n, "float32")
        f(a, b, out)
        got[pad] = out
        if lanes == 12 and pad:
            text = tc.build(s, [A, Bt, C], target="llvm -mcpu=skylake-avx512").get_source(
                "llvm-unopt")
            assert "llvm.x86.avx512.max.ps.512" in text and "llvm.x86.sse.max.ps" not in text
    np.testing.assert_array_equal(got[True], got[False])

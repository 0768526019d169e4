"""The float16 / bfloat16 conversion helpers LLVM calls (``__extendhfsf2``, ``__truncsfhf2``,
...) where the CPU has no conversion instruction: the JIT provides them
(tecomp/codegen/llvm/libcalls.py).  Without them a float16 kernel built for a CPU without
F16C jumped to address 0 on its first call, so every check runs in a child process.

Checked against numpy on every float16 value and on sweeps of floats and doubles that
cover each rounding boundary (midpoints between neighbours, one ulp either side, the
overflow threshold, subnormals, zeros, infinities, NaNs)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_HELPERS_CHILD = r"""
import ctypes, json, sys
import numpy as np
from tecomp.codegen.llvm import jit

CONV = {  # name: (source type, destination type, instruction)
    "h2f": ("half", "float", "fpext"), "h2d": ("half", "double", "fpext"),
    "f2h": ("float", "half", "fptrunc"), "d2h": ("double", "half", "fptrunc"),
    "f2bf": ("float", "bfloat", "fptrunc"), "d2bf": ("double", "bfloat", "fptrunc"),
}
ir = []
for name, (src, dst, inst) in CONV.items():
    ir.append(f'''
define void @{name}(ptr %src, ptr %dst, i64 %n) #0 {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %ps = getelementptr {src}, ptr %src, i64 %i
  %x = load {src}, ptr %ps
  %y = {inst} {src} %x to {dst}
  %pd = getelementptr {dst}, ptr %dst, i64 %i
  store {dst} %y, ptr %pd
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}''')
# a generic x86-64: no F16C, no AVX512-FP16 or -BF16: every conversion is a helper call
ir.append('attributes #0 = { "target-cpu"="x86-64" "target-features"="" }')
jm = jit.compile_ir("\n".join(ir), list(CONV))
fns = {n: ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(a)
       for n, a in jm.addresses.items()}
NP = {"half": np.uint16, "bfloat": np.uint16, "float": np.float32, "double": np.float64}


def run(name, x):
    src, dst, _ = CONV[name]
    x = np.ascontiguousarray(x, NP[src])
    y = np.zeros(x.shape, NP[dst])
    fns[name](x.ctypes.data, y.ctypes.data, x.size)
    return y


def f32_bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def same(got, want):
    # bit for bit; a NaN: a NaN of the same sign (the payload's top bits are the hardware's)
    got, want = np.asarray(got), np.asarray(want)
    nan = np.isnan(want)
    ok = np.where(nan, np.isnan(got) & (np.signbit(got) == np.signbit(want)),
                  got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}"))
    bad = np.flatnonzero(~ok)
    return {"n": int(want.size), "bad": int(bad.size),
            "first": [repr(float(v)) for v in np.asarray(want).ravel()[bad[:3]]]}


out = {"asm": sorted(s for s in ("__extendhfsf2", "__truncsfhf2", "__truncdfhf2",
                                 "__truncsfbf2", "__truncdfbf2") if s in jm.asm)}
halves = np.arange(65536, dtype=np.uint16)
h = halves.view(np.float16)
out["h2f"] = same(run("h2f", halves), h.astype(np.float32))
out["h2d"] = same(run("h2d", halves), h.astype(np.float64))

# floats: every half, the midpoints between neighbours and one float ulp either side, the
# overflow threshold, and a sweep of every 4099th bit pattern
fin = h[np.isfinite(h)].astype(np.float64)
fin = np.unique(np.concatenate([fin, -fin]))
mid = (fin[:-1] + fin[1:]) / 2           # exact in float32 and float64
f = np.concatenate([fin, mid, [65504.0, 65519.996, 65520.0, 65536.0, 1e30, 2.0 ** -25,
                               2.0 ** -24, 3 * 2.0 ** -26, 1e-40, 0.0]]).astype(np.float32)
sweep = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
f = np.concatenate([f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf)),
                    -f, np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32), sweep])
out["f2h"] = same(run("f2h", f).view(np.float16), f.astype(np.float16))

# doubles: the same points, one double ulp either side, and points a float32 rounding would
# put on a midpoint (double rounding), and random bit patterns
d = np.concatenate([fin, mid, [65519.99999999999, 65520.0, 1e300, 1e-300, 2.0 ** -25]])
rng = np.random.default_rng(0)
d = np.concatenate([d, np.nextafter(d, np.inf), np.nextafter(d, -np.inf),
                    mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40), -d,
                    np.array([np.inf, -np.inf, np.nan]),
                    rng.integers(0, 2 ** 63, 200000, dtype=np.int64).view(np.float64),
                    rng.uniform(-70000, 70000, 200000), rng.uniform(-1e-4, 1e-4, 200000)])
out["d2h"] = same(run("d2h", d).view(np.float16), d.astype(np.float16))

# bfloat16: against round to nearest even on the float32 bits (a double rounded to odd
# in float32 first: float32 keeps enough bits for that to round once)
def f32_to_bf16(x):
    u = f32_bits(x).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), ((u >> 16) | 0x40).astype(np.uint16), r)


def to_odd_f32(x):
    r = x.astype(np.float32)
    back = r.astype(np.float64)
    r = np.where(np.isfinite(x) & (np.abs(back) > np.abs(x)), np.nextafter(r, np.float32(0)), r)
    bits = f32_bits(r) | (np.isfinite(x) & (r.astype(np.float64) != x)).astype(np.uint32)
    return np.where(np.isnan(x), x.astype(np.float32), bits.view(np.float32))


def as_bf16_floats(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


bf_f = np.concatenate([f, as_bf16_floats(halves) + np.float32(0)])
out["f2bf"] = same(as_bf16_floats(run("f2bf", bf_f)), as_bf16_floats(f32_to_bf16(bf_f)))
bf_mid = (as_bf16_floats(halves).astype(np.float64)[:-1] +
          as_bf16_floats(halves).astype(np.float64)[1:]) / 2
bf_d = np.concatenate([d, bf_mid[np.isfinite(bf_mid)] * (1 + 2.0 ** -40),
                       bf_mid[np.isfinite(bf_mid)] * (1 - 2.0 ** -40), [3.3895313e38, 3.40e38]])
with np.errstate(all="ignore"):
    want = f32_to_bf16(to_odd_f32(bf_d))
out["d2bf"] = same(as_bf16_floats(run("d2bf", bf_d)), as_bf16_floats(want))
print(json.dumps(out))
"""


def _child(code, *args):
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, f"the child died ({p.returncode}):\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_conversion_helpers_match_numpy():
    got = _child(_HELPERS_CHILD)
    # the code calls the helpers (the CPU it is compiled for has no instruction for them)
    assert got.pop("asm") == ["__extendhfsf2", "__truncdfbf2", "__truncdfhf2",
                              "__truncsfbf2", "__truncsfhf2"]
    for name, r in got.items():
        assert r["n"] > 60000 and r["bad"] == 0, (name, r)


_KERNEL_CHILD = r"""
import json, sys
import numpy as np
import tecomp as tc

A = tc.placeholder((65536,), dtype="float16", name="A")
W = tc.compute((65536,), lambda i: A[i].astype("float32"), name="W")
X = tc.placeholder((4096,), dtype="float32", name="X")
N = tc.compute((4096,), lambda i: X[i].astype("float16"), name="N")
H = tc.placeholder((1000,), dtype="float16", name="H")
P = tc.compute((1000,), lambda i: H[i] * H[i] + tc.const(1, "float16"), name="P")
out = {}
for name, args, t in (("widen", [A, W], W), ("narrow", [X, N], N), ("poly", [H, P], P)):
    s = tc.create_schedule(t.op)
    s[t].vectorize(s[t].op.axis[0])
    f = tc.build(s, args, target="llvm -mcpu=x86-64")
    asm = f.get_source("asm")
    out[name + "_calls"] = [h for h in ("__extendhfsf2", "__truncsfhf2") if h in asm]
    f.export_library(sys.argv[1] + f"/{name}.so")
    g = tc.load_module(sys.argv[1] + f"/{name}.so")
    rng = np.random.default_rng(1)
    if name == "widen":
        x = np.arange(65536, dtype=np.uint16).view(np.float16)
        want = x.astype(np.float32)
    elif name == "narrow":
        x = (rng.standard_normal(4096) * np.logspace(-9, 6, 4096)).astype(np.float32)
        want = x.astype(np.float16)
    else:
        x = rng.uniform(-200, 200, 1000).astype(np.float16)
        want = (x.astype(np.float32) * x.astype(np.float32) + 1).astype(np.float16)
    jit_y, lib_y = np.zeros_like(want), np.zeros_like(want)
    f(x, jit_y)
    g(x, lib_y)
    nan = np.isnan(want)
    u = f"u{want.itemsize}"
    out[name] = {"jit_vs_numpy": int(((jit_y.view(u) != want.view(u)) & ~nan).sum()),
                 "lib_vs_numpy": int(((lib_y.view(u) != want.view(u)) & ~nan).sum()),
                 "nan_kept": bool((np.isnan(jit_y) == nan).all())}
print(json.dumps(out))
"""


def test_float16_kernels_for_a_cpu_without_f16c(tmp_path):
    """float16 kernels compiled for a generic x86-64 (no F16C) run in the JIT as in an
    exported library (which links libgcc's helpers), and as numpy converts."""
    got = _child(_KERNEL_CHILD, str(tmp_path))
    assert got["widen_calls"] == ["__extendhfsf2"] and "__truncsfhf2" in got["narrow_calls"]
    for name in ("widen", "narrow", "poly"):
        assert got[name] == {"jit_vs_numpy": 0, "lib_vs_numpy": 0, "nan_kept": True}, got


def test_undefined_symbols_of_an_object():
    from tecomp.codegen.llvm import jit

    with pytest.raises(RuntimeError, match="not a readable ELF64 file"):
        jit.undefined_symbols(b"\x7fELF" + b"\0" * 10)

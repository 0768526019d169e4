"""tc.Target: parsing, the machine facts it holds, cross-targeting (AVX2 and SSE code built
and run on this machine), and compute definitions that do not depend on it."""
import json
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.strategy import cpu as sc
from tecomp.target import Target

RNG = np.random.default_rng(7)


def _arr(*shape):
    return RNG.standard_normal(shape).astype("float32")


# ---------------------------------------------------------------------------------------
# parsing


@pytest.mark.parametrize("text,canon", [
    ("llvm", "llvm"),
    ("  llvm  ", "llvm"),
    ("llvm -mcpu=haswell", "llvm -mcpu=haswell"),
    ("llvm --mcpu=haswell", "llvm -mcpu=haswell"),
    ("llvm -mattr=+avx2,+fma", "llvm -mattr=+avx2,+fma"),
    ("llvm -num-cores=4 -mcpu=znver4", "llvm -mcpu=znver4 -num-cores=4"),
    ("cuda -arch=sm_90", "cuda -arch=sm_90"),
    ("cuda", "cuda"),
    ("cuda-emu", "cuda-emu"),
])
def test_parse_and_print(text, canon):
    from tecomp.target import names_host
    from tecomp.target.host import host_cpu as _host_cpu

    # the host's own CPU by name is the host: printed without it (on a Zen 4, znver4),
    # where the name describes it (names_host: not a hypervisor's masked model)
    if names_host(_host_cpu()):
        canon = canon.replace(f" -mcpu={_host_cpu()}", "")
    t = tc.Target(text)
    assert str(t) == canon
    assert t == canon and t == tc.Target(canon) and hash(t) == hash(tc.Target(canon))
    assert tc.Target(t) == t
    assert pickle.loads(pickle.dumps(t)) == t
    assert repr(t) == f"tc.Target({canon!r})"


def test_immutable():
    t = tc.Target("llvm")
    with pytest.raises(AttributeError, match="immutable"):
        t.mcpu = "haswell"


@pytest.mark.parametrize("text,lanes,vregs,fma", [
    ("llvm -mcpu=haswell", 8, 16, True),
    ("llvm -mcpu=sandybridge", 8, 16, False),
    ("llvm -mcpu=x86-64", 4, 16, False),
    ("llvm -mattr=+avx2,+fma", 8, 16, True),
    ("llvm -mcpu=skylake-avx512", 16, 32, True),
    ("llvm -mcpu=skylake-avx512 -mattr=-avx512f", 8, 16, True),
    ("llvm -mcpu=haswell -mattr=+avx512f", 16, 32, True),
    ("llvm -mcpu=znver4", 16, 32, True),
])
def test_vector_facts_of_named_cpus(text, lanes, vregs, fma):
    t = tc.Target(text)
    assert (t.lanes, t.vregs, t.has_feature("fma")) == (lanes, vregs, fma)
    from tecomp.target import names_host

    assert t.is_host == ((t.mcpu is None or names_host(t.mcpu)) and t.mattr == ())
    info = sc.cpu_model(t)
    assert (info.lanes, info.vregs, info.target) == (lanes, vregs, str(t))


def test_caches_of_named_cpus_and_cores():
    z4 = tc.Target("llvm -mcpu=znver4 -num-cores=8")
    assert (z4.l1_bytes, z4.l2_bytes, z4.threads) == (32 << 10, 1 << 20, 8)
    hw = tc.Target("llvm -mcpu=haswell")
    assert hw.l2_bytes == 256 << 10
    assert hw.threads == tc.get_num_threads()
    info = sc.cpu_model("llvm -mcpu=znver4 -num-cores=8")
    assert (info.l2_bytes, info.threads) == (1 << 20, 8)


def test_measured_costs_of_named_cpus():
    # Zen 4 runs a 16-lane FMA as two 8-lane halves, Zen 5 whole (benchmarks/machine_probe.py)
    z4, z5 = (tc.Target(f"llvm -mcpu={c}").machine for c in ("znver4", "znver5"))
    assert (z4.lanes, z4.fma_lanes, z5.lanes, z5.fma_lanes) == (16, 8, 16, 16)
    assert z4.split_loads_cheap and 0 < z5.transpose_cost < z5.gather_cost
    # an unmeasured CPU: the defaults, the FMA as wide as the register
    sk = tc.Target("llvm -mcpu=skylake-avx512").machine
    assert sk.fma_lanes == sk.lanes and not sk.split_loads_cheap


def test_host_is_read_from_the_machine():
    from tecomp.codegen.llvm import jit as llvm_jit

    h = tc.Target("llvm")
    assert h.is_host and h.cpu == llvm_jit.host().cpu
    assert h.has_feature("avx512f") == llvm_jit.host().has_feature("avx512f")
    assert h.lanes == (16 if h.has_feature("avx512f") else 8 if h.has_feature("avx") else 4)
    # the host by name is the host (where the name describes it: names_host), and as native
    from tecomp.target import names_host

    assert tc.Target(f"llvm -mcpu={h.cpu}").is_host == names_host(h.cpu)
    assert tc.Target("llvm -mcpu=native").is_host
    assert h.runs_here() is None


def test_cuda_limits_have_one_home():
    from tecomp.codegen import cuda
    from tecomp.lower import passes

    t = tc.Target("cuda -arch=sm_90")
    assert t.arch == "sm_90" and t.max_threads_per_block == 1024 and t.warp_size == 32
    assert cuda.MAX_THREADS_PER_BLOCK is passes.MAX_THREADS_PER_BLOCK is t.max_threads_per_block
    assert cuda.MAX_STATIC_SHARED_BYTES == t.max_static_shared_bytes == 48 * 1024
    assert tuple(passes.MAX_BLOCK_DIM.values()) == cuda.MAX_BLOCK_DIMS == t.max_block_dims
    with pytest.raises(tc.TargetError, match="lanes|property of llvm targets"):
        t.l2_bytes


# ---------------------------------------------------------------------------------------
# cross-targeting: the AVX2 / SSE schedules, compiled for those CPUs, run here

CROSS = ["llvm -mcpu=haswell", "llvm -mattr=+avx2,+fma", "llvm -mcpu=x86-64"]


def _ops_of_target(target):
    """(name, args, inputs, reference, schedule) for the tecomp.nn templates."""
    A = tc.placeholder((45, 70), name="A")
    B = tc.placeholder((70, 37), name="B")
    C = nn.matmul(A, B)
    a, b = _arr(45, 70), _arr(70, 37)
    yield "matmul", [A, B, C], [a, b], a.astype("float64") @ b, sc.schedule_matmul(C, target)
    X = tc.placeholder((13, 70), name="X")
    W = tc.placeholder((21, 70), name="W")
    D = nn.dense(X, W)
    x, w = _arr(13, 70), _arr(21, 70)
    yield "dense", [X, W, D], [x, w], x.astype("float64") @ w.T, sc.schedule_dense(D, target)
    I = tc.placeholder((2, 8, 12, 12), name="I")
    K = tc.placeholder((16, 8, 3, 3), name="K")
    O = nn.relu(nn.conv2d_nchw(I, K, stride=1, padding=1))
    i, k = _arr(2, 8, 12, 12), _arr(16, 8, 3, 3)
    ref = np.zeros((2, 16, 12, 12))
    ip = np.pad(i.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for dy in range(3):
        for dx in range(3):
            ref += np.einsum("nchw,oc->nohw", ip[:, :, dy:dy + 12, dx:dx + 12], k[:, :, dy, dx])
    yield "conv", [I, K, O], [i, k], np.maximum(ref, 0), sc.schedule_conv2d_nchw(O, target)
    S = tc.placeholder((9, 50), name="S")
    Y = nn.softmax(S)
    s_ = _arr(9, 50).astype("float64")
    e = np.exp(s_ - s_.max(1, keepdims=True))
    yield "softmax", [S, Y], [s_.astype("float32")], e / e.sum(1, keepdims=True), \
        sc.schedule_softmax(Y, target)


@pytest.mark.parametrize("target", CROSS)
def test_cross_target_schedules_run_here(target):
    t = tc.Target(target)
    assert t.runs_here() is None  # every x86-64 machine tecomp runs on has these
    for name, args, ins, ref, s in _ops_of_target(target):
        f = tc.build(s, args, target=target)
        assert f.target == t
        out = np.full([int(e.value) for e in args[-1].shape], np.nan, "float32")
        f(*ins, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1, np.abs(ref).max()),
                                   err_msg=f"{name} for {target}")
        asm = f.get_source("asm")
        assert "zmm" not in asm, f"{name} for {target}: AVX-512 registers in the code"
        if t.lanes == 4:
            assert "ymm" not in asm, f"{name} for {target}: AVX registers in the code"
        else:
            assert "ymm" in asm, f"{name} for {target}: no AVX vectors"
        ir = f.get_source("llvm-unopt")
        # (on a Haswell, "llvm -mcpu=haswell" is the host: compiled without attributes)
        assert (f'"target-cpu"="{t.cpu}"' in ir) == (not t.is_host)


def test_host_target_keeps_its_code():
    """The host target's modules carry no target attributes (LLVM's host TargetMachine
    compiles them, AVX-512 where the host has it)."""
    A = tc.placeholder((64, 64), name="A")
    B = tc.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].op.axis[1])
    f = tc.build(s, [A, B])
    assert f.target == tc.Target("llvm") and "target-cpu" not in f.get_source("llvm-unopt")


def test_schedules_follow_the_target_not_the_host():
    """The same matmul scheduled for Haswell and for Skylake-AVX512: 8- and 16-lane
    register blocks, in the IR and in the code."""
    A = tc.placeholder((64, 64), name="A")
    B = tc.placeholder((64, 64), name="B")
    C = nn.matmul(A, B)
    texts = {}
    for t in ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"):
        s = sc.schedule_matmul(C, t)
        texts[t] = str(tc.lower(s, [A, B, C], target=t))
        assert tc.lower(s, [A, B, C], target=t).attrs["target"] == tc.Target(t)
    assert "vectorized (j.inner.inner, 0, 16)" in texts["llvm -mcpu=haswell"]
    assert "vectorized (j.inner.inner, 0, 32)" in texts["llvm -mcpu=skylake-avx512"]


def test_auto_schedule_for_a_target():
    A = tc.placeholder((48, 96), name="A")
    B = tc.placeholder((96, 40), name="B")
    k = tc.reduce_axis((0, 96), name="k")
    C = tc.compute((48, 40), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = _arr(48, 96), _arr(96, 40)
    for t in ("llvm -mcpu=haswell", "llvm -mcpu=x86-64"):
        s = tc.auto_schedule([A, B, C], target=t)
        f = tc.build(s, [A, B, C], target=t)
        out = np.zeros((48, 40), "float32")
        f(a, b, out)
        np.testing.assert_allclose(out, a.astype("float64") @ b, rtol=1e-4, atol=1e-3)
        assert "zmm" not in f.get_source("asm")


def test_module_for_a_missing_feature_refuses_to_run():
    t = tc.Target("llvm -mattr=+fma4")   # AMD's FMA4: no Intel or Zen CPU has it
    if t.runs_here() is None:
        pytest.skip("this CPU has FMA4")
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[i] * A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].op.axis[0])
    f = tc.build(s, [A, B], target=t)
    assert f.get_source("asm")                          # the code is there
    with pytest.raises(tc.TargetError, match="cannot run on this machine.*fma4"):
        f(np.ones(64, "float32"), np.zeros(64, "float32"))
    with pytest.raises(tc.AutoScheduleError, match="cannot measure here"):
        tc.auto_schedule([A, B], target=t, trials=2)


# ---------------------------------------------------------------------------------------
# compute definitions and gradients do not depend on the target


def _conv_grad_text(lanes, monkeypatch):
    """The printed gradients of convolutions whose gradients have several formulations:
    narrow phases as NHWC convolutions (16 channels, stride 2 on 5x5), the weight gradient
    over panels (512 channels at 7x7), through NHWC (stride 2), over flat rows (256 at
    30x30)."""
    monkeypatch.setenv("TECOMP_VECTOR_LANES", str(lanes))
    texts = []
    for (C, H, stride, O) in [(16, 5, 2, 2), (512, 7, 1, 512), (64, 28, 2, 64),
                              (256, 30, 1, 256)]:
        X = tc.placeholder((1, C, H, H), name="X")
        W = tc.placeholder((O, C, 3, 3), name="W")
        Y = nn.conv2d_nchw(X, W, stride=stride, padding=1)
        Hd = tc.placeholder(Y.shape, name="H")
        gx, gw = tc.gradient(Y, [X, W], head=Hd)
        s = tc.create_schedule([gx.op, gw.op])
        texts.append(str(tc.lower(s, [X, W, Hd, gx, gw])))
    return texts


def test_gradients_are_the_same_for_every_vector_width(monkeypatch):
    """tc.gradient of convolutions whose gradients have several formulations (NHWC,
    panels, flat rows, phases): the same printed IR whatever width the schedules see,
    and no machine query on the way."""
    avx512 = _conv_grad_text(16, monkeypatch)
    avx2 = _conv_grad_text(8, monkeypatch)
    assert avx512 == avx2

    def no_machine(*a, **k):
        raise AssertionError("tc.gradient asked about the machine")

    for fact in ("machine", "lanes", "vregs", "l1_bytes", "l2_bytes", "l3_bytes", "threads"):
        monkeypatch.setattr(Target, fact, property(no_machine))
    assert _conv_grad_text(8, monkeypatch) == avx2


def test_schedule_backward_for_a_target():
    from tecomp.strategy import schedule_backward

    X = tc.placeholder((8, 40), name="X")
    W = tc.placeholder((24, 40), name="W")
    Y = nn.dense(X, W)
    gx, gw = tc.gradient(Y, [X, W])
    t = "llvm -mcpu=haswell"
    s = schedule_backward([gx, gw], target=t)
    f = tc.build(s, [X, W, gx, gw], target=t)
    x, w = _arr(8, 40), _arr(24, 40)
    ox, ow = np.zeros((8, 40), "float32"), np.zeros((24, 40), "float32")
    f(x, w, ox, ow)
    ones = np.ones((8, 24))
    np.testing.assert_allclose(ox, ones @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ow, ones.T @ x, rtol=1e-4, atol=1e-4)
    assert "zmm" not in f.get_source("asm")


# ---------------------------------------------------------------------------------------
# the features of a target are LLVM's; code needing one this CPU lacks never runs here

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_features_are_llvms_for_the_cpu_and_mattr():
    spr = tc.Target("llvm -mcpu=sapphirerapids")
    # what tecomp's own table never listed: FP16, AMX, VBMI, GFNI ...
    assert {"avx512fp16", "amx-tile", "avx512vbmi", "gfni", "avx512bf16"} <= spr.features
    assert "avx512fp16" in spr.checked_features and "amx-tile" not in spr.checked_features
    hsw = tc.Target("llvm -mcpu=haswell")
    assert {"avx2", "fma", "f16c", "bmi2", "movbe"} <= hsw.features
    assert not any(f.startswith("avx512") for f in hsw.features)
    # a removal takes what needs it along; an addition brings what it implies
    no512 = tc.Target("llvm -mcpu=skylake-avx512 -mattr=-avx512f")
    assert not any(f.startswith("avx512") for f in no512.features) and "fma" in no512.features
    fp16 = tc.Target("llvm -mattr=+avx512fp16")
    assert {"avx512fp16", "avx512bw", "avx512f", "avx2", "f16c"} <= fp16.features
    assert tc.Target("llvm -mcpu=x86-64").features >= {"sse2", "cmov", "cx8"}
    assert not tc.Target("llvm -mcpu=x86-64").features & {"sse3", "avx", "f16c", "popcnt"}
    # the host by its name, and as native, is the host
    assert tc.Target("llvm -mcpu=native") == tc.Target("llvm")
    assert tc.Target("llvm -mcpu=native").is_host


_MISSING_FEATURE_CHILD = r"""
import json, sys
import numpy as np
import tecomp as tc
from tecomp.target import host as T
from tecomp.runtime import aot_format

target, drop, lib = sys.argv[1], sys.argv[2].split(",") if sys.argv[2] else [], sys.argv[3]
if drop:   # a CPU without these features, as the checks see it
    T.read_host()
    T._HOST_INFO["features"] = T._HOST_INFO["features"] - set(drop)
    real = aot_format.host_cpu_features
    aot_format.host_cpu_features = lambda: real() - set(drop)
A = tc.placeholder((256,), dtype="float16", name="A")
B = tc.compute((256,), lambda i: A[i] * A[i], name="B")
s = tc.create_schedule(B.op)
s[B].vectorize(B.op.axis[0])
f = tc.build(s, [A, B], target=target)
out = {"asm": f.get_source("asm")}
a = np.linspace(-2, 2, 256).astype("float16")
try:
    f(a, np.zeros_like(a))
    out["call"] = "ran"
except tc.TargetError as e:
    out["call"] = str(e)
f.export_library(lib)
try:
    tc.load_module(lib)(a, np.zeros_like(a))
    out["load"] = "ran"
except tc.LoadError as e:
    out["load"] = str(e)
print(json.dumps(out))
"""


def _run_missing_feature_child(target, drop, tmp_path):
    p = subprocess.run([sys.executable, "-c", _MISSING_FEATURE_CHILD, target, ",".join(drop),
                        str(tmp_path / "lib.so")], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, f"the child died ({p.returncode}):\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_fp16_code_refuses_a_cpu_without_avx512_fp16(tmp_path):
    """Code for Sapphire Rapids multiplies float16 with vmulph (AVX512-FP16), which a Zen 4
    lacks: on such a CPU (simulated: the checks see this one without avx512fp16) neither
    the module nor its exported library runs it; both name the feature and the fix."""
    drop = ["avx512fp16"] if tc.Target("llvm").has_feature("avx512fp16") else []
    got = _run_missing_feature_child("llvm -mcpu=sapphirerapids", drop, tmp_path)
    assert "vmulph" in got["asm"]   # an AVX512-FP16 instruction
    assert re.search(r"cannot run on this machine: code for llvm -mcpu=sapphirerapids may use "
                     r"(\S+, )*avx512fp16\b.*'llvm -mcpu=native'.*-mattr=(\S+,)*-avx512fp16",
                     got["call"]), got["call"]
    assert re.search(r"needs the CPU feature\(s\) (\S+, )*avx512fp16\b.*illegal instruction",
                     got["load"]), got["load"]


def _target_this_cpu_cannot_run():
    """A named CPU (else an -mattr) whose code may use a feature this CPU lacks, and the
    feature; None where this CPU has every feature of them all."""
    host = tc.Target("llvm").features
    for name in tc.target.CPUS:
        t = tc.Target(f"llvm -mcpu={name}")
        missing = sorted(t.checked_features - host)
        if missing and not t.is_host:
            return str(t), missing[0]
    for f in ("fma4", "xop", "tbm", "sse4a", "avx512fp16", "avx512vp2intersect"):
        if f not in host:
            return f"llvm -mattr=+{f}", f
    return None


def test_code_for_a_feature_this_cpu_lacks_is_refused(tmp_path):
    """The same on the real CPU, whichever it is: a target whose code this CPU cannot run
    (Zen code on an Intel CPU, Sapphire Rapids code on a Zen 4, ...) is refused when
    called and when loaded, naming a feature it lacks."""
    found = _target_this_cpu_cannot_run()
    if found is None:
        pytest.skip("this CPU has every feature of every target tecomp names")
    target, feature = found
    got = _run_missing_feature_child(target, [], tmp_path)
    assert re.search(rf"cannot run on this machine: code for {re.escape(target)} may use "
                     rf".*\b{re.escape(feature)}\b", got["call"]), got["call"]
    assert re.search(rf"needs the CPU feature\(s\) .*\b{re.escape(feature)}\b", got["load"]), \
        got["load"]


#: the features each CPU of the table lists, which must be LLVM's for it (the table stands
#: in for LLVM where it cannot be asked): the vector ISA tecomp's code generator picks
_TABLE_FEATURES = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                   "avx512vnni", "avx512bf16", "sse4a")


@pytest.mark.parametrize("name", sorted(tc.target.CPUS))
def test_table_of_named_cpus_agrees_with_llvm(name):
    """Every x86 CPU tecomp knows by name: the table's features (used where LLVM cannot be
    asked) are LLVM's for that CPU, as far as the code generator asks, and its caches are
    plausible per-core / whole-chip sizes."""
    from tecomp.target import x86
    from tecomp.target.host import llvm_cpu_features

    llvm = llvm_cpu_features(name, "")
    if llvm is None:
        pytest.skip("no LLVM here")
    table, l1, l2, l3 = x86.CPUS[name]
    for f in _TABLE_FEATURES:
        assert (f in table) == (f in llvm), (name, f)
    assert 16 << 10 <= l1 <= 64 << 10 and 128 << 10 <= l2 <= 4 << 20 and l2 <= l3 <= 1 << 30


@pytest.mark.parametrize("name,lanes,has,lacks,caches", [
    # client parts with AVX-512 (Ice Lake, Tiger Lake, Rocket Lake: no BF16, no FP16)
    ("rocketlake", 16, {"avx512vnni", "avx512vbmi2"}, {"avx512bf16", "avx512fp16", "amx-tile"},
     (48 << 10, 512 << 10, 16 << 20)),
    ("tigerlake", 16, {"avx512vnni", "avx512vp2intersect"}, {"avx512fp16"},
     (48 << 10, 1280 << 10, 12 << 20)),
    ("icelake-client", 16, {"avx512vnni"}, {"avx512bf16"}, (48 << 10, 512 << 10, 8 << 20)),
    ("cannonlake", 16, {"avx512ifma"}, {"avx512vnni"}, (32 << 10, 256 << 10, 4 << 20)),
    # servers
    ("cooperlake", 16, {"avx512bf16", "avx512vnni"}, {"avx512fp16"},
     (32 << 10, 1 << 20, 38 << 20)),
    ("graniterapids", 16, {"avx512fp16", "avx512bf16", "amx-tile", "amx-fp16"}, set(),
     (48 << 10, 2 << 20, 504 << 20)),
    # AVX2 only: hybrid clients (AVX-VNNI, no AVX-512) and E-core servers
    ("raptorlake", 8, {"avxvnni", "fma"}, {"avx512f"}, (48 << 10, 2 << 20, 36 << 20)),
    ("meteorlake", 8, {"avxvnni"}, {"avx512f"}, (48 << 10, 2 << 20, 24 << 20)),
    ("arrowlake", 8, {"avxvnni"}, {"avx512f"}, (48 << 10, 3 << 20, 36 << 20)),
    ("lunarlake", 8, {"avxvnni"}, {"avx512f"}, (48 << 10, 2560 << 10, 12 << 20)),
    ("sierraforest", 8, {"avxvnni"}, {"avx512f"}, (32 << 10, 1 << 20, 96 << 20)),
    ("znver1", 8, {"sse4a", "fma"}, {"avx512f"}, (32 << 10, 512 << 10, 8 << 20)),
])
def test_named_foreign_cpus(name, lanes, has, lacks, caches):
    """A CPU named with -mcpu is LLVM's CPU of that name: its features (asked of LLVM),
    the vector width and registers that follow, the table's caches, and the schedules'
    machine model for them; it prints its name back (it is not the host; where the host
    is that CPU, its caches are the host's own)."""
    from tecomp.target import names_host

    t = tc.Target(f"llvm -mcpu={name} -num-cores=4")
    assert str(t) == f"llvm -mcpu={name} -num-cores=4" and tc.Target(str(t)) == t
    assert t.cpu == name and not t.is_host
    assert has <= t.features and not (lacks & t.features)
    assert (t.lanes, t.vregs) == (lanes, 32 if lanes == 16 else 16)
    m = t.machine
    assert (m.lanes, m.masks, m.threads) == (lanes, lanes == 16, 4)
    if not names_host(name):
        assert (t.l1_bytes, t.l2_bytes, t.l3_bytes) == caches
        assert (m.l1_bytes, m.l2_bytes, m.l3_bytes) == caches
    # the template schedules build for it (AVX-512 or AVX2 blockings)
    C = nn.conv2d_nhwc(tc.placeholder((1, 14, 14, 32), name="d"),
                       tc.placeholder((3, 3, 32, 32), name="w"), padding=1)
    p = sc.conv2d_nhwc_params(C, m)
    assert p.ob == 2 * lanes


def test_code_for_a_named_client_part_has_none_of_the_servers_instructions():
    """-mcpu=rocketlake code is a Rocket Lake's, wherever it is built: a float16 product
    without AVX512-FP16's vmulph (on a Xeon that KVM has LLVM name rocketlake, the name
    was the host, and its code used the host's FP16); it runs here when this CPU has
    AVX-512."""
    A = tc.placeholder((256,), dtype="float16", name="A")
    B = tc.compute((256,), lambda i: A[i] * A[i], name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    f = tc.build(s, [A, B], target="llvm -mcpu=rocketlake")
    asm = f.get_source("asm")
    assert "vmulph" not in asm and ("zmm" in asm or "ymm" in asm)
    if tc.Target("llvm -mcpu=rocketlake").runs_here() is None:
        a = np.linspace(-2, 2, 256).astype("float16")
        b = np.zeros_like(a)
        f(a, b)
        np.testing.assert_array_equal(b, a * a)


def _masked_host(monkeypatch, name, features):
    """This process's host seen as a CPU that LLVM names ``name`` with ``features`` (a
    hypervisor that masks the model number: LLVM names a server part after a client one)."""
    import tecomp.target as T
    from tecomp.target import host as H

    H.read_host()
    monkeypatch.setitem(H._HOST_INFO, "cpu", name)
    monkeypatch.setitem(H._HOST_INFO, "features", frozenset(features))
    monkeypatch.setattr(T, "_NAMES_HOST", {})
    monkeypatch.setenv("TECOMP_CALIBRATE", "0")


def test_a_masked_host_is_the_host_and_its_name_another_cpu(monkeypatch):
    """KVM masks a Xeon's model number and LLVM names the host ``rocketlake`` (a client
    part without AVX512-FP16, AVX512-BF16 or AMX): ``tc.Target("llvm")`` and
    ``-mcpu=native`` are still the host (its own features, its caches from sysfs), while
    ``-mcpu=rocketlake`` is LLVM's Rocket Lake, whose code runs on a real one (no FP16,
    the table's caches) and whose table entries are not the host's."""
    from tecomp.target import host as H, names_host, measured_costs, x86
    from tecomp.target.host import llvm_cpu_features

    spr = llvm_cpu_features("sapphirerapids", "")
    if spr is None:
        pytest.skip("no LLVM here")
    _masked_host(monkeypatch, "rocketlake", spr)
    assert not names_host("rocketlake") and not names_host("sapphirerapids")
    host, native = tc.Target("llvm"), tc.Target("llvm -mcpu=native")
    assert host.is_host and native.is_host and native == host and host.cpu == "rocketlake"
    assert {"avx512fp16", "avx512bf16"} <= host.features
    assert host.l2_bytes == H.host_cache(2, 512 << 10)
    rkl = tc.Target("llvm -mcpu=rocketlake")
    assert not rkl.is_host and str(rkl) == "llvm -mcpu=rocketlake" and rkl != host
    assert "avx512vnni" in rkl.features and not {"avx512fp16", "avx512bf16"} & rkl.features
    assert (rkl.l2_bytes, rkl.l3_bytes) == x86.CPUS["rocketlake"][2:]
    assert rkl.runs_here() is None      # a subset of the host's features
    # a measured entry under the masked name is another CPU's: not the host's costs
    monkeypatch.setitem(x86.MEASURED, "rocketlake", {"gather_cost": 9.0})
    assert measured_costs(rkl) == {"gather_cost": 9.0}
    assert "gather_cost" not in measured_costs(host)


def test_a_host_named_truly_is_the_host_by_name(monkeypatch):
    """Where LLVM's name for the host describes it (its features cover the host's), the
    name is the host, as before: printed without -mcpu, its caches from sysfs; a host
    without some of the named CPU's features (a hypervisor hides them) too."""
    from tecomp.target import host as H, names_host
    from tecomp.target.host import llvm_cpu_features

    spr = llvm_cpu_features("sapphirerapids", "")
    if spr is None:
        pytest.skip("no LLVM here")
    # (one the name lacks that is no vector extension: a hypervisor's, not another part)
    _masked_host(monkeypatch, "sapphirerapids", (spr - {"avx512fp16"}) | {"sse4a"})
    assert names_host("sapphirerapids")
    t = tc.Target("llvm -mcpu=sapphirerapids")
    assert t.is_host and str(t) == "llvm" and t == tc.Target("llvm")
    assert t.l2_bytes == H.host_cache(2, 512 << 10) and "avx512fp16" not in t.features


def test_a_host_whose_features_llvm_cannot_list_is_named_truly(monkeypatch):
    """LLVM may name the host yet fail to report its features (``read_host`` then knows
    no feature names, and ``llvm_cpu_features`` gives None): ``names_host`` has nothing to
    compare and keeps the name the host's, where it used to subtract None from a set
    (a TypeError in every build that asked; the fuzzer's workers hit it)."""
    import tecomp.target as T
    from tecomp.target import host as H

    H.read_host()
    monkeypatch.setitem(H._HOST_INFO, "names", None)
    monkeypatch.setattr(T, "_NAMES_HOST", {})
    monkeypatch.setattr(H, "_FEATURES_OF", {})
    assert H.llvm_cpu_features(H.host_cpu(), "") is None
    assert T.names_host(H.host_cpu()) is (T.host_isa() is not None)
    assert not T.names_host("not-this-cpu")


def test_features_llvm_emits_only_for_intrinsics_are_not_compared(monkeypatch):
    """A hypervisor may hide PKU or RDRAND: code for a CPU with them still runs (LLVM
    never emits their instructions for a kernel); one a tensor intrinsic requires counts."""
    from tecomp.target import host as T

    t = tc.Target("llvm -mcpu=skylake-avx512")
    assert {"pku", "rdrnd"} <= t.features - t.checked_features
    T.read_host()
    monkeypatch.setitem(T._HOST_INFO, "features",
                        (T._HOST_INFO["features"] | t.checked_features) - {"pku", "rdrnd"})
    assert t.missing_here() == ()
    assert t.missing_here(required=("pku",)) == ("pku",)


@pytest.mark.parametrize("triple, isa", [
    ("aarch64-unknown-linux-gnu", "aarch64"), ("aarch64-none-linux-gnu", "aarch64"),
    ("aarch64-linux-musl", "aarch64"), ("aarch64-linux-android", "aarch64"),
    ("arm64-linux-gnu", "aarch64"), ("x86_64-pc-linux-gnu", "x86-64"),
    ("x86_64-unknown-linux", "x86-64")])
def test_linux_triples_of_every_vendor_are_taken(triple, isa):
    """Only the system part of -mtriple is checked (Linux, 64-bit pointers): the vendor
    is free; tests/must_fail/test_cross_target_errors.py has the refused ones."""
    t = Target("llvm -mtriple=" + triple)
    assert t.isa == isa and str(t) == "llvm -mtriple=" + triple
    assert "linux" in t.triple

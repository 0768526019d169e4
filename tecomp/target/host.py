"""The host machine, read once: the CPU LLVM names and its features, the names of the
features LLVM knows, the cache sizes sysfs gives, the CPU's model name."""
from __future__ import annotations

import os
import platform
import re
import sys
import threading
from typing import Dict, FrozenSet, Optional, Tuple

from .x86 import HASWELL_FEATURES

_LOCK = threading.Lock()
_HOST_INFO: Dict[str, object] = {}

#: Held around every call into LLVM: this module's questions to it and every compilation
#: of :mod:`tecomp.codegen.llvm.jit` (LLVM's global state is not thread-safe).
LLVM_LOCK = threading.RLock()


def _llvmlite_lock():
    """llvmlite's own lock around every call into its library (``ffi.lib._lock``: an
    object with a ``_lock`` RLock), where llvmlite is loaded and has it; else None."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    lock = getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)
    return lock if hasattr(lock, "acquire") else None


def _hold_for_fork() -> None:
    # a fork() waits for the thread that is inside LLVM: a child forked in the middle of
    # an LLVM call inherits LLVM's state half-changed by a thread it does not have, and
    # llvmlite's own lock held forever (the fuzzer's threads family: children forked
    # while another thread built hung in their first llvmlite call, ffi.py __enter__;
    # llvmlite takes its lock outside tecomp's too: objects disposed of by the garbage
    # collector in any thread)
    LLVM_LOCK.acquire()
    lock = _llvmlite_lock()
    if lock is not None:
        lock.acquire()


def _release_after_fork() -> None:
    lock = _llvmlite_lock()
    if lock is not None:
        lock.release()
    LLVM_LOCK.release()


def _new_lock_in_child() -> None:
    # the child's locks are new ones (the parent's stay held by the forking thread until
    # _release_after_fork, which runs in the parent only)
    global LLVM_LOCK
    LLVM_LOCK = threading.RLock()
    if _llvmlite_lock() is not None:
        sys.modules["llvmlite.binding.ffi"].lib._lock._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_hold_for_fork, after_in_parent=_release_after_fork,
                        after_in_child=_new_lock_in_child)


def _llvm():
    """llvmlite's binding (imported on first use: a loaded library runs without it)."""
    import llvmlite.binding as llvm

    return llvm


def host_cpu() -> str:
    """The host CPU's LLVM name (``"emeraldrapids"``, ``"znver4"``)."""
    if "cpu" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["cpu"]  # type: ignore[return-value]


def host_triple() -> str:
    """This process's LLVM target triple (``"x86_64-unknown-linux-gnu"``); without LLVM,
    the machine's (``platform.machine()``) with an unknown vendor."""
    if "features" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["triple"] or f"{platform.machine().lower()}-unknown-linux-gnu"  # type: ignore[return-value]


def host_features() -> FrozenSet[str]:
    """The host CPU's features (LLVM's names, without ``+``)."""
    if "features" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["features"]  # type: ignore[return-value]


def host_feature_string() -> str:
    """The host's features as LLVM gives them (``"+avx2,-amx-tile,..."``; empty without
    LLVM): the ``features`` of a TargetMachine for this CPU."""
    if "features" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["feature_string"]  # type: ignore[return-value]


def feature_names() -> Optional[FrozenSet[str]]:
    """Every feature name LLVM knows (None without LLVM)."""
    if "features" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["names"]  # type: ignore[return-value]


def read_host() -> None:
    """Ask LLVM (once) for the host CPU, its features and every feature name it knows."""
    with _LOCK:
        if "features" in _HOST_INFO:
            return
        try:
            llvm = _llvm()
            with LLVM_LOCK:
                cpu = llvm.get_host_cpu_name()
                try:
                    text = llvm.get_host_cpu_features().flatten()
                except RuntimeError:  # some hosts cannot report features
                    text = ""
                triple = llvm.get_process_triple()
            feats = frozenset(f[1:] for f in text.split(",") if f.startswith("+"))
            names = frozenset(f[1:] for f in text.split(",") if f[1:]) or None
        except Exception:  # noqa: BLE001 - no LLVM here: a plain AVX2 machine
            cpu, text, triple, feats, names = "haswell", "", "", HASWELL_FEATURES, None
        _HOST_INFO["cpu"] = cpu
        _HOST_INFO["names"] = names
        _HOST_INFO["feature_string"] = text
        _HOST_INFO["triple"] = triple
        _HOST_INFO["features"] = feats


#: features X86's inliner does not compare (its InlineFeatureIgnoreList), which the probe
#: of :func:`llvm_cpu_features` therefore cannot see
PROBE_BLIND = frozenset({"64bit", "cx16", "sahf"})
_FEATURES_OF: Dict[Tuple[str, str], FrozenSet[str]] = {}
#: the TargetMachine the probes of :func:`llvm_cpu_features` run on, by triple (kept: it
#: caches a subtarget per function feature string, the same in every probe)
_PROBE_TM: Dict[str, object] = {}


def llvm_cpu_features(cpu: str, features: str) -> Optional[FrozenSet[str]]:
    """The CPU features (LLVM's names, among :func:`feature_names`) code compiled with
    ``"target-cpu"=cpu`` and ``"target-features"=features`` may use: the CPU's own,
    plus what ``features`` adds and everything that implies, less what it removes and
    everything that needs it; None without LLVM.  :data:`PROBE_BLIND` features are
    reported only when ``features`` adds them (``64bit`` always).

    llvmlite has no call for a CPU's feature set; LLVM's inliner answers the question: it
    inlines a function into another only when the callee's features are a subset of the
    caller's (``X86TTIImpl::areInlineCompatible``).  So a probe module has one caller
    compiled for ``(cpu, features)`` and, for each feature ``f``, a callee compiled for
    ``+f`` alone; after LLVM's O1 pipeline, the callees that were inlined are the features
    the caller has.  About 30 ms, once per ``(cpu, features)`` in a process: the probes
    share one TargetMachine (:data:`_PROBE_TM`), which keeps the subtarget of each
    feature string it has met, so that only the first probe builds the callees' (one
    per feature: with a TargetMachine each, a probe took 80-250 ms).

    ``cpu`` must be a CPU LLVM knows (an unknown name makes LLVM abort the process)."""
    known = feature_names()
    if known is None:
        return None
    key = (cpu, features)
    got = _FEATURES_OF.get(key)
    if got is not None:
        return got
    llvm = _llvm()
    names = sorted(known)
    lines = []
    for i in range(len(names)):
        # the inline asm keeps the call from being deleted as dead when it is not inlined
        lines.append(f'define internal void @f{i}() #{i + 1} {{\n'
                     f'  call void asm sideeffect "", ""()\n  ret void\n}}')
    calls = "\n".join(f"  call void @f{i}()" for i in range(len(names)))
    lines.append(f"define void @probe() #0 {{\n{calls}\n  ret void\n}}")
    lines.append(f'attributes #0 = {{ "target-cpu"="{cpu}" "target-features"="{features}" }}')
    for i, f in enumerate(names):
        lines.append(f'attributes #{i + 1} = {{ "target-features"="+{f}" }}')
    triple = _HOST_INFO["triple"]
    x86 = str(triple).startswith(("x86_64", "i686", "i386"))
    with LLVM_LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        tm = _PROBE_TM.get(triple)
        if tm is None:
            tm = _PROBE_TM[triple] = llvm.Target.from_triple(triple).create_target_machine(
                cpu="x86-64" if x86 else "generic", features="", opt=1)
        mod = llvm.parse_assembly("\n".join(lines))
        mod.triple = triple
        mod.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=1)
        pb = llvm.create_pass_builder(tm, pto)
        mpm = pb.getModulePassManager()
        mpm.run(mod, pb)
        mpm.close()
        pb.close()
        body = str(mod.get_function("probe"))
    called = set(re.findall(r"@f(\d+)\(\)", body))   # (a call may become "fastcc")
    have = {f for i, f in enumerate(names) if str(i) not in called}
    added = {a[1:] for a in features.split(",") if a.startswith("+")}
    have = (have - PROBE_BLIND) | (added & PROBE_BLIND) | ({"64bit"} & known)
    got = _FEATURES_OF[key] = frozenset(have)
    return got


def host_cache(level: int, default: int) -> int:
    """L1d / L2 / L3 size of cpu0 from sysfs, or ``default``."""
    key = f"cache{level}"
    if key in _HOST_INFO:
        return _HOST_INFO[key]  # type: ignore[return-value]
    base = "/sys/devices/system/cpu/cpu0/cache"
    size = default
    try:
        for d in sorted(os.listdir(base)):
            p = os.path.join(base, d)
            with open(os.path.join(p, "level")) as f:
                lvl = int(f.read())
            with open(os.path.join(p, "type")) as f:
                typ = f.read().strip()
            if lvl == level and typ in ("Data", "Unified"):
                with open(os.path.join(p, "size")) as f:
                    txt = f.read().strip()
                mult = {"K": 1024, "M": 1024 * 1024}.get(txt[-1], 1)
                size = int(txt.rstrip("KM")) * mult
                break
    except (OSError, ValueError):
        pass
    _HOST_INFO[key] = size
    return size



def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` says.

    Returns
    -------
    str
        E.g. ``"AMD EPYC 9R14 96-Core Processor"``.
    """
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"

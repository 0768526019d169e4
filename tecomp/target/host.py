"""The host machine, read once: the CPU LLVM names and its features, the names of the
features LLVM knows, the cache sizes sysfs gives, the CPU's model name."""
from __future__ import annotations

import os
import platform
import threading
from typing import Dict, FrozenSet, Optional

from .x86 import HASWELL_FEATURES

_LOCK = threading.Lock()
_HOST_INFO: Dict[str, object] = {}


def host_cpu() -> str:
    if "cpu" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["cpu"]  # type: ignore[return-value]


def host_features() -> FrozenSet[str]:
    if "features" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["features"]  # type: ignore[return-value]


def feature_names() -> Optional[FrozenSet[str]]:
    """Every feature name LLVM knows (None without LLVM)."""
    if "features" not in _HOST_INFO:
        read_host()
    return _HOST_INFO["names"]  # type: ignore[return-value]


def read_host() -> None:
    with _LOCK:
        if "features" in _HOST_INFO:
            return
        try:
            from ..codegen.llvm import jit as llvm_jit

            h = llvm_jit.host()
            cpu = h.cpu
            feats = frozenset(f[1:] for f in h.features.split(",") if f.startswith("+"))
            names = h.feature_names or None
        except Exception:  # noqa: BLE001 - no LLVM here: a plain AVX2 machine
            cpu, feats, names = "haswell", HASWELL_FEATURES, None
        _HOST_INFO["cpu"] = cpu
        _HOST_INFO["names"] = names
        _HOST_INFO["features"] = feats


def llvm_cpu_features(cpu: str, features: str) -> Optional[FrozenSet[str]]:
    """LLVM's features for ``cpu`` with ``features`` (None without LLVM)."""
    if feature_names() is None:
        return None
    from ..codegen.llvm import jit as llvm_jit

    return llvm_jit.cpu_features(cpu, features)


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
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"

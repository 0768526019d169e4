"""The call sites of extern stages (``tc.extern``): one table per process.

Lowering registers each extern stage's call as a :class:`Site` (its Python function and
how its arguments are laid out) and writes the site's number into the ``ExternCall``
statement; the interpreter calls the site's function directly, compiled code through
the runtime's C entry point (:mod:`tecomp.runtime.extern`).  Sites live as long as the
process: generated code holds their numbers.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, List, Tuple

__all__ = ["Site", "register_site", "site", "sites"]


@dataclass(frozen=True)
class Site:
    fn: Callable
    name: str
    order: str                        # "b" buffer / "s" scalar, per argument
    buffers: Tuple[Tuple[str, int, bool], ...]   # (dtype, ndim, writable) per buffer
    scalars: Tuple[bool, ...]         # per scalar: is it a float


_SITES: List[Site] = []
_LOCK = threading.Lock()


def register_site(site: Site) -> int:
    with _LOCK:
        _SITES.append(site)
        return len(_SITES) - 1


def site(n: int) -> Site:
    return _SITES[n]


def sites() -> List[Tuple[int, Site]]:
    """Every site registered so far, with its number."""
    with _LOCK:
        return list(enumerate(_SITES))

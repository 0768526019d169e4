"""Test support: a kernel built once for the tests (and the loops of one test) that build
the same one.

Many tests build a schedule whose lowered function is the same as one built a moment
before: a matrix whose parameter only changes the data or the run (the offset of an
operand, the thread count a kernel runs on), a test that builds under several machine
models of which some give the same code, two tests of one file on the same operator.  A
:class:`BuildMemo` lowers each schedule (cheap) and compiles it (code generation, the
LLVM optimiser: most of a build) only when no earlier build of the memo lowered to the
same function for the same target under the same code generator's switches: the printed
IR, the function's attributes, the ``TECOMP_*`` environment and the public upper-case
settings of the modules of ``tecomp.codegen`` and ``tecomp.lower`` must match, then
:func:`tecomp.ir.parse.structural_equal` (the parameters, the body, the conditions on the
arguments) confirms it.  The module is shared: the memo suits tests that call a kernel,
not those that change or close it, nor those that patch a code generator's class or
function (which the switches above do not show)."""
from __future__ import annotations

import os
import sys
from collections import OrderedDict

from ..build import build
from ..ir.parse import structural_equal
from ..lower.pipeline import lower
from ..target import as_target

_PLAIN = (bool, int, float, str, bytes, type(None))


def _modules():
    return sorted((n, m) for n, m in list(sys.modules.items())
                  if n.startswith(("tecomp.codegen", "tecomp.lower")) and m is not None)


def codegen_settings(mods=None):
    """The switches a build reads outside the lowered function, as a key: the
    ``TECOMP_*`` environment and the public upper-case globals of the loaded modules ``mods``
    (default: those of ``tecomp.codegen`` and ``tecomp.lower``), plain values as they
    are, a dict of a table's size by its items, anything else by its identity; and the
    objects the key names by identity (kept alive with the key, so that no other object
    takes an identity while the key is in use)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("TECOMP_")))
    keep = []

    def plain(v):
        if isinstance(v, _PLAIN):
            return v
        keep.append(v)
        return ("object", id(v))

    glob = []
    for n, m in mods if mods is not None else _modules():
        for k, v in sorted(vars(m).items()):
            if k.isupper() and not k.startswith("_"):   # (private ones are caches)
                glob.append((n, k, tuple((repr(a), plain(b)) for a, b in v.items())
                             if isinstance(v, dict) and len(v) <= 64 else plain(v)))
    return (env, tuple(glob)), keep


class BuildMemo:
    """``memo.build(s, args, target=...)``: ``tc.build``'s module for the schedule, the
    one an earlier call built where the lowered function and the code generator's
    settings are the same (the last ``size`` kept).  ``hits`` counts the builds saved."""

    def __init__(self, size: int = 32):
        self.size = size
        self.hits = 0
        self._mods: OrderedDict = OrderedDict()

    def build(self, s, args, target="llvm", name: str = "main"):
        tgt = as_target(target)
        func = lower(s, args, name=name, target=tgt)
        attrs = tuple(sorted((k, repr(v)) for k, v in func.attrs.items() if k != "param_checks"))
        mods = _modules()
        settings, keep = codegen_settings(mods)
        key = (str(tgt), str(func), settings, attrs)
        hit = self._mods.get(key)
        if hit is not None and structural_equal(hit[0], func):
            self._mods.move_to_end(key)
            self.hits += 1
            return hit[2]
        mod = build(func, target=tgt)
        if _modules() != mods:   # the first build of a kind imports its code generator
            settings, keep = codegen_settings()
            key = (str(tgt), str(func), settings, attrs)
        self._mods[key] = (func, keep, mod)
        if len(self._mods) > self.size:
            self._mods.popitem(last=False)
        return mod

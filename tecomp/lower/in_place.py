"""Which input a function may take in place of an output: ``f(x, x)`` for ``B = A + 1``.

Every runtime refuses an output whose memory overlaps another argument (the shared
argument checks, :mod:`tecomp.runtime.argcheck`), with one exception: the *same* array
(same address, shape and strides) passed for an input ``I`` and an output ``O``, where
:func:`in_place_pairs` proves that this gives the result of separate arrays.  It does
when every element of ``O`` is computed once, from the element of ``I`` at the same
index and nothing else of ``I``, before anything else reads that element:

1. ``O`` is in ``func.attrs["written_once"]`` (lowering puts there the outputs of compute
   stages without a reduction: their loop nest stores each element exactly once);
2. every reference to ``I`` is a load inside the value of a store to ``O`` whose indices
   are provably the load's (so the load reads the element the store then overwrites,
   and no other);
3. ``O`` is never loaded, and neither buffer is an operand of an extern call or a tensor
   intrinsic (which read and write memory the IR does not show);
4. on the GPU, every store to ``O`` is inside a loop bound to each thread axis its
   kernel launches (a store outside one runs once per thread of that axis: the second
   run would read the element the first one overwrote).

Anything else (a stencil, a transpose, a reduction, a cache stage between ``I`` and
``O``, a hand-written PrimFunc without ``written_once``) is not proved, and the runtimes
refuse the call with an ArgumentError that says to pass a copy.
"""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

from ..ir.expr import Buffer, BufferLoad, Const
from ..ir.functor import Visitor
from ..ir.op import sub
from ..ir.simplify import simplify
from ..ir.stmt import AttrStmt, ExternCall, For, PrimFunc, TensorIntrinCall

__all__ = ["in_place_pairs"]

#: the AttrStmt key of a GPU kernel (tecomp.lower.device_split.KEY)
_KERNEL = "device_kernel"


def _same_index(a, b) -> bool:
    if a is b:
        return True

    try:
        d = simplify(sub(a, b))
    except Exception:  # noqa: BLE001 -- not provably equal is the safe answer
        return False
    return isinstance(d, Const) and d.value == 0


class _Uses(Visitor):
    """One walk: every load, store and opaque use of the parameter buffers."""

    def __init__(self, params: Set[Buffer]):
        self.params = params
        #: buffer -> [(the store it is inside or None, its indices)]
        self.loads: Dict[Buffer, List[tuple]] = {}
        #: buffer -> [(store, thread tags around it, the tags its kernel launches)]
        self.stores: Dict[Buffer, List[tuple]] = {}
        self.opaque: Set[Buffer] = set()
        self._store = None
        self._tags: List[str] = []
        self._kernel_tags: List[Set[str]] = [set()]

    def visit_BufferLoad(self, e: BufferLoad):
        if e.buffer in self.params:
            self.loads.setdefault(e.buffer, []).append((self._store, e.indices))
        self.generic_visit(e)

    def visit_BufferStore(self, s):
        for i in s.indices:
            self.visit(i)
        if s.buffer in self.params:
            self.stores.setdefault(s.buffer, []).append(
                (s, frozenset(self._tags), self._kernel_tags[-1]))
        outer, self._store = self._store, s
        self.visit(s.value)
        self._store = outer

    def visit_For(self, s: For):
        self.visit(s.min)
        self.visit(s.extent)
        tag = s.thread_tag if s.kind == "thread" and not s.thread_tag.startswith("vthread") \
            else ""
        if tag:
            self._tags.append(tag)
            self._kernel_tags[-1].add(tag)
        self.visit(s.body)
        if tag:
            self._tags.pop()

    def visit_AttrStmt(self, s: AttrStmt):
        if isinstance(s.value, Buffer) and s.value in self.params:
            self.opaque.add(s.value)
        if s.key == _KERNEL:
            self._kernel_tags.append(set())
            self.visit(s.body)
            self._kernel_tags.pop()
            return
        self.generic_visit(s)

    def visit_ExternCall(self, s: ExternCall):
        self.opaque.update(b for b in s.buffers if b in self.params)
        self.generic_visit(s)

    def visit_TensorIntrinCall(self, s: TensorIntrinCall):
        self.opaque.update(b for b in s.buffers if b in self.params)
        self.generic_visit(s)


def in_place_pairs(func: PrimFunc) -> Tuple[Tuple[Buffer, Buffer], ...]:
    """The ``(input, output)`` buffer parameters of ``func`` that may be one array (see
    the module docstring).  A function loaded from a library carries them in
    ``func.attrs["in_place"]`` (its body is gone)."""
    given = func.attrs.get("in_place")
    if given is not None:
        return tuple(given)
    once = func.attrs.get("written_once") or ()
    if not once:
        return ()
    params = {p for p in func.params if isinstance(p, Buffer)}
    uses = _Uses(params)
    uses.visit(func.body)
    out = []
    for o in once:
        if o not in params or o in uses.loads or o in uses.opaque or o not in uses.stores:
            continue
        stores = uses.stores[o]
        if not all(tags >= kernel for _, tags, kernel in stores):
            continue
        for i in func.params:
            if not isinstance(i, Buffer) or i is o or i in uses.stores or i in uses.opaque \
                    or i.dtype != o.dtype or len(i.shape) != len(o.shape):
                continue
            if all(st is not None and st.buffer is o and len(idx) == len(st.indices)
                   and all(_same_index(x, y) for x, y in zip(idx, st.indices))
                   for st, idx in uses.loads.get(i, ())):
                out.append((i, o))
    return tuple(out)

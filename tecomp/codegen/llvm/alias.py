"""Scoped no-alias metadata on the loads and stores of a kernel (:class:`AliasScopes`).

Every load and store the emitter makes through a buffer (plain, masked, gathered,
scattered, and a tensor intrinsic's ``ib.load`` / ``ib.store``) carries
``!alias.scope`` (the scope of the memory the buffer lives in) and ``!noalias`` (the
scopes of every other such memory) in one domain per module:

* each buffer tecomp allocates (``Allocate``: a stack ``alloca``, a piece of the spill
  block, a ``tecomp_ws_alloc`` block) is a scope of its own: its memory is reached
  through no other buffer, whatever the caller passes;
* each argument buffer is a scope of its own in the variants that promise that no
  written array overlaps another (``noalias=True``); in the others they share one
  scope (they may overlap each other, never a buffer tecomp allocates).

LLVM then knows that a load of a packed operand in the workspace does not read the
output, in the serial kernel as in a parallel task's body.  Without it LLVM had only
the ``noalias`` arguments of the body function, which the inliner turns into scopes for
accesses it can trace to them: an access through a pointer returned by a call (a
workspace block) gets the scope of an argument only when LLVM proves that argument not
captured before it, a walk over the argument's uses that gives up past a fixed number
of them (an unrolled kernel has hundreds): the int8 GEMM's stores of its accumulators
into ``C`` then stayed inside the reduction loop, one per step (one thread).

A buffer's scope is keyed by the :class:`~tecomp.ir.expr.Buffer` (an argument's, or
``"args"`` where they share one), so a parallel task's body tags the buffers it captures
as the kernel around it does.  The scope and domain nodes are ``distinct`` and
self-referential (LLVM's form: an inlined copy of a body gets fresh ones); llvmlite
cannot write such a node, so each is emitted with a ``"tecomp.selfref.N"`` placeholder
as its first operand, which ``_ModuleBuilder.text`` patches (as the loop ids).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import llvmlite.ir as ir

from ...ir.functor import collect
from ...ir.stmt import Allocate
from .values import _sanitize

#: at most this many scopes per kernel (the ``!noalias`` list of each holds all the
#: others: n^2 operands); buffers past it carry no tags (LLVM's own analysis only)
MAX_SCOPES = 96

#: the shared scope of argument buffers that may overlap each other
ARGS = "args"


class AliasScopes:
    """The alias scopes of one LLVM module (one variant of one PrimFunc): see the module
    docstring.  :meth:`tag` attaches a buffer's to an instruction."""

    def __init__(self, mb, func, sig, noalias: bool):
        self._mb = mb
        self._key: Dict[object, object] = {}
        roots: List[object] = []
        names: Dict[object, str] = {}
        for bp in sig.buffers:
            key = bp.buffer if noalias else ARGS
            self._key[bp.buffer] = key
            if key not in names:
                roots.append(key)
                names[key] = bp.buffer.name if noalias else "arguments"
        for node in collect(func.body, lambda n: isinstance(n, Allocate)):
            b = node.buffer
            if b not in self._key:
                self._key[b] = b
                roots.append(b)
                names[b] = b.name
        self._roots = roots[:MAX_SCOPES] if len(roots) > 1 else []
        self._scoped = set(self._roots)
        self._names = names
        self._scope: Dict[object, ir.Value] = {}
        self._tags: Dict[object, Optional[Tuple[object, object]]] = {}
        self._domain = None

    def _selfref(self, *ops):
        mb = self._mb
        mb._selfref_ids += 1
        return mb.module.add_metadata(
            [ir.MetaDataString(mb.module, f"tecomp.selfref.{mb._selfref_ids}"), *ops])

    def _scope_of(self, key):
        node = self._scope.get(key)
        if node is None:
            mod = self._mb.module
            if self._domain is None:
                self._domain = self._selfref(
                    ir.MetaDataString(mod, f"{self._mb.symbol} buffers"))
            node = self._scope[key] = self._selfref(
                self._domain, ir.MetaDataString(mod, _sanitize(self._names[key])))
        return node

    def tags(self, buffer) -> Optional[Tuple[object, object]]:
        """``(alias.scope, noalias)`` metadata of an access to ``buffer``, or None."""
        key = self._key.get(buffer)
        if key not in self._tags:
            if key not in self._scoped:
                self._tags[key] = None
            else:
                mod = self._mb.module
                own = mod.add_metadata([self._scope_of(key)])
                others = mod.add_metadata([self._scope_of(r) for r in self._roots
                                           if r is not key])
                self._tags[key] = (own, others)
        return self._tags[key]

    def tag(self, inst, buffer):
        """Attach ``buffer``'s scopes to the load, store or memory intrinsic call
        ``inst``; returns ``inst``."""
        t = self.tags(buffer)
        if t is not None:
            inst.set_metadata("alias.scope", t[0])
            inst.set_metadata("noalias", t[1])
        return inst

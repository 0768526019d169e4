"""How a PrimFunc's parameters map onto the CPU kernel ABI, and the check sites a kernel
reports errors at.

Shared by the LLVM code generator (:mod:`tecomp.codegen.llvm`; the ABI is described in
:mod:`tecomp.codegen.llvm.abi`), the runtime (:mod:`tecomp.runtime.llvm`) and the
loader of exported libraries (:mod:`tecomp.runtime.aot`): this module imports no llvmlite, so a
library can be loaded and called where LLVM is not installed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from ..errors import BuildError
from ..ir import dtype as _dt
from ..ir.expr import Buffer, Var
from ..ir.functor import Visitor, free_vars
from ..ir.printer import to_str
from ..ir.stmt import PrimFunc

__all__ = ["BufferParam", "ScalarParam", "Signature", "CheckSite"]


@dataclass
class BufferParam:
    """A buffer parameter: where its pointer and strides travel in the ABI."""

    pos: int            # position in PrimFunc.params
    buffer: Buffer
    data_index: int     # index in the data-pointer array
    stride_slot: int    # first of its ndim stride slots in ``args``
    is_output: bool     # the body stores to it

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)


@dataclass
class ScalarParam:
    pos: int
    var: Var
    slot: int

    @property
    def name(self) -> str:
        return self.var.name


class Signature:
    """How a PrimFunc's parameters map onto the kernel ABI (see
    :mod:`tecomp.codegen.llvm.abi`).

    ``written``: the buffers the function stores to; by default read from its body (a
    loaded library, whose function has no body, passes them).
    """

    def __init__(self, func: PrimFunc, written: Optional[Iterable[Buffer]] = None):
        self.func = func
        self.params: List[object] = []
        self.buffers: List[BufferParam] = []
        self.scalars: List[ScalarParam] = []
        written = _stored_buffers(func.body) if written is None else set(written)
        seen = set()
        for pos, p in enumerate(func.params):
            if isinstance(p, Buffer):
                if p in seen:
                    raise BuildError(f"buffer {p.name} appears twice in the parameters of "
                                     f"{func.name}")
                seen.add(p)
                _dt.canon(p.dtype)
                bp = BufferParam(pos, p, len(self.buffers), -1, p in written)
                self.buffers.append(bp)
                self.params.append(bp)
            elif isinstance(p, Var):
                if p in seen:
                    raise BuildError(f"scalar parameter {p.name} appears twice in the parameters "
                                     f"of {func.name}")
                seen.add(p)
                sp = ScalarParam(pos, p, len(self.scalars))
                self.scalars.append(sp)
                self.params.append(sp)
            else:
                raise BuildError(f"parameter {pos + 1} of {func.name} is a "
                                 f"{type(p).__name__}; parameters must be Buffers or Vars")
        #: the variable stored in each value slot
        self.slot_vars: List[Var] = [sp.var for sp in self.scalars]
        #: symbolic shape variable -> (BufferParam, dim) where it is bound from
        self.shape_var_origin: Dict[Var, Tuple[BufferParam, int]] = {}
        scalar_vars = {sp.var for sp in self.scalars}
        for bp in self.buffers:
            for d, ext in enumerate(bp.buffer.shape):
                if isinstance(ext, Var) and ext not in self.shape_var_origin:
                    if not _dt.is_int(ext.dtype):
                        raise BuildError(f"the extent {ext.name} of {bp.name}.shape[{d}] has dtype "
                                         f"{ext.dtype}; extents are integers")
                    self.shape_var_origin[ext] = (bp, d)
                    if ext not in scalar_vars:
                        self.slot_vars.append(ext)
        known = set(self.slot_vars)
        for bp in self.buffers:
            exprs = list(bp.buffer.shape) + list(bp.buffer.strides or ())
            for e in exprs:
                for v in free_vars(e):
                    if v not in known:
                        raise BuildError(
                            f"the shape of parameter {bp.name} uses `{v.name}` only inside "
                            f"`{to_str(e)}`, so its value cannot be read from any array: pass "
                            f"{v.name} as a scalar parameter, or give some buffer a dimension "
                            f"of extent exactly {v.name}")
        slot = len(self.slot_vars)
        for bp in self.buffers:
            bp.stride_slot = slot
            slot += bp.ndim
        self.num_slots = slot
        self.slot_index = {v: i for i, v in enumerate(self.slot_vars)}

    @property
    def outputs(self) -> List[BufferParam]:
        return [bp for bp in self.buffers if bp.is_output]


def _stored_buffers(body) -> set:
    out = set()

    class _V(Visitor):
        def visit_BufferStore(self, s):
            out.add(s.buffer)
            self.generic_visit(s)

    _V().visit(body)
    return out


@dataclass
class CheckSite:
    """One bounds check (or checked assert): what the Python side says when it fails."""

    kind: str           # "load", "store", "assert" or "malloc"
    buffer: str
    text: str           # the printed access (or the assert message)
    stmt: str           # the printed enclosing statement

"""What the CUDA runtime launches: the CUDA C of a function (:class:`CudaSource`), its
kernels (:class:`KernelInfo`: name, parameters, grid, block, shared memory) and their
parameters (:class:`KernelParam`).  The code generator
(:func:`tecomp.codegen.cuda.codegen_cuda`) fills them in; the module classes
(:mod:`tecomp.runtime.cuda`, the emulation) and nvcc (:mod:`tecomp.runtime.nvcc`) read
them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ..ir import op as _op
from ..ir.expr import Buffer, Const, Expr
from ..ir.stmt import PrimFunc
from ..target import MAX_STATIC_SHARED_BYTES

__all__ = ["KernelParam", "KernelInfo", "CudaSource", "workspace_elements", "WORKSPACE_ALIGN"]

#: the bytes every global workspace's first element is aligned to, which the generated
#: code may assume (cuMemAlloc gives 256; the emulation aligns its arrays to this)
WORKSPACE_ALIGN = 16


def workspace_elements(buf: Buffer) -> Expr:
    """The elements to allocate for the global workspace ``buf`` (an int64 expression of
    host values): its shape's product, or with padded strides (``storage_align``) the
    span ``1 + sum((extent - 1) * stride)`` (at least 0), which the kernels index into
    (the product alone was short of it: the padded rows' copies wrote past the end)."""
    one = Const(1, "int64")
    dims = [_op.widen(d, "int64") for d in buf.shape]
    if buf.strides is None:
        n = one
        for d in dims:
            n = _op.mul(n, d)
        return n
    n = one
    for d, st in zip(dims, buf.strides):
        n = _op.add(n, _op.mul(_op.sub(d, one), _op.widen(st, "int64")))
    return _op.maximum(n, Const(0, "int64"))


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a kernel: a buffer pointer or a scalar passed by value."""

    name: str            # the C name in the kernel signature
    obj: object          # the Buffer or Var it stands for
    dtype: str
    is_buffer: bool
    is_const: bool = False  # a buffer the kernel only reads (``const T* __restrict__``)
    align: int = 0          # bytes its pointer must be a multiple of (wmma tiles), or 0


@dataclass(frozen=True)
class KernelInfo:
    """One ``__global__`` function of a :class:`CudaSource` and how to launch it."""

    name: str
    params: Tuple[KernelParam, ...]
    grid: Tuple[Expr, Expr, Expr]    # launch sizes as IR expressions of host values
    block: Tuple[Expr, Expr, Expr]
    shared_bytes: int                # __shared__ memory per block
    stage: str                       # the buffers the kernel computes (for messages)
    has_barrier: bool = False        # whether it calls __syncthreads() or a warp-wide PTX helper
    local_bytes: int = 0             # per-thread arrays (DeviceKernel.local_bytes)

    @property
    def dynamic_shared(self) -> int:
        """The bytes of dynamic shared memory a launch passes: the kernel's arrays where
        they take more than the 48 KiB a kernel may declare statically, else 0."""
        return self.shared_bytes if self.shared_bytes > MAX_STATIC_SHARED_BYTES else 0

    @property
    def constant_block(self) -> Optional[Tuple[int, int, int]]:
        if all(isinstance(d, Const) for d in self.block):
            return tuple(int(d.value) for d in self.block)
        return None


@dataclass
class CudaSource:
    """The CUDA C of one function (what :func:`tecomp.codegen.cuda.codegen_cuda` returns) and
    how to launch its kernels."""

    func: PrimFunc
    source: str
    kernels: List[KernelInfo]
    workspaces: List[Buffer] = field(default_factory=list)   # global allocations
    host_asserts: List[Tuple[Expr, str]] = field(default_factory=list)
    written: frozenset = frozenset()     # parameter Buffers the function stores to

    def __str__(self) -> str:
        return self.source

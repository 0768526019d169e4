"""The host/device split for the GPU targets (a codegen-phase pass: cuda, cuda-emu).

The rule (the contract between the lowering and the CUDA C generator)
---------------------------------------------------------------------
``func.body`` is a sequence of top-level statements, possibly wrapped in ``Allocate``,
``LetStmt``, ``AttrStmt`` and ``AssertStmt``.  The wrappers are peeled:

* ``Allocate`` of scope ``global``: a device *workspace* the host runtime allocates
  (its shape must be computable from the arguments) and passes to the kernels that use
  it as a parameter.
* ``Allocate`` of scope ``shared``/``local``, ``LetStmt``, ``AttrStmt``: kept around each
  kernel that uses them (a shared array cannot outlive a kernel anyway).  A ``LetStmt``
  whose value is computable on the host is also substituted into launch dimensions.
* ``AssertStmt`` whose condition is computable on the host: checked by the host
  runtime before launching; otherwise kept in the kernels (``__trap()`` when false).

Every statement left is ONE ``__global__`` kernel, launched in order.  Its grid and
block sizes are the extents of the ``thread`` loops inside it (``For(kind="thread",
thread_tag="blockIdx.x")`` ...).  When loops of one tag have different extents (two
stages computed at the same block with different ``threadIdx.x`` extents), the launch
uses the largest (the code generator guards the smaller loops).  A statement without
thread loops is a BuildError ("did you forget to bind?"), unless every array it stores is 0-d (a
0-d stage, e.g. the division of a mean over every axis): that one runs as a kernel of one
thread.  A launch extent that depends
on something only the kernel knows is a BuildError.  A kernel whose ``__shared__``
arrays take more than ``MAX_STATIC_SHARED_BYTES`` (48 KiB) declares them in dynamic
shared memory, which the runtime opts the kernel in to; one whose arrays take more than
``MAX_DYNAMIC_SHARED_BYTES`` (227 KiB, sm_90's limit), or whose
constant launch exceeds the block, grid or threads-per-block limits, is a
:class:`~tecomp.errors.ResourceLimitError` (a BuildError: a legal schedule the target
cannot run).

The pass's result: ``func.body`` is the sequence of kernels, each
``AttrStmt("device_kernel", DeviceKernel, kernel statement inside its wrappers)``,
and ``func.attrs["host"]`` the :class:`HostPart` (workspaces, host assertions, host
lets, the parameters written).  The CUDA C generator renders exactly that.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..errors import BuildError, ResourceLimitError
from ..ir import dtype as _dt
from ..ir.expr import Buffer, BufferLoad, Call, CommReducer, Const, Expr, Max, Var
from ..ir.functor import Visitor, collect, free_vars, reads_memory, substitute
from ..ir.printer import to_str
from ..ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, LetStmt, PrimFunc, SeqStmt,
    Stmt, seq,
)
from ..target import (
    MAX_BLOCK_DIMS, MAX_DYNAMIC_SHARED_BYTES, MAX_GRID_DIMS, MAX_LOCAL_BYTES_PER_THREAD,
    MAX_THREADS_PER_BLOCK, PER_THREAD_SCOPES, SHARED_ALIGN,
)

KEY = "device_kernel"
#: AttrStmt key of a cross-thread reduction (see codegen.cuda.CudaRenderer.cross_thread_reduce)
CROSS_THREAD_REDUCE = "cross_thread_reduce"


def is_vthread(tag: str) -> bool:
    return tag == "vthread" or tag.startswith("vthread.")


def constant_size(buf: Buffer) -> int:
    """The number of elements ``buf`` spans (with padded strides from ``storage_align``:
    ``1 + sum((extent - 1) * stride)``); 0 when an extent is 0 (a tile whose region is
    empty, e.g. every read of it is guarded off); BuildError when it is not a constant."""
    n = 1
    for d in buf.shape:
        if not isinstance(d, Const):
            # a limit of the target (a C or CUDA array has a constant size), not a bug of
            # the schedule: the fuzzer counts it as a rejected schedule (seed 3046424)
            raise ResourceLimitError(
                f"buffer {buf.name} in scope {buf.scope!r} has the non-constant shape "
                f"[{', '.join(to_str(x) for x in buf.shape)}]; {buf.scope} arrays need a "
                f"constant size: split the axes it is computed over by a constant factor "
                f"so that its bounds are constant")
        n *= int(d.value)
    if any(int(d.value) < 0 for d in buf.shape):
        raise BuildError(f"buffer {buf.name} in scope {buf.scope!r} has the negative shape "
                         f"[{', '.join(to_str(x) for x in buf.shape)}]; the extents of an "
                         f"allocation must be >= 0")
    if n == 0:
        return 0
    if buf.strides is not None:
        if not all(isinstance(st, Const) for st in buf.strides):
            raise BuildError(f"buffer {buf.name} in scope {buf.scope!r} has non-constant "
                             f"strides; {buf.scope} arrays need a constant size")
        n = 1 + sum((int(d.value) - 1) * int(st.value) for d, st in zip(buf.shape, buf.strides))
    return n


def per_thread_bytes(stmt: Stmt, stage: str) -> int:
    """The bytes of the per-thread arrays ``stmt`` allocates, each allocation counted (a
    C compiler may give sibling blocks' arrays the same place, or not); a wmma fragment
    as the CUDA emulation holds it (a float per element, in every thread).  A
    ResourceLimitError when the ``local`` arrays take more than a CUDA thread's local
    memory (:data:`~tecomp.target.MAX_LOCAL_BYTES_PER_THREAD`)."""
    local = total = 0
    for a in collect(stmt, lambda n: isinstance(n, Allocate)):
        buf = a.buffer
        if buf.scope not in PER_THREAD_SCOPES:
            continue
        n = declared_size(buf)
        if buf.scope == "local":
            local += n * _dt.nbytes(buf.dtype)
            total += n * _dt.nbytes(buf.dtype)
        else:
            total += n * max(_dt.nbytes(buf.dtype), 4)
    if local > MAX_LOCAL_BYTES_PER_THREAD:
        raise ResourceLimitError(
            f"stage {stage}: its local (per-thread) arrays take {local} bytes per thread, more "
            f"than the {MAX_LOCAL_BYTES_PER_THREAD} bytes of local memory a CUDA thread may "
            f"use; use smaller tiles per thread, or put the array in shared memory")
    return total


def shared_array_bytes(buf: Buffer) -> int:
    """The bytes a ``__shared__`` array of ``buf`` takes: its declared size rounded up to
    ``SHARED_ALIGN``, as the aligned declarations (and the next array's start) can take."""
    return -(-declared_size(buf) * _dt.nbytes(buf.dtype) // SHARED_ALIGN) * SHARED_ALIGN


def declared_size(buf: Buffer) -> int:
    """The number of elements of the C array declared for ``buf``: its
    :func:`constant_size`, but at least 1 -- C and CUDA C have no arrays of 0 elements; the
    one element of an empty buffer is never accessed (its loops run 0 times)."""
    return max(constant_size(buf), 1)


@dataclass(frozen=True, eq=False)
class DeviceKernel:
    """One kernel of the split: what to launch and what it takes."""

    index: int
    stage: str                         # the buffers it computes (for messages)
    stmt: Stmt                         # the kernel statement without its wrappers
    launch: Dict[str, Expr]            # thread tag -> launch extent (host expression)
    grid: Tuple[Expr, Expr, Expr]
    block: Tuple[Expr, Expr, Expr]
    buffers: Tuple[Buffer, ...]        # global buffers: parameters, then workspaces
    read_only: frozenset               # those of them it never stores to
    scalars: Tuple[Var, ...]           # host variables it needs
    shared: Tuple[Buffer, ...]         # __shared__ arrays at its top (reductions' last)
    red_bufs: Dict[str, Buffer]        # compute dtype -> the cross-thread reductions' buffer
    shared_bytes: int
    #: the bytes of the per-thread arrays (``local``, wmma fragments) its allocations
    #: declare, all together: what the CUDA emulation gives each thread's stack on top of
    #: its default
    local_bytes: int = 0

    def __str__(self):
        dims = lambda ds: ", ".join(to_str(d) for d in ds)  # noqa: E731
        return (f"kernel {self.index} ({self.stage}): grid ({dims(self.grid)}), block "
                f"({dims(self.block)}), {self.shared_bytes} bytes shared; takes "
                + ", ".join([b.name for b in self.buffers] + [v.name for v in self.scalars]))


@dataclass(frozen=True, eq=False)
class HostPart:
    """What the host runtime does around the launches."""

    host_vars: Tuple[Var, ...]         # scalar parameters, then shape/stride variables
    workspaces: Tuple[Buffer, ...]     # global allocations it makes
    asserts: Tuple[Tuple[Expr, str], ...]   # checked before launching
    lets: Dict[Var, Expr]              # top-level lets computable on the host
    written: frozenset                 # parameter buffers some kernel stores to


def host_vars_of(func: PrimFunc) -> List[Var]:
    """The Vars the host knows at call time: scalar parameters, then shape/stride vars."""
    out: Dict[Var, None] = {}
    for p in func.params:
        if isinstance(p, Var):
            out.setdefault(p, None)
    for p in func.params:
        if isinstance(p, Buffer):
            for e in tuple(p.shape) + tuple(p.strides or ()):
                for v in free_vars(e):
                    out.setdefault(v, None)
    return list(out)


def thread_loops(s: Stmt) -> List[For]:
    return collect(s, lambda n: isinstance(n, For) and n.kind == "thread"
                   and not is_vthread(n.thread_tag))


def buffers_in(s: Stmt) -> List[Buffer]:
    """Buffers loaded or stored in ``s``, in order of first appearance (pre-order)."""
    seen: Dict[Buffer, None] = {}

    class _V(Visitor):
        def visit_BufferStore(self, st):
            seen.setdefault(st.buffer, None)
            self.generic_visit(st)

        def visit_BufferLoad(self, e):
            seen.setdefault(e.buffer, None)
            self.generic_visit(e)

        def visit_Allocate(self, st):
            seen.setdefault(st.buffer, None)
            self.generic_visit(st)

    _V().visit(s)
    return list(seen)


def stored_buffers(s) -> List[Buffer]:
    out: Dict[Buffer, None] = {}
    for st in collect(s, lambda n: isinstance(n, BufferStore)):
        out.setdefault(st.buffer, None)
    return list(out)


def unpack_cross_thread_reduce(s: AttrStmt):
    """Check and return (reducer, source, dest BufferLoad, tags) of a cross-thread reduction."""
    v = s.value
    ok = (isinstance(v, tuple) and len(v) == 4 and isinstance(v[0], CommReducer)
          and isinstance(v[1], Expr) and isinstance(v[2], BufferLoad)
          and isinstance(v[3], tuple) and v[3] and all(isinstance(t, str) for t in v[3]))
    if not ok:
        raise BuildError(
            "a cross_thread_reduce AttrStmt needs the value (reducer: CommReducer, source: Expr, "
            "dest: BufferLoad, thread tags: tuple of str); got " + repr(v))
    return v


@dataclass
class _Plan:
    stmt: Stmt                    # the kernel statement
    wrappers: Tuple[Stmt, ...]    # enclosing LetStmt/Allocate/AttrStmt/AssertStmt, outer first


def _peel(func: PrimFunc, host: set):
    """Peel the top level of ``func.body`` into kernel plans (see the module doc)."""
    plans: List[_Plan] = []
    workspaces: List[Buffer] = []
    host_asserts: List[Tuple[Expr, str]] = []
    host_lets: Dict[Var, Expr] = {}
    known = set(host)

    def computable(e) -> bool:
        return all(v in known for v in free_vars(e)) and not collect(
            e, lambda n: isinstance(n, (BufferLoad, Call)))

    def walk(s: Stmt, ctx: Tuple[Stmt, ...]):
        if isinstance(s, SeqStmt):
            for x in s.seq:
                walk(x, ctx)
        elif isinstance(s, Allocate) and s.buffer.scope == "global":
            for d in s.buffer.shape:
                if not computable(substitute(d, host_lets)):
                    raise BuildError(
                        f"workspace {s.buffer.name} has shape "
                        f"[{', '.join(to_str(x) for x in s.buffer.shape)}], which the host "
                        f"cannot compute from the arguments")
            workspaces.append(s.buffer)
            walk(s.body, ctx)
        elif isinstance(s, (Allocate, AttrStmt)):
            walk(s.body, ctx + (s,))
        elif isinstance(s, LetStmt):
            value = substitute(s.value, host_lets)
            if computable(value):
                host_lets[s.var] = value
                known.add(s.var)
            walk(s.body, ctx + (s,))
        elif isinstance(s, AssertStmt):
            cond = substitute(s.cond, host_lets)
            if computable(cond):
                host_asserts.append((cond, s.message))
                walk(s.body, ctx)
            else:
                walk(s.body, ctx + (s,))
        elif isinstance(s, Evaluate) and isinstance(s.value, Const):
            return
        else:
            plans.append(_Plan(s, ctx))

    walk(func.body, ())
    return plans, workspaces, host_asserts, host_lets


def _wrap(plan: _Plan) -> Stmt:
    """The kernel statement inside the wrappers it needs (lets/allocations it uses)."""
    body = plan.stmt
    for w in reversed(plan.wrappers):
        if isinstance(w, LetStmt):
            if w.var not in free_vars(body):
                continue
        elif isinstance(w, Allocate):
            if w.buffer not in buffers_in(body):
                continue
        body = dataclasses.replace(w, body=body)
    return body


def _stage_name(s: Stmt) -> str:
    stored = [b for b in stored_buffers(s) if b.scope == "global"] or stored_buffers(s)
    return ", ".join(b.name for b in stored) or "(no stores)"


def _launch_dims(plan_stmt: Stmt, host_lets, known: set, stage: str):
    """tag -> launch extent (host Expr), checking computability."""
    by_tag: Dict[str, List[Expr]] = {}
    for loop in thread_loops(plan_stmt):
        ext = substitute(loop.extent, host_lets)
        bad = [v for v in free_vars(ext) if v not in known]
        if bad or collect(ext, lambda n: isinstance(n, (BufferLoad, Call))):
            why = (f"depends on {', '.join(v.name for v in bad)}, known only inside the kernel"
                   if bad else "reads memory")
            raise BuildError(
                f"stage {stage}: the extent `{to_str(loop.extent)}` of loop {loop.var.name} bound "
                f"to {loop.thread_tag} {why}; launch dimensions must be computable from the "
                f"arguments and their shapes (split the axis by a constant factor before binding)")
        lst = by_tag.setdefault(loop.thread_tag, [])
        if not any(ext == x for x in lst):
            lst.append(ext)
    launch: Dict[str, Expr] = {}
    for tag, exts in by_tag.items():
        if len(exts) == 1:
            launch[tag] = exts[0]
        elif all(isinstance(x, Const) for x in exts):
            launch[tag] = max(exts, key=lambda c: c.value)
        else:
            m = exts[0]
            for x in exts[1:]:
                m = Max(m, x, m.dtype if _dt.bits(m.dtype) >= _dt.bits(x.dtype) else x.dtype)
            launch[tag] = m
    return launch


def dims_text(dims) -> str:
    return ", ".join(to_str(d) for d in dims)


def _check_constant_launch(stage, grid, block):
    dims = "xyz"
    for i, d in enumerate(block):
        if isinstance(d, Const) and d.value > MAX_BLOCK_DIMS[i]:
            raise ResourceLimitError(f"stage {stage}: threadIdx.{dims[i]} has extent {d.value}, more than "
                                     f"the {MAX_BLOCK_DIMS[i]} a CUDA block allows; split it further")
    for i, d in enumerate(grid):
        if isinstance(d, Const) and d.value > MAX_GRID_DIMS[i]:
            raise ResourceLimitError(f"stage {stage}: blockIdx.{dims[i]} has extent {d.value}, more than "
                                     f"the {MAX_GRID_DIMS[i]} a CUDA grid allows")
    if all(isinstance(d, Const) for d in block):
        n = block[0].value * block[1].value * block[2].value
        if n > MAX_THREADS_PER_BLOCK:
            raise ResourceLimitError(f"stage {stage}: {n} threads per block "
                                     f"({' x '.join(str(d.value) for d in block)}), more than the "
                                     f"{MAX_THREADS_PER_BLOCK} a CUDA block allows")


def _kernel(k: int, plan: _Plan, func: PrimFunc, host: List[Var], host_lets, known,
            params_buffers, workspaces) -> Tuple[DeviceKernel, Stmt, set]:
    stage = _stage_name(plan.stmt)
    first = stage.split(",")[0]
    stored = [b for b in stored_buffers(plan.stmt) if b.scope == "global"]
    if not thread_loops(plan.stmt) and stored and all(not b.shape for b in stored):
        # a stage whose results are 0-d (the mean or the cast after a full reduction, an
        # argmax over every axis) has no data axis to bind: it runs as a kernel of one
        # thread (its reduction loops serial in it)
        one = Var(f"{first}.single", "int32")
        plan = dataclasses.replace(plan, stmt=For(one, Const(0, "int32"), Const(1, "int32"),
                                                  "thread", plan.stmt, "threadIdx.x"))
    stmt = _wrap(plan)
    if not thread_loops(plan.stmt):
        raise BuildError(
            f"stage {stage}: its loop nest has no axis bound to a GPU thread, so it cannot "
            f"run as a CUDA kernel. Bind its outer axes, e.g. "
            f"bx, tx = s[{first}].split(axis, factor=64); "
            f"s[{first}].bind(bx, tc.thread_axis('blockIdx.x')); "
            f"s[{first}].bind(tx, tc.thread_axis('threadIdx.x')). Did you forget to bind?")
    launch = _launch_dims(plan.stmt, host_lets, known, stage)
    grid = tuple(launch.get(f"blockIdx.{d}", Const(1, "int32")) for d in "xyz")
    block = tuple(launch.get(f"threadIdx.{d}", Const(1, "int32")) for d in "xyz")
    _check_constant_launch(stage, grid, block)

    # buffers: parameters, workspaces, kernel-local allocations
    used = buffers_in(stmt)
    allocated = {a.buffer for a in collect(stmt, lambda n: isinstance(n, Allocate))}
    for b in used:
        if b not in allocated and b not in params_buffers and b not in workspaces:
            raise BuildError(f"stage {stage}: buffer {b.name} is used but is neither a "
                             f"parameter of {func.name} nor allocated")
    shared = [b for b in used if b in allocated and b.scope == "shared"]
    red_bufs: Dict[str, Buffer] = {}
    reductions = collect(stmt, lambda n: isinstance(n, AttrStmt) and n.key == CROSS_THREAD_REDUCE)
    red_dest = set()
    for a in reductions:
        _, source, dest, _ = unpack_cross_thread_reduce(a)
        red_dest.add(dest.buffer)
        cd = _dt.compute_dtype(source.dtype)
        if cd not in red_bufs:
            nthreads = 1
            for d in block:
                if not isinstance(d, Const):
                    raise BuildError(f"stage {stage}: a cross-thread reduction needs a block of "
                                     f"constant size, got ({dims_text(block)})")
                nthreads *= int(d.value)
            red_bufs[cd] = Buffer("red_buf", (Const(nthreads, "int32"),), cd, scope="shared")
    shared += list(red_bufs.values())
    shared_bytes = sum(shared_array_bytes(b) for b in shared)
    if shared_bytes > MAX_DYNAMIC_SHARED_BYTES:
        raise ResourceLimitError(
            f"stage {stage}: the shared buffers {', '.join(b.name for b in shared)} take "
            f"{shared_bytes} bytes per block, more than the {MAX_DYNAMIC_SHARED_BYTES} bytes "
            f"of shared memory a CUDA block may use (sm_90's limit); use smaller tiles")
    local_bytes = per_thread_bytes(stmt, stage)
    kstored = set(stored_buffers(stmt)) | red_dest
    gbufs = [b for b in params_buffers if b in used] + [b for b in workspaces if b in used]

    # scalar parameters: host vars used by the body or by the strides of its buffers
    needed = set(free_vars(stmt))
    for b in gbufs:
        for st in b.effective_strides():
            needed |= set(free_vars(st))
    # and by the extents that an index read from memory (a gather's id) is checked against
    for acc in collect(stmt, lambda n: isinstance(n, (BufferLoad, BufferStore))):
        for d, i in enumerate(acc.indices):
            if reads_memory(i):
                needed |= set(free_vars(acc.buffer.shape[d]))
    lets_inside = {w.var for w in collect(stmt, lambda n: isinstance(n, LetStmt))}
    for v in needed:
        if v not in host and v not in lets_inside:
            raise BuildError(f"stage {stage}: variable {v.name} is used in the kernel but is "
                             f"bound by no parameter of {func.name} (a scalar parameter or "
                             f"a dimension of a parameter's shape)")
    scalars = tuple(v for v in host if v in needed)
    kernel = DeviceKernel(k, stage, plan.stmt, launch, grid, block, tuple(gbufs),
                          frozenset(b for b in gbufs if b not in kstored), scalars,
                          tuple(shared), red_bufs, shared_bytes, local_bytes)
    return kernel, stmt, {b for b in params_buffers if b in kstored}


def split_host_device_pass(func: PrimFunc) -> PrimFunc:
    """Split ``func`` into the host's part and its kernels (see the module doc)."""
    host = host_vars_of(func)
    plans, workspaces, host_asserts, host_lets = _peel(func, set(host))
    known = set(host) | set(host_lets)
    params_buffers = [p for p in func.params if isinstance(p, Buffer)]
    for b in params_buffers:
        if b.scope != "global":
            raise BuildError(f"parameter buffer {b.name} has scope {b.scope!r}; parameters "
                             "live in global memory")
    kernels, written = [], set()
    for k, plan in enumerate(plans):
        kernel, stmt, w = _kernel(k, plan, func, host, host_lets, known, params_buffers,
                                  workspaces)
        written |= w
        kernels.append(AttrStmt(KEY, kernel, stmt))
    out = func.with_body(seq(*kernels) if len(kernels) != 1 else kernels[0])
    out.attrs["host"] = HostPart(tuple(host), tuple(workspaces), tuple(host_asserts),
                                 host_lets, frozenset(written))
    return out


def kernels_of(func: PrimFunc) -> List[AttrStmt]:
    """The ``device_kernel`` statements of a split function, in launch order."""
    body = func.body
    items = body.seq if isinstance(body, SeqStmt) else (body,)
    return [s for s in items if isinstance(s, AttrStmt) and s.key == KEY]

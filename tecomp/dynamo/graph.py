"""One ATen FX graph (AOTAutograd's forward, backward or inference graph) compiled for
the CPU: supported nodes grouped into regions, each region cut into tecomp kernels (an
anchor -- a GEMM, a convolution, a norm, a softmax, ... -- with its elementwise
neighbours), every other node run eagerly between them.

:class:`CompiledGraph` is what the backend hands AOTAutograd: a boxed callable.  On the
first call with a new signature (the shapes, dtypes and strides of the tensor inputs and
the values of the integer inputs) it specialises the graph to it:

1. the values of every node are propagated with fake tensors (no computation);
2. each node is checked against the lowering rules (:mod:`tecomp.dynamo.lowering`);
   the others are logged (logger ``tecomp.dynamo``, one line per operator) and run
   eagerly;
3. ``torch.fx``'s capability partitioner groups the supported nodes into maximal
   regions whose contraction leaves the graph acyclic, and :func:`_kernels` cuts each
   into the nodes of its kernels; a kernel made only of views runs eagerly (as views,
   without a copy);
4. each kernel's nodes (a :class:`Region`) are translated to one tecomp DAG (in an
   inference graph, a convolution's weight read in the layout its template copies it
   into, packed once ahead of the calls: :mod:`tecomp.dynamo.prepack`), scheduled
   by ``tc.auto_schedule`` (trials=0: the templates, elementwise stages inlined into
   their consumers and producers) and built -- or taken from the in-process or on-disk
   cache (:mod:`tecomp.dynamo.cache`), keyed by their operators, shapes and the target,
   so that identical blocks share one kernel;
5. the plan -- kernels and eager nodes in an order that respects every dependence -- is
   run.

In a graph traced with symbolic sizes (TorchDynamo's dynamic shapes) the kernels of step 4
are lowered from the traced symbolic values instead (:mod:`tecomp.dynamo.symbolic`), with
``tc.var`` extents and a symbolic key: a new size makes a new plan (steps 1-3 and 5, no
build) that takes the same kernels from the in-process cache.
"""
from __future__ import annotations

import collections
import heapq
import logging
import operator
import threading
import time
import weakref
from typing import Dict, List

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.node import _get_qualified_name
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from .. import threads as _threads
from ..errors import InternalError
from . import cache as _cache
from . import lowering_nn
from . import openmp as _openmp
from . import prepack as _prepack
from .lowering import ANCHORS, VIEWS, unsupported
from .symbolic import SymbolicGraph

log = logging.getLogger("tecomp.dynamo")


class _Support(OperatorSupportBase):
    def __init__(self, reasons):
        self.reasons = reasons

    def is_node_supported(self, submodules, node) -> bool:
        return node.op == "call_function" and self.reasons.get(node) is None


class Region:
    """Nodes lowered together: ``inputs`` (tensor nodes read from outside), ``outputs``
    (nodes read outside), and the built kernel."""

    __slots__ = ("nodes", "inputs", "outputs", "module", "out_specs", "key", "origin",
                 "guards", "packs", "_packers", "scalars")

    def __init__(self, nodes, inputs, outputs):
        self.nodes, self.inputs, self.outputs = nodes, inputs, outputs
        self.module = None
        self.out_specs = []
        self.key = None
        self.origin = None  # where its kernel came from: a key of STATS
        self.guards = []  # checks of its inputs before it runs (lowering_nn.index_guards)
        # the positions of the graph's arguments (symbols' values) that its kernel takes
        # after its tensors (symbolic.SymbolicGraph.scalars)
        self.scalars = []
        # per input, the name of the layout its kernel reads it packed in, or None
        # (lowering_nn.weight_packs; None: every input as it is)
        self.packs = None
        self._packers = None

    def kernel_inputs(self, env) -> list:
        """The kernel's arguments before its outputs: the inputs' values in ``env``, the
        packed ones in their packed layout (:mod:`tecomp.dynamo.prepack`)."""
        ins = [env[n] for n in self.inputs]
        if self.packs is None:
            return ins
        if self._packers is None:
            self._packers = [None if p is None else lowering_nn._pack(p) for p in self.packs]
        return [x if p is None else _prepack.packed(x, p) for x, p in zip(ins, self._packers)]


def _signature(args) -> tuple:
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append((a.dtype, a.device.type, tuple(a.shape), tuple(a.stride())))
        else:
            sig.append(a if isinstance(a, (int, float, bool)) or a is None else type(a))
    return tuple(sig)


class CompiledGraph:
    """An ATen graph run through tecomp kernels (see the module docstring): a boxed
    callable (``f(list_of_args)``), as AOTAutograd calls its compilers' results."""

    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule, options, role: str = "forward"):
        self.gm = gm
        self.options = options
        self.role = role
        self.plans: Dict[tuple, _Plan] = {}
        self._lock = threading.Lock()
        # whether AOTAutograd traced the graph with symbolic sizes (before the plans'
        # propagation writes their concrete values in the nodes' meta)
        self.symbolic = any(_symbolic(n.meta.get("val")) for n in gm.graph.nodes
                            if n.op == "placeholder")
        # its traced symbolic values: each plan's kernels are built with symbolic
        # extents from them where they can be (once for every size)
        self.sym = SymbolicGraph(gm) if self.symbolic and getattr(options, "dynamic", True) \
            else None

    def __call__(self, args):
        args = list(args)
        sig = _signature(args)
        plan = self.plans.get(sig)
        if plan is None:
            with self._lock:
                plan = self.plans.get(sig)
                if plan is None:
                    plan = self.plans[sig] = _Plan(self.gm, args, self.options, self.role,
                                                     self.symbolic, self.sym)
        mode = self.options.threads
        if mode != "auto":
            with _openmp.scope(mode):
                return plan.run(args)
        if self.role == "inference" or not _openmp.available():
            return plan.run(args)  # (tecomp's pool: see Options, threads)
        chooser = plan.chooser
        if chooser is None:  # the first call (pages touched, pools started): not timed
            plan.chooser = _openmp.Chooser()
            return plan.run(args)
        mode = chooser.pick()
        t0 = time.perf_counter()
        with _openmp.scope(mode):
            out = plan.run(args)
        chooser.record(mode, time.perf_counter() - t0)
        return out


def _propagate(gm, args) -> Dict[torch.fx.Node, object]:
    """Every node's value, with fake tensors of the inputs' shapes, dtypes and strides."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    vals = {}
    for n in gm.graph.nodes:
        if "val" in n.meta:
            vals[n] = n.meta["val"]
    for n, a in zip((n for n in gm.graph.nodes if n.op == "placeholder"), args):
        if not isinstance(a, torch.Tensor):
            vals[n] = a
    return vals


def _symbolic(v) -> bool:
    """Whether a placeholder's traced value has a symbolic size (or is one)."""
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        return True
    return isinstance(v, torch.Tensor) and any(isinstance(e, torch.SymInt)
                                               for e in v.shape)


def _concrete(v):
    """A fake-propagated Python scalar as a plain int/float (a SymInt of a static
    specialisation has a value)."""
    if isinstance(v, torch.SymInt):
        return int(v)
    if isinstance(v, torch.SymFloat):
        return float(v)
    return v


class _Plan:
    """One specialisation of a graph: the regions' kernels and the eager nodes, in order."""

    def __init__(self, gm, args, options, role, symbolic=False, sym=None):
        graph = gm.graph
        vals = _propagate(gm, args)
        vals = {n: _concrete(v) for n, v in vals.items()}
        self.placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        reasons = {}
        for n in graph.nodes:
            if n.op == "call_function":
                reasons[n] = unsupported(n, vals)
        for n in _returned_views(graph) if symbolic else ():
            reasons[n] = ("a view the graph returns, of sizes that vary (dynamic): it runs "
                          "as a view, so that AOTAutograd can rebuild it from its base")
        _log_unsupported(reasons, role)
        order = {n: k for k, n in enumerate(graph.nodes)}
        traced = vals
        for attempt in range(2):
            regions = _partition(gm, reasons, traced, order)
            while _guard(regions, traced, reasons):
                regions = _partition(gm, reasons, traced, order)
            vals = _row_major_between_kernels(regions, traced)
            failed = []
            for r in regions:
                if role == "inference" and getattr(options, "prepack", False):
                    packs = lowering_nn.weight_packs(r, vals)
                    r.packs = packs if any(p is not None for p in packs) else None
                err = _cache.compile_region(r, vals, options, sym)
                if err is not None:
                    failed.append((r, err))
            retry = [n for r, _ in failed for n in r.nodes if n.target in VIEWS]
            if attempt == 0 and retry:
                # the auto-scheduler could not schedule a region through its views (their
                # indices, composed, defeat its bounds proofs): split the region there,
                # the views run eagerly (as views, without a copy)
                for r, e in failed:
                    log.info("tecomp.dynamo: a region of %d node%s could not be scheduled "
                             "(%s: %s); splitting it at its views", len(r.nodes),
                             "s" if len(r.nodes) != 1 else "",
                             type(e).__name__, str(e)[:300])
                for n in retry:
                    reasons[n] = "a view in a region that could not be scheduled"
                continue
            break
        for r, e in failed:
            _cache.log_failure(r, e)
        regions = [r for r in regions if r.module is not None]
        _eager_layouts_for_eager_readers(regions, traced)
        self.steps = _schedule(graph, regions, order)
        self.output = next(n for n in graph.nodes if n.op == "output")
        self.release = _releases(self.steps, self.output)
        # the kernels' outputs by node: a released one's memory is reused (see run)
        self.specs = {n: spec for r in regions for n, spec in zip(r.outputs, r.out_specs)}
        self.regions = regions
        # the graph's arguments the kernels take as scalars, and each region's among them
        self.scalars = sorted({k for r in regions for k in r.scalars})
        for r in regions:
            r.scalars = [self.scalars.index(k) for k in r.scalars]
        self.vals = vals
        self.role = role
        # the intermediates released by the last call, for the next (see run)
        self._spare = _Spare()
        # threads="auto" in a training graph: whose threads run its kernels
        # (openmp.Chooser), made at the first call, which it does not time
        self.chooser = None
        inside = {n for r in regions for n in r.nodes}
        outside = [n for n in graph.nodes if n.op == "call_function" and n not in inside
                   and isinstance(n.target, torch._ops.OpOverload)]
        views = sum(1 for n in outside if n.target in VIEWS and reasons.get(n) is None)
        eager = len(outside) - views
        log.info("tecomp.dynamo: %s graph: %d tecomp kernel%s (%d nodes), %s%d eager ATen "
                 "node%s", role, len(regions), "s" if len(regions) != 1 else "", len(inside),
                 f"{views} view{'s' if views != 1 else ''} of kernels' outputs, "
                 if views else "", eager, "s" if eager != 1 else "")
        if log.isEnabledFor(logging.DEBUG):
            for k, r in enumerate(item for kind, item in self.steps if kind == 0):
                log.debug("tecomp.dynamo: %s graph: kernel %d (%s, %s): %s", role, k,
                          r.origin, r.key[:12], _ops(r.nodes))

    def run(self, args):
        """Run the steps on ``args`` (a list, emptied: AOTAutograd's boxed convention).

        An intermediate a kernel wrote is dropped after its last use; where nothing else
        holds it (no view of it is alive), a later kernel output of the same shape,
        strides and dtype in this call takes its memory instead of a new allocation (as
        Inductor reuses a buffer): ResNet-50's blocks of one stage have the same
        shapes, and each new allocation of tens of MB is fresh pages the kernel then
        faults in.

        The intermediates still released at the end of a call are kept for the next
        call (:class:`_Spare`, at most the workspace limit over every plan): without
        them, every call of a training step's backward took fresh pages for each of its
        4 MB intermediates (malloc returns such blocks to the system once freed), 2,400
        page faults and 2.5 ms of system time a step of the small CNN of
        benchmarks/torch_compile.py (Zen 5, 1 thread), a sixth of the step."""
        env = dict(zip(self.placeholders, args))
        sizes = [args[k] for k in self.scalars]
        args.clear()
        free = self._spare.take()  # spec -> released kernel outputs
        specs = self.specs
        for (kind, item), done in zip(self.steps, self.release):
            if kind == 0:  # a region
                ins = item.kernel_inputs(env)
                if item.guards:
                    lowering_nn.check_ids(ins, item.guards, self.vals)
                outs = [_allocate(free, spec) for spec in item.out_specs]
                if item.scalars:
                    item.module.call_grad_inputs(*ins, *outs,
                                                 *[sizes[k] for k in item.scalars])
                else:
                    item.module.call_grad_inputs(*ins, *outs)
                for n, o in zip(item.outputs, outs):
                    env[n] = o
                ins = outs = o = None
            elif kind == 1:  # an eager node
                a, kw = torch.fx.node.map_arg((item.args, item.kwargs), env.__getitem__)
                env[item] = item.target(*a, **kw)
                a = kw = None
            else:  # get_attr
                env[item] = _attr(item.graph.owning_module, item.target)
            for n in done:
                t = env.pop(n)
                spec = specs.get(n)
                if spec is not None and _unshared(t, env):
                    free[spec].append(t)
                t = None
        out = torch.fx.node.map_arg(self.output.args[0], env.__getitem__)
        env = None
        self._spare.keep(free)
        return out


#: whether plans keep their released intermediates for the next call (:class:`_Spare`);
#: off: every call allocates its kernels' outputs anew (benchmarks/torch_compile.py
#: ``--ab no-keep``)
KEEP_BETWEEN_CALLS = True


class _Spare:
    """The released intermediates a plan keeps between its calls (spec -> tensors),
    taken whole by a call and kept again at its end.  Over every plan of the process
    they hold at most the workspace limit (``tc.set_workspace_limit``,
    ``TECOMP_WORKSPACE_LIMIT``: 1 GiB by default; 0 keeps none); ``tc.release_workspace()``
    frees them.  A call made while another thread's call of the same plan holds them
    starts without."""

    __slots__ = ("buffers", "nbytes", "__weakref__")
    _lock = threading.RLock()  # (a plan collected while it is held frees its own)
    _total = 0  # bytes kept over every plan
    _all: "weakref.WeakSet" = weakref.WeakSet()

    def __init__(self):
        self.buffers = None
        self.nbytes = 0

    def take(self):
        with _Spare._lock:
            got, self.buffers = self.buffers, None
            _Spare._total -= self.nbytes
            self.nbytes = 0
        return got if got is not None else collections.defaultdict(list)

    def keep(self, free) -> None:
        if not KEEP_BETWEEN_CALLS:
            return
        kept = collections.defaultdict(list)
        with _Spare._lock:
            if self.buffers is not None:  # (another thread's call kept its own)
                return
            room = _threads.workspace_limit() - _Spare._total
            nbytes = 0
            for spec, ts in free.items():
                size = _nbytes(spec)
                for t in ts:
                    if nbytes + size > room:
                        break
                    kept[spec].append(t)
                    nbytes += size
            if nbytes:
                self.buffers, self.nbytes = kept, nbytes
                _Spare._total += nbytes
                _Spare._all.add(self)

    def __del__(self):
        with _Spare._lock:
            _Spare._total -= self.nbytes
            self.nbytes = 0


def _nbytes(spec) -> int:
    """The bytes of a tensor of ``spec`` (shape, strides, dtype)."""
    shape, strides, dtype = spec
    if any(e == 0 for e in shape):
        return 0
    span = 1 + sum((e - 1) * abs(s) for e, s in zip(shape, strides))
    return span * dtype.itemsize


def release_spare() -> int:
    """Free the intermediates every plan keeps for its next call; the bytes freed."""
    freed = 0
    # under the lock that keep() adds to the set under: a plan's call that ended in
    # another thread during the walk raised "Set changed size during iteration" out of
    # tc.release_workspace()
    with _Spare._lock:
        for sp in list(_Spare._all):
            freed += sp.nbytes
            _Spare._total -= sp.nbytes
            sp.buffers, sp.nbytes = None, 0
    return freed


_threads.on_release(release_spare)


#: the count of references to a tensor's storage (PyTorch's private binding, as
#: AOTAutograd uses it), or None where this PyTorch lacks it (then nothing is reused)
_STORAGE_USES = getattr(torch._C, "_storage_Use_Count", None)


def _unshared(t, env=None) -> bool:
    """Whether the kernel output ``t``, just dropped from the plan's values ``env``, is
    no other node's value too (an eager node that returned the very tensor, e.g. an
    in-place op) and the only tensor on its memory: no view of it is alive (under
    ``torch.inference_mode`` a view does not reference its base tensor, only the
    memory).  Nothing outside the plan holds a kernel output it has not returned.
    (Not ``sys.getrefcount``: once a ``torch.compile`` had failed in the process, it
    counted one more reference to every tensor here, 4 instead of 3, held by no node, and
    nothing was reused again.)"""
    return (_STORAGE_USES is not None and type(t) is torch.Tensor and
            not any(v is t for v in (env or {}).values()) and
            _STORAGE_USES(t.untyped_storage()._cdata) == 2)


def _allocate(free, spec) -> torch.Tensor:
    """A tensor of ``spec`` (shape, strides, dtype): a released one of ``free`` or new."""
    kept = free.get(spec)
    if kept:
        return kept.pop()
    shape, strides, dtype = spec
    return torch.empty_strided(shape, strides, dtype=dtype)


def _releases(steps, output) -> List[list]:
    """Per step, the values no later step reads and the graph does not return: :meth:`_Plan.run`
    drops its references to them after that step (as Inductor frees a buffer after its
    last use), so that the memory of an intermediate is free for the next ones during
    the call, not only once the whole graph has run (ResNet-50 at batch 8 holds 0.8 GB of
    activations).  A view keeps its base alive by itself."""
    keep = set()
    torch.fx.node.map_arg(output.args[0], keep.add)
    last = {}
    for k, (kind, item) in enumerate(steps):
        reads, defs = [], [item]
        if kind == 0:
            reads, defs = list(item.inputs), list(item.outputs)
        elif kind == 1:
            torch.fx.node.map_arg((item.args, item.kwargs), reads.append)
        for n in defs:
            last.setdefault(n, k)
        for n in reads:
            last[n] = k
    out = [[] for _ in steps]
    for n, k in last.items():
        if n not in keep:
            out[k].append(n)
    return out


def _partition(gm, reasons, vals, order) -> List[Region]:
    """The supported nodes grouped into regions by the capability partitioner."""
    names = {_get_qualified_name(o) for o in VIEWS}
    parts = CapabilityBasedPartitioner(
        gm, _Support(reasons), allows_single_node_partition=True,
        non_compute_ops=sorted(names | {"_operator.getitem"})).propose_partitions()
    regions = []
    for p in parts:
        nodes = sorted(p.nodes, key=order.__getitem__)
        if all(n.target is operator.getitem for n in nodes):
            continue
        for seg in _kernels(nodes):
            r = _region(seg, vals)
            if r is not None:
                regions.append(r)
    return regions


def _guard(regions, vals, reasons) -> bool:
    """Give each region the checks of its inputs (an embedding's ids); mark the
    embeddings whose ids a region computes to run eagerly (True if any)."""
    again = False
    for r in regions:
        r.guards, inner = lowering_nn.index_guards(r, vals)
        for n in inner:
            reasons[n] = "ids computed in the same kernel (their range is checked eagerly)"
            again = True
    return again


def _kernels(nodes):
    """``nodes`` (a region of supported nodes, in graph order, convex in the graph) cut
    into the nodes of each kernel, as Inductor fuses: each anchor (an operator of
    ``ANCHORS``: a GEMM, a convolution, a pooling, a norm, a softmax, attention) starts a
    kernel, which takes the elementwise nodes and views that follow it as its epilogue;
    a plain reduction starts a kernel after an anchor and joins one of elementwise
    stages and reductions.  Nodes that read nothing of the region (a weight's
    transpose, constants) go to the first kernel that reads them, as its prologue; those
    that no kernel reads join the last kernel they read from (or, reading only nodes
    outside the region, a kernel that reads the same), or make one of their own.

    Each kernel is numbered; a node joins the highest-numbered kernel it reads from, a
    new kernel gets a number above all, a prologue node the lowest number among its
    readers: every edge goes from a kernel to one with a number at least its own, so the
    kernels contracted keep the graph acyclic (the region was convex: no path leaves it
    and comes back, so a node that reads and feeds only nodes outside may join any
    kernel).  Identical blocks of a model make identical kernels, which share
    one build (:mod:`tecomp.dynamo.cache`)."""
    members = set(nodes)
    kernel: Dict[torch.fx.Node, int] = {}
    is_op: List[bool] = []  # per kernel: whether it has an "op" anchor
    floating = []
    views = set()  # the kernels of views that run eagerly (_eager_view)
    for n in nodes:
        ins = [kernel[a] for a in n.all_input_nodes if a in kernel]
        kind = ANCHORS.get(n.target)
        if _eager_view(n, members):
            kernel[n] = len(is_op)
            views.add(len(is_op))
            is_op.append(False)
        elif kind == "op" or (kind == "reduction" and (not ins or is_op[max(ins)])):
            kernel[n] = len(is_op)
            is_op.append(kind == "op")
        elif ins:
            kernel[n] = max(ins)
        else:
            floating.append(n)
    unread = []
    for n in reversed(floating):
        readers = [kernel[u] for u in n.users if u in kernel and kernel[u] not in views]
        if readers:
            kernel[n] = min(readers)
        else:
            unread.append(n)
    for n in reversed(unread):  # in graph order: an epilogue of what they read, if any
        ins = [kernel[a] for a in n.all_input_nodes if a in kernel]
        if not ins:  # it reads only nodes outside: with a kernel that reads the same
            ins = [min([kernel[u] for a in n.all_input_nodes for u in a.users
                        if u in kernel and kernel[u] not in views], default=len(is_op))]
        kernel[n] = max(ins)
    for n in nodes:  # an operator's outputs are read where it is computed
        if n.target is operator.getitem and n.args[0] in members:
            kernel[n] = kernel[n.args[0]]
    groups = collections.defaultdict(list)
    for n in nodes:
        groups[kernel[n]].append(n)
    return [groups[k] for k in sorted(groups)
            if not all(n.target in VIEWS or n.target is operator.getitem for n in groups[k])]


def _eager_view(n, members) -> bool:
    """Whether the view ``n`` runs better eagerly, as a view of what a kernel computes,
    than copied as one more output of that kernel: the alias of a tensor the forward
    saves for the backward (read by no node of the region), and a view of one output of
    a multi-output operator (max pooling's values beside its indices: a kernel writing
    the view keeps the values in a temporary buffer, allocated at each call)."""
    if n.target not in VIEWS:
        return False
    if n.target is torch.ops.aten.alias.default:
        return not any(u in members for u in n.users)
    a = n.args[0]
    return (isinstance(a, torch.fx.Node) and a.target is operator.getitem
            and isinstance(a.args[0], torch.fx.Node) and a.args[0] in members)


def _region(nodes, vals):
    """The region of ``nodes``: its inputs and outputs; None for one whose multi-output
    operator is read outside it other than through getitem."""
    members = set(nodes)
    inputs, outputs = [], []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in members and isinstance(vals.get(a), torch.Tensor) and a not in inputs:
                inputs.append(a)
        if any(u not in members for u in n.users):
            outputs.append(n)
    if any(not isinstance(vals.get(o), torch.Tensor) for o in outputs):
        return None
    return Region(nodes, inputs, outputs)


def _row_major_between_kernels(regions, vals) -> dict:
    """``vals`` with every region output that only other kernels read laid out row-major
    (its traced value as a meta tensor of the same shape and dtype).  Eager PyTorch
    often computes such a tensor as a permuted view (the query, key and value of
    attention: ``view(b, s, h, d).permute(0, 2, 1, 3)``, strides ``(s*h*d, d, h*d,
    1)``); a kernel that wrote those strides, and the kernels that read them, would run
    their strided variants (indices from the strides at run time, about 1.3x slower
    for a BERT projection), where the kernels' own placeholders are row-major.  Outputs
    that an eager node or the graph's output reads keep eager's strides (a view, a
    returned tensor: AOTAutograd may rebuild views from them)."""
    inside = {n for r in regions for n in r.nodes}
    out = dict(vals)
    for r in regions:
        for n in r.outputs:
            v = vals.get(n)
            if isinstance(v, torch.Tensor) and not v.is_contiguous() and \
                    all(u in inside for u in n.users):
                out[n] = torch.empty(tuple(v.shape), dtype=v.dtype, device="meta")
    return out


def _eager_layouts_for_eager_readers(regions, traced) -> None:
    """Lay out every kernel output that a node run eagerly reads (an unsupported node,
    a node of a region whose kernel could not be compiled, the graph's output) with the
    strides it was traced with, gaps included (a select of a permuted projection:
    attention's query), unless its elements overlap: an eager node's result takes its
    layout from its inputs', and a ``view`` of it (attention's output) may only be
    legal in the traced layout.  (:func:`_row_major_between_kernels` made row-major
    the outputs that only kernels read.)"""
    inside = {n for r in regions for n in r.nodes}
    for r in regions:
        for k, n in enumerate(r.outputs):
            if not all(u in inside for u in n.users):
                r.out_specs[k] = _cache.out_spec(traced[n], gaps=True)


def _returned_views(graph) -> set:
    """The chains of views (of an input or of a computed tensor) that ``graph`` returns.
    AOTAutograd rebuilds such an output from its base: by replaying the views where
    their arguments are static, else (a graph with symbolic sizes: a slice starting at
    ``s0 // 2``) with ``base.as_strided()`` of the strides and storage offset of the
    tensor the graph returned -- which must then be a view of the base, not a copy."""
    out = next(n for n in graph.nodes if n.op == "output")
    todo, seen = list(out.all_input_nodes), set()
    while todo:
        n = todo.pop()
        if n not in seen and n.op == "call_function" and n.target in VIEWS:
            seen.add(n)
            if isinstance(n.args[0], torch.fx.Node):
                todo.append(n.args[0])
    return seen


def _attr(mod, target: str):
    for part in target.split("."):
        mod = getattr(mod, part)
    return mod


def _schedule(graph, regions, order) -> List[tuple]:
    """Kernels and eager nodes in a topological order of the graph with every region
    contracted to one node (the partitioner keeps that graph acyclic)."""
    owner = {}
    for r in regions:
        for n in r.nodes:
            owner[n] = r
    units, deps = [], {}
    for n in graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        u = owner.get(n, n)
        if u not in deps:
            units.append(u)
            deps[u] = set()
        for a in n.all_input_nodes:
            au = owner.get(a, a)
            if au is not u and a.op != "placeholder":
                deps[u].add(au)
    users = collections.defaultdict(list)
    indeg = {}
    for u in units:
        indeg[u] = len(deps[u])
        for d in deps[u]:
            users[d].append(u)
    first = {u: (order[u.nodes[0]] if isinstance(u, Region) else order[u]) for u in units}
    ready = sorted((u for u in units if indeg[u] == 0), key=first.__getitem__)
    steps = []
    heap = [(first[u], k, u) for k, u in enumerate(ready)]
    heapq.heapify(heap)
    tie = len(heap)
    while heap:
        _, _, u = heapq.heappop(heap)
        if isinstance(u, Region):
            steps.append((0, u))
        elif u.op == "get_attr":
            steps.append((2, u))
        else:
            steps.append((1, u))
        for v in users[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                tie += 1
                heapq.heappush(heap, (first[v], tie, v))
    if len(steps) != len(units):
        raise InternalError("tecomp.dynamo: the regions of a graph form a cycle")
    return steps


def _ops(nodes) -> str:
    """The operators of ``nodes``, in order, each once, without the ``aten.`` prefix."""
    names = dict.fromkeys(str(n.target).replace("aten.", "") for n in nodes
                          if isinstance(n.target, torch._ops.OpOverload))
    return " ".join(names)


def _log_unsupported(reasons, role):
    seen = collections.Counter()
    why = {}
    for n, r in reasons.items():
        if r is not None and isinstance(n.target, torch._ops.OpOverload):
            key = str(n.target)
            seen[key] += 1
            why.setdefault(key, r)
    for key, count in sorted(seen.items()):
        log.info("tecomp.dynamo: %s runs eagerly in the %s graph (%d node%s): %s", key, role,
                 count, "s" if count != 1 else "", why[key])

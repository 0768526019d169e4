"""Schedules and stages: *how* a compute DAG runs, never *what* it computes.

A ``Stage`` owns the loop structure of one compute: its root iteration variables (the
compute's axes, then its reduce axes), the relations that derive new ones (split,
fuse), the current *leaf* order (outermost first), what each leaf loop runs as
(serial, parallel, vectorized, unrolled, bound to a GPU thread axis) and where the
stage is computed (at the root, inlined into its consumers, or at a loop of another
stage).  Every primitive checks its arguments and raises :class:`ScheduleError` naming
the stage and axis with a fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from ..errors import ScheduleError, ShapeError, TecompError
from ..ir import op as _op
from ..ir.expr import (
    LT, And, Cast, Const, Expr, IterVar, Mul, ProducerLoad, Range, Reduce, Select, Var, as_index,
)
from ..ir.deep import deep_entry
from ..ir.functor import Mutator, map_combiner, substitute
from ..ir.names import display, is_pragma_name
from ..ir.simplify import simplify
from ..target import FRAGMENT_SCOPES
from ..te.scatter import ScatterOp
from ..te.tensor import (
    THREAD_TAGS, ComputeOp, Operation, PlaceholderOp, Tensor, compute, compute_ops, const as _const,
)
from ..te.tensor_intrin import TensorIntrin
from .relations import (  # noqa: F401  (re-exported)
    Fuse, Split, _derived, _with_body, index_dtype_of, max_extents,
)
from . import trace as _trace
from .rfactor import rfactor
from .separate import separate
from .trace import SCHEDULE_PRIMITIVES, STAGE_PRIMITIVES, Trace, TracedStage, traced

SCOPES = ("global", "shared", "local") + FRAGMENT_SCOPES
#: the largest ``pragma(axis, "unroll_count", n)`` (LLVM's unroll count is a 32-bit count
#: of at least 1: 2**32 reached it as 0 and crashed LLVM's unroller)
MAX_UNROLL_COUNT = 1024
#: the most blocks per SM ``pragma min_blocks_per_sm`` asks for (no GPU holds more)
MAX_MIN_BLOCKS_PER_SM = 32

#: the pragmas that are on where set and take no value (None, or True): a value such as
#: False or 0 would read as "off" and turn them on, so :meth:`Stage.pragma` refuses it
FLAG_PRAGMAS = frozenset({"unroll_explicit", "no_partition", "partition", "fp_contract",
                          "fp_reciprocal", "nontemporal", "masked_wide_loads", "zero_terms"})


# ---------------------------------------------------------------------------------
# relations between iteration variables


@dataclass
class IterAttr:
    kind: str = "serial"  # serial, parallel, vectorized, unrolled, thread
    thread: Optional[IterVar] = None
    pragmas: tuple = ()
    prefetches: tuple = ()  # (tensor, offset, along IterVar or None, level, carry IterVar
    #                         or None), in order given


def prefetch_kind_problem(stage_name: str, iv: IterVar, a: Optional[IterAttr],
                          tensor) -> Optional[str]:
    """Why a prefetch of ``tensor`` cannot run at the start of each iteration of the
    loop over ``iv`` (vectorized or bound to a GPU thread axis), or None.  Checked by
    ``Stage.prefetch`` and again at lowering (the kind may be set afterwards)."""
    if a is None:
        return None
    what = f"prefetch of {tensor.name} on stage {stage_name}, axis {iv.name}"
    if a.kind == "vectorized":
        return (f"{what}: the axis is vectorized, and a prefetch runs once per loop "
                f"iteration, not per SIMD lane; prefetch at an outer axis (split {iv.name} "
                "and vectorize the inner part, or pick the loop around it)")
    if a.kind == "thread":
        tag = a.thread.thread_tag if a.thread is not None else "a GPU thread axis"
        return (f"{what}: the axis is bound to {tag}, which is not a loop that a thread "
                f"runs; prefetch at a serial, parallel or unrolled loop")
    return None


class Stage(TracedStage):
    """The schedule of one compute: ``s[C]``.  Its methods are the schedule primitives
    (``split``, ``tile``, ``reorder``, ``vectorize``, ``compute_at``, ...; see
    docs/schedule.md).

    Parameters
    ----------
    op : Operation
        The compute.
    schedule : Schedule
        The schedule it belongs to.
    """

    def __init__(self, op: Operation, schedule: "Schedule"):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self._reset_loops()
        self.attach_type = "root"  # root | inline | scope
        self.attach_stage: Optional[Stage] = None
        self.attach_ivar: Optional[IterVar] = None
        self.scope = "global"
        self.is_output = False
        self.storage_aligns: Dict[int, tuple] = {}
        self.storage_perm: Optional[tuple] = None   # storage_order: dims, outermost first
        self.bound_aligns: Dict[int, int] = {}   # output dimension -> align_bounds factor
        self.reduce_aligns: Dict[int, int] = {}  # reduce axis position -> align_bounds factor
        self.tensorized: Optional[tuple] = None  # (IterVar, TensorIntrin): tensorize
        self.unmasked = None      # _tensorize_unmasked: the TensorIntrin of the whole tiles
        self.double_buffered = False  # double_buffer
        self.buffer_stages = 2        # double_buffer(stages=...)
        self.buffer_producer = "threads"   # double_buffer(producer=...)
        self.buffer_swizzle = "none"       # double_buffer(swizzle=...)
        self.persistent_blocks = None      # persistent(blocks, group_m)
        self.stored_root = False  # store_root
        self.lockstep = None      # _lockstep: (steps, rescale, fragments or None)
        self.lockstep_view = None  # _lockstep_view: (lockstep stage, intrinsic, operands)
        self.atomic = None        # _atomic_add: per axis (min, extent) of the region
        self.written = None       # _written_at: per axis (min, extent) of the region
        self.reduce_range = None  # _reduce_range: (min, extent) of its one reduce axis

    def _reset_loops(self):
        op = self.op
        self.all_iter_vars: List[IterVar] = list(op.axis) + list(op.reduce_axis)
        self.leaf_iter_vars: List[IterVar] = list(self.all_iter_vars)
        self.relations: list = []
        self.iter_attrs: Dict[IterVar, IterAttr] = {}

    # -- naming -----------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self):
        return f"stage({self.name}, leaves=[{', '.join(iv.name for iv in self.leaf_iter_vars)}])"

    # -- checks -----------------------------------------------------------------
    def _iv(self, iv, what: str, arg: str = "axis") -> IterVar:
        if isinstance(iv, Var):
            for cand in self.all_iter_vars:
                if cand.var is iv:
                    iv = cand
                    break
        if not isinstance(iv, IterVar):
            raise ScheduleError(
                f"{what} on stage {self.name}: {arg} must be an axis of the stage "
                f"(e.g. s[{self.name}].op.axis[0] or one returned by split/fuse), got {iv!r}")
        if iv not in self.all_iter_vars:
            owner = self.schedule._owner_of(iv)
            where = f"stage {owner.name}" if owner is not None else "no stage of this schedule"
            hint = "" if iv.kind != "thread" else " (a thread axis is passed to bind, not scheduled)"
            raise ScheduleError(
                f"{what} on stage {self.name}: axis {iv.name} belongs to {where}, not to stage "
                f"{self.name}{hint}; use s[{self.name}].op.axis / op.reduce_axis or the axes "
                f"returned by this stage's split/fuse")
        if iv not in self.leaf_iter_vars:
            raise ScheduleError(
                f"{what} on stage {self.name}: axis {iv.name} was already split or fused away "
                f"(current axes: {', '.join(x.name for x in self.leaf_iter_vars)}); schedule "
                f"the axes that replaced it")
        return iv

    def _attr(self, iv) -> IterAttr:
        a = self.iter_attrs.get(iv)
        if a is None:
            a = self.iter_attrs[iv] = IterAttr()
        return a

    def _set_kind(self, iv, kind, what):
        a = self._attr(iv)
        if a.kind not in ("serial", kind):
            raise ScheduleError(
                f"{what} on stage {self.name}: axis {iv.name} is already "
                f"{'bound to ' + a.thread.thread_tag if a.thread is not None else a.kind}; an axis runs "
                f"one way: split it to combine kinds")
        a.kind = kind

    def _not_inlined(self, what):
        if self.attach_type == "inline":
            raise ScheduleError(f"{what} on stage {self.name}: the stage is inlined into its "
                                f"consumers and has no loops; call s[{self.name}].compute_root() "
                                "first to give it loops again")

    # -- loop structure ---------------------------------------------------------
    def split(self, parent, factor=None, nparts=None, disable_predication=False):
        """Split ``parent`` into ``(outer, inner)`` with ``inner`` of extent ``factor``
        (or ``outer`` of extent ``nparts``).  A tail that does not divide is guarded.

        ``disable_predication=True`` (TVM's): no guard, because the split divides the
        axis.  Where that is not known when lowering, it is checked: a constant extent
        the split does not divide is a ScheduleError at lowering, a symbolic one is
        checked when the kernel is called (an ArgumentError naming the split), so the
        iterations past the axis never run outside the arrays."""
        parent = self._iv(parent, "split")
        if not isinstance(disable_predication, bool):
            raise ScheduleError(f"split on stage {self.name}, axis {parent.name}: "
                                f"disable_predication must be True or False, got "
                                f"{disable_predication!r:.40}")
        self._not_inlined("split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(
                f"split on stage {self.name}, axis {parent.name}: give exactly one of factor= "
                f"and nparts= (got {'both' if factor is not None else 'neither'})")
        arg, val = ("factor", factor) if factor is not None else ("nparts", nparts)
        if isinstance(val, bool) or not isinstance(val, (int, Expr)) and not hasattr(val, "__index__"):
            raise ScheduleError(f"split on stage {self.name}, axis {parent.name}: {arg} must be "
                                f"a positive int, got {val!r}")
        e = as_index(val)
        if isinstance(e, Const) and e.value < 1:
            raise ScheduleError(f"split on stage {self.name}, axis {parent.name}: {arg}={e.value} "
                                f"must be at least 1")
        kind = "reduce" if parent.kind == "reduce" else "data_par"
        # int64 where the loops' value outer*inner_extent + inner (up to the extent
        # rounded up to a multiple of the factor or parts, in the tail) may not fit int32
        pe = max_extents(self.op, self.relations).get(parent)
        f = int(e.value) if isinstance(e, Const) else None
        cover = -(-pe // f) * f if pe is not None and f is not None else None
        dt = index_dtype_of((parent.var.dtype, e.dtype), cover)
        outer = _derived(parent.name + ".outer", kind, dt)
        inner = _derived(parent.name + ".inner", kind, dt)
        self.relations.append(Split(parent, outer, inner, e if factor is not None else None,
                                    e if nparts is not None else None, disable_predication))
        pos = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        self.all_iter_vars += [outer, inner]
        return outer, inner

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two axes and order them ``(x.outer, y.outer, x.inner, y.inner)``."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes):
        """Fuse adjacent axes (outermost first) into one."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            raise ScheduleError(f"fuse on stage {self.name}: give at least one axis")
        ivs = [self._iv(a, "fuse") for a in axes]
        self._not_inlined("fuse")
        if len(set(ivs)) != len(ivs):
            raise ScheduleError(f"fuse on stage {self.name}: axis repeated in "
                                f"({', '.join(a.name for a in ivs)})")
        pos = [self.leaf_iter_vars.index(a) for a in ivs]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            order = ", ".join(x.name for x in self.leaf_iter_vars)
            raise ScheduleError(
                f"fuse on stage {self.name}: axes ({', '.join(a.name for a in ivs)}) are not "
                f"adjacent and outermost-first in the loop order ({order}); reorder them first")
        kinds = {a.kind for a in ivs}
        if len(kinds) > 1:
            raise ScheduleError(
                f"fuse on stage {self.name}: cannot fuse data-parallel and reduction axes "
                f"({', '.join(f'{a.name}:{a.kind}' for a in ivs)})")
        for a in ivs:
            if a in self.iter_attrs and self.iter_attrs[a].kind != "serial":
                raise ScheduleError(f"fuse on stage {self.name}: axis {a.name} is already "
                                    f"{self.iter_attrs[a].kind}; fuse before setting loop kinds")
        cur = ivs[0]
        largest = max_extents(self.op, self.relations)
        for nxt in ivs[1:]:
            a, b = largest.get(cur), largest.get(nxt)
            dt = index_dtype_of((cur.var.dtype, nxt.var.dtype),
                                a * b if a is not None and b is not None else None)
            fused = _derived(f"{cur.name}.{nxt.name}.fused", cur.kind, dt)
            if a is not None and b is not None:
                largest[fused] = a * b
            self.relations.append(Fuse(cur, nxt, fused))
            p = self.leaf_iter_vars.index(cur)
            self.leaf_iter_vars[p:p + 2] = [fused]
            self.all_iter_vars.append(fused)
            cur = fused
        return cur

    def reorder(self, *axes):
        """Put ``axes`` in this relative order, in the positions they occupy now."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        ivs = [self._iv(a, "reorder") for a in axes]
        self._not_inlined("reorder")
        seen = set()
        for a in ivs:
            if a in seen:
                raise ScheduleError(f"reorder on stage {self.name}: axis {a.name} is repeated "
                                    f"in ({', '.join(x.name for x in ivs)}); name each axis once")
            seen.add(a)
        pos = sorted(self.leaf_iter_vars.index(a) for a in ivs)
        for p, a in zip(pos, ivs):
            self.leaf_iter_vars[p] = a

    # -- loop kinds ---------------------------------------------------------------
    def unroll(self, axis):
        """Unroll the loop over ``axis`` (its extent must be constant)."""
        iv = self._iv(axis, "unroll")
        self._not_inlined("unroll")
        self._set_kind(iv, "unrolled", "unroll")

    def vectorize(self, axis):
        """Run the loop over ``axis`` as SIMD lanes (constant extent, data-parallel)."""
        iv = self._iv(axis, "vectorize")
        self._not_inlined("vectorize")
        if iv.kind == "reduce":
            raise ScheduleError(
                f"vectorize on stage {self.name}: axis {iv.name} is a reduction axis, whose "
                "iterations all update the same element; vectorize a data-parallel axis, or "
                "rfactor the reduction first")
        self._set_kind(iv, "vectorized", "vectorize")

    def parallel(self, axis):
        """Run the loop over ``axis`` on the CPU thread pool (data-parallel axes only)."""
        iv = self._iv(axis, "parallel")
        self._not_inlined("parallel")
        if iv.kind == "reduce":
            raise ScheduleError(
                f"parallel on stage {self.name}: axis {iv.name} is a reduction axis; running "
                "its iterations at once would race on the output; parallelize a data-parallel "
                "axis, or rfactor the reduction first")
        self._set_kind(iv, "parallel", "parallel")

    def bind(self, axis, thread_ivar):
        """Bind ``axis`` to a GPU thread axis made by ``tc.thread_axis``."""
        iv = self._iv(axis, "bind")
        self._not_inlined("bind")
        if not isinstance(thread_ivar, IterVar) or thread_ivar.kind != "thread":
            raise ScheduleError(
                f"bind on stage {self.name}, axis {iv.name}: the second argument must be a "
                f"thread axis such as tc.thread_axis('threadIdx.x'), got {thread_ivar!r}")
        for other, a in self.iter_attrs.items():
            if a.thread is not None and a.thread.thread_tag == thread_ivar.thread_tag \
                    and other is not iv and thread_ivar.thread_tag != "vthread":
                raise ScheduleError(
                    f"bind on stage {self.name}: {thread_ivar.thread_tag} is already bound to "
                    f"axis {other.name}; each thread axis binds one loop of a stage")
        a = self._attr(iv)
        if a.thread is not None:
            raise ScheduleError(f"bind on stage {self.name}: axis {iv.name} is already bound "
                                f"to {a.thread.thread_tag}")
        self._set_kind(iv, "thread", "bind")
        a.thread = thread_ivar

    def pragma(self, axis, name: str, value=None):
        """Annotate the loop over ``axis``: ``unroll_explicit`` unrolls it in the IR;
        ``unroll_count`` (an int from 1 to :data:`MAX_UNROLL_COUNT`) has LLVM unroll the
        loop that many times; ``no_partition`` / ``partition``: loop partitioning leaves the loop whole / also
        splits it on the selects in what its body stores (docs/schedule.md); ``fp_contract``
        lets ``a*b + c`` in the nest be one FMA, ``fp_reciprocal`` lets ``a / b`` in it
        be ``a * (1 / b)`` (docs/numerics.md); ``nontemporal`` has the
        LLVM backend stream the nest's aligned whole-vector stores to the buffers it does
        not allocate past the cache (docs/schedule.md); ``masked_wide_loads`` has it read
        a strided load under a lane mask in the nest as a wide masked load and a shuffle,
        not a gather (docs/schedule.md); ``zero_terms``, on any loop of a convolution's
        stage, computes the products on its zero padding that its sum leaves out
        (``tecomp.te.reduce.ZERO_WHERE``: the tap loops keep constant bounds);
        ``load_each_use`` (the value: the name of a tensor the stage reads) has the LLVM
        backend load each use of that tensor's whole vectors in the nest on its own
        rather than once into a register, so that each may be the memory operand of the
        instruction that uses it (an x86 FMA; the machine model's ``memory_operands``);
        ``vector_bytes`` (16, 32 or 64) compiles the kernel (all of it) for vector
        registers of that width where the target's are wider (x86 with AVX-512: 32 gives
        256-bit registers; elsewhere no effect; docs/schedule.md);
        ``min_blocks_per_sm`` (an int from 1 to
        :data:`MAX_MIN_BLOCKS_PER_SM`), on a loop outside a CUDA kernel's thread loops,
        asks ptxas to fit the kernel's registers to that many resident blocks per SM
        (``__launch_bounds__``' second number); any other name is kept as a
        ``// attr pragma_<name>`` comment for the backends.  A value is None, a bool,
        an int32, a finite float or a string of at most 256 characters (the printed IR
        shows it and the trace stores it; anything else is a ScheduleError).  The pragmas of
        :data:`FLAG_PRAGMAS` are on where set and take no value (or True): any other
        value is a ScheduleError (``False`` would read as off)."""
        iv = self._iv(axis, "pragma")
        self._not_inlined("pragma")
        if not is_pragma_name(name):
            raise ScheduleError(f"pragma on stage {display(self.name)}, axis {display(iv.name)}: "
                                f"the name must be an identifier (letters, digits, _), e.g. "
                                f"'unroll_explicit'; got {name!r:.60}")
        if name == "unroll_count" and (isinstance(value, bool) or not isinstance(value, int)
                                       or not 1 <= value <= MAX_UNROLL_COUNT):
            raise ScheduleError(
                f"pragma unroll_count on stage {display(self.name)}, axis {display(iv.name)}: "
                f"the value is how many times LLVM unrolls the loop, an int from 1 to "
                f"{MAX_UNROLL_COUNT}; got {value!r:.60}")
        if name == "min_blocks_per_sm" and (isinstance(value, bool) or not isinstance(
                value, int) or not 1 <= value <= MAX_MIN_BLOCKS_PER_SM):
            raise ScheduleError(
                f"pragma min_blocks_per_sm on stage {display(self.name)}, axis "
                f"{display(iv.name)}: the value is how many blocks of the kernel one SM "
                f"should hold at once, an int from 1 to {MAX_MIN_BLOCKS_PER_SM}; got "
                f"{value!r:.60}")
        if name in FLAG_PRAGMAS and value is not None and value is not True:
            raise ScheduleError(
                f"pragma {name} on stage {display(self.name)}, axis {display(iv.name)}: the "
                f"pragma takes no value (set, it is on; to keep it off, do not set it), got "
                f"{value!r:.60}; write s[T].pragma(axis, {name!r})")
        if name == "vector_bytes" and (isinstance(value, bool) or not isinstance(value, int)
                                       or value not in (16, 32, 64)):
            raise ScheduleError(
                f"pragma vector_bytes on stage {display(self.name)}, axis {display(iv.name)}: "
                f"the value is the width in bytes of the vector registers the kernel is "
                f"compiled for, 16, 32 or 64; got {value!r:.60}")
        if name == "load_each_use":
            read = sorted({t.name for t in self.op.input_tensors})
            if not isinstance(value, str) or value not in read:
                raise ScheduleError(
                    f"pragma load_each_use on stage {display(self.name)}, axis "
                    f"{display(iv.name)}: the value is the name of a tensor the stage reads "
                    f"(here {', '.join(map(repr, read)) or 'none'}), whose vectors the nest "
                    f"then loads at each use; got {value!r:.60}")
        why = _trace.pragma_value_problem(value)
        if why is not None:
            raise ScheduleError(
                f"pragma {name} on stage {display(self.name)}, axis {display(iv.name)}: the "
                f"value {why} (the printed IR shows it and the schedule's trace stores it); "
                f"got {type(value).__name__} {display(repr(value))[:60]}")
        for base in (str, float, int):    # (a subclass's own __str__/__repr__ not kept)
            if isinstance(value, base) and not isinstance(value, bool):
                value = getattr(base, f"__{base.__name__}__")(value)
                break
        if name == "causal_tiles":
            raise ScheduleError(
                f"pragma causal_tiles on stage {display(self.name)}, axis {display(iv.name)}: "
                f"the pragma skips loop iterations, which is correct only for the masked "
                f"computes of tecomp.nn.flash_attention, and only their template sets it; "
                f"schedule tc.nn.flash_attention with tecomp.strategy.cuda.attention (or "
                f"tc.auto_schedule) to get its causal tile skipping")
        a = self._attr(iv)
        a.pragmas = a.pragmas + ((name, value),)
        if name == "unroll_explicit":
            self._set_kind(iv, "unrolled", "pragma unroll_explicit")

    def _causal_tiles(self, axis, side: str, rows: int, cols: int, whole: bool = False,
                      masked: bool = False) -> None:
        """The FlashAttention template's ``causal_tiles`` pragma (:mod:`tecomp.lower.
        causal_tiles`): not a schedule primitive (untraced, refused by :meth:`pragma`),
        since skipping iterations is right only where a causal mask empties them.  The
        schedule's trace is then not replayable (replayed, it would skip nothing).
        ``whole``: the tiles the mask leaves whole in a loop of their own, whose copy of
        the body does not test it (the loop's body twice in the kernel); ``masked`` (with
        ``whole``): the other tiles run the masked intrinsic of a
        :meth:`_tensorize_unmasked` stage on every tile, without its test."""
        iv = self._iv(axis, "pragma")
        a = self._attr(iv)
        a.pragmas = a.pragmas + (("causal_tiles", f"{side} {int(rows)} {int(cols)}"
                                  + (" whole" if whole else "")
                                  + (" masked" if whole and masked else "")),)
        tr = self.schedule.trace
        if tr.problem is None:
            tr.problem = (f"stage {self.name}: the FlashAttention template's causal tile "
                          "skipping, not a schedule primitive")

    def _lockstep(self, steps: int, rescale, fragments: Optional[dict] = None) -> None:
        """FlashAttention-2's online softmax (:mod:`tecomp.strategy.cuda.attention`): not a
        schedule primitive (untraced), since it is right only for the template's computes.

        This stage, a reduction over one axis computed at a consumer's loop ``ko`` over
        the tiles of that axis (``compute_at(consumer, ko)`` first), runs in step with
        that loop instead of whole at each of its iterations: its state is kept whole at
        the root (``store_root``: global, indexed as the tensor), set to the reducer's
        identity before the loop, and at iteration ``ko`` combined with the ``steps``
        elements ``[ko * steps, ko * steps + steps)`` only; readers inside the loop see
        the running state.  Each row's factor ``rescale(old, new)`` (the state before
        and after the step, as tuples of loads) is then stored for the tensorized
        accumulator the consumer adds into at ``ko`` (its fragments are multiplied by it
        before the step's products, ``cuda.mma_scale_rows_f32``).

        Right where every reader inside the loop reads the state only through a factor
        ``exp(-g(state))`` (FlashAttention's ``p = exp(s - lse)``), the accumulated
        products are linear in it, and ``rescale(old, new) = exp(g(old) - g(new))``: the
        accumulator is then at every step what the whole reduction would have given over
        the steps so far (the template answers for it).  The schedule's trace is then
        not replayable (``tc.auto_schedule`` does not search it).

        ``fragments``: the state is kept in each warp's registers instead, as row tiles
        (``mma.accumulator`` tiles of 16 rows holding each row's value in all 16 columns)
        over the rows of the accumulator's fragment, and the step is the tensor
        intrinsics the dict names (each run on every 16-row tile; the template's, not the
        reducer's expression): ``state`` (the outputs' tile names, in order), ``init``
        (per state tile the fill intrinsic run before the loop), ``step`` (a tuple of
        groups ``(per_column, ops)``, each op ``(intrinsic, output tile, {placeholder:
        tile})``; ``"x"`` is the stage's one input, an ``mma.accumulator`` stage computed
        at the same loop, whose 16 x 16 tiles a group with ``per_column`` runs over),
        ``columns`` (the tiles kept per 16 x 16 tile of ``x``, written by such a group),
        ``factor`` (the tile the accumulator's tiles are multiplied by, ``cuda.mma_mul_f32``)
        and ``store`` (the intrinsic that writes the state tiles to the stage's buffers
        once the loop is done: what readers after the loop read).  Readers inside the
        loop read the state through stages of :meth:`_lockstep_view`."""
        if self.attach_type != "scope" or not self.op.reduce_axis or \
                len(self.op.reduce_axis) != 1:
            raise ScheduleError(f"_lockstep on stage {self.name}: a reduction over one axis "
                                "computed at a consumer's loop (compute_at first)")
        self.lockstep = (int(steps), rescale, fragments)
        self.stored_root = True
        tr = self.schedule.trace
        if tr.problem is None:   # (replayed without this step, the schedule would fail)
            tr.problem = (f"_lockstep on stage {self.name}: the FlashAttention template's "
                          "single pass, not a schedule primitive")

    def _lockstep_view(self, lock: "Stage", intrin: str, operands: dict) -> None:
        """FlashAttention-2's online softmax with its state in registers (:meth:`_lockstep`
        with ``fragments``): not a schedule primitive (untraced).  This stage, an
        ``mma.accumulator`` stage computed inside the loop of the ``_lockstep`` stage
        ``lock`` whose value is a function of the step's tiles (FlashAttention's ``p =
        exp(x - lse)``: the step's ``exp(x - m)`` times ``1 / l``), is computed from them
        by the tensor intrinsic ``intrin`` on each of its 16 x 16 tiles, its placeholders
        given the tiles ``operands`` names (``{placeholder: tile}``: a row tile, or a tile
        of the step's ``columns``, the one of the same keys).  Right where that function
        is the stage's compute (the template answers for it)."""
        self.lockstep_view = (lock, intrin, dict(operands))
        tr = self.schedule.trace
        if tr.problem is None:
            tr.problem = (f"_lockstep_view on stage {self.name}: the FlashAttention template's "
                          "single pass, not a schedule primitive")

    def _tensorize_unmasked(self, intrin) -> None:
        """FlashAttention's masked scores (:mod:`tecomp.strategy.cuda.attention`): not a
        schedule primitive (untraced).  This stage, tensorized (:meth:`tensorize`), computes
        ``select(c, a, b)`` with ``c`` an integer comparison of its indices (a read of a
        compute whose value is an expression of its own index alone, as the template's
        positions ``qpos[i] = i``, counts as that expression of the index read); each tile of the intrinsic's region is then run as
        ``intrin``, which must compute ``a``, where ``c`` holds on the whole tile (a test of
        the tile's corner, made by lowering and proved there by the ``causal_tiles``
        pragma's copy of the whole tiles), as the stage's own intrinsic elsewhere."""
        if self.tensorized is None or not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"_tensorize_unmasked on stage {self.name}: a tensorized stage "
                                "and a tensor intrinsic (a tecomp bug: the template calls it)")
        self.unmasked = intrin
        tr = self.schedule.trace
        if tr.problem is None:
            tr.problem = (f"_tensorize_unmasked on stage {self.name}: the FlashAttention "
                          "template's whole tiles, not a schedule primitive")

    def _atomic_add(self, region) -> None:
        """FlashAttention-2's ``dq`` (:mod:`tecomp.strategy.cuda.attention`): not a
        schedule primitive (untraced), since it is right only for the template's computes.

        This stage, a copy of a tensorized ``mma.accumulator`` (``cache_write``) computed
        at a loop of a stage that does not read it (``compute_at`` is refused there: set
        ``attach_type`` by this call), adds its region into its buffer instead of storing
        it: the buffer is global and whole (float32), set to 0 by a kernel of its own
        before the host's, and each iteration's region ``region`` (per axis ``(min,
        extent)``, expressions of the enclosing loops' variables) is added with
        ``atomicAdd`` (``cuda.mma_atomic_add_f32``), since the blocks of the host's kernel
        add partial sums (over their own part of the reduction,
        :meth:`_reduce_range`) into the same elements.  The sum is right whatever the
        order of the additions; its rounding may differ from run to run."""
        if self.attach_type != "scope" or self.op.reduce_axis or \
                len(region) != len(self.op.axis):
            raise ScheduleError(f"_atomic_add on stage {self.name}: a copy computed at a loop "
                                "with a region per axis (a tecomp bug: the template calls it)")
        self._template_region("atomic", region, "atomic dq")

    def _template_region(self, field: str, region, what: str) -> None:
        """This stage's ``field`` (``atomic``, ``written``) the region ``region``, its
        buffer whole (``store_root``); the trace notes that the schedule is the
        FlashAttention template's ``what``, no primitive (it does not replay)."""
        setattr(self, field, tuple(region))
        self.stored_root = True
        tr = self.schedule.trace
        if tr.problem is None:
            tr.problem = (f"_{'atomic_add' if field == 'atomic' else 'written_at'} on stage "
                          f"{self.name}: the FlashAttention template's {what}, not a schedule "
                          "primitive")

    def _atomic_at(self, parent: "Stage", axis, region) -> None:
        """:meth:`_atomic_add` at ``parent``'s loop ``axis``, which need not read this
        stage (the template's fused kernel)."""
        iv = parent._iv(axis, f"_atomic_at of {self.name}", "axis")
        self._check_attachable("_atomic_at")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, iv
        self._atomic_add(region)

    def _written_at(self, parent: "Stage", axis, region) -> None:
        """This stage computed at ``parent``'s loop ``axis``, which need not read it, each
        iteration storing the region ``region`` (per axis ``(min, extent)``, expressions
        of the enclosing loops' variables) into its whole global buffer: the
        FlashAttention template's forward kernel writing the rows' logsumexp once its key
        tiles are done, or the CPU attention template's task once its row sum is (the
        iterations of the host's kernel or loop nest cover the stage: it may be an
        output).  Not a schedule primitive (untraced): right only for the templates'
        computes."""
        iv = parent._iv(axis, f"_written_at of {self.name}", "axis")
        if self.op.reduce_axis or len(region) != len(self.op.axis) or \
                type(self.op) is not ComputeOp:
            raise ScheduleError(f"_written_at on stage {self.name}: an elementwise compute "
                                "with a region per axis (a tecomp bug: the template calls it)")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, iv
        self._template_region("written", region, "logsumexp")

    def _reduce_range(self, lo, extent: int) -> None:
        """The one reduce axis of this stage runs over ``[lo, lo + extent)`` only
        (``lo`` an expression of the enclosing loops' variables): a block's partial sum,
        which an :meth:`_atomic_add` stage adds into the whole.  Template-only."""
        if len(self.op.reduce_axis) != 1:
            raise ScheduleError(f"_reduce_range on stage {self.name}: a reduction over one "
                                "axis (a tecomp bug: the template calls it)")
        self.reduce_range = (lo, int(extent))

    def tensorize(self, axis, intrin):
        """Run the loops from ``axis`` inward as the tensor intrinsic ``intrin``
        (``tc.decl_tensor_intrin`` or a built-in ``tc.tensor_intrin(name)``).

        The loops from ``axis`` inward must compute the intrinsic's declared computation:
        their data-parallel loops are its axes and their reduction loops its reduce axes,
        in order, with the same extents; lowering checks the expression and each operand's
        memory layout and raises ``ScheduleError`` naming what differs.  Call it after the
        splits and reorders that shape those loops."""
        iv = self._iv(axis, "tensorize")
        self._not_inlined("tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(
                f"tensorize on stage {display(self.name)}, axis {display(iv.name)}: the second "
                f"argument must be a tensor intrinsic (tc.decl_tensor_intrin(...) or "
                f"tc.tensor_intrin(name)), got {intrin!r:.60}")
        if type(self.op) is not ComputeOp:
            raise ScheduleError(f"tensorize on stage {display(self.name)}: only a tc.compute "
                                "stage can be tensorized")
        if self.tensorized is not None and self.tensorized[0] is not iv:
            raise ScheduleError(
                f"tensorize on stage {display(self.name)}: the stage is already tensorized at "
                f"axis {display(self.tensorized[0].name)}; a stage runs one intrinsic")
        self.tensorized = (iv, intrin)

    def prefetch(self, tensor, axis, offset: int = 1, along=None, level: int = 1,
                 carry=None):
        """Prefetch ``tensor`` in the loop over ``axis``: at the start of every
        iteration, the elements of ``tensor`` that iteration ``axis + offset`` accesses
        (every load and store of it in the loop body, stages computed inside included)
        are brought into the cache, one prefetch per 64-byte line along the innermost
        dimension (a region under a line wide that moves on by at most a line each
        iteration of a loop of 4 or more: one prefetch at its start, the iterations
        together covering the lines).  The iteration is clamped into the loop's range;
        when the body stores
        to ``tensor`` the prefetch announces a write.  Results never change.

        ``along`` (an IterVar of a loop around ``axis``: an outer loop of this stage or
        of a stage it is computed at; Halide's ``from``): advance that loop by
        ``offset`` instead, keeping ``axis`` where it is.  E.g. with a row loop ``R``
        around a stage whose loop ``j`` walks the row, ``prefetch(x, j, 1, along=R)``
        prefetches, at each step of ``j``, the same part of the next row: spread over
        the row rather than all at its start.

        ``level``: the cache the lines are brought into: 1 (L1 and the levels below it,
        x86 ``prefetcht0``), 2 (L2, ``prefetcht1``: the lines come on into L1 when
        loaded, without holding L1's line buffers while they are on their way) or 3 (the
        last level, ``prefetcht2``).

        ``carry`` (an IterVar of a loop around ``axis``, as ``along``, and around
        ``along`` where that is given; with a positive ``offset``): an iteration past
        the end of ``axis``'s loop (``along``'s) is taken from the next iteration of
        ``carry`` instead of being clamped, as if the two loops were one: ``axis +
        offset - extent`` of ``carry + 1`` (clamped as above in ``carry``'s last
        iteration).  E.g. a tile loop ``T`` around a step loop ``k`` that walks the
        tile's rows: ``prefetch(W, k, 32, carry=T)``, in the tile's last 32 steps,
        prefetches the start of the next tile's rows rather than the end of its own
        again; with blocks ``ko`` of those steps, ``prefetch(W, ki, 1, along=ko,
        carry=T)``, the last block's steps the next tile's first block."""
        if not isinstance(tensor, Tensor):
            where = f", axis {axis.name}" if isinstance(axis, IterVar) else ""
            raise ScheduleError(
                f"prefetch on stage {self.name}{where}: tensor must be a Tensor (a placeholder "
                f"or a compute that the loop reads or writes, e.g. s[{self.name}].prefetch(A, "
                f"axis, 1)), got {tensor!r}")
        iv = self._iv(axis, f"prefetch of {tensor.name}")
        what = f"prefetch of {tensor.name} on stage {self.name}, axis {iv.name}"
        if isinstance(offset, bool) or not isinstance(offset, int) \
                or not -2**31 < offset < 2**31:
            raise ScheduleError(
                f"{what}: offset must be an int32 (how many iterations ahead: 1 prefetches for "
                f"the next iteration, -1 for the previous one), got {offset!r}")
        if self.attach_type == "inline":
            raise ScheduleError(
                f"{what}: the stage is inlined into its consumers and has no loops; call "
                f"s[{self.name}].compute_root() first, or prefetch at a loop of a stage that "
                "reads the inlined body")
        problem = prefetch_kind_problem(self.name, iv, self.iter_attrs.get(iv), tensor)
        if problem is not None:
            raise ScheduleError(problem)
        if along is not None and not isinstance(along, IterVar):
            raise ScheduleError(
                f"{what}: along must be the IterVar of a loop around {iv.name} (e.g. an outer "
                f"axis of the stage {self.name} is computed at), got {along!r}")
        if along is iv:
            along = None
        if carry is not None and (not isinstance(carry, IterVar) or carry is iv):
            raise ScheduleError(
                f"{what}: carry must be the IterVar of a loop around {iv.name} (e.g. the "
                f"tile loop whose next iteration continues the prefetch), got {carry!r:.60}")
        if carry is not None and offset <= 0:
            raise ScheduleError(
                f"{what}: carry continues the prefetch past the end of "
                f"{(along or iv).name}'s loop into the next iteration of {carry.name}, so it "
                f"needs a positive offset (got offset={offset}); drop carry, or give a "
                "positive offset")
        if carry is not None and carry is along:
            raise ScheduleError(
                f"{what}: carry={carry.name} is along= itself; carry must be a loop around "
                f"{along.name}, whose next iteration continues the prefetch past the end of "
                f"{along.name}'s loop: pass that loop, or leave carry out to clamp")
        if isinstance(level, bool) or not isinstance(level, int) or level not in (1, 2, 3):
            raise ScheduleError(
                f"{what}: level must be the cache level to prefetch into, 1 (L1), 2 (L2) or 3 "
                f"(the last level), got {level!r}")
        a = self._attr(iv)
        a.prefetches = a.prefetches + ((tensor, offset, along, level, carry),)

    # -- where it is computed -----------------------------------------------------
    def compute_at(self, parent, axis):
        """Compute this stage inside ``parent``'s loop over ``axis``: only the region
        one iteration of that loop reads is computed there, into a buffer that small."""
        if isinstance(parent, (Tensor, Operation)):
            parent = self.schedule[parent]
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at on stage {self.name}: parent must be a stage "
                                f"(s[T]), got {parent!r}")
        if parent is self:
            raise ScheduleError(
                f"compute_at on stage {self.name}: cannot compute a stage at an axis of itself; "
                f"pick a loop of a stage that consumes {self.name}")
        iv = parent._iv(axis, f"compute_at of {self.name}", "axis")
        self._check_attachable("compute_at")
        if not self.schedule._depends_on(parent, self):
            raise ScheduleError(
                f"compute_at on stage {self.name}: stage {parent.name} does not consume "
                f"{self.name} (directly or through other stages); compute it at a stage that "
                "reads it")
        a = parent
        while a is not None:
            if a is self:
                raise ScheduleError(f"compute_at on stage {self.name}: stage {parent.name} is "
                                    f"itself computed inside {self.name}: that is a cycle")
            a = a.attach_stage
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, iv

    def store_root(self):
        """Keep this stage's buffer whole at the root while ``compute_at`` computes it at a
        consumer's loop (Halide's ``store_root``).

        Each iteration of that loop computes the region its own consumers there read, as
        any ``compute_at`` does, but into the stage's full-size buffer (indexed as the
        tensor is), allocated once outside every loop; stages outside the loop (an output
        of the schedule among them) may then read the stage after the loop nest that
        computes it.  E.g. batch norm's gradient: the two per-channel sums computed at
        the data gradient's channel loop, just before the channel's elements read them,
        and read again by the scale and shift gradients at the root.

        Lowering refuses it for a stage computed in ``local``/``shared`` scope or on the
        GPU, with ``align_bounds``, or where iterations of an enclosing parallel loop may
        compute overlapping parts of the stage (two threads writing one element).  At
        the root it changes nothing."""
        self._check_attachable("store_root")
        self.stored_root = True

    def compute_inline(self):
        """Substitute this stage's body into every consumer (no buffer, no loops)."""
        if isinstance(self.op, ComputeOp) and self.op.reduce_axis:
            raise ScheduleError(
                f"compute_inline on stage {self.name}: it is a reduction, which cannot be "
                "inlined into its consumers; compute_at it at a consumer loop instead")
        self._check_attachable("compute_inline")
        for st in self.schedule.stages:
            if getattr(st.op, "call", None) is not None and any(
                    t.op is self.origin_op or t.op is self.op for t in st.op.input_tensors):
                raise ScheduleError(
                    f"compute_inline on stage {self.name}: the extern stage {st.name} reads it, "
                    f"and its function ({st.op.call.name}) reads memory: keep {self.name} "
                    "computed at the root")
        for st in self.schedule.stages:
            if isinstance(st.op, ScatterOp) and any(
                    t.op is self.origin_op or t.op is self.op for t in st.op.input_tensors):
                raise ScheduleError(
                    f"compute_inline on stage {self.name}: the scatter-add {st.name} reads it "
                    f"(at data-dependent indices): keep {self.name} computed at the root")
        for st in self.schedule.stages:
            if st.attach_stage is self:
                raise ScheduleError(
                    f"compute_inline on stage {self.name}: stage {st.name} is computed at one of "
                    f"its loops; compute_root() that stage first")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def _single_output(self, what):
        """Refuse ``what`` on a multi-output compute (it rewrites one body)."""
        n = len(getattr(self.op, "bodies", ()))
        if n > 1:
            raise ScheduleError(
                f"{what} on stage {self.name}: it computes {n} outputs in one loop nest (a "
                f"multi-output compute), and {what} takes a single-output compute; compute "
                "the outputs in separate tc.compute calls to use it")

    def compute_root(self):
        """Compute this stage in its own loop nest at the top of the function (default)."""
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    def _check_attachable(self, what):
        if hasattr(self.op, "scan_axis"):
            raise ScheduleError(
                f"{what} on stage {self.name}: it is a scan, which runs its steps in order in "
                "its own loop nest at the root; schedule the computes of its body instead")
        call = getattr(self.op, "call", None)
        if call is not None:
            raise ScheduleError(
                f"{what} on stage {self.name}: it is an extern stage (computed by a call to "
                f"{call.name}), which runs once, whole, at the root; it has no loops or body to "
                "move")
        if isinstance(self.op, ScatterOp):
            raise ScheduleError(
                f"{what} on stage {self.name}: it is a scatter-add (tc.scatter_add, or the "
                "gradient of a read through an index tensor), which runs once, whole, at the "
                "root; it has no loops or body to move")
        if self.is_output:
            raise ScheduleError(
                f"{what} on stage {self.name}: it is an output of the schedule, which must be "
                "computed in full at the root; only intermediate stages can be moved")

    # -- storage ------------------------------------------------------------------
    def set_scope(self, scope: str):
        """Store this stage's buffer in ``scope``: global, shared (GPU), local, or a
        tensor-core fragment (``wmma.matrix_a``, ``wmma.matrix_b``, ``wmma.accumulator``:
        filled, used and stored only through the ``cuda.wmma_*`` intrinsics)."""
        if scope not in SCOPES:
            raise ScheduleError(f"set_scope on stage {self.name}: unknown scope {scope!r}; use "
                                f"one of {', '.join(SCOPES)}")
        if self.is_output and scope != "global":
            raise ScheduleError(f"set_scope on stage {self.name}: it is an output, which lives "
                                "in global memory (the caller's array)")
        self.scope = scope

    def storage_align(self, axis, factor: int, offset: int = 0):
        """Pad the buffer so that the stride of ``axis``'s dimension is
        ``factor * k + offset`` elements (avoids bank / cache-set conflicts)."""
        if not isinstance(axis, IterVar) or axis not in self.op.axis:
            raise ScheduleError(
                f"storage_align on stage {self.name}: axis must be one of its output axes "
                f"({', '.join(iv.name for iv in self.op.axis)})")
        if not isinstance(factor, int) or factor < 1 or not isinstance(offset, int) or not 0 <= offset < factor:
            raise ScheduleError(f"storage_align on stage {self.name}: need an int factor >= 1 "
                                f"and 0 <= offset < factor, got factor={factor!r}, offset={offset!r}")
        dim = self.op.axis.index(axis)
        if dim == len(self.op.axis) - 1:
            raise ScheduleError(f"storage_align on stage {self.name}: axis {axis.name} is the "
                                "innermost dimension, whose stride is 1; align an outer axis")
        self.storage_aligns[dim] = (factor, offset)

    def storage_order(self, *axes):
        """Lay this stage's buffer out with its dimensions in the order of ``axes`` (every
        output axis once, outermost first) instead of the order of the axes; the
        stage's indices, loops and values stay the same (Halide's ``reorder_storage``,
        listed outermost first as loops are).  E.g. a ``cache_read`` copy of
        ``w[o, c, ky, kx]`` stored ``c, ky, kx, o``: a vector along ``o`` is then
        contiguous.  The printed IR shows the strides this gives.  Not for outputs,
        whose buffer is the caller's array."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        names = ", ".join(iv.name for iv in self.op.axis)
        if self.is_output:
            raise ScheduleError(
                f"storage_order on stage {self.name}: it is an output, whose buffer is the "
                "caller's array in its own layout; reorder the storage of an intermediate "
                f"stage (e.g. s.cache_write({self.name}, 'local'))")
        for ax in axes:
            if not isinstance(ax, IterVar) or ax not in self.op.axis:
                raise ScheduleError(
                    f"storage_order on stage {self.name}: {getattr(ax, 'name', ax)!r} is not "
                    f"one of its output axes ({names}); give each of them once (the "
                    "stage's op.axis, not split or fused loops)")
        dims = tuple(self.op.axis.index(ax) for ax in axes)
        if sorted(dims) != list(range(len(self.op.axis))):
            raise ScheduleError(
                f"storage_order on stage {self.name}: got {', '.join(a.name for a in axes)}; "
                f"give every output axis ({names}) exactly once, outermost first")
        self.storage_perm = None if dims == tuple(range(len(dims))) else dims

    def double_buffer(self, stages: int = 2, producer: str = "threads", swizzle: str = "none"):
        """Give this shared-memory stage two buffers (``stages`` of them), so that a GPU
        block copies the tile of the next iteration into one while it computes from the
        other (TVM's ``double_buffer``; with ``stages`` > 2, a ring of buffers as Triton's
        ``num_stages`` and CUTLASS's multistage pipelines: ``stages - 1`` tiles in flight).

        For a ``shared`` stage computed at a serial loop of a kernel (``compute_at``)
        whose iteration first copies the stage (every thread a share, e.g. a GEMM's
        tiles at its ``k.outer`` loop) and then reads it: lowering copies the first
        ``stages - 1`` iterations' tiles before the loop, and in each iteration, after its
        one barrier, issues the copy of the tile ``stages - 1`` iterations ahead into the
        buffer the previous iteration read, before the reads of the current one.  One
        barrier an iteration instead of two; the buffer takes ``stages`` times the shared
        memory.  On the GPU a copy of global memory into the tile is asynchronous
        (``cp.async`` on sm_80 and later; with more than two stages each iteration's
        copies are a commit group, and the barrier waits only for the oldest), so the
        next tiles' loads are in flight while the block computes.  Every shared stage
        copied in the same iteration must be buffered too, with the same ``stages``.

        ``producer="tma"`` (sm_90 and later): the tile is not copied by the block's threads
        but by the TMA unit -- one thread issues, per iteration, one
        ``cp.async.bulk.tensor`` of the whole tile through a tensor map of the tensor it
        reads (a ``const __grid_constant__`` kernel parameter the runtime encodes at each
        call), into the ring; each slot has a *full* mbarrier (the copy's bytes complete
        it) that the threads wait on instead of a barrier, and an *empty* one they arrive
        on when they have read it, which the issuing thread waits on before copying into
        the slot again.  The stage's loops must be its own (no split, fuse or binding:
        the tile is one box), its copy a plain read of a C-contiguous global tensor with
        the tile's innermost dimension along the tensor's (TMA copies boxes as they lie
        in memory; a transposed tile is a ScheduleError), the box at most 256 along each
        dimension; the rows of the tensor must be 16-byte aligned (a TensorMapError when
        it is called otherwise).

        ``producer="tma_warp"``: the same ring, the copies issued by a warp of its own
        (warp specialisation): the kernel is launched with one more ``threadIdx.z``
        (the block's threads along x and y, a warp when they are 32), whose first thread
        runs ahead through all the loop's iterations, waiting only for empty slots, while
        the other threads compute; the tiles' origins may depend only on the block and
        the loop (not on the computing threads).

        ``swizzle`` (``"32B"``, ``"64B"``, ``"128B"``): the ring's
        slots are laid out swizzled, as the tensor map's ``CU_TENSOR_MAP_SWIZZLE_*`` writes
        them (with ``producer="threads"`` the threads' copies and every element access
        place each 16-byte chunk at its swizzled address, and ``ldmatrix`` reads the rows
        there): in each 8-row pattern (rows of exactly the swizzle's bytes: the tile's
        innermost extent), the 16-byte chunks of row ``r`` exchanged by ``chunk ^ (r %
        8)`` (128B; 64B and 32B the same on their narrower rows).  The stage's indices stay
        logical (the printed IR and the interpreter read the tile unswizzled); only the
        hardware sees the layout: the TMA copy, and the readers that know it -- the
        ``cuda.wgmma_*_rows`` intrinsics, whose descriptors carry the same swizzle mode.
        Each 8-row pattern meets all 32 banks, so reading a column of 16-byte chunks (an
        8 x 8 core matrix, what wgmma reads) is conflict-free."""
        if self.scope != "shared":
            raise ScheduleError(
                f"double_buffer on stage {display(self.name)}: its scope is {self.scope}; "
                "double buffering is for a GPU tile in shared memory (s.cache_read(t, "
                "'shared', readers) or set_scope('shared') first)")
        if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= 8:
            raise ScheduleError(
                f"double_buffer on stage {display(self.name)}: stages={stages!r:.40}; give "
                "an int from 2 (two buffers, the default) to 8 (a ring of 8 tiles)")
        if producer not in ("threads", "tma", "tma_warp"):
            raise ScheduleError(
                f"double_buffer on stage {display(self.name)}: producer={producer!r:.40}; give "
                "'threads' (the block's threads copy the tile, cp.async), 'tma' (one thread "
                "issues a TMA copy of the whole tile, sm_90 and later) or 'tma_warp' (a warp "
                "of its own issues them: warp specialisation)")
        if swizzle not in ("none", "32B", "64B", "128B"):
            raise ScheduleError(
                f"double_buffer on stage {display(self.name)}: swizzle={swizzle!r:.40}; give "
                "'none', '32B', '64B' or '128B' (the tile's rows of that many bytes)")
        self.double_buffered = True
        self.buffer_stages = stages
        self.buffer_producer = producer
        self.buffer_swizzle = swizzle

    def persistent(self, blocks: int, group_m: int = 8):
        """Run this stage's blocks as a persistent grid: ``blocks`` blocks (as many as the
        GPU has SMs: 132 on an H100 SXM), each looping over the output tiles
        ``blockIdx.x``, ``+ blocks``, ... (no more blocks than tiles), taken in grouped
        order: ``group_m`` tile rows at a time, down a group's rows before its next
        column, so that the blocks running at once share their operands' tiles in L2.
        The stage's loops bound to ``blockIdx.y`` (rows) and ``blockIdx.x`` (columns) must
        be its two outermost, of constant extents; a TMA ring inside starts again with
        each tile."""
        for name, v, lo in (("blocks", blocks, 1), ("group_m", group_m, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > 1 << 20:
                raise ScheduleError(f"persistent on stage {display(self.name)}: {name}="
                                    f"{v!r:.40}; give a positive int")
        self.persistent_blocks = (blocks, group_m)

    def align_bounds(self, axis, factor: int):
        """Compute the region of output axis ``axis`` rounded out to whole multiples of
        ``factor`` (Halide's ``align_bounds``), not clipped at the tensor's edge.

        For a stage computed at a loop (``compute_at``): where the region one iteration
        needs runs past the end of the tensor, the stage still computes ``factor``-aligned
        blocks, so its loops and its buffer keep a constant extent (no guard, no tail
        kernel).  The values past the edge are computed but never reach a result.  Every
        read in the stage's body must stay inside the memory of what it reads there (an
        input's shape, or the buffer of a stage computed at an enclosing loop); lowering
        checks it and raises otherwise.  An iteration whose region lies wholly past the
        edge skips the stage.  ``factor=1`` keeps the needed region unclipped.

        ``axis`` a reduce axis of a sum (a tensor-core GEMM's ``k`` of extent 100 run as
        112 in steps of 16): the reduction runs over its extent rounded up to a multiple
        of ``factor``, so that a split by ``factor`` divides it (no guard: a tensorized
        region stays whole).  Right only where every term past the extent is zero: the
        sum's terms must be products with a factor read at the bare reduce index from a
        copy made by ``cache_read(..., pad=0.0)`` (or a plain copy of one) whose region
        past the edge is computed (``align_bounds`` on it, or a GPU tile); checked here
        (ScheduleError otherwise)."""
        if isinstance(axis, IterVar) and axis in self.op.reduce_axis:
            self._align_reduction(axis, factor)
            return
        if not isinstance(axis, IterVar) or axis not in self.op.axis:
            raise ScheduleError(
                f"align_bounds on stage {self.name}: axis must be one of its output axes "
                f"({', '.join(iv.name for iv in self.op.axis)}) or reduce axes, got {axis!r}")
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise ScheduleError(
                f"align_bounds on stage {self.name}, axis {axis.name}: factor must be an int "
                f">= 1 (the block the region is rounded out to), got {factor!r}")
        if self.is_output:
            raise ScheduleError(
                f"align_bounds on stage {self.name}: it is an output, whose buffer is the "
                "caller's array and cannot grow past its shape; align the bounds of an "
                f"intermediate stage (e.g. s.cache_write({self.name}, 'local'))")
        self.bound_aligns[self.op.axis.index(axis)] = factor

    def _align_reduction(self, axis: IterVar, factor) -> None:
        """``align_bounds`` on a reduce axis (see there): checked, then recorded."""
        what = f"align_bounds on stage {self.name}, reduce axis {axis.name}"
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise ScheduleError(f"{what}: factor must be an int >= 1 (the step the "
                                f"reduction's extent is rounded up to), got {factor!r}")
        body = self.op.body if len(self.op.bodies) == 1 else None
        dom = axis.dom
        if not isinstance(body, Reduce) or body.combiner.name != "sum" or not (
                isinstance(dom.min, Const) and isinstance(dom.extent, Const)):
            raise ScheduleError(f"{what}: the stage must be a sum over a constant range (the "
                                "terms past the extent are zeros only in a sum)")
        past = range(dom.extent.value, -(-dom.extent.value // factor) * factor)
        if not _zero_past_edge(body.source, axis.var, past):
            raise ScheduleError(
                f"{what}: the terms past its extent {dom.extent.value} may not be zero; every "
                f"term must be a product with a factor read at {axis.name} from a copy made "
                "by cache_read(..., pad=0.0) (the copy holds zeros past the edge)")
        self.reduce_aligns[self.op.reduce_axis.index(axis)] = factor


# ---------------------------------------------------------------------------------


def _strip_casts(e):
    while isinstance(e, Cast):
        e = e.value
    return e


def _conjuncts(c):
    return _conjuncts(c.a) + _conjuncts(c.b) if isinstance(c, And) else [c]


def _zero_past_edge(source, k: Var, past=()) -> bool:
    """Whether the sum term ``source`` is zero wherever the reduce variable ``k`` is past
    its extent: a product (under casts) with a factor read at ``k`` (in some dimension
    ``d``) from a ``cache_read(..., pad=0)`` copy, directly or through plain copies of
    it, guarded there by ``index < extent`` (the copy is zero past it); or read from a
    padded blocked copy (``cache_read(..., pad=0, blocks=)``: at ``k // f`` and ``k %
    f``) one of whose guards is false at each ``k`` of ``past`` (the values past the
    extent the aligned reduction runs over)."""
    e = _strip_casts(source)
    if not isinstance(e, Mul):
        return False
    for f in (_strip_casts(e.a), _strip_casts(e.b)):
        if not isinstance(f, ProducerLoad):
            continue
        dims = [d for d, i in enumerate(f.indices) if i is k]
        t = f.producer
        for _ in range(8):   # plain copies (shared tiles, fragments) down to the padded one
            op = t.op
            if not isinstance(op, ComputeOp) or len(op.bodies) != 1:
                break
            ax = [iv.var for iv in op.axis]
            b = op.body
            if isinstance(b, ProducerLoad) and len(b.indices) == len(ax) and all(
                    i is v for i, v in zip(b.indices, ax)):
                t = b.producer
                continue
            if isinstance(b, Select) and isinstance(b.false_value, Const) and \
                    b.false_value.value == 0 and isinstance(b.true_value, ProducerLoad) and \
                    all(i is v for i, v in zip(b.true_value.indices, ax)):
                if any(isinstance(c, LT) and c.a is ax[d] and isinstance(c.b, Const) and
                       isinstance(op.shape[d], Const) and c.b.value == op.shape[d].value
                       for d in dims for c in _conjuncts(b.cond)):
                    return True
            if isinstance(b, Select) and isinstance(b.false_value, Const) and \
                    b.false_value.value == 0 and past and len(f.indices) == len(ax):
                at = dict(zip(ax, f.indices))
                for c in _conjuncts(b.cond):
                    ck = substitute(c, at)
                    if all(_false_at(ck, k, v) for v in past):
                        return True
            break
    return False


def _false_at(cond, k: Var, value: int) -> bool:
    """Whether ``cond`` simplifies to false with ``k = value`` (whatever else it reads:
    a condition on other variables too is not false)."""
    got = simplify(substitute(cond, {k: Const(value, k.dtype)}))
    return isinstance(got, Const) and not got.value


class _ReplaceLoads(Mutator):
    def __init__(self, old: Tensor, new: Tensor, remap=None):
        self.old, self.new, self.remap = old, new, remap

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.producer is self.old:
            return ProducerLoad(self.new, self.remap(idx) if self.remap else idx, e.dtype)
        return e if all(a is b for a, b in zip(idx, e.indices)) else ProducerLoad(e.producer, idx, e.dtype)

    def visit_Reduce(self, e):
        src, cond = self.visit(e.source), self.visit(e.condition)
        if src is e.source and cond is e.condition:
            return e
        return Reduce(e.combiner, src, e.axis, cond, e.dtype, e.value_index)


class Schedule:
    """The schedule of a compute DAG: one Stage per compute, producers first.

    Made by :func:`create_schedule` or ``tc.auto_schedule``; ``s[C]`` is the
    :class:`Stage` of ``C``; ``s.trace`` records the primitives called.

    Parameters
    ----------
    outputs : list of Operation
        The output operations.
    """

    def __init__(self, outputs: List[Operation]):
        self.outputs = outputs
        self.stages: List[Stage] = []
        self._stage_of: Dict[int, Stage] = {}

        for op in compute_ops(outputs):
            deferred = getattr(op, "range_deferred", None)
            if deferred:   # a read before a placeholder's start, not a scan's state
                raise ShapeError(deferred[0][2])
            st = Stage(op, self)
            self.stages.append(st)
            self._stage_of[id(op)] = st
        for op in outputs:
            self._stage_of[id(op)].is_output = True
        # a scan's body (the computes that read its state) runs inside its time loop
        for st in list(self.stages):
            if hasattr(st.op, "scan_axis"):
                for op in st.op.body_ops():
                    b = self._stage_of[id(op)]
                    b.attach_type, b.attach_stage, b.attach_ivar = "scope", st, st.op.scan_axis
        #: every primitive called on this schedule, replayable and printable as Python
        self.trace = Trace(self, outputs)

    # -- lookup -----------------------------------------------------------------------
    def __getitem__(self, t) -> Stage:
        op = t.op if isinstance(t, Tensor) else t
        if isinstance(op, Stage):
            return op
        if isinstance(op, PlaceholderOp):
            raise ScheduleError(f"{op.name} is a placeholder (an input array): it has no loops "
                                "to schedule; schedule the computes that read it")
        st = self._stage_of.get(id(op)) if isinstance(op, Operation) else None
        if st is None:
            raise ScheduleError(
                f"{getattr(op, 'name', op)!r} is not part of this schedule; create the schedule "
                "from the outputs that (transitively) compute it")
        return st

    def __contains__(self, t) -> bool:
        op = t.op if isinstance(t, Tensor) else t
        return id(op) in self._stage_of

    def _owner_of(self, iv) -> Optional[Stage]:
        for st in self.stages:
            if iv in st.all_iter_vars:
                return st
        return None

    def consumers(self, stage: Stage) -> List[Stage]:
        t = stage.op.output(0)
        return [s for s in self.stages if any(x is t for x in s.op.input_tensors)]

    def _depends_on(self, consumer: Stage, producer: Stage) -> bool:
        target = producer.op.output(0)
        seen = set()

        def dfs(op):
            for t in op.input_tensors:
                # (a stage whose op was replaced is read through its origin's tensors)
                if t is target or self._stage_of.get(id(t.op)) is producer:
                    return True
                if id(t.op) not in seen:
                    seen.add(id(t.op))
                    st = self._stage_of.get(id(t.op))
                    if dfs(st.op if st is not None else t.op):
                        return True
            return False

        return dfs(consumer.op)

    def _insert_after(self, new: Stage, anchor: Optional[Stage]):
        pos = 0 if anchor is None else self.stages.index(anchor) + 1
        self.stages.insert(pos, new)
        self._stage_of[id(new.op)] = new

    def _replace_op(self, stage: Stage, new_op: ComputeOp):
        if stage.op is not stage.origin_op:
            del self._stage_of[id(stage.op)]
        stage.op = new_op
        self._stage_of[id(new_op)] = stage
        self._stage_of[id(stage.origin_op)] = stage

    # -- primitives -----------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers, pad=None, blocks=None) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` read instead; returns it.

        ``pad`` (a number): the copy holds ``pad`` past ``tensor``'s edge, so that it
        can be computed there in whole blocks (``align_bounds``), e.g. a GEMM's panel
        of B zero-padded to the register block's width.

        ``blocks`` (a list of ``(dimension, factor)``): the copy is stored blocked, as
        ``NCHW16c`` is: each listed dimension is split by its factor (which must divide
        it, unless ``pad`` is given: the copy is then rounded up to whole blocks, the
        elements past ``tensor``'s edge holding ``pad``); the copy's dimensions are the
        outer parts, in ``tensor``'s order, then the inner parts in the order listed.
        ``blocks=[(1, 16), (0, 4)]`` stores ``B[K, N]`` as ``[K/4, N/16, 16, 4]`` (what
        VNNI's dot product reads); the readers read ``copy[k // 4, n // 16, n % 16, k %
        4]``."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_read: tensor must be a Tensor, got {tensor!r}")
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read of {tensor.name}: unknown scope {scope!r}; use "
                                f"one of {', '.join(SCOPES)}")
        if isinstance(readers, (Tensor, Stage, Operation)):
            readers = [readers]
        rstages = [self[r] for r in readers]
        if not rstages:
            raise ScheduleError(f"cache_read of {tensor.name}: give at least one reader")
        for st in rstages:
            if not any(t is tensor for t in st.op.input_tensors):
                raise ScheduleError(
                    f"cache_read of {tensor.name}: stage {st.name} does not read "
                    f"{tensor.name}; readers must be stages that index {tensor.name}")
            if st.attach_type == "inline":
                raise ScheduleError(f"cache_read of {tensor.name}: reader {st.name} is inlined")
        fill = None
        if pad is not None:
            if isinstance(pad, bool) or not isinstance(pad, (int, float)):
                raise ScheduleError(
                    f"cache_read of {tensor.name}: pad must be a number (the value the copy "
                    f"holds past {tensor.name}'s edge, e.g. 0.0), got {pad!r}")
            try:
                fill = _const(pad, tensor.dtype)
            except TecompError as e:
                raise ScheduleError(
                    f"cache_read of {tensor.name}: pad={pad!r} is not a {tensor.dtype} value "
                    f"({e}); give one of {tensor.name}'s dtype") from None
        if blocks is not None:
            cache, remap = self._blocked_copy(tensor, scope, blocks, fill)
        elif pad is None:
            cache = compute(tensor.shape, lambda *i: tensor[i], name=f"{tensor.name}.{scope}")
        else:
            def padded(*i):
                inside = [c for d, x in enumerate(i)
                          for c in (x >= 0, x < tensor.shape[d])]
                return _op.if_then_else(_op.all_(*inside), tensor[i], fill)

            cache = compute(tensor.shape, padded, name=f"{tensor.name}.{scope}")
        cst = Stage(cache.op, self)
        cst.scope = scope
        anchor = self[tensor] if tensor in self else None
        self._insert_after(cst, anchor)
        for st in rstages:
            rep = _ReplaceLoads(tensor, cache, remap if blocks is not None else None)
            bodies = tuple(rep.visit(b) for b in st.op.bodies)
            self._replace_op(st, _with_body(st.op, bodies if len(bodies) > 1 else bodies[0]))
        return cache

    @staticmethod
    def _blocks(tensor: Tensor, blocks, what: str, fill=None):
        """``(dims, factors)`` of a ``blocks=`` argument (``[(dimension, factor), ...]``),
        checked against ``tensor``'s shape: every factor divides its dimension unless
        ``fill`` (a Const: the copy is rounded up to whole blocks) is given."""
        nd = len(tensor.shape)
        if not isinstance(blocks, (list, tuple)) or not blocks or not all(
                isinstance(b, (list, tuple)) and len(b) == 2 for b in blocks):
            raise ScheduleError(f"{what}: blocks must be a list of (dimension, factor) pairs, "
                                f"e.g. [(1, 16), (0, 4)]; got {blocks!r:.80}")
        dims = []
        for d, f in blocks:
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < nd or d in dims:
                raise ScheduleError(f"{what}: blocks: {d!r:.20} is not a dimension of the "
                                    f"{nd}-d tensor (or is listed twice)")
            ext = tensor.shape[d]
            if isinstance(f, bool) or not isinstance(f, int) or f < 1 or not isinstance(
                    ext, Const) or (ext.value % f and fill is None):
                hint = ("(or pad=, the value of the copy's last block past the edge)"
                        if what.startswith("cache_read") else "")
                raise ScheduleError(
                    f"{what}: blocks: dimension {d} has extent {ext}, which a factor of "
                    f"{f!r:.20} does not divide; give a positive factor that divides it" +
                    (f" {hint}" if hint else ""))
            dims.append(d)
        return dims, {d: f for d, f in blocks}

    @staticmethod
    def _blocked_remap(blocks):
        """The map from an index of a tensor to the index of its copy blocked by
        ``blocks`` (the outer parts in the tensor's order, then the inner parts in the
        order listed)."""
        fac = {d: f for d, f in blocks}

        def remap(idx):
            outer = [_op.floordiv(i, Const(fac[d], i.dtype)) if d in fac else i
                     for d, i in enumerate(idx)]
            return tuple(outer) + tuple(_op.floormod(idx[d], Const(f, idx[d].dtype))
                                        for d, f in blocks)
        return remap

    @staticmethod
    def _blocked_copy(tensor: Tensor, scope: str, blocks, fill=None):
        """The blocked copy of ``cache_read(..., blocks=)`` and the map from an index of
        ``tensor`` to the copy's; ``fill`` (a Const, or None): the value of a copy
        rounded up to whole blocks past ``tensor``'s edge."""
        nd = len(tensor.shape)
        dims, fac = Schedule._blocks(tensor, blocks, f"cache_read of {tensor.name}", fill)
        # with a fill, every blocked dimension is guarded: the copy may be computed past
        # its shape (align_bounds: a tensor-core tile's k step past the reduction's end)
        rounded = list(range(nd)) if fill is not None else []
        shape = [Const(-(-tensor.shape[d].value // fac[d]), tensor.shape[d].dtype) if d in fac
                 else tensor.shape[d] for d in range(nd)] + \
            [Const(f, tensor.shape[d].dtype) for d, f in blocks]

        def fcompute(*p):
            idx = []
            for d in range(nd):
                if d in fac:
                    inner = p[nd + dims.index(d)]
                    idx.append(p[d] * fac[d] + inner)
                else:
                    idx.append(p[d])
            if not rounded:
                return tensor[tuple(idx)]
            inside = _op.all_(*[idx[d] < tensor.shape[d] for d in rounded])
            return _op.if_then_else(inside, tensor[tuple(idx)], fill)

        return (compute(tuple(shape), fcompute, name=f"{tensor.name}.{scope}"),
                Schedule._blocked_remap(blocks))

    def cache_write(self, tensor: Tensor, scope: str, blocks=None) -> Tensor:
        """Compute ``tensor`` into a ``scope`` buffer first, then copy it out; returns
        the cache tensor, which takes over the original body (and its reduction).

        ``blocks`` (a list of ``(dimension, factor)``, each factor dividing its
        dimension): the cache is blocked as ``cache_read``'s copy is, its dimensions
        the outer parts in ``tensor``'s order, then the inner parts in the order listed;
        the copy out reads ``cache[y // 16, x, y % 16]`` for ``blocks=[(0, 16)]``.  The
        stage must not be transformed yet (its loops are the cache's, of another
        shape)."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_write: tensor must be a Tensor, got {tensor!r}")
        if scope not in SCOPES:
            raise ScheduleError(f"cache_write of {tensor.name}: unknown scope {scope!r}; use "
                                f"one of {', '.join(SCOPES)}")
        st = self[tensor]
        st._single_output("cache_write")
        fac, order = {}, []
        if blocks is not None:
            what = f"cache_write of {tensor.name}"
            order, fac = self._blocks(tensor, blocks, what)
            if st.relations or st.iter_attrs or st.leaf_iter_vars != st.all_iter_vars:
                raise ScheduleError(
                    f"{what}: blocks= makes a cache of another shape, but stage {st.name}'s "
                    f"loops are already transformed; call cache_write(..., blocks=) first")
        kept = self._loops_without_reduction(st, tensor)
        op = st.op
        vmap, new_axis, inner = {}, [], {}
        for d in order:
            iv = op.axis[d]
            inner[d] = IterVar(Var(f"{iv.var.name}.inner", iv.var.dtype),
                               Range(Const(0, iv.var.dtype), Const(fac[d], iv.var.dtype)),
                               iv.kind)
        for d, iv in enumerate(op.axis):
            if d in fac:
                ext = Const(iv.dom.extent.value // fac[d], iv.var.dtype)
                nv = IterVar(Var(f"{iv.var.name}.outer", iv.var.dtype),
                             Range(Const(0, iv.var.dtype), ext), iv.kind)
                vmap[iv.var] = nv.var * Const(fac[d], iv.var.dtype) + inner[d].var
            else:
                nv = IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, iv.kind)
                vmap[iv.var] = nv.var
            new_axis.append(nv)
        new_axis += [inner[d] for d in order]
        body = op.body
        if isinstance(body, Reduce):
            new_red = []
            for iv in body.axis:
                # a reduction's extent may depend on an output index (a triangular
                # sum over range(n)): its range is rebound to the cache's own axes
                dom = Range(substitute(iv.dom.min, vmap), substitute(iv.dom.extent, vmap))
                nv = IterVar(Var(iv.var.name, iv.var.dtype), dom, "reduce")
                vmap[iv.var] = nv.var
                new_red.append(nv)
            body = Reduce(map_combiner(body.combiner, lambda e: substitute(e, vmap)),
                          substitute(body.source, vmap), tuple(new_red),
                          substitute(body.condition, vmap), body.dtype)
        else:
            body = substitute(body, vmap)
        cache_op = ComputeOp(f"{op.name}.{scope}", new_axis, body, op.tag, op.attrs)
        cache = cache_op.output(0)
        cst = Stage(cache_op, self)
        cst.scope = scope
        idx = self.stages.index(st)
        self.stages.insert(idx, cst)
        self._stage_of[id(cache_op)] = cst
        out_idx = tuple(iv.var for iv in op.axis)
        if blocks is not None:
            out_idx = self._blocked_remap(blocks)(out_idx)
        copy_body = ProducerLoad(cache, out_idx, cache.dtype)
        self._replace_op(st, _with_body(op, copy_body))
        st._reset_loops()
        if kept is not None:
            # the loops already made of the output axes stay: the copy-out stage runs
            # them, and the cache can be computed at one of them
            st.all_iter_vars, st.leaf_iter_vars, st.relations, st.iter_attrs = kept
        return cache

    def _loops_without_reduction(self, st: "Stage", tensor: Tensor):
        """For cache_write of a stage already split, reordered, fused or annotated: its
        loop structure less the reduce axes (they move to the cache), or None when it
        has none.  A ScheduleError when a transform involved a reduce axis, or another
        stage is computed at one."""
        if not st.relations and not st.iter_attrs and st.leaf_iter_vars == st.all_iter_vars:
            return None
        # (fuse never mixes reduce and output axes; a dict, not a set: in the order they
        # were made, so that the message names the user's axis, the same in every run)
        red = dict.fromkeys(st.op.reduce_axis)
        for rel in st.relations:
            srcs = [rel.parent] if hasattr(rel, "parent") else [rel.outer, rel.inner]
            if any(x in red for x in srcs):
                red.update(dict.fromkeys([rel.outer, rel.inner] if hasattr(rel, "parent")
                                         else [rel.fused]))
        touched = [iv for iv in red if iv not in st.op.reduce_axis or iv in st.iter_attrs
                   or any(getattr(r, "parent", None) is iv for r in st.relations)]
        if touched:
            raise ScheduleError(
                f"cache_write of {tensor.name}: stage {st.name} has already split, fused or "
                f"annotated its reduce axis {touched[0].name}; the reduction moves to the "
                f"cache, so call cache_write first and schedule the reduction on the cache "
                f"(or only transform the output axes before cache_write)")
        for other in self.stages:
            if other.attach_stage is st and other.attach_ivar in red:
                raise ScheduleError(
                    f"cache_write of {tensor.name}: stage {other.name} is computed at the "
                    f"reduce axis {other.attach_ivar.name} of {st.name}, which moves to the "
                    f"cache; compute it at an output axis")
        leaves = [iv for iv in st.leaf_iter_vars if iv not in red]
        alls = [iv for iv in st.all_iter_vars if iv not in red]
        return alls, leaves, list(st.relations), dict(st.iter_attrs)

    def create_group(self, outputs, inputs, include_inputs: bool = False) -> "StageGroup":
        """The stages from ``inputs`` (exclusive, unless ``include_inputs``) to
        ``outputs`` (inclusive), scheduled as one (TVM's ``create_group``):
        ``group.compute_at(s[C], axis)`` computes every member that is not computed
        inside another member at that loop, ``compute_root()`` and ``compute_inline()``
        apply to each.  The group is a view: it changes the member stages, whose calls
        the schedule's trace records."""
        outs = [outputs] if isinstance(outputs, (Tensor, Operation)) else list(outputs)
        ins = [inputs] if isinstance(inputs, (Tensor, Operation)) else list(inputs)
        for t in outs + ins:
            if not isinstance(t, (Tensor, Operation)):
                raise ScheduleError(f"create_group: outputs and inputs must be tensors, got "
                                    f"{t!r:.60}")
        stop = {id(t.op if isinstance(t, Tensor) else t) for t in ins}
        members, seen = [], set()
        todo = [t.op if isinstance(t, Tensor) else t for t in outs]
        while todo:
            op = todo.pop()
            if id(op) in seen:
                continue
            seen.add(id(op))
            if id(op) in stop:
                if include_inputs and isinstance(op, ComputeOp):
                    members.append(self[op])
                continue
            if not isinstance(op, ComputeOp):
                raise ScheduleError(
                    f"create_group: {op.name} is a placeholder reached from the outputs "
                    f"without passing an input of the group; list the tensors the group "
                    f"starts from in inputs")
            members.append(self[op])
            todo.extend(t.op for t in op.input_tensors)
        order = [st for st in self.stages if any(st is m for m in members)]
        return StageGroup(self, order)

    def rfactor(self, tensor: Tensor, axis, factor_axis: int = 0) -> Tensor:
        """Factor the reduction of ``tensor`` over ``axis`` (a leaf axis derived from its
        reduce axes) into a new tensor with ``axis`` as a data-parallel dimension at
        position ``factor_axis``; ``tensor`` then reduces that one.  Returns the new tensor.
        A multi-output reduction (``tc.sum(a), tc.sum(b)`` in one compute, an argmax) is
        factored whole, into one stage with as many outputs: the first is returned,
        ``.op.output(k)`` gives the others."""
        return rfactor(self, tensor, axis, factor_axis)

    def separate(self, tensor: Tensor, axis) -> Tensor:
        """Reduce the window of ``tensor`` in two steps: every reduce axis but ``axis``
        first, into a new tensor ``<name>.sep`` over the data's whole dimension that
        ``axis`` steps along (a pooling's rows reduced over each element of the data
        row, once), then ``tensor`` over ``axis`` from it (the window's taps along the
        row).  Returns the new tensor; ``tensor``'s stage is reset.  The stage must not
        be transformed yet.  Max and min give the same values; a sum adds in another
        order (see :mod:`tecomp.schedule.separate`)."""
        return separate(self, tensor, axis)

    def normalize(self) -> "Schedule":
        """For TVM compatibility: tecomp's loops always start at 0 (a reduce axis over
        ``(lo, hi)`` runs ``k = lo + k'``), so a schedule is always normalized."""
        return self

    # -- display -------------------------------------------------------------------
    def __repr__(self):
        lines = ["schedule("]
        for st in self.stages:
            where = {"root": "root", "inline": "inline"}.get(st.attach_type)
            if where is None:
                where = f"at {st.attach_stage.name}.{st.attach_ivar.name}"
            loops = []
            for iv in st.leaf_iter_vars:
                a = st.iter_attrs.get(iv)
                k = "" if a is None or a.kind == "serial" else (
                    f":{a.thread.thread_tag}" if a.kind == "thread" else f":{a.kind}")
                loops.append(iv.name + k)
            scope = "" if st.scope == "global" else f", scope={st.scope}"
            out = ", output" if st.is_output else ""
            lines.append(f"  {st.name}: [{', '.join(loops)}] {where}{scope}{out}")
        lines.append(")")
        return "\n".join(lines)


class StageGroup:
    """Stages scheduled as one (:meth:`Schedule.create_group`)."""

    def __init__(self, schedule: Schedule, stages):
        self.schedule = schedule
        self.stages = list(stages)

    def __repr__(self):
        return f"StageGroup({', '.join(st.name for st in self.stages)})"

    def _free(self):
        """The members not computed inside another member."""
        inside = {id(st) for st in self.stages}
        return [st for st in self.stages
                if not (st.attach_type == "scope" and id(st.attach_stage) in inside)]

    def compute_at(self, parent, axis) -> "StageGroup":
        """Compute the group inside ``parent``'s loop over ``axis``."""
        if isinstance(parent, (Tensor, Operation)):
            parent = self.schedule[parent]
        if any(parent is st for st in self.stages):
            raise ScheduleError(f"compute_at of {self!r}: the parent {parent.name} is a member "
                                f"of the group; compute the group at a stage outside it")
        for st in self._free():
            st.compute_at(parent, axis)
        return self

    def compute_root(self) -> "StageGroup":
        for st in self._free():
            st.compute_root()
        return self

    def compute_inline(self) -> "StageGroup":
        for st in self.stages:
            st.compute_inline()
        return self


for _name in STAGE_PRIMITIVES:
    setattr(Stage, _name, traced(getattr(Stage, _name)))
for _name in SCHEDULE_PRIMITIVES:
    setattr(Schedule, _name, traced(getattr(Schedule, _name)))
del _name


@deep_entry(lambda ops: ("tc.create_schedule", ops))
def create_schedule(ops: Union[Tensor, Operation, Sequence[Union[Tensor, Operation]]]) -> Schedule:
    """The default schedule of ``ops``: one loop nest per compute, in row-major order.

    Parameters
    ----------
    ops : Tensor or Operation, or a list of them
        The outputs (``C.op`` or ``C``); every compute they read is scheduled.

    Returns
    -------
    Schedule
        The schedule; ``s[C]`` is ``C``'s stage.

    Raises
    ------
    ScheduleError
        For an empty list or something other than tensors and operations.
    ShapeError
        For a read before the start of a placeholder that is not a scan's state
        (such reads are checked once the whole DAG is known).

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((16,), name="A")
    >>> B = tc.compute((16,), lambda i: A[i] * 2.0, name="B")
    >>> s = tc.create_schedule(B.op)
    >>> xo, xi = s[B].split(B.op.axis[0], factor=4)
    """
    if isinstance(ops, (Tensor, Operation)):
        ops = [ops]
    if not isinstance(ops, (list, tuple)) or not ops:
        raise ScheduleError("create_schedule takes an output tensor/operation or a list of them")
    out = []
    for o in ops:
        op = o.op if isinstance(o, Tensor) else o
        if not isinstance(op, Operation):
            raise ScheduleError(f"create_schedule: {o!r} is not a tensor or an operation")
        if isinstance(op, PlaceholderOp):
            raise ScheduleError(f"create_schedule: {op.name} is a placeholder (an input); pass "
                                "the computes you want as outputs")
        out.append(op)
    return Schedule(out)


_trace._create_schedule = create_schedule   # for replay (trace.py cannot import this module)

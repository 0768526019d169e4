"""Every schedule records the primitive calls made on it: ``s.trace``.

A trace is data: a list of steps ``[primitive, on, args, kwargs]`` in JSON (MetaSchedule's
habit), so that a schedule found by the auto-scheduler, a template or a user can be
stored in a tuning log, replayed on a fresh schedule of the same compute DAG in any
process, and printed as the Python that a user would write to make it.

How objects are named in a step (all positions, so names never matter):

* ``{"t": n}`` a tensor: the tensors of the DAG at ``create_schedule`` time in a fixed
  order (the outputs in the order given, then every tensor reachable from them, each
  after its consumer in a depth-first walk), then the tensors returned by
  ``cache_read`` / ``cache_write`` / ``rfactor`` / ``separate`` in the order they were made;
* ``{"s": n}`` the stage at position ``n`` of ``s.stages`` when the step ran;
* ``{"ax": [n, p]}`` the axis at position ``p`` of ``s.stages[n].all_iter_vars``;
* ``{"thread": tag}`` a ``tc.thread_axis(tag)``;
* lists, ints, floats, strings, booleans and None as themselves.

Only the outermost primitive of a nested call is recorded (``tile`` is one step, not its
two splits and a reorder).  A call that raises records nothing.  A call whose arguments
have no such name (a symbolic split factor, an expression as a pragma value) still runs,
but the trace is then marked not replayable (``trace.replayable`` is False and
``trace.problem`` says why).
"""
from __future__ import annotations

import functools
import json
import keyword
import math
import numbers
import re
from typing import Any, Dict, List, Optional

from ..errors import ScheduleError, TecompError
from ..ir.deep import deep_entry
from ..ir.expr import IterVar, Const, Var
from ..ir.functor import collect, substitute
from ..ir.simplify import simplify
from ..te.tensor import Tensor, thread_axis, Operation
from ..te.tensor_intrin import builtin_intrins, TensorIntrin, builtin_name

#: the primitives that are recorded: (owner, name)
STAGE_PRIMITIVES = (
    "split", "tile", "fuse", "reorder", "unroll", "vectorize", "parallel", "bind", "pragma",
    "prefetch", "compute_at", "compute_inline", "compute_root", "set_scope",
    "storage_align", "storage_order", "align_bounds", "tensorize", "double_buffer",
    "store_root",
)
SCHEDULE_PRIMITIVES = ("cache_read", "cache_write", "rfactor", "separate")
_MAKES_TENSOR = ("cache_read", "cache_write", "rfactor", "separate")


#: ``tecomp.schedule.schedule.create_schedule``, set when that module is imported (it
#: imports this one; replaying makes schedules with it)
_create_schedule = None


class TracedStage:
    """What a trace records a stage primitive on (``tecomp.schedule.Stage`` derives from
    it, so that this module need not import the schedule that imports it)."""

    __slots__ = ()


def traced(fn):
    """Decorate a Stage or Schedule primitive so that its call is recorded in the
    schedule's trace (see the module docstring)."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        sched = getattr(self, "schedule", self)
        tr = getattr(sched, "trace", None)
        # (numpy's integers -- a factor from an array's shape -- as the ints they are,
        # for every primitive alike: each checks ``isinstance(v, int)``)
        args = tuple(_plain_int(a) for a in args)
        kwargs = {k: _plain_int(v) for k, v in kwargs.items()}
        if tr is None or tr._depth:
            return fn(self, *args, **kwargs)
        step = tr._encode_step(name, self, args, kwargs)
        tr._depth += 1
        try:
            out = fn(self, *args, **kwargs)
        finally:
            tr._depth -= 1
        tr._append(name, step, out)
        return out

    # a deep program's primitive runs on a big stack (it may have changed the schedule
    # before a RecursionError: it goes there at once)
    return deep_entry(lambda self, *a, **k: (f"the schedule primitive {name}",
                                             getattr(self, "schedule", self)),
                      ahead=True)(wrapper)


def _plain_int(v):
    """``v`` as a Python int where it is another integer type (numpy's ``int64``, not a
    bool), else ``v`` itself."""
    if isinstance(v, numbers.Integral) and not isinstance(v, (int, bool)):
        return int(v)
    return v


class _Unnamed(Exception):
    pass


class Trace:
    """The recorded primitive calls of one schedule (``s.trace``)."""

    def __init__(self, sched, outputs: List = ()):
        self._sched = sched
        self.steps: List[list] = []
        self.tensors: List = _dag_tensors(outputs)
        self.n_outputs = len(outputs)
        self.problem: Optional[str] = None
        self._depth = 0

    @property
    def replayable(self) -> bool:
        return self.problem is None

    def __len__(self):
        return len(self.steps)

    def __repr__(self):
        return f"Trace({len(self.steps)} steps{'' if self.replayable else ', not replayable'})"

    # -- recording ---------------------------------------------------------------------
    def _encode_step(self, name, owner, args, kwargs):

        try:
            on = self._enc(owner) if isinstance(owner, TracedStage) else None
            return [name, on, [self._enc(a) for a in args],
                    {k: self._enc(v) for k, v in sorted(kwargs.items())}]
        except _Unnamed as e:
            if self.problem is None:
                self.problem = f"{name}: {e}"
            return None

    def _append(self, name, step, out):
        if step is not None:
            self.steps.append(step)
        if name in _MAKES_TENSOR:
            self.tensors.append(out)

    def _enc(self, x) -> Any:
        s = self._sched
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, numbers.Integral):    # (numpy's integers too: the primitive took
            return int(x)                      # them as their value, and so does a replay)
        if isinstance(x, float):
            if x != x or x in (float("inf"), float("-inf")):
                raise _Unnamed(f"the value {x!r} has no JSON form")
            return float(x)
        if isinstance(x, (list, tuple)):
            return [self._enc(v) for v in x]
        if isinstance(x, TracedStage):
            return {"s": s.stages.index(x)}
        if isinstance(x, Operation):
            x = x.output(0)
        if isinstance(x, Tensor):
            for n, t in enumerate(self.tensors):
                if t is x:
                    return {"t": n}
            raise _Unnamed(f"tensor {x.name} is not part of this schedule's DAG")
        if isinstance(x, Var) and not isinstance(x, IterVar):
            for n, st in enumerate(s.stages):
                for p, iv in enumerate(st.all_iter_vars):
                    if iv.var is x:
                        return {"ax": [n, p]}
            raise _Unnamed(f"the variable {x.name} is not an axis of a stage (a symbolic "
                           "value cannot be stored in a trace)")
        if isinstance(x, IterVar):
            if x.kind == "thread":
                return {"thread": x.thread_tag}
            for n, st in enumerate(s.stages):
                for p, iv in enumerate(st.all_iter_vars):
                    if iv is x:
                        return {"ax": [n, p]}
            raise _Unnamed(f"axis {x.name} belongs to no stage of this schedule")

        if isinstance(x, TensorIntrin):
            nm = builtin_name(x)
            if nm is None:
                raise _Unnamed(f"the tensor intrinsic {x.name!r:.60} is not a built-in (a trace "
                               "names intrinsics, it does not store their code)")
            return {"intrin": nm}
        raise _Unnamed(f"{type(x).__name__} {x!r:.60} has no name in a trace")

    def to_json(self) -> List[list]:
        """The steps as plain JSON data (a copy)."""
        if not self.replayable:
            raise ScheduleError(f"this schedule's trace cannot be stored: {self.problem}")
        return json.loads(json.dumps(self.steps))

    # -- printing ------------------------------------------------------------------------
    def python(self, args=None, name: str = "schedule") -> str:
        """The trace as Python a user can paste: a function of the schedule's tensors
        (``args``: the list given to ``tc.build``; by default the outputs) that returns
        the schedule."""
        outputs = self.tensors[:self.n_outputs]
        return steps_python(self.to_json(), outputs, args, name)


def _dag_tensors(outputs) -> list:
    """The tensors of the DAG under ``outputs``, in the trace's fixed order."""
    order, seen = [], set()
    outs = [o if isinstance(o, Tensor) else o.output(0) for o in outputs]
    for t in outs:
        if id(t.op) not in seen:
            seen.add(id(t.op))
            order.append(t)
    stack = list(reversed(outs))
    while stack:
        t = stack.pop()
        for x in reversed(list(t.op.input_tensors)):
            if id(x.op) not in seen:
                seen.add(id(x.op))
                order.append(x)
                stack.append(x)
    return order


# ---------------------------------------------------------------------------------------
# replay: a trace is data from outside (a tuning log), checked like a user's arguments


#: the most steps a trace may have (the rules' schedules have tens)
MAX_STEPS = 4096
#: the longest string a step may hold (a pragma's name or value, a scope)
MAX_STRING = 256
#: a split or tile factor (or nparts) may exceed the extent of its axis up to this: a
#: factor past the extent only adds a guard, and the rules split by a vector width or a
#: cache block whatever the extent; where the extent is not known, up to INT32_MAX
FACTOR_SLACK = 1 << 16
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

#: what each argument of each primitive is (see :func:`_check_arg`)
_ARGS: Dict[str, Dict[str, str]] = {
    "split": {"parent": "axis", "factor": "factor?", "nparts": "factor?",
              "disable_predication": "bool"},
    "tile": {"x_parent": "axis", "y_parent": "axis", "x_factor": "factor", "y_factor": "factor"},
    "fuse": {"axes": "axes"}, "reorder": {"axes": "axes"}, "storage_order": {"axes": "axes"},
    "unroll": {"axis": "axis"}, "vectorize": {"axis": "axis"}, "parallel": {"axis": "axis"},
    "bind": {"axis": "axis", "thread_ivar": "thread"},
    "pragma": {"axis": "axis", "name": "string", "value": "scalar"},
    "prefetch": {"tensor": "tensor", "axis": "axis", "offset": "int32", "along": "axis?",
                 "level": "int32", "carry": "axis?"},
    "compute_at": {"parent": "stage", "axis": "axis"},
    "compute_inline": {}, "compute_root": {}, "double_buffer": {"stages": "int32"},
    "store_root": {},
    "set_scope": {"scope": "string"},
    "storage_align": {"axis": "axis", "factor": "factor", "offset": "int32"},
    "align_bounds": {"axis": "axis", "factor": "factor"},
    "tensorize": {"axis": "axis", "intrin": "intrin"},
    "cache_read": {"tensor": "tensor", "scope": "string", "readers": "stages",
                   "pad": "number?", "blocks": "blocks?"},
    "cache_write": {"tensor": "tensor", "scope": "string", "blocks": "blocks?"},
    "rfactor": {"tensor": "tensor", "axis": "axis", "factor_axis": "int32"},
    "separate": {"tensor": "tensor", "axis": "axis"},
}
#: the factor arguments and the axis each one splits (checked against its extent)
_FACTORS = {"split": (("factor", "parent"), ("nparts", "parent")),
            "tile": (("x_factor", "x_parent"), ("y_factor", "y_parent")),
            "align_bounds": (("factor", "axis"),), "storage_align": (("factor", "axis"),)}


def _index(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r:.40} is not a position")
    return v


def _dec(s, tensors, x, depth: int = 0):
    """The objects a step's JSON value names (module docstring); ValueError, IndexError
    or KeyError for a reference to something that is not there."""
    if depth > 3:
        raise ValueError("values nested deeper than a step's arguments are")
    if isinstance(x, list):
        return [_dec(s, tensors, v, depth + 1) for v in x]
    if isinstance(x, dict):
        if len(x) != 1:
            raise ValueError(f"a reference has one key, got {len(x)}")
        ((k, v),) = x.items()
        if k == "t":
            return tensors[_index(v)]
        if k == "s":
            return s.stages[_index(v)]
        if k == "ax":
            if not isinstance(v, list) or len(v) != 2:
                raise ValueError("an axis is [stage, position]")
            return s.stages[_index(v[0])].all_iter_vars[_index(v[1])]
        if k == "thread":
            if not isinstance(v, str):
                raise ValueError("a thread axis is named by its tag")
            return thread_axis(v)
        if k == "intrin":
            if not isinstance(v, str) or v not in builtin_intrins():
                raise ValueError(f"{v!r:.60} is no built-in tensor intrinsic")
            return builtin_intrins()[v]
        raise ValueError(f"unknown reference {k!r:.40}")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise ValueError(f"a {type(x).__name__} is no trace value")


def _check_steps(steps) -> None:
    if not isinstance(steps, list) or not all(
            isinstance(st, list) and len(st) == 4 and isinstance(st[0], str)
            and isinstance(st[2], list) and isinstance(st[3], dict) for st in steps):
        raise ScheduleError("a trace is a list of [primitive, stage, args, kwargs] steps "
                            "(Trace.to_json()); got something else")
    if len(steps) > MAX_STEPS:
        raise ScheduleError(f"a trace has at most {MAX_STEPS} steps, this one {len(steps)}; "
                            "it is damaged or was not written by tecomp")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def pragma_value_problem(v) -> Optional[str]:
    """Why ``v`` cannot be a pragma's value (the printed IR shows it and a trace stores
    it as JSON), or None: it must be None, a bool, an int32, a finite float or a string
    of at most :data:`MAX_STRING` characters."""
    if v is None or isinstance(v, bool) or (_is_int(v) and -INT32_MAX <= v <= INT32_MAX) \
            or (isinstance(v, float) and math.isfinite(v)) \
            or (isinstance(v, str) and len(v) <= MAX_STRING):
        return None
    return ("is not None, a bool, an int32, a finite float or a string of at most "
            f"{MAX_STRING} characters")


def _check_arg(kind: str, v) -> Optional[str]:
    """Why the decoded argument ``v`` is not a ``kind`` (see :data:`_ARGS`), or None."""
    if kind.endswith("?"):
        if v is None:
            return None
        kind = kind[:-1]
    if kind == "axis":
        ok = isinstance(v, IterVar) and v.kind != "thread"
        return None if ok else "is not an axis ({'ax': [stage, position]})"
    if kind == "axes":
        axes = v[0] if len(v) == 1 and isinstance(v[0], list) else v
        if not axes or any(_check_arg("axis", a) for a in axes):
            return "are not axes ({'ax': [stage, position]} each)"
        return None
    if kind == "thread":
        ok = isinstance(v, IterVar) and v.kind == "thread"
        return None if ok else "is not a thread axis ({'thread': tag})"
    if kind == "tensor":
        return None if isinstance(v, Tensor) else "is not a tensor ({'t': position})"
    if kind in ("stage", "stages"):
        items = v if kind == "stages" and isinstance(v, list) else [v]
        if not items or not all(isinstance(x, (Tensor, TracedStage)) for x in items):
            return f"is not a {kind[:5]} ({{'s': position}} or {{'t': position}})"
        return None
    if kind == "intrin":
        return None if isinstance(v, TensorIntrin) else "is not a built-in tensor intrinsic"
    if kind == "factor":
        # (past INT32_MAX only for an axis that long: bounded by the extent below)
        return None if _is_int(v) and 1 <= v <= INT64_MAX else \
            f"is not an int from 1 to {INT64_MAX}"
    if kind == "int32":
        return None if _is_int(v) and -INT32_MAX <= v <= INT32_MAX else "is not an int32"
    if kind == "bool":
        return None if isinstance(v, bool) else "is not true or false"
    if kind == "string":
        return None if isinstance(v, str) and len(v) <= MAX_STRING else \
            f"is not a string of at most {MAX_STRING} characters"
    if kind == "scalar":   # a pragma's value (Stage.pragma checks it the same way)
        return pragma_value_problem(v)
    if kind == "number":
        ok = (_is_int(v) or isinstance(v, float)) and math.isfinite(v)
        return None if ok else "is not a finite number"
    if kind == "blocks":
        ok = isinstance(v, list) and 0 < len(v) <= 8 and all(
            isinstance(b, list) and len(b) == 2 and all(_is_int(x) and 0 <= x <= INT32_MAX
                                                        for x in b) for b in v)
        return None if ok else "is not a list of [dimension, factor] pairs"
    raise AssertionError(kind)  # pragma: no cover - every kind is listed above


def static_extent(stage, iv, shapes: Optional[dict] = None) -> Optional[int]:
    """The extent of axis ``iv`` of ``stage`` as the schedule says it (its root axis's
    extent, with the symbolic extents named in ``shapes`` bound, through the splits and
    fuses), or None where it is not a constant.  Lowering may find it smaller (a stage
    computed at a loop computes a region), never larger."""
    def const(e) -> Optional[int]:
        if shapes:
            vs = collect(e, lambda n: isinstance(n, Var) and n.name in shapes)
            e = simplify(substitute(e, {v: Const(int(shapes[v.name]), v.dtype) for v in vs}))
        return e.value if isinstance(e, Const) and _is_int(e.value) else None

    ext = {r: const(r.dom.extent) for r in list(stage.op.axis) + list(stage.op.reduce_axis)
           if r.dom is not None}
    for rel in stage.relations:
        if hasattr(rel, "parent"):   # a split
            pe = ext.get(rel.parent)
            f = const(rel.factor) if rel.factor is not None else None
            n = const(rel.nparts) if rel.nparts is not None else None
            if f is not None:
                ext[rel.inner] = f
                ext[rel.outer] = None if pe is None else -(-pe // f)
            elif n is not None:
                ext[rel.outer] = n
                ext[rel.inner] = None if pe is None else -(-pe // n)
        else:                        # a fuse
            a, b = ext.get(rel.outer), ext.get(rel.inner)
            ext[rel.fused] = None if a is None or b is None else a * b
    return ext.get(iv)


def _decode_step(s, n: int, step: list, shapes: Optional[dict]):
    """Check step ``n`` of a trace and decode it on the schedule ``s``: ``(owner, args,
    kwargs)`` to call ``getattr(owner, step[0])`` with; a ScheduleError naming the step
    when it is not a call of a primitive with arguments of the kinds it takes (see
    :data:`_ARGS`) or names something the DAG does not have."""
    import inspect

    name, on, args, kwargs = step
    tr = s.trace
    if name not in STAGE_PRIMITIVES + SCHEDULE_PRIMITIVES or (on is None) != (
            name in SCHEDULE_PRIMITIVES):
        raise ScheduleError(f"trace step {n}: {name!r:.60} is not a schedule primitive")
    what = f"trace step {n} ({name})"
    try:
        tensors = list(tr.tensors)
        owner = s if on is None else _dec(s, tensors, on)
        a = [_dec(s, tensors, x) for x in args]
        kw = {str(k): _dec(s, tensors, v) for k, v in kwargs.items()}
    except (IndexError, KeyError, TypeError, ValueError) as e:
        raise ScheduleError(f"{what} names something this DAG does not have "
                            f"({type(e).__name__}: {str(e)[:120]}); the trace was recorded on "
                            "another compute") from None
    if on is not None and not isinstance(owner, TracedStage):
        raise ScheduleError(f"{what}: it runs on {type(owner).__name__}, not on a stage "
                            "({'s': position}); the trace is damaged")
    try:
        bound = inspect.signature(getattr(type(owner), name)).bind(owner, *a, **kw)
    except TypeError as e:      # wrong arguments for the primitive
        raise ScheduleError(f"{what}: arguments the primitive does not take "
                            f"({str(e)[:120]}); the trace is damaged") from None
    given = dict(list(bound.arguments.items())[1:])
    for param, v in given.items():
        kind = _ARGS[name][param]
        why = _check_arg(kind, list(v) if kind == "axes" else v)
        if why is not None:
            raise ScheduleError(f"{what}: {param}={v!r:.60} {why}; the trace is damaged or "
                                "forged")
    for fparam, aparam in _FACTORS.get(name, ()):
        f = given.get(fparam)
        if f is None:
            continue
        ext = static_extent(owner, given[aparam], shapes)
        limit = INT32_MAX if ext is None else max(ext, FACTOR_SLACK)
        if f > limit:
            raise ScheduleError(
                f"{what}: {fparam}={f} for axis {given[aparam].name!r:.60} of extent "
                f"{'unknown' if ext is None else ext}; a factor is at most the extent (or "
                f"{FACTOR_SLACK} where that is larger); the trace is damaged or forged")
    return owner, a, kw


def replay(steps, outputs, shapes: Optional[dict] = None):
    """A fresh schedule of ``outputs`` (the tensors, in the order ``create_schedule`` got
    them when the trace was recorded) with ``steps`` (``Trace.to_json()``) applied.
    ``shapes`` (the values of symbolic extents, as ``tc.auto_schedule`` takes them)
    bounds the split factors the trace may hold.

    A trace is data from outside (a tuning log): every step is checked as a user's call
    is (a primitive of the schedule, arguments of the kinds it takes, split factors of
    at most the axis's extent or :data:`FACTOR_SLACK`, at most :data:`MAX_STEPS` steps),
    and the primitive then checks the rest.  Raises ``ScheduleError`` naming the step
    that does not fit this DAG."""
    _check_steps(steps)
    s = _create_schedule(list(outputs))
    for n, step in enumerate(steps):
        owner, a, kw = _decode_step(s, n, step, shapes)
        try:
            getattr(owner, step[0])(*a, **kw)
        except TypeError as e:
            if isinstance(e, TecompError):
                raise
            raise ScheduleError(f"trace step {n} ({step[0]}): arguments the primitive does "
                                f"not take ({str(e)[:120]}); the trace is damaged") from None
    return s


# ---------------------------------------------------------------------------------------
# printing as Python


_IDENT = re.compile(r"[^0-9A-Za-z_]+")


class _Names:
    def __init__(self):
        self.used = set()

    def fresh(self, base: str) -> str:
        b = _IDENT.sub("_", base).strip("_") or "t"
        if b[0].isdigit():
            b = "t_" + b
        if keyword.iskeyword(b) or b in ("s", "tc"):
            b += "_"
        cand, k = b, 1
        while cand in self.used:
            cand, k = f"{b}_{k}", k + 1
        self.used.add(cand)
        return cand


def steps_python(steps, outputs, args=None, name: str = "schedule") -> str:
    """``steps`` (a trace's JSON) as a Python function of ``args`` that makes the schedule
    (replaying the steps on ``outputs`` to name every object)."""
    create_schedule = _create_schedule
    _check_steps(steps)
    outputs = list(outputs)
    args = [a for a in (args if args is not None else outputs)]
    names = _Names()
    lines: List[str] = []
    tname: Dict[int, str] = {}
    # every object named by id() is kept alive here: an IterVar freed by a later split
    # would otherwise hand its id (and its name) to a new, different axis
    keep: list = list(args) + outputs
    params = []
    for a in args:
        nm = names.fresh(getattr(a, "name", "arg"))
        params.append(nm)
        if isinstance(a, Tensor):
            tname[id(a.op)] = nm
    s = create_schedule(outputs)
    tr = s.trace
    out_names = []
    for t in outputs:
        if id(t.op) not in tname:
            tname[id(t.op)] = names.fresh(t.name)
            keep.append(t)
            lines.append(f"{tname[id(t.op)]} = ...  # the output {t.name!r}")
        out_names.append(tname[id(t.op)])
    lines.append(f"s = tc.create_schedule([{', '.join(n + '.op' for n in out_names)}])")

    def tensor(t) -> str:
        if id(t.op) in tname:
            return tname[id(t.op)]
        # an intermediate: reached from a named consumer
        for c in list(tr.tensors):
            if id(c.op) in tname:
                for i, x in enumerate(c.op.input_tensors):
                    if x is t:
                        nm = names.fresh(t.name)
                        lines.append(f"{nm} = {tname[id(c.op)]}.op.input_tensors[{i}]")
                        tname[id(t.op)] = nm
                        keep.append(t)
                        return nm
        # a deeper one: name its consumers first
        for c in tr.tensors:
            if any(x is t for x in c.op.input_tensors):
                tensor(c)
                return tensor(t)
        return repr(t.name)  # pragma: no cover - every DAG tensor has a consumer path

    axname: Dict[int, str] = {}

    def stage_ref(st) -> str:
        return f"s[{tensor(st.origin_op.output(0))}]"

    def axis(iv) -> str:
        if iv.kind == "thread":
            return f"tc.thread_axis({iv.thread_tag!r})"
        if id(iv) in axname:
            return axname[id(iv)]
        for st in s.stages:
            for field in ("axis", "reduce_axis"):
                ivs = getattr(st.op, field)
                for p, x in enumerate(ivs):
                    if x is iv:
                        nm = names.fresh(iv.name)
                        lines.append(f"{nm} = {stage_ref(st)}.op.{field}[{p}]")
                        axname[id(iv)] = nm
                        keep.append(iv)
                        return nm
        return repr(iv.name)  # pragma: no cover

    def show(x) -> str:
        if isinstance(x, list):
            return "[" + ", ".join(show(v) for v in x) + "]"
        if isinstance(x, TracedStage):
            return stage_ref(x)
        if isinstance(x, Tensor):
            return tensor(x)
        if isinstance(x, IterVar):
            return axis(x)
        if type(x).__name__ == "TensorIntrin":
            return f"tc.tensor_intrin({x.name!r})"
        return repr(x)

    for n, step in enumerate(steps):
        name_, on = step[0], step[1]
        owner, av, kv = _decode_step(s, n, step, None)
        call_args = ", ".join([show(x) for x in av] + [f"{k}={show(v)}" for k, v in kv.items()])
        target = "s" if on is None else stage_ref(owner)
        out = getattr(owner, name_)(*av, **kv)
        call = f"{target}.{name_}({call_args})"
        if name_ in _MAKES_TENSOR:
            nm = names.fresh(out.name)
            tname[id(out.op)] = nm
            keep.append(out)
            lines.append(f"{nm} = {call}")
        elif name_ in ("split", "fuse", "tile"):
            outs = out if isinstance(out, tuple) else (out,)
            ns = []
            for iv in outs:
                nm = names.fresh(iv.name.replace(".outer", "_o").replace(".inner", "_i")
                                 .replace(".fused", "_f"))
                axname[id(iv)] = nm
                keep.append(iv)
                ns.append(nm)
            lines.append(f"{', '.join(ns)} = {call}")
        else:
            lines.append(call)
    body = "\n".join("    " + ln for ln in lines + ["return s"])
    return f"def {name}({', '.join(params)}):\n{body}\n"

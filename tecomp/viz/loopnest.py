"""``tc.draw_schedule``: a schedule's loop nest drawn as nested boxes.

The schedule is lowered (``tc.lower``) and its loop IR drawn: each loop a box (its
kind, variable, range, the stage it belongs to), the statements and allocations inside
it, the stages attached there by ``compute_at``, and for each loop the data one run of
it touches (:func:`tecomp.ir.analysis.loop_footprints`) against the target's L1, L2
and L3 (``Target.machine``): a footprint larger than a cache is marked.  The drawing is
a self-contained HTML page (inline CSS and SVG, nothing fetched), or a PNG/SVG/PDF
drawn with matplotlib.
"""
from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from ..errors import ArgumentError, LowerError
from ..lower import lower
from ..schedule import Schedule
from ..target import as_target
from ..ir.analysis import loop_footprints
from ..ir.expr import Const
from ..ir.printer import to_str
from ..ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse,
    LetStmt, Prefetch, SeqStmt, TensorIntrinCall,
)
from . import _plot

if TYPE_CHECKING:
    from ..ir.expr import Var
    from ..target import Target
    from ..te.tensor import Tensor

__all__ = ["LoopNest", "draw_schedule"]

#: the longest statement text shown (longer ones end in "...")
STMT_CHARS = 110
_KINDS = ("parallel", "vectorized", "unrolled", "serial", "thread")
_LEVELS = ("L1", "L2", "L3")


def _bytes(n: Optional[int]) -> str:
    if n is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.3g} {unit}"
    return f"{n} B"


def _short(text: str, n: int = STMT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


@dataclass
class Node:
    """One box or line of the drawing.  ``kind``: a loop kind (``serial``,
    ``parallel``, ``vectorized``, ``unrolled``, ``thread``), or ``stmt``, ``alloc``,
    ``if``, ``note``; ``text`` what it says; for a loop ``var``, ``extent``, ``stage``,
    ``footprint`` (bytes, None when not known), ``buffers`` (bytes per buffer),
    ``over`` (the caches it exceeds), ``attached`` (stages computed at it),
    ``pragmas``."""

    kind: str
    text: str
    var: str = ""
    extent: str = ""
    stage: str = ""
    footprint: Optional[int] = None
    buffers: Dict[str, Optional[int]] = field(default_factory=dict)
    over: List[str] = field(default_factory=list)
    attached: List[str] = field(default_factory=list)
    pragmas: List[str] = field(default_factory=list)
    children: List["Node"] = field(default_factory=list)

    @property
    def is_loop(self) -> bool:
        return self.kind in _KINDS

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass
class StageRow:
    """A stage of the schedule: ``name``, ``attach`` (``root``, ``inline`` or
    ``compute_at <stage>.<axis>``), ``scope``, ``shape`` and ``axes`` (its leaf axes
    with their kinds)."""

    name: str
    attach: str
    scope: str
    shape: str
    axes: List[str]


class LoopNest:
    """The drawing of a schedule's loop nest (what :func:`draw_schedule` returns).

    ``func`` is the lowered function, ``caches`` the target's ``{"L1": bytes, ...}``,
    ``stages`` a :class:`StageRow` per stage, ``root`` the tree of :class:`Node`;
    ``loops()`` lists the loop nodes.  ``html()`` gives the page, ``save(path)`` writes
    it (``.html``) or a matplotlib picture (``.png``, ``.svg``, ``.pdf``); in Jupyter
    the object shows itself."""

    def __init__(self, func, caches: Dict[str, int], stages: List[StageRow], root: Node,
                 target: str):
        self.func = func
        self.caches = caches
        self.stages = stages
        self.root = root
        self.target = target

    def loops(self) -> List[Node]:
        return [n for n in self.root.walk() if n.is_loop]

    def __repr__(self):
        over = sum(1 for n in self.loops() if n.over)
        return (f"LoopNest({self.func.name}: {len(self.stages)} stages, {len(self.loops())} "
                f"loops, {over} with a footprint over a cache; "
                + ", ".join(f"{k} {_bytes(v)}" for k, v in self.caches.items()) + ")")

    def _repr_html_(self) -> str:
        return self.html()

    def save(self, path) -> str:
        """Write the drawing to ``path``: ``.html`` (the page), or ``.png``, ``.svg``,
        ``.pdf`` (drawn with matplotlib); returns the path."""
        fmt = _plot.image_format(path, "LoopNest.save", ("html", "htm") + _plot.FORMATS)
        if fmt in ("html", "htm"):
            with open(os.fspath(path), "w", encoding="utf-8") as fh:
                fh.write(self.html())
        else:
            _render_matplotlib(self, path, fmt)
        return os.fspath(path)

    # -- HTML ------------------------------------------------------------------------
    def html(self) -> str:
        """The drawing as a self-contained HTML page (every name escaped)."""
        e = html.escape
        title = f"Loop nest of {self.func.name}"
        caches = ", ".join(f"{k} {_bytes(v)}" for k, v in self.caches.items())
        rows = []
        for st in self.stages:
            rows.append(
                f"<tr><td class='sname' style='border-left:6px solid {_color(st.name, self)}'>"
                f"{e(st.name)}</td><td>{e(st.attach)}</td><td>{e(st.scope)}</td>"
                f"<td>{e(st.shape)}</td><td>{' '.join(e(a) for a in st.axes)}</td></tr>")
        legend = " ".join(f"<span class='k {k}'>{k}</span>" for k in _KINDS[:4])
        body = "".join(self._node_html(c) for c in self.root.children)
        return _PAGE.format(
            title=e(title), target=e(self.target), caches=e(caches), legend=legend,
            stages="".join(rows), body=body, css=_CSS)

    def _node_html(self, n: Node) -> str:
        e = html.escape
        if not n.is_loop:
            cls = {"stmt": "stmt", "alloc": "alloc", "if": "guard", "note": "note"}[n.kind]
            inner = "".join(self._node_html(c) for c in n.children)
            if n.kind == "if":
                return (f"<div class='box guard'><div class='hdr'>{e(n.text)}</div>"
                        f"{inner}</div>")
            return f"<div class='{cls}'>{e(n.text)}</div>"
        badge = ""
        if n.footprint is not None or n.buffers:
            cls = ("over-" + n.over[-1].lower()) if n.over else "fits"
            mark = (" &gt; " + e(n.over[-1])) if n.over else ""
            tip = "; ".join(f"{k}: {_bytes(v)}" for k, v in n.buffers.items())
            badge = (f"<span class='fp {cls}' title='{e(tip, quote=True)}'>"
                     f"{e(_bytes(n.footprint))}{mark}</span>{self._bar(n)}")
        extras = ""
        if n.attached:
            extras += "".join(f"<span class='at'>compute_at: {e(a)}</span>"
                              for a in n.attached)
        if n.pragmas:
            extras += "".join(f"<span class='pr'>{e(p)}</span>" for p in n.pragmas)
        inner = "".join(self._node_html(c) for c in n.children)
        return (f"<div class='box loop {n.kind}' style='border-left-color:"
                f"{_color(n.stage, self)}'><div class='hdr'><span class='k {n.kind}'>"
                f"{n.kind}</span> <b>{e(n.var)}</b> <span class='ext'>{e(n.extent)}"
                f"</span> <span class='st'>{e(n.stage)}</span> {extras}"
                f"<span class='right'>{badge}</span></div>{inner}</div>")

    def _bar(self, n: Node) -> str:
        """An inline SVG: the footprint on a log scale against the cache sizes."""
        import math

        top = max(self.caches.values()) * 8
        w, h = 120, 12

        def x(v):
            return max(0.0, min(w, w * math.log2(max(v, 1)) / math.log2(top)))

        ticks = "".join(f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='0' y2='{h}' "
                        f"stroke='#333' stroke-width='1'><title>{k} {_bytes(v)}</title></line>"
                        for k, v in self.caches.items())
        fill = "#c0392b" if n.over else "#27ae60"
        bar = (f"<rect x='0' y='3' width='{x(n.footprint):.1f}' height='{h - 6}' "
               f"fill='{fill}'/>" if n.footprint is not None else "")
        return (f"<svg class='bar' width='{w}' height='{h}' viewBox='0 0 {w} {h}'>"
                f"<rect x='0' y='0' width='{w}' height='{h}' fill='#eee'/>{bar}{ticks}</svg>")


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")


def _color(stage: str, nest: LoopNest) -> str:
    names = [s.name for s in nest.stages]
    return _PALETTE[names.index(stage) % len(_PALETTE)] if stage in names else "#999"


_CSS = """
body{font-family:system-ui,sans-serif;font-size:13px;margin:16px;color:#222}
h1{font-size:17px;margin:0 0 4px}
.meta{color:#555;margin-bottom:8px}
table{border-collapse:collapse;margin:8px 0 14px}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-family:monospace}
th{background:#f3f3f3;font-family:system-ui,sans-serif}
.box{border:1px solid #bbb;border-left:6px solid #999;border-radius:4px;margin:4px 0 4px 14px;
 padding:2px 6px 4px}
.loop.parallel{background:#eef4ff}.loop.vectorized{background:#effaf0}
.loop.unrolled{background:#fff7e8}.loop.serial{background:#fafafa}
.loop.thread{background:#f5eefc}
.guard{background:#fff;border-style:dashed}
.hdr{font-family:monospace;display:flex;gap:6px;align-items:center;flex-wrap:wrap}
.right{margin-left:auto;display:flex;gap:6px;align-items:center}
.k{font-family:system-ui,sans-serif;font-size:11px;border-radius:3px;padding:0 4px;color:#fff}
.k.parallel{background:#2f6fd6}.k.vectorized{background:#2a9d4b}
.k.unrolled{background:#d98a00}.k.serial{background:#888}.k.thread{background:#8e44ad}
.ext{color:#555}.st{color:#666;font-style:italic}
.at{background:#333;color:#fff;border-radius:3px;padding:0 4px;font-size:11px}
.pr{background:#eee;border-radius:3px;padding:0 4px;font-size:11px}
.stmt,.alloc,.note{font-family:monospace;margin:2px 0 2px 16px;white-space:pre}
.alloc{color:#6a3d9a}.note{color:#777}
.fp{font-family:monospace;border-radius:3px;padding:0 4px}
.fits{background:#dff2e1}.over-l1{background:#fde7c4}.over-l2{background:#f9c29c}
.over-l3{background:#f28b82}
svg.bar{vertical-align:middle}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{css}</style></head><body>
<h1>{title}</h1>
<div class="meta">target {target}; caches {caches}. Each loop shows the data one run of it
touches (all its iterations; the loops around it at their first iteration): green fits
in L1, a mark names the largest cache it exceeds; the bar is a log scale with the cache
sizes as ticks. Loop kinds: {legend}.</div>
<table><tr><th>stage</th><th>attached</th><th>scope</th><th>shape</th><th>axes</th></tr>
{stages}</table>
{body}
</body></html>
"""


# ---------------------------------------------------------------------------------
# building the tree


def _stage_rows(s, extents: Dict[int, str]) -> List[StageRow]:
    rows = []
    for st in s.stages:
        if type(st.op).__name__ == "PlaceholderOp":
            continue
        if st.attach_type == "inline":
            attach = "inline"
        elif st.attach_type == "scope" and st.attach_stage is not None:
            attach = f"compute_at {st.attach_stage.name}.{st.attach_ivar.name}"
        else:
            attach = "root"
        axes = []
        for iv in st.leaf_iter_vars:
            a = st.iter_attrs.get(iv)
            kind = a.kind if a is not None else "serial"
            ext = extents.get(id(iv.var), "")
            axes.append(f"{iv.name}{'(' + ext + ')' if ext else ''}"
                        f"{'' if kind == 'serial' else ':' + kind}")
        shape = "x".join(to_str(e) for e in getattr(st.op, "shape", ())) or "-"
        rows.append(StageRow(st.name, attach, st.scope, shape, axes))
    return rows


def _extent_text(f: For) -> str:
    if isinstance(f.min, Const) and f.min.value == 0:
        return str(f.extent.value) if isinstance(f.extent, Const) else to_str(f.extent)
    return f"[{to_str(f.min)}, +{to_str(f.extent)})"


def _stores(s) -> List[str]:
    out: List[str] = []

    def go(x):
        if isinstance(x, BufferStore):
            if x.buffer.name not in out:
                out.append(x.buffer.name)
        elif isinstance(x, TensorIntrinCall):
            if x.stage not in out:
                out.append(x.stage)
        for c in _children(x):
            go(c)
    go(s)
    return out


def _children(s) -> list:
    if isinstance(s, SeqStmt):
        return list(s.seq)
    if isinstance(s, IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    if isinstance(s, (BufferStore, Evaluate, ExternCall, Prefetch, TensorIntrinCall)):
        return []
    b = getattr(s, "body", None)
    return [b] if b is not None else []


def _build_tree(s, func, caches) -> Node:
    owner = {}
    attached: Dict[int, List[str]] = {}
    for st in s.stages:
        for iv in st.all_iter_vars:
            owner[id(iv.var)] = st.name
        if st.attach_type == "scope" and st.attach_ivar is not None:
            attached.setdefault(id(st.attach_ivar.var), []).append(st.name)
    fps = {id(fp.loop): fp for fp in loop_footprints(func)}
    sizes = list(caches.items())

    def node_of(x, pragmas) -> List[Node]:
        if isinstance(x, For):
            fp = fps.get(id(x))
            foot = fp.bytes if fp is not None else None
            stage = owner.get(id(x.var))
            if stage is None:
                st = _stores(x.body)
                stage = st[0] if len(st) == 1 else ""
            n = Node(x.kind if x.kind in _KINDS else "serial", "", var=x.var.name,
                     extent=_extent_text(x), stage=stage, footprint=foot,
                     buffers=dict(fp.buffers) if fp is not None else {},
                     over=[k for k, v in sizes if foot is not None and foot > v],
                     attached=list(attached.get(id(x.var), [])), pragmas=list(pragmas))
            n.children = many(x.body)
            return [n]
        if isinstance(x, AttrStmt):
            if x.key.startswith("pragma_"):
                val = "" if x.value is None else f"={to_str(x.value) if hasattr(x.value, 'dtype') else x.value}"
                p = f"{x.key[len('pragma_'):]}{val}"
                inner = x.body
                if isinstance(inner, (For, AttrStmt)):
                    return node_of(inner, pragmas + [p])
                return [Node("note", f"pragma {p}")] + many(inner)
            return many(x.body)
        if isinstance(x, Allocate):
            b = x.buffer
            shape = "x".join(to_str(e) for e in b.shape)
            return [Node("alloc", f"allocate {b.name}: {b.dtype}[{shape}] ({b.scope})")] \
                + many(x.body)
        if isinstance(x, SeqStmt):
            return [n for c in x.seq for n in node_of(c, [])]
        if isinstance(x, IfThenElse):
            n = Node("if", f"if {_short(to_str(x.cond), 80)}")
            n.children = many(x.then_case)
            out = [n]
            if x.else_case is not None:
                m = Node("if", "else")
                m.children = many(x.else_case)
                out.append(m)
            return out
        if isinstance(x, BufferStore):
            return [Node("stmt", _short(to_str(x)))]
        if isinstance(x, TensorIntrinCall):
            return [Node("stmt", f"tensorized {x.stage}: {getattr(x.intrin, 'name', 'intrinsic')}")]
        if isinstance(x, ExternCall):
            return [Node("stmt", f"extern call {x.name}")]
        if isinstance(x, Prefetch):
            return [Node("note", _short(to_str(x)))]
        if isinstance(x, (LetStmt, AssertStmt)):
            head = (f"let {x.var.name} = {_short(to_str(x.value), 60)}"
                    if isinstance(x, LetStmt) else f"assert {_short(to_str(x.cond), 60)}")
            return [Node("note", head)] + many(x.body)
        if isinstance(x, Evaluate):
            return [Node("note", _short(to_str(x)))]
        return [Node("note", _short(to_str(x)))]

    def many(x) -> List[Node]:
        return node_of(x, [])

    root = Node("note", func.name)
    root.children = many(func.body)
    return root


def draw_schedule(s: Schedule, args: Sequence["Tensor | Var"],
                  path: "str | os.PathLike | None" = None, *,
                  target: "str | Target" = "llvm", name: str = "main") -> LoopNest:
    """Draw the loop nest of schedule ``s`` (lowered with ``args``), with its loop
    kinds, extents, compute_at stages and each loop's footprint against the target's
    caches.

    Parameters
    ----------
    s : Schedule
        Made by ``tc.create_schedule`` and scheduled.
    args : list of Tensor
        The argument list, as for ``tc.lower(s, args)``.
    path : str or os.PathLike, optional
        Where to write the drawing: ``.html`` (a self-contained page), or ``.png``,
        ``.svg``, ``.pdf`` (drawn with matplotlib).  None: write nothing.
    target : str or Target
        A CPU target (default the host): the schedule is lowered for it and its L1,
        L2 and L3 (``Target.machine``) are the caches the footprints are held against.
    name : str
        The lowered function's name.

    Returns
    -------
    LoopNest
        The drawing: ``.html()``, ``.save(path)``, ``.loops()``; shown inline in Jupyter.

    Raises
    ------
    LowerError
        ``s`` is not a schedule, or the schedule cannot be lowered with ``args``.
    ArgumentError
        ``target`` is not a CPU target, or ``path`` has no known suffix.
    RuntimeUnavailableError
        A picture format was asked for and matplotlib is not installed.

    Examples
    --------
    >>> nest = tc.draw_schedule(s, [A, B, C], "gemm.html")   # doctest: +SKIP
    """
    if not isinstance(s, Schedule):
        raise LowerError(f"tc.draw_schedule takes a schedule made by tc.create_schedule, "
                         f"got {type(s).__name__}")
    if path is not None:   # a bad path fails before the work
        _plot.image_format(path, "tc.draw_schedule", ("html", "htm") + _plot.FORMATS)
    tgt = as_target(target)
    if not tgt.is_cpu:
        raise ArgumentError(f"tc.draw_schedule: target {tgt} is not a CPU; the footprints "
                            f"are held against a CPU's caches: use an llvm target")
    func = lower(s, args, name=name, target=tgt)
    m = tgt.machine
    caches = {"L1": m.l1_bytes, "L2": m.l2_bytes, "L3": m.l3_bytes}
    root = _build_tree(s, func, caches)
    extents: Dict[int, str] = {}

    def note(x):
        if isinstance(x, For) and id(x.var) not in extents:
            extents[id(x.var)] = _extent_text(x)
        for c in _children(x):
            note(c)
    note(func.body)
    nest = LoopNest(func, caches, _stage_rows(s, extents), root, str(tgt))
    if path is not None:
        nest.save(path)
    return nest


# ---------------------------------------------------------------------------------
# the matplotlib picture

_FILL = {"parallel": "#eef4ff", "vectorized": "#effaf0", "unrolled": "#fff7e8",
         "serial": "#fafafa", "thread": "#f5eefc", "if": "#ffffff"}
_TAG = {"parallel": "#2f6fd6", "vectorized": "#2a9d4b", "unrolled": "#d98a00",
        "serial": "#888888", "thread": "#8e44ad"}
_OVER = {None: "#dff2e1", "L1": "#fde7c4", "L2": "#f9c29c", "L3": "#f28b82"}


def _render_matplotlib(nest: LoopNest, path, fmt: str) -> None:
    plt = _plot.pyplot("LoopNest.save")
    from matplotlib.patches import FancyBboxPatch
    lines = []   # (depth, node, is_header)

    def lay(n: Node, depth: int):
        if n.is_loop or n.kind == "if":
            start = len(lines)
            lines.append((depth, n, True))
            for c in n.children:
                lay(c, depth + 1)
            boxes.append((depth, n, start, len(lines)))
        else:
            lines.append((depth, n, False))

    boxes: list = []
    for c in nest.root.children:
        lay(c, 0)
    head = 2 + len(nest.stages)
    total = head + len(lines) + 1
    row_in, width = 0.24, 15.0
    fig = plt.figure(figsize=(width, max(2.5, total * row_in)), dpi=100)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, 100)
    ax.set_ylim(total, 0)
    ax.axis("off")
    e = _plot.text
    ax.text(1, 0.8, e(f"Loop nest of {nest.func.name}  —  target {nest.target};  caches "
                      + ", ".join(f"{k} {_bytes(v)}" for k, v in nest.caches.items())),
            fontsize=11, weight="bold", va="center", zorder=100)
    for i, st in enumerate(nest.stages):
        y = 1.8 + i
        ax.add_patch(plt.Rectangle((1, y - 0.35), 0.6, 0.7, color=_color(st.name, nest)))
        ax.text(2, y, e(f"{st.name}: {st.attach}; scope {st.scope}; shape {st.shape}; axes "
                        + " ".join(st.axes)), fontsize=8.5, va="center", zorder=100, family="monospace")
    indent = 1.6
    for depth, n, start, end in sorted(boxes, key=lambda b: b[0]):   # outer boxes first
        x0 = 1 + depth * indent
        y0 = head + start + 0.08
        h = end - start - 0.16
        ax.add_patch(FancyBboxPatch(
            (x0, y0), 98 - 2 * depth * 0.1 - x0, h, boxstyle="round,pad=0,rounding_size=0.3",
            fc=_FILL.get(n.kind, "#fafafa"), ec=_color(n.stage, nest) if n.is_loop else "#999",
            lw=1.2, ls="--" if n.kind == "if" else "-", zorder=1 + depth))
    for i, (depth, n, header) in enumerate(lines):
        y = head + i + 0.5
        x = 1.4 + depth * indent
        if header and n.is_loop:
            ax.text(x, y, n.kind, fontsize=7.5, va="center", zorder=100, color="white",
                    bbox=dict(boxstyle="round,pad=0.15", fc=_TAG.get(n.kind, "#888"), ec="none"))
            label = f"{n.var}  {n.extent}"
            label += f"   {n.stage}" if n.stage else ""
            if n.attached:
                label += f"   [compute_at: {', '.join(n.attached)}]"
            label += "".join(f"   <{p}>" for p in n.pragmas)
            room = int((97.5 - 12 - x - 5.2) / 100 * width * 72 / 8.5 / 0.6)  # monospace chars
            room = max(20, room)
            label = label if len(label) <= room else label[:room - 3] + "..."
            ax.text(x + 5.2, y, e(label), fontsize=8.5, va="center", zorder=100, family="monospace")
            if n.footprint is not None or n.buffers:
                over = n.over[-1] if n.over else None
                txt = _bytes(n.footprint) + (f"  > {over}" if over else "")
                ax.text(97.5 - depth * 0.2, y, e(txt), fontsize=8.5, va="center", zorder=100, ha="right",
                        family="monospace",
                        bbox=dict(boxstyle="round,pad=0.15", fc=_OVER[over], ec="none"))
        else:
            color = {"alloc": "#6a3d9a", "note": "#777777", "if": "#333333"}.get(n.kind, "#222")
            ax.text(x + (0 if header else 0.4), y, e(n.text), fontsize=8, va="center", zorder=100,
                    family="monospace", color=color)
    fig.savefig(os.fspath(path), format=fmt)
    plt.close(fig)

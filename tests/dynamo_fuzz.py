"""Random small PyTorch programs for fuzzing ``torch.compile(backend="tecomp")`` against
eager PyTorch (tests/test_dynamo_fuzz.py).

:func:`make_program` draws, from a seed, a straight-line program over a few float32
inputs: elementwise chains (unary functions, binary operators broadcasting against other
values or new inputs), reductions (``sum``, ``mean``, ``amax``, ``amin``, with and without
``keepdim``), views (``reshape``, ``flatten``, ``permute``, ``transpose``, ``unsqueeze``,
``squeeze``, ``expand``, slices with steps, ``narrow``, ``select``), ``cat``, matrix
products (``@``, ``F.linear``, ``bmm``), softmax, convolution, pooling, layer and batch
norm, attention.  With ``edges`` a program also draws ``sign``, an embedding (int64 ids of
a table: the program is also called with an id past the table, which must raise
IndexError as in eager) and means of 2**18 to 2**22 stride-0 copies of a value (more
terms than a float32 running sum adds up within the tolerance); with ``specials`` (and ``edges``) the float
inputs hold NaN, +-inf and +-0 among normal values (no GEMMs or convolutions then: eager's
differ from themselves at infinities), compared position by position.  Sizes are drawn
twice (sets A and B): every operation takes its parameters from the sizes it is given at
run time (a slice from ``x.shape[d] // 2``), and each is kept only if it runs on both
sets, so the program also runs with dynamic sizes (``torch._dynamo.mark_dynamic``).  The
program returns its last value and some intermediate ones, views among them (an
``expand`` returned as it is: a broadcast view).

    python3 tests/dynamo_fuzz.py --seeds 0:200 [--dynamic] [--grad] [--edges] [--specials]
                                 [--swapped-cache] [--refuse-every N] [--faults]

runs seeds against eager PyTorch (``--grad``: the gradients too) and prints the failing
ones; ``--swapped-cache`` runs them twice through a disk cache whose entries are rotated
among each other in between (each then holds another kernel, with a valid sidecar: none
may be loaded).  ``--refuse-every N`` refuses to compile about one kernel in ``N``
(chosen by its key), so that its nodes run eagerly between kernels, on the tensors the
kernels wrote (their layouts then matter: a ``view`` of an eager result whose strides
follow its inputs').  ``--faults`` (the faults family, :func:`run_faults`) makes each
seed's compilation fail part-way -- an exception (KeyboardInterrupt, MemoryError,
RuntimeError, SystemExit) raised in a region's lowering, its auto-schedule, its build or
while the LLVM worker's reply is read, a full disk under the cache's writes, or the disk
cache damaged (truncated, a bit flipped, a bad sidecar, a FIFO or a directory in a
library's place, another entry's files) -- and then checks the state left behind and
calls and compiles the program again.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import sys
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from tecomp.dynamo import STATS  # also registers the backend "tecomp"

#: unary elementwise functions that keep values finite and moderate
_UNARY: List[Tuple[str, Callable]] = [
    ("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("relu", torch.relu),
    ("exp(-|x|)", lambda v: torch.exp(-v.abs())), ("sqrt(|x|+1)", lambda v: torch.sqrt(v.abs() + 1)),
    ("sin", torch.sin), ("0.5x-1", lambda v: v * 0.5 - 1), ("neg", torch.neg),
    ("log1p(|x|)", lambda v: torch.log1p(v.abs())), ("clamp", lambda v: v.clamp(-1.0, 1.0)),
    ("gelu", F.gelu), ("erf", torch.erf), ("abs", torch.abs),
]

#: unary functions drawn with ``edges`` (apart: the programs drawn without it stay those
#: of the seeds pinned in the tests)
_UNARY_EDGES: List[Tuple[str, Callable]] = [("sign", torch.sign)]

_BINARY: List[Tuple[str, Callable]] = [
    ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("maximum", torch.maximum),
    ("div", lambda a, b: a / (b.abs() + 1)), ("where", lambda a, b: torch.where(a > b, a, b * 2)),
]


#: steps after which the sign of a zero may differ from eager's, as documented
#: (docs/torch_compile.md): PyTorch's relu, maximum and amax keep -0.0 where an operand
#: equal to it is +0.0 (they return the first of equal operands), tecomp's give +0.0
#: (IEEE 754's maximum); amin the other way round
_ZERO_SIGN_FREE = ("relu", "maximum", "amax", "amin")


class Program:
    """A drawn program: ``inputs`` (shapes in sets A and B), ``steps`` (name, function,
    operand indices), ``values`` (each value, numbered as drawn: ``("input", k)`` or
    ``("step", k)``), ``outputs`` (value numbers)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.inputs: List[Tuple[tuple, tuple]] = []
        self.steps: List[Tuple[str, Callable, Tuple[int, ...]]] = []
        self.values: List[Tuple[str, int]] = []
        self.outputs: List[int] = []
        #: per input: None (float32) or the number of rows V of the table it indexes
        #: (int64 ids in [0, V))
        self.ids: List[Optional[int]] = []
        #: whether the float inputs hold special values (NaN, +-inf, +-0) among normal ones
        self.specials = False
        #: whether the steps of the edges are drawn too (sign, embedding, long sums)
        self.edges = False

    def tensors(self, which: int, generator: torch.Generator) -> List[torch.Tensor]:
        """Inputs of size set ``which`` (0: A, 1: B)."""
        return [_input(s[which], v, self.specials, generator)
                for s, v in zip(self.inputs, self.ids)]

    def __call__(self, *xs):
        vals = []
        for kind, k in self.values:
            if kind == "input":
                vals.append(xs[k])
            else:
                _, fn, idx = self.steps[k]
                vals.append(fn(*(vals[i] for i in idx)))
        return tuple(vals[k] for k in self.outputs)

    def live_inputs(self) -> set:
        """The inputs the returned values depend on (TorchDynamo's graph drops the
        others' computations, eager runs them)."""
        todo, seen = list(self.outputs), set()
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                kind, k = self.values[v]
                if kind == "step":
                    todo.extend(self.steps[k][2])
        return {self.values[v][1] for v in seen if self.values[v][0] == "input"}

    def zero_sign_exact(self) -> List[bool]:
        """Per output: whether no step it depends on is one of ``_ZERO_SIGN_FREE``, so
        that each zero it holds has eager's sign (``max_error(signs=)``)."""
        exact = []
        for v in self.outputs:
            todo, seen, ok = [v], set(), True
            while todo and ok:
                u = todo.pop()
                if u in seen:
                    continue
                seen.add(u)
                kind, k = self.values[u]
                if kind == "step":
                    name, _, idx = self.steps[k]
                    ok = not name.startswith(_ZERO_SIGN_FREE)
                    todo.extend(idx)
            exact.append(ok)
        return exact

    def describe(self) -> str:
        lines = [f"seed {self.seed}{' (special values)' if self.specials else ''}:"]
        for v, (kind, k) in enumerate(self.values):
            if kind == "input":
                a, b = self.inputs[k]
                what = "" if self.ids[k] is None else f" ids of a table of {self.ids[k]} rows"
                lines.append(f"  v{v} = input {k}:{what} {list(a)} (sizes B: {list(b)})")
            else:
                name, _, idx = self.steps[k]
                lines.append(f"  v{v} = {name}({', '.join(f'v{i}' for i in idx)})")
        lines.append("  return " + ", ".join(f"v{k}" for k in self.outputs))
        return "\n".join(lines)


class _Drawer:
    def __init__(self, seed: int, specials: bool = False, edges: bool = False):
        self.rng = random.Random(seed)
        self.prog = Program(seed)
        self.prog.specials = specials
        self.prog.edges = edges or specials
        self.vals: List[Tuple[torch.Tensor, torch.Tensor]] = []  # (A, B) example values
        self.gen = torch.Generator().manual_seed(seed)

    def new_input(self, a: Sequence[int], b: Sequence[int], ids: Optional[int] = None) -> int:
        self.prog.values.append(("input", len(self.prog.inputs)))
        self.prog.inputs.append((tuple(a), tuple(b)))
        self.prog.ids.append(ids)
        self.vals.append(tuple(_input(tuple(s), ids, self.prog.specials, self.gen)
                               for s in (a, b)))
        return len(self.vals) - 1

    def sizes(self, rank: int) -> Tuple[List[int], List[int]]:
        """Two size sets: a dimension is 1 in both (sometimes) or drawn in each."""
        a, b = [], []
        for _ in range(rank):
            if self.rng.random() < 0.15:
                a.append(1)
                b.append(1)
            else:
                a.append(self.rng.randint(2, 5))
                b.append(self.rng.randint(2, 6))
        return a, b

    def try_step(self, name: str, fn: Callable, idx: Tuple[int, ...]) -> bool:
        """Append the step if it runs on both size sets and gives a non-empty float
        tensor of at most 4 dimensions."""
        outs = []
        for w in (0, 1):
            try:
                with torch.no_grad():
                    y = fn(*(self.vals[i][w] for i in idx))
            except (RuntimeError, IndexError, ValueError, TypeError):
                return False
            if not isinstance(y, torch.Tensor) or y.numel() == 0 or y.dim() > 4 or \
                    not y.dtype.is_floating_point:
                return False
            finite = y[torch.isfinite(y)]
            if not self.prog.specials and finite.numel() < y.numel() or \
                    finite.numel() and float(finite.abs().max()) > 1e4:
                return False
            outs.append(y)
        self.prog.values.append(("step", len(self.prog.steps)))
        self.prog.steps.append((name, fn, idx))
        self.vals.append((outs[0], outs[1]))
        return True

    def pick(self) -> int:
        """A value, the recent ones more likely."""
        n = len(self.vals)
        return max(0, n - 1 - int(self.rng.expovariate(0.5)))

    def partner(self, k: int) -> int:
        """A value that broadcasts with value ``k``: an existing one or a new input."""
        sa, sb = (tuple(v.shape) for v in self.vals[k])
        same = [j for j, (a, b) in enumerate(self.vals) if j != k and
                _broadcasts(tuple(a.shape), sa) and _broadcasts(tuple(b.shape), sb)]
        if same and self.rng.random() < 0.5:
            return self.rng.choice(same)
        drop = self.rng.randint(0, len(sa)) if self.rng.random() < 0.3 else 0
        a, b = list(sa[drop:]), list(sb[drop:])
        for d in range(len(a)):
            if self.rng.random() < 0.3:
                a[d] = b[d] = 1
        return self.new_input(a, b)

    def step(self) -> None:
        r = self.rng
        k = self.pick()
        x = self.vals[k][0]
        nd = x.dim()
        kind = r.choice(["unary", "unary", "binary", "binary", "reduce", "view", "view",
                         "view", "cat", "matmul", "softmax", "nn"] +
                        (["long_sum"] if self.prog.edges else []))
        if self.prog.specials and kind in ("matmul", "nn"):
            # (with infinities eager's GEMMs and convolutions differ from themselves:
            # oneDNN skips a convolution's padding taps, where 0 * inf is NaN in float64)
            return
        if kind == "unary":
            # (eager gelu is NaN at +inf, a quirk tecomp's gelu -- the limit, inf -- does
            # not copy: not drawn with special values)
            name, f = r.choice([u for u in _UNARY + (_UNARY_EDGES if self.prog.edges else [])
                                if not (self.prog.specials and u[0] == "gelu")])
            self.try_step(name, f, (k,))
        elif kind == "binary":
            name, f = r.choice(_BINARY)
            j = self.partner(k)
            self.try_step(name, f, (k, j) if r.random() < 0.5 else (j, k))
        elif kind == "reduce" and nd >= 1:
            dims = sorted(r.sample(range(nd), r.randint(1, nd)))
            keep = r.random() < 0.5
            op = r.choice(["sum", "mean", "amax", "amin"])
            self.try_step(f"{op}({dims}, keepdim={keep})",
                          lambda v, op=op: getattr(torch, op)(v, dim=dims, keepdim=keep), (k,))
        elif kind == "view":
            self.view(k, nd)
        elif kind == "long_sum":
            # the mean of 2**18 to 2**22 stride-0 copies of |an element| (nothing
            # allocated): more terms than a float32 running sum adds up within tolerance
            n = 2 ** r.randint(18, 22)
            self.try_step(f"v + mean(|v.flatten()[0]| expanded to {n}, 0)",
                          lambda v: v + v.flatten()[:1].abs().expand(n).mean(0), (k,))
        elif kind == "cat" and nd >= 1:
            d = r.randrange(nd)
            if r.random() < 0.5:
                self.try_step(f"cat([v, v[..dim {d}.., ::2]], {d})", lambda v: torch.cat(
                    [v, v[(slice(None),) * d + (slice(None, None, 2),)]], d), (k,))
            else:
                same = [j for j, (a, b) in enumerate(self.vals)
                        if a.dim() == nd and _same_but(a.shape, x.shape, d) and
                        _same_but(b.shape, self.vals[k][1].shape, d)]
                j = r.choice(same) if same else k
                self.try_step(f"cat(dim={d})", lambda a, b: torch.cat([a, b], d), (k, j))
        elif kind == "matmul" and nd >= 1:
            sa, sb = (tuple(v.shape) for v in self.vals[k])
            n = r.randint(2, 6)
            how = r.choice(["matmul", "linear", "bmm"])
            if how == "bmm" and nd == 3:
                w = self.new_input((sa[0], sa[2], n), (sb[0], sb[2], n))
                self.try_step("bmm", torch.bmm, (k, w))
            elif how == "linear":
                w = self.new_input((n, sa[-1]), (n, sb[-1]))
                bias = self.new_input((n,), (n,))
                self.try_step("linear", F.linear, (k, w, bias))
            else:
                w = self.new_input((sa[-1], n), (sb[-1], n))
                self.try_step("matmul", torch.matmul, (k, w))
        elif kind == "nn" and nd >= 2:
            self.nn(k, nd)
        elif kind == "softmax" and nd >= 1:
            log = r.random() < 0.3
            f = F.log_softmax if log else F.softmax
            self.try_step("log_softmax(-1)" if log else "softmax(-1)", lambda v: f(v, -1), (k,))

    def nn(self, k: int, nd: int) -> None:
        """A convolution, pooling, a norm or attention (the kernels' anchors)."""
        r = self.rng
        sa, sb = (tuple(v.shape) for v in self.vals[k])
        what = r.choice(["conv", "pool", "layer_norm", "batch_norm", "attention"] +
                        (["embedding"] if self.prog.edges else []))
        if what == "conv" and nd == 4:
            co, ks = r.randint(1, 4), r.choice([1, 3])
            w = self.new_input((co, sa[1], ks, ks), (co, sb[1], ks, ks))
            bias = self.new_input((co,), (co,)) if r.random() < 0.5 else None
            self.try_step(f"conv2d(k={ks}, padding={ks // 2})", lambda v, w, *b: F.conv2d(
                v, w, b[0] if b else None, padding=ks // 2), (k, w) + ((bias,) if bias else ()))
        elif what == "pool" and nd == 4:
            avg = r.random() < 0.5
            f = F.avg_pool2d if avg else F.max_pool2d
            # windows that tile the image, overlap with padding, or slide by one; max
            # pooling's values sometimes read through a view (in training its indices
            # are a second output of the same kernel)
            ks, st, pad = r.choice([(2, 2, 0), (3, 2, 1), (3, 1, 1)])
            if avg or r.random() < 0.5 or min(sa[2:]) < ks:
                ks, st, pad = 2, 2, 0
            view = not avg and r.random() < 0.3
            self.try_step(f"{'avg' if avg else 'max'}_pool2d({ks}, {st}, {pad})"
                          + (".transpose(2, 3)" if view else ""),
                          lambda v: (lambda y: y.transpose(2, 3) if view else y)(
                              f(v, ks, st, pad)), (k,))
        elif what == "layer_norm":
            w = self.new_input(sa[-1:], sb[-1:])
            bias = self.new_input(sa[-1:], sb[-1:])
            self.try_step("layer_norm(last)", lambda v, w, b: F.layer_norm(
                v, v.shape[-1:], w, b), (k, w, bias))
        elif what == "batch_norm" and nd in (2, 4):
            w = self.new_input(sa[1:2], sb[1:2])
            bias = self.new_input(sa[1:2], sb[1:2])
            self.try_step("batch_norm(batch statistics)", lambda v, w, b: F.batch_norm(
                v, None, None, w, b, training=True), (k, w, bias))
        elif what == "embedding":
            # rows of a table picked by int64 ids (an input); run() also calls the program
            # with an id past the table, which must raise IndexError as eager does
            rows = r.randint(2, 9)
            ids = self.new_input(sa[:1], sb[:1], ids=rows)
            w = self.new_input((rows, sa[-1]), (rows, sb[-1]))
            self.try_step(f"embedding(ids, table of {rows} rows) + (first row of v)",
                          lambda v, i, w: F.embedding(i, w) + v.reshape(-1, v.shape[-1])[:1],
                          (k, ids, w))
        elif what == "attention" and nd == 4:
            self.try_step("scaled_dot_product_attention(v, v, v)",
                          lambda v: F.scaled_dot_product_attention(v, v, v), (k,))

    def view(self, k: int, nd: int) -> None:
        r = self.rng
        what = r.choice(["permute", "transpose", "flatten", "reshape", "unsqueeze",
                         "squeeze", "expand", "slice", "narrow", "select"])
        if what == "permute" and nd >= 2:
            p = list(range(nd))
            r.shuffle(p)
            self.try_step(f"permute({p})", lambda v: v.permute(*p), (k,))
        elif what == "transpose" and nd >= 2:
            a, b = r.sample(range(nd), 2)
            self.try_step(f"transpose({a}, {b})", lambda v: v.transpose(a, b), (k,))
        elif what == "flatten" and nd >= 2:
            a = r.randrange(nd - 1)
            self.try_step(f"flatten({a}, {a + 1})", lambda v: v.flatten(a, a + 1), (k,))
        elif what == "reshape":
            self.try_step("reshape(-1)", lambda v: v.reshape(-1), (k,))
        elif what == "unsqueeze":
            d = r.randint(0, nd)
            self.try_step(f"unsqueeze({d})", lambda v: v.unsqueeze(d), (k,))
        elif what == "squeeze" and nd >= 1:
            d = r.randrange(nd)
            self.try_step(f"squeeze({d})", lambda v: v.squeeze(d), (k,))
        elif what == "expand":
            n = r.randint(2, 3)
            self.try_step(f"unsqueeze(0).expand({n}, ...)",
                          lambda v: v.unsqueeze(0).expand(n, *v.shape), (k,))
        elif what in ("slice", "narrow") and nd >= 1:
            d = r.randrange(nd)
            step = r.choice([1, 1, 2])
            if what == "slice":
                # the bounds from the size at run time: a SymInt under dynamic sizes
                def fn(v, d=d, step=step):
                    h = v.shape[d] // 2
                    return v[(slice(None),) * d + (slice(h, None, step),)]
                self.try_step(f"v[..dim {d}.., n//2::{step}]", fn, (k,))
            else:
                def fn(v, d=d):
                    h = v.shape[d] // 2
                    return v.narrow(d, max(h - 1, 0), v.shape[d] - h)
                self.try_step(f"narrow({d}, n//2 - 1, n - n//2)", fn, (k,))
        elif what == "select" and nd >= 2:
            d = r.randrange(nd)
            last = r.random() < 0.5
            self.try_step(f"select({d}, {'-1' if last else '0'})",
                          lambda v: v.select(d, -1 if last else 0), (k,))


def _broadcasts(a: tuple, b: tuple) -> bool:
    """Whether ``a`` broadcasts to ``b`` (b's shape unchanged)."""
    if len(a) > len(b):
        return False
    return all(x in (1, y) for x, y in zip(a[::-1], b[::-1]))


def _same_but(a, b, d: int) -> bool:
    return all(x == y for k, (x, y) in enumerate(zip(a, b)) if k != d)


def make_program(seed: int, steps: int = 0, specials: bool = False,
                 edges: bool = False) -> Program:
    """The program of ``seed``: 2 to 10 operations (``steps``, if given) on one to a few
    inputs of rank 1 to 4, some of its values returned (a view of one, sometimes);
    ``edges``: also sign, embeddings and long sums; ``specials`` (implies ``edges``):
    its float inputs hold NaN, +-inf and +-0 among normal values."""
    d = _Drawer(seed, specials, edges)
    a, b = d.sizes(d.rng.randint(1, 4))
    d.new_input(a, b)
    want = steps or d.rng.randint(2, 10)
    tries = 0
    while len(d.prog.steps) < want and tries < 200:
        d.step()
        tries += 1
    computed = [v for v, (kind, _) in enumerate(d.prog.values) if kind == "step"]
    if not computed:  # nothing drawn ran: one elementwise step
        d.try_step("tanh", torch.tanh, (0,))
        computed = [len(d.vals) - 1]
    outs = {computed[-1]}
    for _ in range(d.rng.randint(0, 2)):
        outs.add(d.rng.choice(computed))
    if d.rng.random() < 0.3:
        # an output that eager returns as a view of a computed value: broadcast (strides
        # 0), transposed, or a strided slice
        k = d.rng.choice(computed)
        n = len(d.prog.values)
        for name, fn in d.rng.sample(_OUT_VIEWS, len(_OUT_VIEWS)):
            if d.try_step(name, fn, (k,)):
                outs.add(n)
                break
    d.prog.outputs = sorted(outs)
    return d.prog


#: views a program may return as they are
_OUT_VIEWS: List[Tuple[str, Callable]] = [
    ("expand(2, ...)", lambda v: v.expand(2, *v.shape)),
    ("expand size-1 dims to 3", lambda v: v.expand(*(3 if s == 1 else s for s in v.shape))),
    ("transpose(0, -1)", lambda v: v.transpose(0, -1)),
    ("v[..., ::2]", lambda v: v[..., ::2]),
    ("v[1:]", lambda v: v[1:]),
]


def _input(shape, ids, specials: bool, gen: torch.Generator) -> torch.Tensor:
    """A random input: float32 normal values (``specials``: about one in four NaN, +-inf
    or +-0), or int64 ids in ``[0, ids)``."""
    if ids is not None:
        return torch.randint(0, ids, shape, generator=gen)
    x = torch.randn(shape, generator=gen)
    if specials:
        pick = torch.randint(0, 24, shape, generator=gen)
        for k, v in enumerate((math.nan, math.inf, -math.inf, 0.0, -0.0)):
            x = torch.where(pick == k, torch.tensor(v), x)
    return x


def max_error(got, want, signs: Optional[Sequence[bool]] = None) -> float:
    """max |got - want| / max(max |want|, 1), over the outputs (inf where shapes or dtypes
    differ, or where the non-finite values -- NaN, +-inf -- differ; with ``signs``, a
    flag per output, also where a zero of a flagged output has another sign than
    eager's: -x of +0.0 was +0.0)."""
    worst = 0.0
    for n, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return math.inf
        fw, fg = torch.isfinite(w), torch.isfinite(g)
        if not torch.equal(fw, fg) or not torch.equal(g[~fg].nan_to_num(), w[~fw].nan_to_num()):
            return math.inf
        if signs is not None and n < len(signs) and signs[n] and w.is_floating_point():
            zero = (w == 0) & (g == 0)
            if not torch.equal(torch.signbit(g[zero]), torch.signbit(w[zero])):
                return math.inf
        if not fw.any():
            continue
        g, w = g[fw], w[fw]
        scale = max(float(w.abs().max()), 1.0)
        worst = max(worst, float((g.double() - w.double()).abs().max()) / scale)
    return worst


@contextlib.contextmanager
def refusing(every: int):
    """Within it, tecomp.dynamo refuses to compile the kernels whose key's first eight
    hex digits are a multiple of ``every`` (0: none): their nodes run eagerly."""
    from tecomp.dynamo import cache
    from tecomp.errors import InternalError

    lower = cache.lower_region

    def refuse(region, vals, **kw):
        if every and int(region.key[:8], 16) % every == 0:
            raise InternalError("refused by the fuzzer (--refuse-every)")
        return lower(region, vals, **kw)

    cache.lower_region = refuse
    try:
        yield
    finally:
        cache.lower_region = lower


def run(prog: Program, dynamic: bool, options=None, grad: bool = False,
        refuse_every: int = 0) -> float:
    """Compile ``prog`` with backend="tecomp" and return its largest error against eager
    on size set A (and B, with ``dynamic``: every dimension of size > 1 marked dynamic);
    with ``grad``, of the inputs' gradients too (a random weighting of the outputs
    summed, backward through the forward and backward graphs).  Raises AssertionError
    where a kernel could not be compiled (and ran eagerly), unless ``refuse_every``
    refused some (see :func:`refusing`)."""
    with refusing(refuse_every):
        return _run(prog, dynamic, options, grad, check_failed=not refuse_every)


def _run(prog, dynamic, options, grad, check_failed) -> float:
    failed = STATS["failed"]
    g = torch.Generator().manual_seed(prog.seed)
    c = torch.compile(prog, backend="tecomp", options=options or {})
    worst = 0.0
    for which in ((0, 1) if dynamic else (0,)):
        xs = prog.tensors(which, g)
        if dynamic:
            for x in xs:
                for dim, s in enumerate(x.shape):
                    if s > 1:
                        torch._dynamo.maybe_mark_dynamic(x, dim)
        if not grad:
            with torch.no_grad():
                want = prog(*xs)
                got = c(*xs)
            worst = max(worst, max_error(
                got, want, prog.zero_sign_exact() if prog.specials else None))
            continue
        results = []
        for fn in (prog, c):
            leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]
            outs = fn(*leaves)
            heads = [torch.randn(o.shape, generator=torch.Generator().manual_seed(k))
                     for k, o in enumerate(outs)]
            sum((o * h).sum() for o, h in zip(outs, heads)).backward()
            results.append([o.detach() for o in outs] + [
                x.grad if x.grad is not None else torch.zeros_like(x) for x in leaves])
        worst = max(worst, max_error(results[1], results[0]))
    assert not check_failed or STATS["failed"] == failed, \
        "a kernel could not be compiled (see the log)"
    live = prog.live_inputs()
    for k, rows in enumerate(prog.ids):
        if rows is not None and k in live:  # an id past the table: IndexError, as eager
            xs = prog.tensors(0, g)
            xs[k] = xs[k].clone()
            xs[k].view(-1)[-1] = rows
            for fn in (prog, c):
                try:
                    with torch.no_grad():
                        fn(*xs)
                except IndexError:
                    continue
                raise AssertionError(f"{'eager' if fn is prog else 'compiled'}: no IndexError "
                                     f"for id {rows} of input {k}, past its table")
    return worst


#: where the "faults" family makes a compilation fail part-way: a region's lowering, its
#: auto-schedule, its build, the LLVM optimiser worker's reply being read (in the calling
#: thread, as a signal's KeyboardInterrupt would), the disk cache's writes (a full disk),
#: or the disk cache damaged between two compilations
FAULT_POINTS = ("lower", "schedule", "build", "worker_reply", "disk_full", "damaged_cache")
#: what a fault raises (the disk's faults: OSError ENOSPC)
FAULT_ERRORS = (KeyboardInterrupt, MemoryError, RuntimeError, SystemExit)
#: how the damaged_cache fault damages each library (or its sidecar)
DAMAGES = ("truncate", "flip", "sidecar", "fifo", "directory", "swap")


class _Injected:
    """Raises ``error`` at the ``at``-th call of the functions it wraps (counted
    together), in the main thread only (where a signal's handler runs)."""

    def __init__(self, error, at: int):
        self.error, self.at, self.calls = error, at, 0

    def wrap(self, fn):
        import threading

        def faulty(*a, **kw):
            if threading.current_thread() is threading.main_thread():
                self.calls += 1
                if self.calls == self.at:
                    raise self.error
            return fn(*a, **kw)
        return faulty


@contextlib.contextmanager
def injecting(point: str, error, at: int):
    """Within it, the ``at``-th call at ``point`` (of :data:`FAULT_POINTS`, but
    ``damaged_cache``) raises ``error``."""
    import errno

    from tecomp.codegen.llvm import jit
    from tecomp.dynamo import cache
    from tecomp.runtime import libfiles

    if point == "disk_full":   # in the writer thread: every thread counts
        error, inj = OSError(errno.ENOSPC, "No space left on device"), None
        calls = [0]

        def place():
            real = libfiles._temporary

            def full(*a, **kw):
                calls[0] += 1
                if calls[0] >= at:
                    raise error
                return real(*a, **kw)
            return full
        targets = [(libfiles, "_temporary", place())]
    else:
        inj = _Injected(error, at)
        owner, name = {"lower": (cache, "lower_region"), "schedule": (cache, "auto_schedule"),
                       "build": (cache, "build"),
                       "worker_reply": (jit._optproc, "_read_exact")}[point]
        targets = [(owner, name, inj.wrap(getattr(owner, name)))]
    saved = [(o, n, getattr(o, n)) for o, n, _ in targets]
    for o, n, f in targets:
        setattr(o, n, f)
    try:
        yield
    finally:
        for o, n, f in saved:
            setattr(o, n, f)


def damage_cache(cache_dir, rng: random.Random) -> List[str]:
    """Damage each library of the backend's disk cache under ``cache_dir`` in a way of
    :data:`DAMAGES`, drawn by ``rng``; what was done, per file."""
    import shutil

    done = []
    libs = sorted(Path(cache_dir, "dynamo").glob("*.so"))
    for k, p in enumerate(libs):
        how = rng.choice(DAMAGES)
        side = p.with_name(p.name + ".sha256")
        if how == "truncate":
            data = p.read_bytes()
            p.write_bytes(data[:rng.randrange(len(data))])
        elif how == "flip":
            data = bytearray(p.read_bytes())
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            p.write_bytes(bytes(data))
        elif how == "sidecar":
            side.write_text(rng.choice(["", "0" * 64 + "\n", "zz\n", "\x00" * 100]))
        elif how == "fifo":
            p.unlink()
            os.mkfifo(p)
        elif how == "directory":
            p.unlink()
            p.mkdir()
        elif how == "swap" and len(libs) > 1:   # another entry's library and sidecar
            other = libs[(k + 1) % len(libs)]
            if other.is_file():
                shutil.copyfile(other, p)
                shutil.copyfile(other.with_name(other.name + ".sha256"), side)
        done.append(f"{p.name[:12]}: {how}")
    return done


def check_clean_state(cache_dir=None) -> List[str]:
    """What a failed compilation left behind that it must not: a kernel in memory that
    is no module, an LLVM worker taking requests with a reply unread in its pipe (the
    next build would read it as its own), a disk writer registered that is not running,
    temporary files in the disk cache (after :func:`tecomp.dynamo.cache.flush`)."""
    import select

    from tecomp.codegen.llvm import jit
    from tecomp.dynamo import cache

    cache.flush()
    bad = []
    if any(m is None or not hasattr(m, "call_grad_inputs") for m in cache._MEMORY.values()):
        bad.append("a kernel in memory that is no module")
    for w in jit._WORKERS.values():   # one that takes requests has nothing to say
        if w.alive() and select.select([w.proc.stdout], [], [], 0)[0]:
            bad.append("an idle LLVM worker with a reply unread in its pipe")
    w = cache._WRITER
    if w is not None and not w.is_alive():
        bad.append("a disk writer registered that no longer runs")
    if cache_dir is not None and Path(cache_dir, "dynamo").is_dir():
        left = [p.name for p in Path(cache_dir, "dynamo").iterdir() if p.name.startswith(".")]
        if left:
            bad.append(f"temporary files left in the cache: {left[:4]}")
    return bad


def run_faults(prog: Program, fault_seed: int) -> Tuple[float, str]:
    """The "faults" family: compile and call ``prog`` with a fault injected (drawn from
    ``fault_seed``: a point of :data:`FAULT_POINTS`, an error of :data:`FAULT_ERRORS`,
    the call that raises), with the disk cache in a fresh directory; then check the state
    it left (:func:`check_clean_state`), call the same compiled function again, and
    compile it again twice (from memory, then from the disk cache alone), without the
    fault.  Returns the largest error against eager of every call that returned, and
    what was injected.  A call may raise the injected error (a KeyboardInterrupt or
    SystemExit, which tecomp lets through; an error that makes a kernel run eagerly
    must not); anything else, and a wrong value, is a finding (AssertionError)."""
    import tempfile

    from tecomp.dynamo import cache

    rng = random.Random(fault_seed)
    point = rng.choice(FAULT_POINTS)
    error = rng.choice(FAULT_ERRORS)("injected by the fuzzer")
    at = rng.randint(1, 4)
    what = f"fault {point} (call {at}: {type(error).__name__})"
    old_dir = os.environ.get("TECOMP_CACHE_DIR")
    cache_dir = tempfile.mkdtemp(prefix="tecomp-fuzz-faults-")
    os.environ["TECOMP_CACHE_DIR"] = cache_dir
    g = torch.Generator().manual_seed(prog.seed)
    xs = prog.tensors(0, g)
    worst = 0.0

    def call(c):
        with torch.no_grad():
            return max_error(c(*xs), want)

    try:
        with torch.no_grad():
            want = prog(*xs)
        cache.clear_memory()
        torch._dynamo.reset()
        c = torch.compile(prog, backend="tecomp")
        if point == "damaged_cache":
            worst = call(c)
            cache.flush()
            what += "; " + ", ".join(damage_cache(cache_dir, rng))
            cache.clear_memory()
        else:
            with injecting(point, error, at):
                try:
                    worst = call(c)
                except BaseException as e:  # noqa: BLE001  (only the injected one may pass)
                    if not (e is error or isinstance(e, (KeyboardInterrupt, SystemExit)) and
                            type(e) is type(error)):
                        raise AssertionError(f"{what}: the call raised "
                                             f"{type(e).__name__}: {str(e)[:300]}") from e
        bad = check_clean_state(cache_dir)
        assert not bad, f"{what}: " + "; ".join(bad)
        worst = max(worst, call(c))              # the same compiled function again
        failed = STATS["failed"]
        torch._dynamo.reset()
        worst = max(worst, call(torch.compile(prog, backend="tecomp")))   # compiled again
        cache.flush()
        cache.clear_memory()
        torch._dynamo.reset()
        worst = max(worst, call(torch.compile(prog, backend="tecomp")))   # from the disk
        assert STATS["failed"] == failed, f"{what}: a kernel could not be compiled again"
        bad = check_clean_state(cache_dir)
        assert not bad, f"{what}, after compiling again: " + "; ".join(bad)
    finally:
        cache.flush()
        if old_dir is None:
            os.environ.pop("TECOMP_CACHE_DIR", None)
        else:
            os.environ["TECOMP_CACHE_DIR"] = old_dir
        import shutil

        shutil.rmtree(cache_dir, ignore_errors=True)
    return worst, what


def swap_cache_entries(cache_dir) -> int:
    """Rotate the kernels' libraries of the backend's disk cache under ``cache_dir`` among
    their entries, each with a sidecar of its own (a file copied over another: every
    entry now holds another kernel); the number of entries."""
    from tecomp.runtime.libfiles import write_sidecar

    libs = sorted(Path(cache_dir, "dynamo").glob("*.so"))
    datas = [p.read_bytes() for p in libs]
    for p, data in zip(libs, datas[1:] + datas[:1]):
        p.unlink()
        p.write_bytes(data)
        write_sidecar(str(p))
    return len(libs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0:50", help="first:last (exclusive)")
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--grad", action="store_true", help="compare the inputs' gradients too")
    ap.add_argument("--edges", action="store_true",
                    help="draw sign, embeddings (ids past the table too) and long sums")
    ap.add_argument("--specials", action="store_true",
                    help="float inputs hold NaN, +-inf and +-0 among normal values (and "
                         "--edges)")
    ap.add_argument("--swapped-cache", action="store_true",
                    help="run the seeds with the disk cache (a temporary one), rotate its "
                         "entries among each other, run them again: every entry must be "
                         "refused and rebuilt, and the results agree")
    ap.add_argument("--refuse-every", type=int, default=0, metavar="N",
                    help="refuse to compile about one kernel in N (they run eagerly)")
    ap.add_argument("--faults", action="store_true",
                    help="the faults family: each seed's compilation fails part-way (an "
                         "exception in lowering, scheduling, building or the LLVM worker's "
                         "reply, a full disk, a damaged disk cache), then the program is "
                         "called and compiled again: the state left must be clean and every "
                         "result eager's")
    args = ap.parse_args(argv)
    lo, hi = (int(s) for s in args.seeds.split(":"))
    bad = 0
    if args.faults:
        for seed in range(lo, hi):
            prog = make_program(seed)
            try:
                err, what = run_faults(prog, seed)
            except Exception as e:  # noqa: BLE001  (a fuzzer reports every failure)
                err, what = math.inf, f"{type(e).__name__}: {str(e)[:400]}"
            if not err <= 1e-4:
                bad += 1
                print(f"FAIL (faults) {what} (max error {err:.3g})\n{prog.describe()}",
                      flush=True)
        print(f"{hi - lo - bad} of {hi - lo} runs with faults agree with eager")
        return 1 if bad else 0
    rounds = ["plain"]
    if args.swapped_cache:
        import tempfile

        from tecomp.dynamo import cache

        os.environ["TECOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="tecomp-fuzz-cache-")
        rounds = ["written", "swapped"]
    for r in rounds:
        if r == "swapped":
            cache.flush()
            n = swap_cache_entries(os.environ["TECOMP_CACHE_DIR"])
            cache.clear_memory()
            loaded = STATS["disk"]
            print(f"{n} cache entries rotated", flush=True)
        for seed in range(lo, hi):
            torch._dynamo.reset()
            prog = make_program(seed, specials=args.specials, edges=args.edges)
            try:
                err = run(prog, args.dynamic, {"cache": r != "plain"}, grad=args.grad,
                          refuse_every=args.refuse_every)
            except Exception as e:  # noqa: BLE001  (a fuzzer reports every failure)
                err, why = math.inf, f"{type(e).__name__}: {str(e)[:300]}"
            else:
                why = f"max error {err:.3g}"
            if not err <= 1e-4:
                bad += 1
                print(f"FAIL ({r}) {why}\n{prog.describe()}", flush=True)
        if r == "swapped" and STATS["disk"] != loaded:
            bad += 1
            print(f"FAIL {STATS['disk'] - loaded} rotated cache entries were loaded")
    print(f"{len(rounds) * (hi - lo) - bad} of {len(rounds) * (hi - lo)} runs agree with eager")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

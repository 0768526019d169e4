"""The LLVM module of one variant of one PrimFunc (:class:`_ModuleBuilder`): the body
function and the ABI entry points (:mod:`tecomp.codegen.llvm.abi`), declarations, loop
metadata, check sites, the tasks of parallel loops, and the target's code-generation
policy (:func:`policy_for`).
"""
from __future__ import annotations

import re
from typing import Dict, List, Set, Tuple

import llvmlite.ir as ir

from ...errors import BuildError
from ...ir.expr import BufferLoad
from ...ir.functor import Visitor, collect, post_order
from ...ir.names import display
from ...ir.stmt import AttrStmt, For, PrimFunc
from ...target import as_target
from ...runtime.aot_format import check_kernel_symbol
from ...runtime.signature import CheckSite, Signature
from . import jit as llvm_jit
from .abi import ERR_WORDS, body_params, emit_entry, emit_pyarrays_entry
from .alias import AliasScopes
from .emit_memory import frame_overflow
from .emitter import _FnEmitter
from .intrinsics import _mangle
from .policy import TargetPolicy
from .values import _I1, _I32, _I64, _PTR, Val, _Buf, _i64_at, _sanitize
from .aarch64 import AArch64Policy
from .x86 import X86Policy

#: the code-generation policy of each instruction set (:data:`tecomp.target.ISAS`)
POLICIES = {"x86-64": X86Policy, "aarch64": AArch64Policy}


def policy_for(target, vector_bytes: int = 0) -> TargetPolicy:
    """The code-generation policy for the llvm ``target``: that of its instruction set
    (:data:`POLICIES`), else the generic :class:`TargetPolicy`.  Every module is compiled
    for the target's triple (``Target.triple``), with its CPU and features
    (``_ModuleBuilder.text``).  ``vector_bytes``: the module's ``pragma vector_bytes``
    (:func:`pragma_vector_bytes`; 0: none)."""
    return POLICIES.get(target.isa, TargetPolicy)(target, vector_bytes)


def pragma_vector_bytes(body) -> int:
    """The narrowest register width a ``pragma vector_bytes`` in ``body`` asks for (0:
    none): it applies to the whole module (every function of it is compiled for one
    register width)."""
    return min((n.value for n in collect(body, lambda n: type(n) is AttrStmt and
                                         n.key == "pragma_vector_bytes" and
                                         isinstance(n.value, int))), default=0)


def _rmw_buffers(body) -> set:
    """Buffers some store reads back (``B[i] = B[i] + ...``: accumulators)."""
    out = set()

    class _V(Visitor):
        def visit_BufferStore(self, s):
            if s.buffer not in out:
                def hit(n):
                    if isinstance(n, BufferLoad) and n.buffer is s.buffer:
                        out.add(s.buffer)
                post_order(s.value, hit)
            self.generic_visit(s)

    _V().visit(body)
    return out


def _has_vectorized_loop(body) -> bool:
    """Whether some loop of ``body`` is ``vectorized`` (the schedule widens it; LLVM's loop
    vectorizer then does not run on the module, unless a loop is left to it)."""
    return bool(collect(body, lambda n: isinstance(n, For) and n.kind == "vectorized"))


class _ModuleBuilder:
    """Builds the LLVM module of one variant of one PrimFunc."""

    def __init__(self, func: PrimFunc, sig: Signature, layout: str, noalias: bool,
                 checks: bool, target=None):
        self.target = as_target(target if target is not None else "llvm")
        self.func = func
        self.sig = sig
        self.layout = layout
        self.noalias = noalias
        self.checks = checks
        self.symbol = "tecomp_" + _sanitize(func.name)
        check_kernel_symbol(func.name, self.symbol, "build")
        self.module = ir.Module(name=self.symbol)
        self.module.triple, self.module.data_layout = llvm_jit.triple_and_layout(self.target)
        self.decls: Dict[str, ir.Function] = {}
        #: what the tensor intrinsics' ib.call calls, by name (checked before LLVM reads it)
        self.user_calls: Dict[str, object] = {}
        self.sites: List[CheckSite] = []
        self.notes: List[str] = []
        #: the CPU features the tensor intrinsics in it require (checked before it runs)
        self.required_features: Set[str] = set()
        self._loop_ids = 0
        self._selfref_ids = 0
        self._par_count = 0
        self._has_load: Dict[int, tuple] = {}
        #: the target's decisions the emitter asks about (policy.py, x86.py)
        self.policy = policy_for(self.target, pragma_vector_bytes(func.body))
        #: buffers never padded to a masked access (_FnEmitter.pad_lanes): accumulators,
        #: which LICM keeps in registers across a loop as a plain load/store pair only
        self.no_pad = _rmw_buffers(func.body) if self.policy.pads_lanes else set()
        #: fast-math flags on float +, -, *: "contract" lets LLVM fuse a*b+c into an FMA
        #: (one rounding instead of two); opt in with PrimFunc.attrs["fp_contract"] = True
        self.fp_flags = ("contract",) if func.attrs.get("fp_contract", False) else ()
        #: ("arcp",) under ``pragma fp_reciprocal``: a float ``a / b`` with ``b`` the same
        #: in every lane is ``a`` times ``b``'s reciprocal, scaled where ``b`` is subnormal
        #: or huge (_ExprEmitter._reciprocal_div; LLVM hoists it out of the loops ``b`` does
        #: not change in); () otherwise
        self.div_flags = ()
        #: the buffers whose whole-vector stores bypass the cache in the nest being
        #: emitted (``pragma nontemporal``: _FnEmitter.s_attr, _MemoryEmitter.store)
        self.nontemporal: frozenset = frozenset()
        #: in a nest under ``pragma masked_wide_loads``: a strided load under a lane mask
        #: is a wide masked load and a shuffle, not a gather (_MemoryEmitter.load)
        self.masked_wide_loads = False
        #: the buffers (by name) whose whole-vector loads in the nest being emitted are
        #: each kept for its one use (``pragma load_each_use``: volatile, which LLVM
        #: neither merges nor hoists but still folds into an x86 instruction's memory
        #: operand; _FnEmitter.s_attr, _MemoryEmitter.load)
        self.load_each_use: frozenset = frozenset()
        #: the schedule vectorized some loop: scalar float min/max may be the target's own
        #: instruction (_FnEmitter._minmax), which LLVM's loop vectorizer cannot widen
        self.has_vectorized_loop = _has_vectorized_loop(func.body)
        #: the scoped no-alias metadata of the accesses (alias.py)
        self.alias = AliasScopes(self, func, sig, noalias)

    # -- declarations ----------------------------------------------------------------
    def declare(self, name: str, ret, args) -> ir.Function:
        f = self.decls.get(name)
        if f is None:
            f = self.module.globals.get(name)
            if f is None:
                f = ir.Function(self.module, ir.FunctionType(ret, list(args)), name=name)
            self.decls[name] = f
        return f

    def declare_user(self, call) -> ir.Function:
        """The function a tensor intrinsic's ``ib.call`` calls (a
        :class:`~tecomp.codegen.llvm.intrinsics.UserCall`), declared with the types it is
        given; recorded in :attr:`user_calls`."""
        f = self.decls.get(call.name) or self.module.globals.get(call.name)
        if f is None:
            f = self.decls[call.name] = ir.Function(self.module, call.fnty, name=call.name)
        elif not isinstance(f, ir.Function) or f.function_type != call.fnty:
            other = (f"{f.function_type.return_type} "
                     f"({', '.join(str(a) for a in f.function_type.args)})"
                     if isinstance(f, ir.Function) else "a global variable")
            raise BuildError(
                f"tensor intrinsic {display(call.intrin)}: ib.call of {display(call.name)} as "
                f"{call.signature()}, but this kernel already calls it as {other} (an earlier "
                f"ib.call, or tecomp's own code): a function has one type; call it with the "
                f"same types each time")
        self.user_calls.setdefault(call.name, call)
        return f

    def intrinsic(self, base: str, ret, args, mangle_types) -> ir.Function:
        name = base + "".join("." + _mangle(t) for t in mangle_types)
        return self.declare(name, ret, args)

    def loop_md(self, *props):
        """A distinct ``llvm.loop`` node carrying ``props`` (pairs of name, value)."""
        self._loop_ids += 1
        ops = [ir.MetaDataString(self.module, f"tecomp.loopid.{self._loop_ids}")]
        for key, val in props:
            if isinstance(val, bool):
                c = ir.Constant(_I1, 1 if val else 0)
            else:
                c = ir.Constant(_I32, int(val))
            ops.append(self.module.add_metadata([ir.MetaDataString(self.module, key), c]))
        return self.module.add_metadata(ops)

    def has_load(self, e) -> bool:
        """Whether expression ``e`` reads a buffer (memoised by identity: the entry
        keeps ``e`` alive, so that an expression the emitter made and dropped cannot
        pass its answer to a later one at the same address)."""
        ent = self._has_load.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        found = []

        class _V(Visitor):
            def visit_BufferLoad(self, x):
                found.append(x)

        _V().visit(e)
        r = bool(found)
        self._has_load[id(e)] = (e, r)
        return r

    def explicitly_vectorized(self) -> bool:
        """Whether the schedule vectorized the kernel itself: at least one loop was
        widened and none was left to LLVM's loop vectorizer (then the optimiser skips
        its own vectorizers and unroller, see ``jit.optimize``)."""
        widened = any(n.startswith("vectorized loop") and "not widened" not in n
                      for n in self.notes)
        fallback = any("not widened" in n for n in self.notes)
        return widened and not fallback

    def add_site(self, kind, buffer, text, stmt) -> int:
        self.sites.append(CheckSite(kind, buffer, text, stmt))
        return len(self.sites) - 1

    # -- the kernel -----------------------------------------------------------------
    def build(self) -> str:
        sig = self.sig
        # the body function: typed arguments
        arg_types, arg_names = body_params(sig, self.layout)
        body_fn = ir.Function(self.module, ir.FunctionType(_I32, arg_types),
                              name=self.symbol + ".body")
        body_fn.linkage = "internal"
        body_fn.attributes.add("nounwind")
        body_fn.attributes.add("alwaysinline")
        for a, n in zip(body_fn.args, arg_names):
            a.name = n
        nb = len(sig.buffers)
        for k in range(nb):
            if self.noalias:
                body_fn.args[k].add_attribute("noalias")
        body_fn.args[-1].add_attribute("noalias")

        em = _FnEmitter(self, body_fn, body_fn.args[-1], in_parallel=False)
        args = list(body_fn.args)
        for i, v in enumerate(sig.slot_vars):
            em.env[v] = Val(args[nb + i])
        stride_args = args[nb + len(sig.slot_vars):-1]
        si = 0
        for k, bp in enumerate(sig.buffers):
            b = bp.buffer
            extents = [em.scalar_index(x) for x in b.shape]
            if self.layout == "strided":
                strides = list(stride_args[si:si + bp.ndim])
                si += bp.ndim
            else:
                strides = em.declared_strides(b, extents)
            em.bufs[b] = _Buf(b, args[k], strides, extents)
        em.heap_first = frame_overflow(self.func.body, in_parallel=False)
        self.policy.prologue(em)
        em.stmt(self.func.body)
        em.finish_ok()

        main = emit_entry(self.module, self.symbol, sig, self.layout, body_fn)
        emit_pyarrays_entry(self.module, self.symbol, len(sig.buffers), main)

    def text(self) -> str:
        s = llvm_jit.with_target_attributes(str(self.module), self.target,
                                            self.policy.function_attributes,
                                            self.policy.unconstrained,
                                            self.policy.width_attributes)
        # llvmlite cannot build self-referential metadata: loop ids (and the alias
        # scopes and their domain) are emitted as !{!"tecomp.loopid.K", ...}
        # (!{!"tecomp.selfref.K", ...}) and patched into distinct !{!N, ...} here.
        return re.sub(r'^(!\d+) = !\{\s*!"tecomp\.(?:loopid|selfref)\.\d+"\s*,\s*',
                      lambda m: f"{m.group(1)} = distinct !{{{m.group(1)}, ",
                      s, flags=re.M)

    # -- parallel outlining ---------------------------------------------------------
    def outline_parallel(self, parent: "_FnEmitter", loop: For, lo, captured_vars,
                         used_bufs, region_err) -> Tuple[ir.Function, List[object]]:
        """Emit the task function of ``loop``; return it and the captured values.

        A chunk records its error in the task's own five words; a failing chunk then
        merges them into ``region_err`` (``[lock, begin, five words]``, in the caller's
        frame) under a spin lock, keeping the chunk with the smallest ``begin``: the
        caller reports the error a serial run of the loop would, whichever thread ran
        that chunk and whenever (the pool may run a later chunk first)."""
        k = self._par_count
        self._par_count += 1
        name = f"{self.symbol}.par{k}"
        captures: List[object] = []
        index: Dict[int, int] = {}

        def cap(v):
            if isinstance(v, ir.Constant):
                return v
            i = index.get(id(v))
            if i is None:
                i = len(captures)
                index[id(v)] = i
                captures.append(v)
            return ("cap", i)

        var_plan = []
        for var in captured_vars:
            val = parent.env[var]
            v64 = parent.env64.get(var)
            var_plan.append((var, cap(val.s), cap(v64.s) if v64 is not None else None))
        buf_plan = []
        param_bufs = {bp.buffer for bp in self.sig.buffers}
        for b in used_bufs:
            bi = parent.bufs[b]
            buf_plan.append((b, cap(bi.ptr), [cap(s) for s in bi.strides],
                             [cap(e) for e in bi.extents],
                             self.noalias or b not in param_bufs))
        lo_ref = cap(lo)
        region_ref = cap(region_err)

        # body function: typed, noalias pointers, the chunk's error words; inlined into
        # the task wrapper
        types = [v.type for v in captures] + [_PTR, _I64, _I64]
        body = ir.Function(self.module, ir.FunctionType(_I32, types), name=name + ".body")
        body.linkage = "internal"
        body.attributes.add("nounwind")
        body.attributes.add("alwaysinline")
        for b, pref, _, _, na in buf_plan:
            if na and isinstance(pref, tuple):
                body.args[pref[1]].add_attribute("noalias")
        for i, a in enumerate(body.args[:len(captures)]):
            a.name = f"c{i}"
        cerr, begin, end = body.args[-3], body.args[-2], body.args[-1]
        cerr.name, begin.name, end.name = "err", "begin", "end"

        def get(ref):
            return body.args[ref[1]] if isinstance(ref, tuple) else ref

        em = _FnEmitter(self, body, cerr, in_parallel=True)
        for var, sref, s64ref in var_plan:
            em.env[var] = Val(get(sref))
            if s64ref is not None:
                em.env64[var] = Val(get(s64ref))
        for b, pref, srefs, erefs, _ in buf_plan:
            em.bufs[b] = _Buf(b, get(pref), [get(r) for r in srefs], [get(r) for r in erefs])
        em.heap_first = frame_overflow(loop.body, in_parallel=True)
        lo_v = get(lo_ref)
        start = em.iadd(lo_v, begin)
        stop_n = em.b.sub(end, begin)
        em.loop(_sanitize(loop.var.name), start, stop_n,
                lambda iv: em.with_loop_var(loop.var, Val(iv), lambda: em.stmt(loop.body)))
        if self.nontemporal:
            # the chunk's non-temporal stores are weakly ordered: a full fence (x86
            # mfence) makes them visible before the pool's join says the chunk is done
            self.policy.store_fence(self, em.b)
        em.finish_ok()

        # task wrapper: i32 (ptr closure, i64 begin, i64 end)
        task = ir.Function(self.module, ir.FunctionType(_I32, [_PTR, _I64, _I64]), name=name)
        task.linkage = "internal"
        task.attributes.add("nounwind")
        cl, tb, te = task.args
        cl.name, tb.name, te.name = "closure", "begin", "end"
        bb = ir.IRBuilder(task.append_basic_block("entry"))
        st = ir.LiteralStructType([v.type for v in captures])
        vals = []
        for i, v in enumerate(captures):
            p = bb.gep(cl, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                       source_etype=st)
            vals.append(bb.load(p, typ=v.type))
        words = ir.ArrayType(_I64, ERR_WORDS)
        cerr = bb.alloca(words, name="err")
        cerr.type = _PTR  # an opaque pointer, whatever llvmlite infers
        cerr.align = 8
        bb.store(ir.Constant(words, [0] * ERR_WORDS), cerr, align=8)
        rc = bb.call(body, vals + [cerr, tb, te])
        fail_bb = task.append_basic_block("failed")
        ret_bb = task.append_basic_block("ret")
        bb.cbranch(bb.icmp_signed("!=", rc, ir.Constant(_I32, 0)), fail_bb, ret_bb)
        bb.position_at_end(fail_bb)
        self._merge_chunk_error(bb, task, vals[region_ref[1]], cerr, tb, ret_bb)
        bb.position_at_end(ret_bb)
        bb.ret(rc)
        return task, captures

    @staticmethod
    def _merge_chunk_error(bb, task, region, cerr, begin, done_bb) -> None:
        """Under the spin lock ``region[0]``: if ``begin`` is smaller than ``region[1]``,
        the chunk's error words become the region's (see :meth:`outline_parallel`)."""
        lock_bb = task.append_basic_block("lock")
        held_bb = task.append_basic_block("held")
        take_bb = task.append_basic_block("take")
        unlock_bb = task.append_basic_block("unlock")
        bb.branch(lock_bb)
        bb.position_at_end(lock_bb)
        pair = bb.cmpxchg(_i64_at(bb, region, 0), ir.Constant(_I64, 0), ir.Constant(_I64, 1),
                          "acquire", "monotonic")
        bb.cbranch(bb.extract_value(pair, 1), held_bb, lock_bb)
        bb.position_at_end(held_bb)
        best = bb.load(_i64_at(bb, region, 1), typ=_I64, align=8)
        bb.cbranch(bb.icmp_signed("<", begin, best), take_bb, unlock_bb)
        bb.position_at_end(take_bb)
        bb.store(begin, _i64_at(bb, region, 1), align=8)
        for w in range(ERR_WORDS):
            v = bb.load(_i64_at(bb, cerr, w), typ=_I64, align=8)
            bb.store(v, _i64_at(bb, region, 2 + w), align=8)
        bb.branch(unlock_bb)
        bb.position_at_end(unlock_bb)
        bb.atomic_rmw("xchg", _i64_at(bb, region, 0), ir.Constant(_I64, 0), "release")
        bb.branch(done_bb)

"""LLVM intrinsics, the instruction sequences that stand in for conversions the CPU
lacks, and what a tensor intrinsic's ``llvm`` function gets.

* :func:`_mangle`: the type suffix of an overloaded intrinsic's name (``llvm.fabs.v8f32``,
  used by ``_ModuleBuilder.intrinsic``); :func:`_fabs_decl` declares ``llvm.fabs`` in a
  builder's module.
* :class:`_Freeze`: the ``freeze`` instruction, which llvmlite lacks;
* :class:`_VolatileLoad`: ``load volatile``, which it lacks too.
* float16 and bfloat16 conversions in plain integer and float instructions (no libcall,
  no bfloat16 instruction needed): :func:`_bf16_to_f32`, :func:`_f32_to_bf16`,
  :func:`_f64_to_f16`.

Tensor intrinsics
-----------------
A tensor intrinsic's ``llvm`` function gets the operands' regions as :class:`IntrinView`
and an :class:`IntrinBuilder` over the function being generated.

An emitter is plain Python over these (no llvmlite import needed); types are written
as LLVM writes them (``"i32"``, ``"<16 x i32>"``, ``"<32 x i8>"``)::

    def vnni(ib, ins, outs):                       # c[16] += a[4] . b[16, 4]
        a = ib.splat(ib.load(ins[0], "i32"), 16)   # the 4 bytes of a in every lane
        acc = ib.load(outs[0], "<16 x i32>")
        r = ib.call("llvm.x86.avx512.vpdpbusd.512", "<16 x i32>",
                    acc, a, ib.load(ins[1], "<16 x i32>"))
        ib.store(outs[0], r)

Loads and stores are unaligned (``align 1``) and read ``ty``'s bytes from the element at
``index`` (default: the region's first).  The region is as large as the declared
placeholder; what the emitter reads or writes beyond it is its own bug.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

from llvmlite import ir

from ...errors import BuildError, InternalError
from ...ir.names import display
from ...target import as_target
from ...te.tensor_intrin import IntrinOperand
from . import jit as llvm_jit
from .values import _F16, _F32, _I16, _I32, _I64, _splat, _with_lanes

_TYPE = re.compile(r"\s*(?:<\s*(\d+)\s*x\s*)?(i\d+|float|double|half)\s*>?\s*")


def _mangle(ty) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_mangle(ty.element)}"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    raise InternalError(f"no intrinsic mangling for type {ty}")


class _Freeze(ir.Instruction):
    """``freeze``: turns poison (e.g. an out-of-range fptosi) into an arbitrary value."""

    def __init__(self, parent, value, name=""):
        super().__init__(parent, value.type, "freeze", [value], name=name)

    def descr(self, buf):
        v, = self.operands
        buf.append(f"freeze {v.type} {v.get_reference()}\n")


class _VolatileLoad(ir.LoadInstr):
    """``load volatile``, which llvmlite's load lacks: LLVM keeps every such load (none
    merged with another of the same address, none hoisted) and may still fold it into
    the x86 instruction that uses it."""

    def descr(self, buf):
        text = []
        super().descr(text)
        buf.append("".join(text).replace("load ", "load volatile ", 1))


def _bf16_to_f32(b: ir.IRBuilder, x):
    """The float32 whose upper half is the bfloat16 bits ``x`` (i16, scalar or vector)."""
    i32 = _with_lanes(_I32, x.type)
    w = b.shl(b.zext(x, i32), _splat(i32, 16))
    return b.bitcast(w, _with_lanes(_F32, x.type))


def _f32_to_bf16(b: ir.IRBuilder, x):
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), as i16 bits; a NaN
    stays a (quiet) NaN of the same sign."""
    i32 = _with_lanes(_I32, x.type)
    i16 = _with_lanes(_I16, x.type)
    u = b.bitcast(x, i32)
    hi = b.lshr(u, _splat(i32, 16))
    bias = b.add(_splat(i32, 0x7FFF), b.and_(hi, _splat(i32, 1)))
    rounded = b.trunc(b.lshr(b.add(u, bias), _splat(i32, 16)), i16)
    quiet = b.trunc(b.or_(hi, _splat(i32, 0x40)), i16)
    return b.select(b.fcmp_unordered("uno", x, x), quiet, rounded)


def _f64_to_f16(b: ir.IRBuilder, x):
    """``fptrunc double -> half`` rounding once, without a libcall (x: scalar or vector).

    x86 without AVX512-FP16 has no direct instruction and the compiler-rt helper is not
    in the process.  Round to float32 *to odd* (truncate, then set the last bit when
    inexact), then to half: the odd bit keeps the second rounding correct.
    """
    f32 = _with_lanes(_F32, x.type)
    i32 = _with_lanes(_I32, x.type)
    r = b.fptrunc(x, f32)
    back = b.fpext(r, x.type)
    # truncate toward zero: if |r| > |x|, step r one ulp toward zero
    ar = b.call(_fabs_decl(b, back.type), [back])
    ax = b.call(_fabs_decl(b, x.type), [x])
    too_big = b.fcmp_ordered(">", ar, ax)
    bits = b.bitcast(r, i32)
    one = _splat(i32, 1)
    bits = b.select(too_big, b.sub(bits, one), bits)
    inexact = b.fcmp_ordered("!=", b.fpext(b.bitcast(bits, f32), x.type), x)
    bits = b.select(inexact, b.or_(bits, one), bits)
    odd = b.bitcast(bits, f32)
    isnan = b.fcmp_unordered("uno", x, x)
    odd = b.select(isnan, r, odd)
    return b.fptrunc(odd, _with_lanes(_F16, x.type))


def _fabs_decl(b: ir.IRBuilder, ty):
    mod = b.module
    name = "llvm.fabs." + _mangle(ty)
    f = mod.globals.get(name)
    if f is None:
        f = ir.Function(mod, ir.FunctionType(ty, [ty]), name=name)
    return f


# ---------------------------------------------------------------------------------------
# tensor intrinsics


class IntrinView(IntrinOperand):
    """One operand of a tensor intrinsic for LLVM (see
    :class:`~tecomp.te.tensor_intrin.IntrinOperand`): ``strides`` are ints."""

    def __init__(self, name: str, buffer_name: str, dtype: str, shape: Tuple[int, ...],
                 strides: Tuple[int, ...], ptr, mem_type, buffer=None):
        super().__init__(name, buffer_name, dtype, shape, strides)
        self._ptr = ptr
        self._mem = mem_type
        self._buffer = buffer       # the Buffer (its alias scopes: alias.py)


class IntrinBuilder:
    """Emits one tensor intrinsic into the function being generated.  ``b`` is the
    llvmlite ``IRBuilder`` for anything the helpers do not cover."""

    def __init__(self, fn_emitter, intrin_name: str, builtin: bool = False):
        self._em = fn_emitter
        self.b = fn_emitter.b
        self.name = intrin_name
        self._builtin = builtin      # one of tecomp's own (its failures are tecomp's bugs)

    # -- types -------------------------------------------------------------------------
    def type(self, ty):
        """An llvmlite type from its LLVM spelling (or an llvmlite type, returned as is)."""
        if isinstance(ty, ir.Type):
            return ty
        m = _TYPE.fullmatch(ty) if isinstance(ty, str) else None
        if m is None:
            raise BuildError(f"tensor intrinsic {self.name}: {ty!r:.40} is not an LLVM type "
                             "this builder knows (iN, float, double, half, or <L x one of them>)")
        lanes, scalar = m.groups()
        st = {"float": ir.FloatType(), "double": ir.DoubleType(), "half": ir.HalfType()}.get(
            scalar) or ir.IntType(int(scalar[1:]))
        return ir.VectorType(st, int(lanes)) if lanes else st

    # -- memory ------------------------------------------------------------------------
    def ptr(self, view: IntrinView, index: Sequence[int] = ()):
        """The address of ``view[index]`` (``index``: ints, default all 0)."""
        index = tuple(index) or (0,) * len(view.shape)
        if len(index) != len(view.shape) or not all(
                isinstance(i, int) and 0 <= i < n for i, n in zip(index, view.shape)):
            raise BuildError(f"tensor intrinsic {self.name}: index {index} is outside operand "
                             f"{view.name} of shape {view.shape}")
        off = sum(i * s for i, s in zip(index, view.strides))
        if off == 0:
            return view._ptr
        return self.b.gep(view._ptr, [ir.Constant(_I64, off)], source_etype=view._mem)

    def load(self, view: IntrinView, ty, index: Sequence[int] = ()):
        """Load a value of type ``ty`` from ``view[index]`` (unaligned)."""
        return self._em.mb.alias.tag(
            self.b.load(self.ptr(view, index), typ=self.type(ty), align=1), view._buffer)

    def store(self, view: IntrinView, value, index: Sequence[int] = ()):
        """Store ``value`` at ``view[index]`` (unaligned)."""
        self._em.mb.alias.tag(self.b.store(value, self.ptr(view, index), align=1),
                              view._buffer)

    # -- values ------------------------------------------------------------------------
    def call(self, name: str, ret, *args):
        """Call the LLVM intrinsic (or function) ``name`` returning ``ret``.  A call of an
        ``llvm.*`` name that LLVM cannot compile is a BuildError naming it
        (:func:`check_calls`)."""
        if not isinstance(name, str) or not name:
            raise BuildError(f"tensor intrinsic {display(self.name)}: ib.call needs the name "
                             f"of a function (a str), got {name!r:.60}")
        call = UserCall(name, ir.FunctionType(self.type(ret), [a.type for a in args]),
                        tuple(a if type(a) is ir.Constant else None for a in args), self.name,
                        self._builtin)
        return self.b.call(self._em.mb.declare_user(call), list(args))

    def splat(self, value, lanes: int):
        """``value`` (a scalar) in each of ``lanes`` lanes."""
        vty = ir.VectorType(value.type, lanes)
        v = self.b.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        return self.b.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                     ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

    def shuffle(self, a, b, mask: Sequence[int]):
        """``shufflevector a, b, mask``."""
        return self.b.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(mask)),
                                                       list(mask)))

    def cast(self, how: str, value, ty):
        """``how`` (zext, sext, trunc, bitcast, sitofp, ...) of ``value`` to ``ty``."""
        fn = getattr(self.b, how, None)
        if how not in ("zext", "sext", "trunc", "bitcast", "sitofp", "uitofp", "fptosi",
                       "fpext", "fptrunc") or fn is None:
            raise BuildError(f"tensor intrinsic {self.name}: unknown cast {how!r:.20}")
        return fn(value, self.type(ty))

    def add(self, a, b):
        """``a + b`` (integers or integer vectors, wrapping)."""
        return self.b.add(a, b)

    def mul(self, a, b):
        """``a * b`` (integers or integer vectors, wrapping)."""
        return self.b.mul(a, b)


# ---------------------------------------------------------------------------------------
# the calls tensor intrinsics make (ib.call): checked before LLVM reads them

class UserCall:
    """One function a tensor intrinsic's ``llvm`` function calls: ``name``, its type
    (``fnty``: the return type and the arguments' types as given), the arguments that are
    constants (others None: an intrinsic may want an immediate), and the tensor
    intrinsic that called it (``builtin``: one of tecomp's own)."""

    def __init__(self, name: str, fnty, consts: tuple, intrin: str, builtin: bool = False):
        self.name = name
        self.fnty = fnty
        self.consts = consts
        self.intrin = intrin
        self.builtin = builtin

    @property
    def is_llvm(self) -> bool:
        """An LLVM intrinsic (LLVM reads these names itself; any other is a symbol)."""
        return self.name.startswith("llvm.")

    def signature(self) -> str:
        """The type as given, LLVM's way round: ``<16 x i32> (<16 x i32>, ...)``."""
        return f"{self.fnty.return_type} ({', '.join(str(a) for a in self.fnty.args)})"

    def probe_ir(self, target) -> Tuple[str, str]:
        """The IR of the declaration alone, and of a function that makes the call (with
        the constants given, and the target's CPU and features as the kernel has them)."""
        h = llvm_jit.host()
        m = ir.Module(name="tecomp_probe")
        m.triple, m.data_layout = h.triple, h.data_layout
        callee = ir.Function(m, self.fnty, name=self.name)
        decl = str(m)
        params = [t for t, c in zip(self.fnty.args, self.consts) if c is None]
        fn = ir.Function(m, ir.FunctionType(self.fnty.return_type, params), name="tecomp_probe")
        b = ir.IRBuilder(fn.append_basic_block())
        free = iter(fn.args)
        b.ret(b.call(callee, [next(free) if c is None else c for c in self.consts]))
        return decl, llvm_jit.with_target_attributes(str(m), target)

    def key(self, target) -> tuple:
        return (self.name, str(self.fnty), tuple(str(c) for c in self.consts), str(target))


#: what :meth:`check_calls` found for each call (by :meth:`UserCall.key`): None where LLVM
#: took it, else the BuildError's message
_CHECKED: dict = {}


def _declared(line: Optional[str], name: str) -> Optional[str]:
    """``"<ret> (<args>)"`` from LLVM's ``declare`` line of ``name``."""
    if not line:
        return None
    m = re.match(r"declare (?:[a-z_]+ )*(.+?) @.*?\((.*)\)(?: #\d+)?\s*$", line)
    return f"{m.group(1)} ({m.group(2)})" if m else None


def _llvm_words(res: dict) -> str:
    """What LLVM said about a call it rejected or died on."""
    if res.get("timeout"):
        return "LLVM did not finish compiling it"
    if "crash" not in res:
        said = (res.get("error") or "").strip().splitlines()
        return f"LLVM rejects it ({said[0][:300]!r})" if said else "LLVM rejects it"
    err = res.get("stderr", "")
    said = re.findall(r"Assertion `.*?&& \"([^\"]+)\"", err) or re.findall(
        r"LLVM ERROR: ([^\n]+)", err) or re.findall(r"Assertion `([^']+)'", err)
    said = f": {said[-1][:300]!r}" if said else ""
    return f"LLVM aborted on it ({res['crash']}{said})"


def unknown_intrinsic_message(call: UserCall) -> str:
    import llvmlite.binding as llvm

    version = ".".join(map(str, llvm.llvm_version_info[:2]))
    return (f"tensor intrinsic {display(call.intrin)} calls {display(call.name)}, which is "
            f"not an intrinsic LLVM {version} has: a name starting with 'llvm.' is one of "
            f"LLVM's own (check its spelling and its type suffix, e.g. 'llvm.fma.v8f32'); "
            f"call a function of a library loaded in this process by its own name")


def check_call(call: UserCall, target) -> Optional[str]:
    """The message of the BuildError ``call`` deserves (None: LLVM takes it), found by
    compiling it alone in a child process (:func:`~tecomp.codegen.llvm.jit.probe_call`);
    remembered for the process.  None too where no child process can be started."""
    key = call.key(target)
    if key in _CHECKED:
        return _CHECKED[key]
    res = llvm_jit.probe_call(call.name, *call.probe_ir(target))
    if res is None:
        return None
    msg = None
    if res.get("known") is False:
        msg = unknown_intrinsic_message(call)
    elif not res.get("ok"):
        theirs = _declared(res.get("decl"), call.name)
        sig = call.signature()
        msg = (f"tensor intrinsic {display(call.intrin)}: its ib.call of "
               f"{display(call.name)} as {sig} is not a call LLVM can compile for target "
               f"{target}: {_llvm_words(res)}.")
        requires = ("tc.decl_tensor_intrin(..., requires=[...]) names the CPU features it "
                    "needs, and tecomp then refuses targets without them")
        here = None if target.is_host else llvm_jit.probe_call(
            call.name, *call.probe_ir(as_target("llvm")))
        if here is not None and here.get("ok"):
            msg += (f" It compiles for this machine's CPU: target {target} lacks an "
                    f"instruction it needs; {requires}")
        elif theirs and theirs != sig:
            msg += (f" LLVM declares {display(call.name)} as {theirs}: give ib.call that "
                    f"return type and arguments of those types (ib.cast('bitcast', value, "
                    f"type) reinterprets a vector's bits)")
        else:
            msg += (" Check the number and types of its arguments and its return type "
                    "against LLVM's definition of the intrinsic, and that the target has "
                    f"the instructions it needs ({requires})")
    _CHECKED[key] = msg
    return msg


def check_calls(calls, target) -> None:
    """Raise the BuildError of the first of ``calls`` (:class:`UserCall`, the LLVM
    intrinsics a kernel's tensor intrinsics call) that LLVM cannot compile."""
    for call in calls:
        msg = check_call(call, target)
        if msg is not None:
            if call.builtin:
                raise InternalError(f"the built-in {msg}")
            raise BuildError(msg)

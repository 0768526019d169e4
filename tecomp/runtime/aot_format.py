"""The format of a library ``Module.export_library`` writes and ``tc.load_module`` reads.

A library is an ELF shared object with

* the kernel, once per call variant (``layout`` contiguous/strided x ``noalias``),
  each with two entries: ``<symbol>(data, args, err)`` (data pointers: the C ABI,
  docs/runtime.md) and ``<symbol>_pyarrays`` (numpy array objects: the Python
  runtime's fast entry), where ``<symbol>`` is :func:`variant_symbol` of the module's
  entry symbol ``tecomp_<name>``;
* the thread pool (``tecomp_parallel_for``, ``tecomp_pool_*``: see
  :mod:`tecomp.threads`);
* the metadata: one JSON document, NUL-terminated, in the global constant
  ``tecomp_metadata_json`` in its own section :data:`SECTION` (the loader reads it from
  the file as data, before anything of the library is mapped or run), also returned by
  the C function ``const char *tecomp_metadata(void)``;
* the sha256 of that document (its bytes before the NUL), 32 bytes, in the global
  constant ``tecomp_metadata_sha256`` in the section :data:`DIGEST_SECTION`, written with
  the code by the same compile: the loader refuses a library whose metadata is not the
  document its code was compiled for (:func:`check_digest`: a flip in the metadata, or
  metadata copied from another library, with the sidecar written anew, would make the
  argument checks accept shapes the code does not compute over);
* no constructors or destructors (``DT_INIT``, ``DT_INIT_ARRAY``, ...): loading the
  library runs none of its code.

The metadata (format :data:`FORMAT_VERSION`) holds everything the runtime's argument
checks and calls need, as data: the parameters (names, dtypes, shapes and strides as
integer expressions of the variables in ``vars``), which buffers the kernel writes, the
ABI positions (data index of each buffer, value slot of each scalar and shape variable,
first stride slot of each buffer), where each shape variable is bound from, the
conditions lowering recorded on the scalars (``param_checks``), the inputs that may be
passed in place of an output (``in_place``: ``[input, output]`` parameter positions,
:mod:`tecomp.lower.in_place`; optional, none when absent), each variant's symbol
and error sites (the texts of BoundsError messages), the target, the CPU features the
code needs, the tecomp version and the numpy array object layout the ``_pyarrays``
entries read.  Expressions are JSON lists (``["var", 0]``, ``["const", 4, "int32"]``,
``["mul", a, b, "int32"]``, ...): :class:`_ExprEncoder` writes them, :class:`_Reader`
reads them and rejects anything else, naming the file.

A GPU library (format :data:`CUDA_FORMAT_VERSION`, ``"device": "cuda"``; written by
:mod:`tecomp.codegen.cuda_export`) holds no host code: the same parameter fields, and in
``cuda`` what launching needs -- each kernel's name, parameters (``["param", k]``: the
k-th parameter's buffer, ``["workspace", k]``, ``["var", i]``: a scalar), grid and block
as expressions, shared memory; the global workspaces; the host assertions (conditions on
the sizes and their messages); the architectures and PTX version of its fatbin, which is
the contents of the section :data:`FATBIN_SECTION` (symbol :data:`FATBIN_SYMBOL`).

This module imports no llvmlite: the loader (:mod:`tecomp.runtime.aot`) uses it.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from .._version import __version__
from ..errors import BuildError, InternalError, LoadError
from ..ir import dtype as _dt
from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Buffer, Cast, Const, Expr, FloorDiv, FloorMod, Max, Min,
    Mul, Not, Or, Select, Sub, TruncDiv, TruncMod, Var, as_index,
)
from ..ir.printer import to_str
from ..ir.stmt import ParamCheck
from ..lower.in_place import in_place_pairs
from ..lower.tma_pipeline import TmaBox, TmaDim
from ..target import tma as _tma
from .cuda_kernels import KernelInfo, KernelParam, workspace_elements
from .extern import SYMBOL as EXTERN_SYMBOL
from .signature import CheckSite, Signature
from ..threads import DELEGATE_MARKED, DELEGATE_TO, PARALLEL_FOR, POOL_FUNCTIONS

__all__ = ["FORMAT", "FORMAT_VERSION", "SECTION", "METADATA_SYMBOL", "METADATA_FUNCTION",
           "DIGEST_SECTION", "DIGEST_SYMBOL", "metadata_digest", "check_digest",
           "VARIANTS", "variant_symbol", "reserved_symbols", "check_kernel_symbol", "build_metadata",
           "parse_metadata", "LibraryInfo", "check_signature", "needed_features",
           "host_cpu_features", "CHECKED_FEATURES", "UNREPORTED_FEATURES",
           "CUDA_FORMAT_VERSION", "FATBIN_SECTION", "FATBIN_SYMBOL", "build_cuda_metadata",
           "CudaLibraryInfo"]

FORMAT = "tecomp-aot-library"
#: the metadata format this tecomp writes and reads; a library of another is refused
FORMAT_VERSION = 2   # 2: the pool defines the workspace cache (tecomp_ws_*, tecomp_pool_ws_*)
#: the format of a GPU library: a tecomp that reads only CPU libraries refuses it by this
#: (a kernel parameter of dtype "tensor_map" has the object ["tma", {src, dims, swizzle}]:
#: the box its map is encoded for from the argument ``src`` at each call)
CUDA_FORMAT_VERSION = 4   # 4: TMA tensor-map parameters (an older reader refuses them by version)
#: the dtype of a TMA tensor-map kernel parameter
TENSOR_MAP = "tensor_map"
#: the ELF section (and symbol) that holds a GPU library's fatbin
FATBIN_SECTION = ".tecomp_fatbin"
FATBIN_SYMBOL = "tecomp_fatbin"
#: the ELF section that holds the metadata JSON
SECTION = ".tecomp_meta"
METADATA_SYMBOL = "tecomp_metadata_json"
METADATA_FUNCTION = "tecomp_metadata"
#: the ELF section (and symbol) that holds the sha256 of the metadata document
DIGEST_SECTION = ".tecomp_meta_sha256"
DIGEST_SYMBOL = "tecomp_metadata_sha256"
#: every call variant, in the order the metadata lists them
VARIANTS: Tuple[Tuple[str, bool], ...] = (
    ("contiguous", True), ("contiguous", False), ("strided", True), ("strided", False))
#: the error words after each call (``[code, site, dim, index, extent]``)
ERR_WORDS = 5
#: metadata larger than this is not tecomp's
MAX_METADATA_BYTES = 64 << 20

#: what the thread pool defines: the function kernels call, and its controls
_POOL_SYMBOLS = (PARALLEL_FOR, "tecomp_ws_alloc", "tecomp_ws_free", DELEGATE_TO,
                 DELEGATE_MARKED) + tuple(POOL_FUNCTIONS)


def variant_symbol(entry: str, layout: str, noalias: bool) -> str:
    """The exported name of one variant of the kernel whose entry symbol is ``entry``:
    ``tecomp_<name>`` (contiguous, no aliasing: the one C code usually calls),
    ``tecomp_<name>_mayalias``, ``tecomp_<name>_strided``,
    ``tecomp_<name>_strided_mayalias``."""
    return entry + ("_strided" if layout == "strided" else "") + ("" if noalias else "_mayalias")


def reserved_symbols() -> FrozenSet[str]:
    """The names a library defines besides its kernel (a kernel may not take one)."""
    return frozenset(_POOL_SYMBOLS + (METADATA_SYMBOL, METADATA_FUNCTION, FATBIN_SYMBOL,
                                      DIGEST_SYMBOL))


#: the runtime functions a kernel's code calls (the thread pool's, the extern stages'):
#: no kernel may be built under one of their names
CALLED_SYMBOLS = _POOL_SYMBOLS[:3] + (EXTERN_SYMBOL,)


def check_kernel_symbol(name: str, entry: str, doing: str) -> None:
    """A BuildError where kernel ``name``'s symbols clash with the runtime's: for
    ``doing="build"``, its entry symbol ``entry`` with a function its code may call
    (``tc.build(..., name="parallel_for")`` defined ``tecomp_parallel_for`` in the module
    that calls the thread pool's: llvmlite's DuplicatedNameError, an InternalError, in
    a kernel with a parallel loop); for ``"export"``, any call variant's symbol with one
    the library defines besides its kernel."""
    if doing == "build":
        clash = {entry} & set(CALLED_SYMBOLS)
    else:
        clash = {variant_symbol(entry, *key) for key in VARIANTS} & reserved_symbols()
    if clash:
        where = "tecomp's runtime functions, which its code may call" if doing == "build" \
            else "the library's runtime functions"
        raise BuildError(f"cannot {doing} {name}: its symbol {sorted(clash)[0]} is one of "
                         f"{where}; build it under another name (tc.build(..., name=...))")


# ---------------------------------------------------------------------------------------
# CPU features

#: LLVM's name of each x86 feature whose use the loader checks -> its flag in
#: /proc/cpuinfo: the instruction-set extensions code generation may use for a kernel
#: (``tc.Target.checked_features``; features LLVM emits only for their own intrinsics,
#: such as rtm, xsave or AMX, are not checked unless a tensor intrinsic requires them)
CHECKED_FEATURES: Dict[str, str] = {
    "64bit": "lm", "cmov": "cmov", "cx8": "cx8", "cx16": "cx16", "mmx": "mmx", "fxsr": "fxsr",
    "sahf": "lahf_lm", "popcnt": "popcnt", "lzcnt": "abm", "movbe": "movbe", "bmi": "bmi1",
    "bmi2": "bmi2", "adx": "adx", "prfchw": "3dnowprefetch", "sse": "sse", "sse2": "sse2",
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "crc32": "sse4_2",
    "sse4a": "sse4a", "avx": "avx", "avx2": "avx2", "fma": "fma", "fma4": "fma4", "xop": "xop",
    "f16c": "f16c", "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avxvnni": "avx_vnni",
    "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq",
    "avx512vp2intersect": "avx512_vp2intersect", "avxifma": "avx_ifma", "tbm": "tbm",
    "aes": "aes", "pclmul": "pclmulqdq", "sha": "sha_ni", "rdrnd": "rdrand",
    "rdseed": "rdseed", "amx-tile": "amx_tile", "amx-int8": "amx_int8",
    "amx-bf16": "amx_bf16", "amx-fp16": "amx_fp16",
}

#: features code generation may use that Linux does not report in /proc/cpuinfo (AVX10.2,
#: APX, RAO-INT): the loader cannot tell whether this CPU has them, so it refuses a
#: library that needs one
UNREPORTED_FEATURES = frozenset({"avx10.2", "egpr", "ndd", "ppx", "push2pop2", "nf", "ccmp",
                                 "cf", "zu", "raoint"})


def needed_features(target, required=()) -> Tuple[List[str], List[str]]:
    """``(checked, unchecked)``: the features the code for ``target`` may use
    (``target.checked_features``, and ``required``: those its tensor intrinsics need),
    which the loader compares with the CPU's, and the rest of the target's, for
    information; each sorted."""
    checked = set(target.checked_features) | set(required)
    return sorted(checked), sorted(set(target.features) - checked)


def host_cpu_features() -> Optional[FrozenSet[str]]:
    """This CPU's features among :data:`CHECKED_FEATURES` (LLVM's names), from the flags
    of /proc/cpuinfo (no LLVM needed); None where they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    flags = set(value.split())
                    return frozenset(k for k, flag in CHECKED_FEATURES.items() if flag in flags)
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------
# expressions

_BINARY = {"add": Add, "sub": Sub, "mul": Mul, "floordiv": FloorDiv, "floormod": FloorMod,
           "truncdiv": TruncDiv, "truncmod": TruncMod, "min": Min, "max": Max}
_BINARY_NAME = {cls: name for name, cls in _BINARY.items()}
#: comparisons and logic (dtype bool): the host assertions of a GPU library
_LOGIC = {"lt": LT, "le": LE, "gt": GT, "ge": GE, "eq": EQ, "ne": NE, "and": And, "or": Or}
_LOGIC_NAME = {cls: name for name, cls in _LOGIC.items()}
_INT_DTYPES = tuple(d for d in _dt.ALL_DTYPES if _dt.is_int(d))
#: how deeply a shape expression may nest (the reader recurses once per level)
_MAX_DEPTH = 256
#: the most dimensions a parameter may have
_MAX_NDIM = 1024


class _ExprEncoder:
    """Integer shape expressions as JSON lists; each variable once, in ``vars``."""

    def __init__(self, func_name: str, logic: bool = False):
        self.func_name = func_name
        #: comparisons, logic and selects too (GPU libraries' host assertions)
        self.logic = logic
        self.vars: List[Var] = []
        self._index: Dict[Var, int] = {}

    def var(self, v: Var) -> int:
        i = self._index.get(v)
        if i is None:
            i = self._index[v] = len(self.vars)
            self.vars.append(v)
        return i

    def expr(self, e) -> list:
        if not isinstance(e, Expr):
            e = as_index(e)
        t = type(e)
        if t is Var:
            return ["var", self.var(e)]
        if t is Const and e.dtype in _INT_DTYPES:
            return ["const", int(e.value), e.dtype]
        if t in _BINARY_NAME and e.dtype in _INT_DTYPES:
            return [_BINARY_NAME[t], self.expr(e.a), self.expr(e.b), e.dtype]
        if t is Cast and e.dtype in _INT_DTYPES:
            return ["cast", self.expr(e.value), e.dtype]
        if not self.logic:
            pass
        elif t in _LOGIC_NAME:
            return [_LOGIC_NAME[t], self.expr(e.a), self.expr(e.b)]
        elif t is Not:
            return ["not", self.expr(e.a)]
        elif t is Select and e.dtype in _INT_DTYPES + ("bool",):
            return ["select", self.expr(e.cond), self.expr(e.true_value),
                    self.expr(e.false_value), e.dtype]
        raise BuildError(
            f"cannot export {self.func_name}: the shape expression `{to_str(e)}` uses "
            f"{t.__name__} ({e.dtype}), which an exported library cannot describe (integer "
            f"+ - * // % min max and integer casts of variables and constants); give the "
            f"buffer a simpler shape, or pass the extent as a scalar parameter")


# ---------------------------------------------------------------------------------------
# writing


def build_metadata(*, func, sig: Signature, checks: bool, entry: str, target, cpu: str,
                   variants: Dict[Tuple[str, bool], Tuple[Sequence[CheckSite], Sequence[str]]],
                   pyobject_data_offset: int, required_features=()) -> str:
    """The metadata JSON of a library (see the module docstring).  ``variants`` maps each
    of :data:`VARIANTS` to its check sites and vectorization notes;
    ``required_features``: the CPU features its tensor intrinsics require."""
    enc = _ExprEncoder(func.name)
    checked, unchecked = needed_features(target, required_features)
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tecomp_version": __version__,
        "name": func.name,
        "entry": entry,
        "target": str(target),
        "cpu": cpu,
        "features": checked,
        "features_unchecked": unchecked,
        "checks": bool(checks),
        "pyobject_data_offset": int(pyobject_data_offset),
        **_params_doc(func, sig, enc),
        "err_words": ERR_WORDS,
        "variants": [{"layout": layout, "noalias": noalias,
                      "symbol": variant_symbol(entry, layout, noalias),
                      "sites": [[s.kind, s.buffer, s.text, s.stmt]
                                for s in variants[(layout, noalias)][0]],
                      "notes": list(variants[(layout, noalias)][1])}
                     for layout, noalias in VARIANTS],
        # last: every variable the entries above used
        "vars": None,
    }
    doc["vars"] = [{"name": v.name, "dtype": v.dtype} for v in enc.vars]
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":"))


def _params_doc(func, sig: Signature, enc: "_ExprEncoder") -> Dict[str, Any]:
    """The fields of the parameters, their ABI positions and checks (every library)."""
    params = []
    for p in sig.params:
        if hasattr(p, "buffer"):
            b = p.buffer
            params.append({
                "kind": "buffer", "name": b.name, "dtype": b.dtype,
                "shape": [enc.expr(x) for x in b.shape],
                "strides": None if b.strides is None else [enc.expr(x) for x in b.strides],
                "data_index": p.data_index, "stride_slot": p.stride_slot,
                "written": bool(p.is_output)})
        else:
            params.append({"kind": "scalar", "var": enc.var(p.var), "slot": p.slot})
    param_checks = [{"expr": enc.expr(pc.expr), "lower": int(pc.lower), "uses": list(pc.uses),
                     **({} if pc.upper is None else {"upper": int(pc.upper)})}
                    for pc in func.attrs.get("param_checks", ())]

    pos = {id(p): k for k, p in enumerate(func.params)}
    in_place = [[pos[id(i)], pos[id(o)]] for i, o in in_place_pairs(func)]
    return {
        "params": params,
        "slots": {"count": sig.num_slots, "vars": [enc.var(v) for v in sig.slot_vars]},
        "shape_var_origin": [[enc.var(v), bp.data_index, d]
                             for v, (bp, d) in sig.shape_var_origin.items()],
        "param_checks": param_checks,
        "in_place": in_place,
    }


def build_cuda_metadata(*, func, sig: Signature, cs, entry: str, target, archs: Sequence[str],
                        ptx: str, fatbin_bytes: int) -> str:
    """The metadata JSON of a GPU library (see the module docstring): ``cs`` is the
    module's :class:`~tecomp.runtime.cuda_kernels.CudaSource`, ``archs`` and ``ptx``
    what its fatbin (``fatbin_bytes`` long) holds."""
    enc = _ExprEncoder(func.name, logic=True)
    params = list(func.params)
    workspaces = list(cs.workspaces)

    def obj(o) -> list:
        if isinstance(o, TmaBox):   # a tensor map: what the loader encodes it from
            return ["tma", {"src": obj(o.src)[1], "swizzle": o.swizzle,
                            "dims": [[d.axis, d.coef, d.box, d.part, d.whole]
                                     for d in o.dims]}]
        if isinstance(o, Buffer):
            for k, p in enumerate(params):
                if p is o:
                    return ["param", k]
            for k, w in enumerate(workspaces):
                if w is o:
                    return ["workspace", k]
            raise InternalError(f"kernel buffer {o.name} of {func.name} is neither a "
                                f"parameter nor a workspace")
        return ["var", enc.var(o)]

    doc = {
        "format": FORMAT,
        "format_version": CUDA_FORMAT_VERSION,
        "tecomp_version": __version__,
        "device": "cuda",
        "name": func.name,
        "entry": entry,
        "target": str(target),
        **_params_doc(func, sig, enc),
        "cuda": {
            "archs": list(archs), "ptx": ptx, "fatbin_bytes": int(fatbin_bytes),
            "kernels": [{
                "name": k.name, "stage": k.stage, "shared_bytes": int(k.shared_bytes),
                "has_barrier": bool(k.has_barrier), "local_bytes": int(k.local_bytes),
                "grid": [enc.expr(d) for d in k.grid], "block": [enc.expr(d) for d in k.block],
                "params": [{"name": p.name, "obj": obj(p.obj), "dtype": p.dtype,
                            "is_buffer": bool(p.is_buffer), "is_const": bool(p.is_const),
                            "align": int(p.align)} for p in k.params]}
                for k in cs.kernels],
            "workspaces": [{"name": w.name, "dtype": w.dtype,
                            # (padded strides: the span, which the kernels index)
                            "shape": [enc.expr(d) for d in (
                                w.shape if w.strides is None else [workspace_elements(w)])]}
                           for w in workspaces],
            "host_asserts": [[enc.expr(c), m] for c, m in cs.host_asserts],
        },
        "vars": None,
    }
    doc["vars"] = [{"name": v.name, "dtype": v.dtype} for v in enc.vars]
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":"))


# ---------------------------------------------------------------------------------------
# reading


@dataclass
class LibraryVariant:
    layout: str
    noalias: bool
    symbol: str
    sites: List[CheckSite]
    notes: List[str]


@dataclass
class LibraryInfo:
    """The metadata of a library, checked and turned back into IR objects."""

    name: str
    entry: str
    vars: Tuple[Var, ...]            # the variables of the ``vars`` table, in its order
    params: Tuple[Any, ...]          # Buffers and Vars, in parameter order
    written: Tuple[Buffer, ...]      # the buffers the kernel stores to
    param_checks: Tuple[ParamCheck, ...]
    #: (input, output) buffers that may be one array (tecomp.lower.in_place)
    in_place: Tuple[Tuple[Buffer, Buffer], ...]
    checks: bool
    target: str
    cpu: str
    features: Tuple[str, ...]
    pyobject_data_offset: int
    variants: Dict[Tuple[str, bool], LibraryVariant]
    tecomp_version: str
    raw: Dict[str, Any]              # the JSON document as read
    #: a GPU library's kernels (its CPU fields above are then empty); None for a CPU one
    cuda: Optional["CudaLibraryInfo"] = None


@dataclass
class CudaLibraryInfo:
    """What a GPU library's metadata says about its code: the architectures of its
    cubins, its PTX, its fatbin's size, and the launches (a CudaSource without source)."""

    archs: Tuple[str, ...]
    ptx: str
    fatbin_bytes: int
    kernels: List[KernelInfo]
    workspaces: List[Buffer]
    host_asserts: List[Tuple[Expr, str]]


#: the kinds of check sites a kernel reports (CheckSite.kind)
SITE_KINDS = ("load", "store", "assert", "malloc")
#: the longest name (of the kernel, a parameter, a variable) and text (of an error site,
#: a note) a library may hold: the metadata as a whole is at most MAX_METADATA_BYTES
_TEXT_MAX = _NAME_MAX = 1 << 20
#: symbols are "tecomp_" + the kernel name as an identifier (at most MAX_IDENTIFIER
#: characters: a longer name is cut and hashed) + a variant suffix
_SYMBOL_MAX = 256
_SYMBOL = re.compile(r"tecomp_[A-Za-z0-9_]{1,249}")


class _Reader:
    """Checks every field of the metadata JSON (anything unexpected is a LoadError naming
    the file) and builds the IR objects."""

    def __init__(self, where: str, exporting: Optional[str] = None):
        self.where = where
        #: the kernel being exported, when the export checks the metadata it wrote
        self.exporting = exporting
        self.vars: List[Var] = []
        #: whether comparisons, logic and selects may appear (a GPU library)
        self.logic = False

    def fail(self, what: str) -> Exception:
        if self.exporting is not None:
            return InternalError(f"the metadata written for {self.exporting} does not read "
                                 f"back ({what})")
        return LoadError(
            f"{self.where}: its tecomp metadata is damaged or not tecomp's ({what}); export "
            f"the library again with Module.export_library, or load the file it was exported "
            f"to")

    def too_big(self, what: str) -> Exception:
        """A field past the format's limits: a damaged file when loading, a program the
        format cannot describe when exporting."""
        if self.exporting is not None:
            name = self.exporting if len(self.exporting) <= 80 else self.exporting[:80] + "..."
            return BuildError(
                f"cannot export {name}: {what}, more than a library can describe; "
                f"give it shorter names, fewer dimensions or simpler shape expressions")
        return self.fail(what)

    def get(self, d: dict, key: str, kind, what: str = ""):
        if not isinstance(d, dict) or key not in d:
            raise self.fail(f"no field {key!r}{what}")
        v = d[key]
        ok = (isinstance(v, kind) and not (kind is int and isinstance(v, bool))) \
            if kind is not None else True
        if not ok:
            raise self.fail(f"field {key!r}{what} is a {type(v).__name__}")
        return v

    def text(self, d: dict, key: str, limit: int = _NAME_MAX, what: str = "") -> str:
        v = self.get(d, key, str, what)
        if len(v) > limit:
            raise self.too_big(f"field {key!r}{what} is {len(v)} characters long (at most "
                               f"{limit})")
        return v

    def items(self, d: dict, key: str, limit: int, what: str = "") -> list:
        v = self.get(d, key, list, what)
        if len(v) > limit:
            raise self.too_big(f"field {key!r}{what} has {len(v)} entries (at most {limit})")
        return v

    def dtype(self, v, allowed=_dt.ALL_DTYPES) -> str:
        if not isinstance(v, str) or v not in allowed:
            raise self.fail(f"dtype {str(v)[:40]!r}")
        return v

    def index(self, v, n: int, what: str) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
            raise self.fail(f"{what} {str(v)[:40]} is out of range")
        return v

    def expr(self, j, depth: int = 0) -> Expr:
        if depth > _MAX_DEPTH:
            raise self.too_big(f"a shape expression nests more than {_MAX_DEPTH} levels deep")
        if not isinstance(j, list) or not j or not isinstance(j[0], str):
            raise self.fail(f"an expression {str(j)[:60]}")
        op = j[0]
        if op == "var" and len(j) == 2:
            return self.vars[self.index(j[1], len(self.vars), "variable")]
        if op == "const" and len(j) == 3:
            v = j[1]
            if not isinstance(v, int) or isinstance(v, bool) or not -2**63 <= v < 2**63:
                raise self.fail(f"the constant {str(v)[:40]}")
            return Const(v, self.dtype(j[2], _INT_DTYPES))
        if op in _BINARY and len(j) == 4:
            a, b = self.expr(j[1], depth + 1), self.expr(j[2], depth + 1)
            return _BINARY[op](a, b, self.dtype(j[3], _INT_DTYPES))
        if op == "cast" and len(j) == 3:
            return Cast(self.expr(j[1], depth + 1), self.dtype(j[2], _INT_DTYPES))
        if not self.logic:
            pass
        elif op in _LOGIC and len(j) == 3:
            return _LOGIC[op](self.expr(j[1], depth + 1), self.expr(j[2], depth + 1))
        elif op == "not" and len(j) == 2:
            return Not(self.expr(j[1], depth + 1))
        elif op == "select" and len(j) == 5:
            return Select(*(self.expr(x, depth + 1) for x in j[1:4]),
                          self.dtype(j[4], _INT_DTYPES + ("bool",)))
        raise self.fail(f"an expression of kind {op[:40]!r}")

    def exprs(self, j, limit: int, what: str) -> Tuple[Expr, ...]:
        if not isinstance(j, list):
            raise self.fail(what)
        if len(j) > limit:
            raise self.too_big(f"{what} has {len(j)} dimensions (at most {limit})")
        return tuple(self.expr(x) for x in j)

    def sites(self, j) -> List[CheckSite]:
        if not isinstance(j, list):
            raise self.fail("the error sites")
        out = []
        for s in j:
            if not (isinstance(s, list) and len(s) == 4 and all(isinstance(x, str) for x in s)
                    and s[0] in SITE_KINDS
                    and all(len(x) <= _TEXT_MAX for x in s)):
                raise (self.too_big("an error message text is longer than "
                                    f"{_TEXT_MAX} characters")
                       if isinstance(s, list) and len(s) == 4 and all(
                           isinstance(x, str) for x in s) and s[0] in SITE_KINDS
                       else self.fail(f"an error site {str(s)[:60]}"))
            out.append(CheckSite(*s))
        return out


def metadata_digest(doc: bytes) -> bytes:
    """The 32 bytes :data:`DIGEST_SECTION` holds for the metadata document ``doc`` (its
    bytes, without the NUL)."""
    return hashlib.sha256(doc).digest()


def check_digest(sections: Dict[str, bytes], doc: bytes, where: str) -> None:
    """A LoadError unless the library whose sections are ``sections`` records, in
    :data:`DIGEST_SECTION`, the sha256 of its metadata document ``doc``: the metadata its
    code was compiled for (a flip or a copy that changes an extent would make the argument
    checks accept arrays the code does not compute over, the sidecar written anew)."""
    want = sections.get(DIGEST_SECTION)
    if want is None:
        raise LoadError(
            f"{where} has no {DIGEST_SECTION} section (the sha256 of its metadata, written "
            f"with its code): it was exported by an older tecomp, or it is damaged; export "
            f"it again with this tecomp")
    got = metadata_digest(doc)
    if want != got:
        raise LoadError(
            f"{where}: its metadata ({SECTION}, sha256 {got.hex()[:16]}...) is not the "
            f"metadata its code was compiled for ({DIGEST_SECTION} says "
            f"{want.hex()[:16]}...): the library was changed after export_library wrote it "
            f"(and its sidecar written anew), so its argument checks cannot be trusted to "
            f"describe its code; export it again")


def parse_metadata(raw: bytes, where: str, *, exporting: Optional[str] = None) -> LibraryInfo:
    """Read and check the metadata bytes of the library ``where`` (for messages).
    ``exporting``: the name of the kernel whose metadata the export checks before it
    writes the library (a field past the limits is then a BuildError that says so)."""
    r = _Reader(where, exporting)
    if len(raw) > MAX_METADATA_BYTES:
        raise r.too_big(f"its metadata takes {len(raw)} bytes (at most {MAX_METADATA_BYTES})")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise r.fail(f"not JSON: {str(exc)[:80]}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise r.fail("no tecomp library format tag")
    version = r.get(doc, "format_version", int)
    made_by = r.text(doc, "tecomp_version", 64)
    if version not in (FORMAT_VERSION, CUDA_FORMAT_VERSION):
        raise LoadError(
            f"{where} was exported by tecomp {made_by!r:.70} in library format {version}; this "
            f"tecomp ({__version__}) reads formats {FORMAT_VERSION} (CPU) and "
            f"{CUDA_FORMAT_VERSION} (GPU): export it again with this tecomp, or load it with "
            f"the tecomp that exported it")
    cuda = r.logic = version == CUDA_FORMAT_VERSION
    if cuda and doc.get("device") != "cuda":
        raise r.fail("a GPU library format without device 'cuda'")
    name = r.text(doc, "name", _NAME_MAX)
    if not name.isidentifier():
        raise r.fail(f"the kernel name {name[:60]!r}")
    entry = r.text(doc, "entry", _SYMBOL_MAX)
    if not _SYMBOL.fullmatch(entry) or entry in reserved_symbols():
        raise r.fail(f"the entry symbol {entry[:60]!r}")
    # variables, then parameters
    for k, v in enumerate(r.items(doc, "vars", 100000)):
        r.vars.append(Var(r.text(v, "name", what=f" of variable {k}"),
                          r.dtype(r.get(v, "dtype", str, f" of variable {k}"))))
    params: List[Any] = []
    written: List[Buffer] = []
    for k, p in enumerate(r.items(doc, "params", 100000)):
        what = f" of parameter {k + 1}"
        kind = r.get(p, "kind", str, what)
        if kind == "buffer":
            shape = r.exprs(r.get(p, "shape", list, what), _MAX_NDIM, f"the shape{what}")
            st = p.get("strides") if isinstance(p, dict) else None
            strides = None if st is None else r.exprs(st, _MAX_NDIM, f"the strides{what}")
            if strides is not None and len(strides) != len(shape):
                raise r.fail(f"the strides{what} do not match its shape")
            b = Buffer(r.text(p, "name", what=what), shape,
                       r.dtype(r.get(p, "dtype", str, what)), strides, "global")
            params.append(b)
            if r.get(p, "written", bool, what):
                written.append(b)
        elif kind == "scalar":
            params.append(r.vars[r.index(r.get(p, "var", int, what), len(r.vars), "variable")])
        else:
            raise r.fail(f"parameter kind {kind[:40]!r}")
    checks_ = []
    for k, pc in enumerate(r.items(doc, "param_checks", 100000)):
        what = f" of parameter check {k}"
        uses = tuple(r.items(pc, "uses", 1000, what))
        if not all(isinstance(u, str) and len(u) <= _TEXT_MAX for u in uses):
            raise r.fail(f"the uses{what}")
        upper = r.get(pc, "upper", int, what) if isinstance(pc, dict) and "upper" in pc else None
        checks_.append(ParamCheck(r.expr(r.get(pc, "expr", list, what)),
                                  r.get(pc, "lower", int, what), uses, upper))
    in_place = []
    # (a library exported before this field takes no input in place of an output)
    for pair in (r.items(doc, "in_place", 100000) if "in_place" in doc else ()):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise r.fail(f"an in-place pair {str(pair)[:40]}")
        i, o = (params[r.index(k, len(params), "the parameter")] for k in pair)
        if not (isinstance(i, Buffer) and isinstance(o, Buffer) and i not in written
                and o in written and i.dtype == o.dtype and len(i.shape) == len(o.shape)):
            raise r.fail(f"the in-place pair {pair}")
        in_place.append((i, o))
    if cuda:
        return LibraryInfo(
            name=name, entry=entry, vars=tuple(r.vars), params=tuple(params),
            written=tuple(written), in_place=tuple(in_place), param_checks=tuple(checks_),
            checks=False, target=r.text(doc, "target", 1024), cpu="", features=(),
            pyobject_data_offset=0, variants={}, tecomp_version=made_by, raw=doc,
            cuda=_cuda_part(r, r.get(doc, "cuda", dict), params))
    variants: Dict[Tuple[str, bool], LibraryVariant] = {}
    for v in r.items(doc, "variants", len(VARIANTS)):
        key = (r.get(v, "layout", str), r.get(v, "noalias", bool))
        if key not in VARIANTS or key in variants:
            raise r.fail(f"variant {key!r:.60}")
        sym = r.text(v, "symbol", _SYMBOL_MAX)
        if sym != variant_symbol(entry, *key):
            raise r.fail(f"the symbol {sym[:60]!r} of variant {key}")
        notes = r.items(v, "notes", 100000)
        if not all(isinstance(n, str) and len(n) <= _TEXT_MAX for n in notes):
            raise r.fail("the vectorization notes")
        variants[key] = LibraryVariant(key[0], key[1], sym, r.sites(v.get("sites")), notes)
    if len(variants) != len(VARIANTS):
        raise r.fail(f"{len(variants)} call variants instead of {len(VARIANTS)}")
    if r.get(doc, "err_words", int) != ERR_WORDS:
        raise r.fail("the number of error words")
    features = r.items(doc, "features", 1000)
    if not all(isinstance(f, str) and len(f) <= 64 for f in features):
        raise r.fail("the CPU features")
    return LibraryInfo(
        name=name, entry=entry, vars=tuple(r.vars), params=tuple(params),
        written=tuple(written), in_place=tuple(in_place),
        param_checks=tuple(checks_), checks=r.get(doc, "checks", bool),
        target=r.text(doc, "target", 1024), cpu=r.text(doc, "cpu", 256),
        features=tuple(features),
        pyobject_data_offset=r.get(doc, "pyobject_data_offset", int), variants=variants,
        tecomp_version=made_by, raw=doc)


_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}a?")
_PTX = re.compile(r"compute_[1-9][0-9]{1,2}a?")


def _cuda_part(r: _Reader, c: dict, params: List[Any]) -> CudaLibraryInfo:
    """The ``cuda`` field of a GPU library's metadata, read."""
    archs = r.items(c, "archs", 64)
    if not archs or not all(isinstance(a, str) and _ARCH.fullmatch(a) for a in archs):
        raise r.fail(f"the architectures {str(archs)[:60]}")
    ptx = r.text(c, "ptx", 32)
    if not _PTX.fullmatch(ptx):
        raise r.fail(f"the PTX version {ptx[:40]!r}")
    workspaces = []
    for k, w in enumerate(r.items(c, "workspaces", 10000)):
        what = f" of workspace {k}"
        workspaces.append(Buffer(r.text(w, "name", what=what),
                                 r.exprs(r.get(w, "shape", list, what), _MAX_NDIM,
                                         f"the shape{what}"),
                                 r.dtype(r.get(w, "dtype", str, what)), None, "global"))

    def obj(j, what):
        if isinstance(j, list) and len(j) == 2 and j[0] == "param":
            p = params[r.index(j[1], len(params), "the parameter")]
            if isinstance(p, Buffer):
                return p
        elif isinstance(j, list) and len(j) == 2 and j[0] == "workspace":
            return workspaces[r.index(j[1], len(workspaces), "the workspace")]
        elif isinstance(j, list) and len(j) == 2 and j[0] == "var":
            return r.vars[r.index(j[1], len(r.vars), "variable")]
        elif isinstance(j, list) and len(j) == 2 and j[0] == "tma" and isinstance(j[1], dict):
            return tma_box(j[1], what)
        raise r.fail(f"the object {str(j)[:40]}{what}")

    def tma_box(d: dict, what: str) -> TmaBox:
        """A tensor map's box (a TMA kernel parameter: the loader encodes its map from
        the argument at each call), checked as the host will use it."""
        src = params[r.index(r.get(d, "src", int, what), len(params), "the parameter")]
        swizzle = r.get(d, "swizzle", str, what)
        dims = r.get(d, "dims", list, what)
        if not isinstance(src, Buffer) or src.dtype not in _tma.DATA_TYPES or \
                swizzle not in _tma.SWIZZLES or not 1 <= len(dims) <= _tma.MAX_RANK:
            raise r.fail(f"the tensor map{what}")
        out = []
        for x in dims:
            ok = isinstance(x, list) and len(x) == 5 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in x[:3] + x[4:])
            if not ok or not 0 <= x[0] < len(src.shape) or not 1 <= x[1] <= 1 << 20 or \
                    not 1 <= x[2] <= _tma.MAX_BOX or x[3] not in ("whole", "inner", "outer") \
                    or not 0 <= x[4] <= 1 << 20:
                raise r.fail(f"a dimension of the tensor map{what}")
            out.append(TmaDim(x[0], x[1], x[2], x[3], x[4]))
        return TmaBox(src, src, tuple(out), (), swizzle)

    kernels = []
    for k, kd in enumerate(r.items(c, "kernels", 10000)):
        what = f" of kernel {k}"
        kname = r.text(kd, "name", 256, what)
        if not kname.isidentifier():
            raise r.fail(f"the kernel name {kname[:60]!r}")
        kparams = []
        for j, pd in enumerate(r.items(kd, "params", 10000, what)):
            pw = f" of parameter {j}{what}"
            is_buffer = r.get(pd, "is_buffer", bool, pw)
            o = obj(r.get(pd, "obj", list, pw), pw)
            dtype = r.get(pd, "dtype", str, pw)
            if dtype == TENSOR_MAP:
                if is_buffer or not isinstance(o, TmaBox):
                    raise r.fail(f"the type{pw}")
            elif isinstance(o, TmaBox) or is_buffer != isinstance(o, Buffer) or \
                    r.dtype(dtype) != o.dtype:
                raise r.fail(f"the type{pw}")
            align = r.get(pd, "align", int, pw)
            if not 0 <= align <= 4096:
                raise r.fail(f"the alignment{pw}")
            kparams.append(KernelParam(r.text(pd, "name", 256, pw), o, dtype, is_buffer,
                                       r.get(pd, "is_const", bool, pw), align))
        dims = [r.exprs(r.get(kd, key, list, what), 3, f"the {key}{what}")
                for key in ("grid", "block")]
        if any(len(d) != 3 for d in dims) or any(
                isinstance(e, Const) and not e.value >= low
                for d, low in zip(dims, (0, 1)) for e in d):
            # (a block of no threads, or a negative extent, launches nothing: the outputs
            # would be left as they were)
            raise r.fail(f"the launch dimensions{what}")
        shared, local = r.get(kd, "shared_bytes", int, what), r.get(kd, "local_bytes", int, what)
        if not (0 <= shared < 1 << 31 and 0 <= local < 1 << 31):
            raise r.fail(f"the memory sizes{what}")
        kernels.append(KernelInfo(kname, tuple(kparams), dims[0], dims[1], shared,
                                  r.text(kd, "stage", what=what),
                                  r.get(kd, "has_barrier", bool, what), local))
    asserts = []
    for a in r.items(c, "host_asserts", 100000):
        if not (isinstance(a, list) and len(a) == 2 and isinstance(a[1], str)
                and len(a[1]) <= _TEXT_MAX):
            raise r.fail(f"a host assertion {str(a)[:40]}")
        asserts.append((r.expr(a[0]), a[1]))
    size = r.get(c, "fatbin_bytes", int)
    if not 16 <= size <= MAX_METADATA_BYTES * 16:
        raise r.fail(f"the fatbin size {size}")
    return CudaLibraryInfo(tuple(archs), ptx, size, kernels, workspaces, asserts)


def check_signature(info: LibraryInfo, sig: Signature, where: str) -> None:
    """Raise LoadError unless the ABI positions ``sig`` derives from the parameters (as
    this tecomp's code generator would) are those the library was compiled with."""
    raw = info.raw
    r = _Reader(where)
    index = {v: i for i, v in enumerate(info.vars)}
    derived = {
        "params": [{"data_index": p.data_index, "stride_slot": p.stride_slot,
                    "written": bool(p.is_output)} if hasattr(p, "buffer") else {"slot": p.slot}
                   for p in sig.params],
        "slots": {"count": sig.num_slots, "vars": [index.get(v) for v in sig.slot_vars]},
        "shape_var_origin": sorted([index.get(v), bp.data_index, d]
                                   for v, (bp, d) in sig.shape_var_origin.items()),
    }
    try:
        recorded = {
            "params": [{k: p[k] for k in ("data_index", "stride_slot", "written")}
                       if p["kind"] == "buffer" else {"slot": p["slot"]} for p in raw["params"]],
            "slots": {"count": raw["slots"]["count"], "vars": list(raw["slots"]["vars"])},
            "shape_var_origin": sorted(list(x) for x in raw["shape_var_origin"]),
        }
    except (KeyError, TypeError) as exc:
        raise r.fail(f"the argument layout ({type(exc).__name__} {str(exc)[:40]})") from None
    if json.dumps(derived, sort_keys=True) != json.dumps(recorded, sort_keys=True):
        raise LoadError(
            f"{where}: the argument layout it was compiled with is not the one this tecomp "
            f"({__version__}) derives from its parameters (it was exported by tecomp "
            f"{info.tecomp_version!r:.70}): export it again with this tecomp")


def library_description(info: LibraryInfo) -> str:
    """One line about a library, for messages: its kernel, target and tecomp version."""
    if info.cuda is not None:
        return (f"kernel {info.name} for target {info.target!r:.80} (GPU code "
                f"{', '.join(info.cuda.archs)} and PTX {info.cuda.ptx}), exported by tecomp "
                f"{info.tecomp_version!r:.40}")
    return (f"kernel {info.name} for target {info.target!r:.80} (cpu {info.cpu!r:.40}), "
            f"exported by tecomp {info.tecomp_version!r:.40}")

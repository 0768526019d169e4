"""What a tensor intrinsic's ``cuda`` function gets: the operands' regions as
:class:`CudaIntrinView` and a :class:`CudaIntrinBuilder` over the kernel being written.

The emitter writes CUDA C statements; the same text is compiled by nvcc and, in the
CUDA emulation, by a C++ compiler::

    def dp4a(cb, ins, outs):                              # c[0] += a[0:4] . b[0:4]
        ld = cb.helper("tc_ld_b32")                       # 4 bytes as one word
        a = cb.tmp("unsigned int", f"{ld}({ins[0].ptr})")
        b = cb.tmp("unsigned int", f"{ld}({ins[1].ptr})")
        cb.emit(f"{outs[0].at(0)} = {cb.helper('tc_dp4a_us')}({a}, {b}, {outs[0].at(0)});")

``view.ptr`` is a C expression of a pointer to the region's first element (of the
buffer's element type), ``view.at(i, j, ...)`` the C lvalue of one element.  The region
is as large as the declared placeholder; what the emitter reads or writes beyond it is
its own bug.  The statements go into a block of their own, so temporaries never clash.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from ..errors import BuildError
from ..ir.expr import Var
from ..te.tensor_intrin import IntrinOperand
from .cuda_hopper import HOPPER_COLLECTIVES, HOPPER_HELPERS

#: tecomp's device helpers an emitter may call (defined in tecomp.codegen.cuda, the
#: tc_ldmatrix_* / tc_mma_* ones below)
HELPERS = ("tc_ld_b32", "tc_dp4a_us", "tc_dp4a_ss", "tc_ldmatrix_x4", "tc_ldmatrix_x4_trans",
           "tc_mma_m16n8k16_f16", "tc_mma_m16n8k16_bf16", "tc_tf32", "tc_mma_m16n8k8_tf32",
           "tc_pack2_f16", "tc_pack2_bf16", "tc_max_nan_f32", "tc_quad_max_f32",
           "tc_quad_sum_f32",
           "tc_swizzled_ptr", "tc_ex2_ftz", "tc_ex2",
           *HOPPER_HELPERS)  # sm_90a: mbarrier, cp.async.bulk, wgmma (cuda_hopper.py)

#: what one lane holds of a 16 x 16 tile of an ``mma.*`` fragment: its C element type and
#: the dtypes the fragment buffer may have (the PTX ISA's m16n8k16 / m16n8k8 fragments; the
#: cuda.mma_* intrinsics of tecomp.te.intrin_mma fill and read them)
MMA_FRAGMENTS = {
    "mma.matrix_a": ("unsigned int", ("float16", "bfloat16", "float32")),
    "mma.matrix_b": ("unsigned int", ("float16", "bfloat16", "float32")),
    "mma.accumulator": ("float", ("float32",)),
}
#: registers per lane of a 16 x 16 tile, by the fragment's dtype: A four f16x2 (bf16x2)
#: registers (ldmatrix.x4), B two per 16 x 8 half; a float32 operand tile eight tf32
#: values, one per register; the accumulator four floats per 16 x 8 half
MMA_TILE_REGS = {"float16": 4, "bfloat16": 4, "float32": 8}

_LDMATRIX = (
    "// ldmatrix.sync.aligned.m8n8.x4{t}.shared.b16: lane l gives the address of row l % 8\n"
    "// of 8 x 8 matrix l / 8 (16-byte aligned, in shared memory); r[q] gets the lane's two\n"
    "// elements of matrix q (the CUDA emulation: tecomp_emu::ldmatrix_x4).\n"
    "{{q}} void tc_ldmatrix_x4{u}(unsigned int* r, const void* row) {{{{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  tecomp_emu::ldmatrix_x4(r, row, {trans});\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750\n"
    "#error \"tecomp: ldmatrix (the cuda.mma_* intrinsics) needs sm_75 or later\"\n"
    "#else\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{t}.shared.b16 {{{{%0, %1, %2, %3}}}}, [%4];\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
    "               : \"r\"((unsigned)__cvta_generic_to_shared(row)));\n"
    "#endif\n"
    "}}}}")

_MMA = (
    "// d += a . b, mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32: a the lane's 4\n"
    "// registers of a 16 x 16 A, b its 2 of a 16 x 8 B, d its 4 floats of the 16 x 8 C.\n"
    "{{q}} void tc_mma_m16n8k16_{t}(float* d, const unsigned int* a, const unsigned int* b) {{{{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  tecomp_emu::mma_m16n8k16(d, a, b, {bf16});\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n"
    "#error \"tecomp: mma.sync.m16n8k16 (the cuda.mma_* intrinsics) needs sm_80 or later\"\n"
    "#else\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 \"\n"
    "               \"{{{{%0, %1, %2, %3}}}}, {{{{%4, %5, %6, %7}}}}, {{{{%8, %9}}}}, {{{{%0, %1, %2, %3}}}};\"\n"
    "               : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "#endif\n"
    "}}}}")

_TF32 = (
    "// a float rounded to tf32 (10 mantissa bits, to nearest, ties away from zero:\n"
    "// cvt.rna.tf32.f32), as the bits of a float.\n"
    "{q} unsigned int tc_tf32(float x) {{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  return tecomp_emu::round_tf32(x);\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n"
    "#error \"tecomp: tf32 (the cuda.mma_*_tf32 intrinsics) needs sm_80 or later\"\n"
    "#else\n"
    "  unsigned int r;\n"
    "  asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(r) : \"f\"(x));\n"
    "  return r;\n"
    "#endif\n"
    "}}")

_MMA_TF32 = (
    "// d += a . b, mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: a the lane's 4\n"
    "// registers of a 16 x 8 A, b its 2 of an 8 x 8 B, d its 4 floats of the 16 x 8 C.\n"
    "{q} void tc_mma_m16n8k8_tf32(float* d, const unsigned int* a, const unsigned int* b) {{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  tecomp_emu::mma_m16n8k8_tf32(d, a, b);\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n"
    "#error \"tecomp: mma.sync.m16n8k8 (the cuda.mma_*_tf32 intrinsics) needs sm_80 or later\"\n"
    "#else\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \"\n"
    "               \"{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\"\n"
    "               : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "#endif\n"
    "}}")

_PACK2 = (
    "// two floats rounded to nearest to {dt} and packed in one register, the first in the\n"
    "// lower half (an A fragment's register: cvt.rn.{t}x2.f32 takes the upper one first).\n"
    "{{q}} unsigned int tc_pack2_{t}(float lo, float hi) {{{{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  return (unsigned int){conv}(lo).__x | ((unsigned int){conv}(hi).__x << 16);\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n"
    "#error \"tecomp: cvt.rn.{t}x2.f32 (the cuda.mma_acc_to_a_* intrinsics) needs sm_80 or later\"\n"
    "#else\n"
    "  unsigned int r;\n"
    "  asm(\"cvt.rn.{t}x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
    "  return r;\n"
    "#endif\n"
    "}}}}")

_EX2_FTZ = (
    "// 2^x, ex2.approx.ftz.f32: a subnormal input read as 0, a subnormal result flushed to\n"
    "// zero (the CUDA emulation: tecomp_emu::ex2_ftz).\n"
    "{q} float tc_ex2_ftz(float x) {{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  return tecomp_emu::ex2_ftz(x);\n"
    "#else\n"
    "  float r;\n"
    "  asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(x));\n"
    "  return r;\n"
    "#endif\n"
    "}}")

_EX2 = (
    "// 2^x, ex2.approx.f32: subnormal inputs and results kept (what __expf runs on the\n"
    "// argument times log2(e); the CUDA emulation: exp2f).\n"
    "{q} float tc_ex2(float x) {{\n"
    "#if defined(TECOMP_CUDA_EMU)\n"
    "  return exp2f(x);\n"
    "#else\n"
    "  float r;\n"
    "  asm(\"ex2.approx.f32 %0, %1;\" : \"=f\"(r) : \"f\"(x));\n"
    "  return r;\n"
    "#endif\n"
    "}}")

_MAX_NAN = (
    "// max(a, b), NaN where either is NaN: max.NaN.f32 on sm_80 and later (one FMNMX.NAN,\n"
    "// where the compares take two FSETP and an FSEL); the same by compares in the CUDA\n"
    "// emulation and before sm_80.\n"
    "{q} float tc_max_nan_f32(float a, float b) {{\n"
    "#if defined(TECOMP_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)\n"
    "  return ((a > b) || (a != a)) ? a : b;\n"
    "#else\n"
    "  float r;\n"
    "  asm(\"max.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n"
    "  return r;\n"
    "#endif\n"
    "}}")

_QUAD = (
    "// The {what} of a, b, c, d (the lane's four elements of a row of an mma accumulator\n"
    "// tile) and of the other three lanes of its quad (lanes 4g..4g+3, the row's lanes):\n"
    "// two __shfl_xor_sync, lane masks 1 and 2; every lane of the quad gets it.{nan}\n"
    "{{q}} float tc_quad_{kind}_f32(float a, float b, float c, float d) {{{{\n"
    "  float x = {comb_ab};\n"
    "  x = {comb_xc};\n"
    "  x = {comb_xd};\n"
    "  for (int m = 1; m <= 2; m <<= 1) {{{{\n"
    "    const float y = __shfl_xor_sync(0xffffffffu, x, m);\n"
    "    x = {comb_xy};\n"
    "  }}}}\n"
    "  return x;\n"
    "}}}}")


def _quad(kind: str) -> str:
    if kind == "max":   # (its emitters ask for tc_max_nan_f32 too: defined before it)
        comb = lambda a, b: f"tc_max_nan_f32({a}, {b})"  # noqa: E731
        what, nan = "maximum", "  NaN propagates."
    else:
        comb = lambda a, b: f"{a} + {b}"  # noqa: E731
        what, nan = "sum", ""
    return _QUAD.format(what=what, nan=nan, kind=kind, comb_ab=comb("a", "b"),
                        comb_xc=comb("x", "c"), comb_xd=comb("x", "d"), comb_xy=comb("x", "y"))


#: the device helpers of the cuda.mma_* intrinsics: inline PTX on the GPU, the CUDA
#: emulation's per-lane implementations (tecomp/codegen/cuda_emu_header.h) there
MMA_HELPERS = {
    "tc_ldmatrix_x4": _LDMATRIX.format(t="", u="", trans=0),
    "tc_ldmatrix_x4_trans": _LDMATRIX.format(t=".trans", u="_trans", trans=1),
    "tc_mma_m16n8k16_f16": _MMA.format(t="f16", bf16=0),
    "tc_mma_m16n8k16_bf16": _MMA.format(t="bf16", bf16=1),
    "tc_tf32": _TF32,
    "tc_mma_m16n8k8_tf32": _MMA_TF32,
    "tc_pack2_f16": _PACK2.format(t="f16", dt="float16", conv="__float2half"),
    "tc_pack2_bf16": _PACK2.format(t="bf16", dt="bfloat16", conv="__float2bfloat16"),
    "tc_max_nan_f32": _MAX_NAN,
    "tc_quad_max_f32": _quad("max"),
    "tc_quad_sum_f32": _quad("sum"),
    "tc_ex2_ftz": _EX2_FTZ,
    "tc_ex2": _EX2,
}


class CudaIntrinView(IntrinOperand):
    """One operand of a tensor intrinsic in CUDA C (see
    :class:`~tecomp.te.tensor_intrin.IntrinOperand`): ``ptr`` C text of a pointer to its
    first element, ``ctype`` the C type of an element, ``strides`` ints, or C text where
    they are known only when the kernel runs.  ``fragment``: for an operand in a
    tensor-core fragment scope, the C lvalue of its ``nvcuda::wmma::fragment`` (an
    ``mma.*`` scope: of the lane's register array, :data:`MMA_FRAGMENTS`; it has no
    elements in memory: ``ptr`` and ``at`` mean nothing for it); None for memory.
    ``scope`` the buffer's scope; ``layout`` for a fragment, the layout of the memory
    tiles its loads read as the mma sees the matrix (``"row_major"`` or
    ``"col_major"``); ``swizzle`` the swizzle of a TMA ring's slots (``"none"``,
    ``"32B"``, ``"64B"``, ``"128B"``: the indices stay logical, only the hardware that
    decodes the swizzle may read it)."""

    def __init__(self, name: str, buffer_name: str, dtype: str, ctype: str,
                 shape: Tuple[int, ...], strides: Tuple[Union[int, str], ...], array: str,
                 base: str, fragment: Optional[str] = None, scope: str = "global",
                 layout: Optional[str] = None, swizzle: str = "none"):
        super().__init__(name, buffer_name, dtype, shape, strides)
        self.swizzle = swizzle   # a swizzled TMA ring's layout (double_buffer(swizzle=))
        self.fragment = fragment
        self.scope = scope
        self.layout = layout
        self.ctype = ctype
        self._array = array   # C name of the buffer
        self._base = base     # C text: the element offset of the region's first element
        self.ptr = f"({array} + {base})" if base != "0" else array

    def offset(self, index: Sequence[int] = ()) -> str:
        """C text of the element offset of ``self[index]`` from the region's first."""
        index = tuple(index) or (0,) * len(self.shape)
        if len(index) != len(self.shape) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                for i, n in zip(index, self.shape)):
            raise BuildError(f"tensor intrinsic operand {self.name}: index {index!r:.60} is "
                             f"outside its shape {self.shape}")
        const, terms = 0, []
        for i, s in zip(index, self.strides):
            if i == 0:
                continue
            if isinstance(s, int):
                const += i * s
            else:
                terms.append(f"{i} * ({s})")
        if const or not terms:
            terms.append(str(const))
        return " + ".join(terms)

    def at(self, *index: int) -> str:
        """C lvalue of element ``index`` (ints, default all 0) of the region."""
        off = self.offset(index)
        if off == "0":
            return f"{self._array}[{self._base}]"
        return f"{self._array}[{self._base} + {off}]"


class CudaIntrinBuilder:
    """Emits one tensor intrinsic into the CUDA C kernel being written."""

    def __init__(self, renderer, intrin_name: str):
        self._r = renderer
        self.name = intrin_name

    def emit(self, line: str) -> None:
        """Append one line of C (a statement)."""
        if not isinstance(line, str) or "\n" in line or "\r" in line:
            raise BuildError(f"tensor intrinsic {self.name}: emit() takes one line of C "
                             f"text, got {line!r:.60}")
        self._r.emit(line)

    def tmp(self, ctype: str, value: str, hint: str = "t") -> str:
        """Declare ``const ctype NAME = value;`` with a fresh name, and return the name."""
        name = self._r.name(Var(f"tc_{hint}" if hint.isidentifier() else "tc_t", "int32"))
        self.emit(f"const {ctype} {name} = {value};")
        return name

    def helper(self, name: str) -> str:
        """The name of tecomp's device helper ``name`` (one of :data:`HELPERS`), whose
        definition is then emitted with the kernel."""
        if name not in HELPERS:
            raise BuildError(f"tensor intrinsic {self.name}: no device helper {name!r:.40}; "
                             f"the helpers are {', '.join(HELPERS)}")
        if name in MMA_HELPERS or name in HOPPER_COLLECTIVES:
            # warp-wide, or waiting on other threads: the emulation runs them in step
            self._r.has_barrier = True
        return self._r.helper(name)

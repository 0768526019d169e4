"""The tensor cores through PTX (sm_80+): ``ldmatrix`` and ``mma.sync.m16n8k16``, as tensor
intrinsics of the same 16 x 16 x 16 tiles as the ``cuda.wmma_*`` ones
(:mod:`tecomp.te.intrin_cuda`), so a schedule written for wmma runs on these by renaming
its intrinsics and fragment scopes (``wmma.*`` -> ``mma.*``)::

    AF = s.cache_read(AS, "mma.matrix_a", [C])                       # AS in shared memory
    BF = s.cache_read(BS, "mma.matrix_b", [C])
    CF = s.cache_write(C, "mma.accumulator")
    s[AF].tensorize(ii, tc.tensor_intrin("cuda.mma_load_a_f16"))     # ldmatrix.x4
    s[BF].tensorize(kk, tc.tensor_intrin("cuda.mma_load_b_f16"))     # ldmatrix.x4(.trans)
    s[CF].tensorize(ii, tc.tensor_intrin("cuda.mma_f16f16f32"))      # 2 x mma.sync m16n8k16
    s[C].tensorize(ii, tc.tensor_intrin("cuda.mma_store_f32"))       # per-lane stores

A fragment here is what each lane of the warp holds in registers, in the PTX ISA's
fragment layouts ("Matrix Fragments for mma.m16n8k16"): with ``g = lane / 4``, ``t =
lane % 4``, a 16 x 16 A tile is four f16x2 registers, ``A[g][2t:2t+2]``, ``A[g+8][2t:2t+2]``,
``A[g][2t+8:2t+10]``, ``A[g+8][2t+8:2t+10]``; each 16 x 8 half ``h`` of a 16 x 16 B tile two,
``B[2t:2t+2][8h+g]`` and ``B[2t+8:2t+10][8h+g]``; each half of the accumulator four
floats, ``C[g][8h+2t:8h+2t+2]`` and ``C[g+8][8h+2t:8h+2t+2]``.

* ``cuda.mma_load_a_f16`` / ``cuda.mma_load_b_f16`` -- a 16 x 16 float16 tile of *shared*
  memory, row or column major (the other stride a multiple of 8 elements, the tile 32
  bytes aligned), into a fragment: one ``ldmatrix.x4``, ``.trans`` where the tile is
  stored the other way round from the registers (A column major, B row major);
* ``cuda.mma_f16f16f32`` -- ``C[i, j] += float(A[i, k]) * float(B[k, j])`` over a 16 x 16 x
  16 tile: two ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``; its init
  ``cuda.mma_fill_f32`` sets the lane's accumulator registers to 0;
* ``cuda.mma_store_f32`` -- the accumulator tile to shared or global memory, row or
  column major, each lane storing its 8 elements;
* ``cuda.mma_store_f16`` / ``cuda.mma_store_bf16`` -- ``C16[i, j] = C[i, j]`` cast: the
  accumulator tile to 16-bit memory, each lane converting and storing its 8 elements (an
  output cast to the inputs' dtype without a float32 tile: FlashAttention's epilogue);
* ``cuda.mma_atomic_add_f32`` -- ``C[i, j] += F[i, j]``: the accumulator tile added into
  float32 memory with ``atomicAdd`` per element (its declaration is the store's copy:
  lowering emits it for a ``Stage._atomic_add`` stage tensorized with
  ``cuda.mma_store_f32``, whose buffer it zeroes first), so that the blocks of a kernel
  may add partial sums into one tile (FlashAttention-2's ``dq``);
* ``cuda.mma_scale_rows_f32`` -- ``C[i, j] *= f[i]``: each row of an accumulator tile in
  place by a factor from memory (``f`` a 16 x 16 view of a vector, column stride 0), each
  lane its 8 elements by the factors of its two rows.  Lowering emits it, not a schedule:
  the rescaling of an accumulator between the steps of an online reduction
  (``Stage._lockstep``, FlashAttention-2's ``acc *= exp(m_old - m_new)``);
* ``cuda.mma_acc_to_a_f16`` / ``cuda.mma_acc_to_a_bf16`` -- ``A[i, k] = C[i, k]`` cast: a
  16 x 16 accumulator tile straight into the A operand of the next mma, in the lane's
  registers (no shared memory, no ``ldmatrix``).  The accumulator's two 16 x 8 halves hold
  ``C[g][2t:2t+2]``, ``C[g+8][2t:2t+2]``, ``C[g][2t+8:2t+10]``, ``C[g+8][2t+8:2t+10]`` in
  floats 0-1, 2-3, 4-5, 6-7: the A fragment's four registers in order, so each lane packs
  its own pairs (``cvt.rn.f16x2.f32``): FlashAttention-2's ``P = exp(S - m)`` fed to
  ``P V`` without leaving the registers; a back-to-back GEMM's intermediate;
* ``cuda.mma_row_max_f32`` / ``cuda.mma_row_sum_f32`` -- ``R[i, j] = max_k C[i, k]``
  (``sum``): the rows of a 16 x 16 accumulator tile reduced into an accumulator tile
  that holds each row's result in all its columns (a lane's floats of row ``g`` and of
  row ``g + 8`` then all equal: the row statistics of FlashAttention-2's online softmax,
  ``m`` and ``l``, in the registers that later scale the row).  Each lane reduces its
  four elements of each row, then the quad (the four lanes of a row, ``t = 0..3``) with
  two ``__shfl_xor_sync`` (lane masks 1 and 2); a tile split along ``k`` adds into the
  running result (their inits: ``cuda.mma_fill_neg_inf_f32`` and ``cuda.mma_fill_f32``),
  which is a row tile, read from each lane's registers 0 and 2 (rows ``g`` and ``g +
  8``).  The maximum propagates NaN, as ``tc.max``;
* ``cuda.mma_rows_copy_f32``, ``_rows_mul_f32``, ``_rows_exp_diff_or_zero_f32`` and
  ``_rows_rcp_or_zero_f32`` (``1 / a`` where ``a > 0``, else 0: ``__fdividef``) --
  elementwise on row tiles (every operand one): each lane computes its two rows' values
  once, from its registers 0 and 2, into all four registers of each row, so that a row
  tile carried across a loop is two values a lane (FlashAttention-2's ``m`` and ``l``
  in registers, ``Stage._lockstep`` with ``fragments``); ``cuda.mma_store_rows_f32`` --
  ``v[i] = R[i, j]``: a row tile to a vector in memory (column stride 0), each row by
  the first lane of its quad;
* ``cuda.mma_exp_diff_f32`` -- ``C[i, j] = fast_exp(A[i, j] - B[i, j])`` and
  ``cuda.mma_mul_f32`` -- ``C[i, j] = A[i, j] * B[i, j]``: elementwise on accumulator
  tiles, each lane its 8 floats (every accumulator tile has the one layout, so no lane
  exchanges anything): with ``B`` a row tile of ``cuda.mma_row_max_f32``, ``exp(S -
  m)``; with ``B`` one of factors, the rows of an accumulator rescaled in registers;
  ``cuda.mma_exp_diff_or_zero_f32`` -- ``C[i, j] = fast_exp(A[i, j] - B[i, j])``, ``B =
  -inf`` read as 0 (0 where ``A`` is ``-inf`` too, as a row's scores are where their
  maximum is): a row whose maximum is ``-inf`` (every key masked) gives 0, not
  ``exp(-inf + inf)`` (NaN), as ``flash_attention``'s ``p``, and a NaN ``B`` NaN (a NaN
  score reaches its row, as the softmax's); the guard a select of ``B``, once a row;
  ``cuda.mma_exp_diff_or_zero_ftz_f32`` and ``cuda.mma_rows_exp_diff_or_zero_ftz_f32``
  -- the same with ``ex2.approx.ftz.f32`` of the difference times ``log2(e)``: a result
  below ``2**-126`` is 0 (two instructions fewer an exp than ``__expf``, whose
  ``ex2.approx`` keeps subnormals: ``FlashConfig(ftz=True)``);
  ``cuda.mma_exp2_diff_or_zero_f32``, ``cuda.mma_rows_exp2_diff_or_zero_f32`` and their
  ``_ftz`` twins -- ``2^(A - B)``, ``B = -inf`` read as 0 (0 where ``A`` is ``-inf`` too,
  as a row's scores are where their maximum is): operands in base-2 units (``log2(e)``
  folded into them beforehand), one ``ex2.approx`` (``.ftz``) of the difference, no
  multiply, the guard a select of ``B``, once a row (``FlashConfig(exp2=True)``);
* ``cuda.mma_add_cols_f32`` -- ``C[i, j] = A[i, j] + v[j]``: a vector in memory (a 16 x 16
  view of it, row stride 0) added along the columns of an accumulator tile, each lane
  loading the 4 elements of its columns: a per-key bias on the scores in registers (a
  padding mask, ``-inf`` past the keys);
* ``cuda.mma_mask_causal_f32`` -- ``C[i, j] = A[i, j]`` where ``kpos[j] <= qpos[i]``, else
  ``-inf``: the causal mask of a tile of scores in registers, from the positions of the
  tile's rows and columns (two int32 vectors in memory, 16 x 16 views of column stride 0
  and of row stride 0: the tile's offsets, or any positions), each lane loading its 2 rows'
  and 4 columns' positions: the diagonal key tiles of a causal FlashAttention.

FlashAttention's template declares two of its own per scale (:func:`flash_x`, the masked,
scaled scores; :func:`flash_p`, ``p`` from them).

Each has a bfloat16 twin, ``_f16`` spelled ``_bf16`` (``cuda.mma_load_a_bf16``,
``cuda.mma_bf16bf16f32``: ``mma.sync....f32.bf16.bf16.f32``; ldmatrix moves 16-bit
values whatever they hold).

The rules of the wmma intrinsics hold (whole warps, tiles that do not depend on the
lane); the CUDA emulation implements ``ldmatrix`` and ``mma.sync`` lane by lane, the
lanes of a warp exchanging their registers, so a wrong lane mapping gives a wrong result
there as on the GPU.
"""
from __future__ import annotations

import struct

from ..errors import BuildError
from .intrin_cuda import TC_DTYPES, _copy, _fill, _leading_dim, _memory, _mma
from .reduce import max as _max, sum as _sum
from .intrin import exp2, fast_exp, if_then_else, ne
from .tensor import compute, const, placeholder, reduce_axis

#: the C text of a lane's index in its warp (the renderer requires blockDim.x to be a
#: multiple of 32, so the lanes of a warp are consecutive threadIdx.x)
LANE = "((int)threadIdx.x & 31)"
#: the ldmatrix helper without and with ``.trans``
TRANS_HELPERS = {False: "tc_ldmatrix_x4", True: "tc_ldmatrix_x4_trans"}


def accumulator_coords(half: int, reg: int):
    """``(row, col)`` of accumulator register ``reg`` (0..3) of 16 x 8 half ``half`` within
    the 16 x 16 tile, as C text in the lane's ``g`` and ``t`` (the PTX ISA's m16n8k16 C
    layout: rows ``g`` and ``g + 8``, columns ``2t`` and ``2t + 1``)."""
    return f"g + {8 * (reg >> 1)}", f"{8 * half + (reg & 1)} + 2 * t"


def _fragment(intrin: str, view, scope: str) -> str:
    if view.fragment is None or view.scope != scope:
        where = (f"{view.buffer_name}, which is in memory" if view.fragment is None else
                 f"{view.buffer_name}, a fragment of scope {view.scope!r}")
        raise BuildError(
            f"tensor intrinsic {intrin}: operand {view.name} is a block of {where}; this "
            f"operand is an mma fragment of scope {scope!r} (s.cache_read / s.cache_write "
            "with that scope; the wmma.* scopes belong to the cuda.wmma_* intrinsics)")
    return view.fragment


def _shared(name: str, view, what: str, swizzled: bool = False):
    """``view``, a tile of shared memory (BuildError otherwise: ``what`` reads it);
    ``swizzled``: the intrinsic decodes a swizzled tile's layout (else it refuses one)."""
    src = _memory(name, view, swizzled)
    if src.scope != "shared":
        raise BuildError(
            f"tensor intrinsic {name}: operand {src.name} is a block of {src.buffer_name}, "
            f"which is in {src.scope} memory; {what} shared memory only: copy the tile to "
            "shared memory first (s.cache_read(..., \"shared\", ...)) and load the fragment "
            "from that stage")
    return src


def _load(name: str, operand: str):
    scope = f"mma.matrix_{operand}"

    def emit(cb, ins, outs):
        frag = _fragment(name, outs[0], scope)
        src = _shared(name, ins[0], "ldmatrix reads", swizzled=True)
        _, ld = _leading_dim(name, src, 8, "ldmatrix")
        # matrix q = lane / 8 of the x4 is the 8 x 8 block (q % 2, q / 2) of the tile as
        # the mma sees it (A[m, k], B[k, n]); memory rows run along its first axis when
        # the fragment is row major as the mma sees it, along the second otherwise
        row_first = outs[0].layout != "col_major"
        q, r = f"({LANE} >> 3)", f"({LANE} & 7)"
        if row_first:
            row, col = f"({r} + ({q} & 1) * 8)", f"({q} >> 1) * 8"
        else:
            row, col = f"({r} + ({q} >> 1) * 8)", f"({q} & 1) * 8"
        # the registers pair elements along k: A's second axis, B's first
        trans = row_first == (operand == "b")
        helper = cb.helper(TRANS_HELPERS[trans])
        ptr = f"{src.ptr} + {row} * {ld} + {col}"
        if src.swizzle != "none":   # (each lane's row where the swizzle put it)
            mask = int(src.swizzle[:-1]) // 16 - 1   # ("128B": 128 bytes a row)
            ptr = f"{cb.helper('tc_swizzled_ptr')}({ptr}, {mask}u)"
        cb.emit(f"{helper}({frag}, {ptr});")
    return emit


def _load_tf32(name: str, operand: str):
    """A 16 x 16 float32 tile of shared memory into a tf32 fragment: each lane reads its 8
    elements (the PTX ISA's m16n8k8 fragments: A ``[g + 8 (r % 2)][t + 4 (r / 2) + 8 h]``
    in register ``4 h + r``, ``h`` the k half; B ``[t + 4 j + 8 h][8 n + g]`` in register
    ``4 n + 2 h + j``, ``n`` the column half) and rounds them to tf32."""
    scope = f"mma.matrix_{operand}"

    def emit(cb, ins, outs):
        frag = _fragment(name, outs[0], scope)
        src = _shared(name, ins[0], "the tf32 fragment loads read")
        layout, ld = _leading_dim(name, src, 1, "the tf32 fragment load")
        # element (r, c) of the matrix as the mma sees it sits at r * ld + c where the
        # tile is indexed as the mma sees it and stored row major, or both the other way
        straight = (outs[0].layout != "col_major") == (layout == "row_major")
        cvt = cb.helper("tc_tf32")
        cb.emit(f"{{ const int g = {LANE} >> 2, t = {LANE} & 3;")
        for reg in range(8):
            if operand == "a":   # (row, k) of the 16 x 16 A tile
                r, c = f"g + {8 * (reg & 1)}", f"t + {4 * ((reg >> 1) & 1) + 8 * (reg >> 2)}"
            else:                # (k, n) of the 16 x 16 B tile
                r, c = f"t + {4 * (reg & 1) + 8 * ((reg >> 1) & 1)}", f"g + {8 * (reg >> 2)}"
            off = f"({r}) * {ld} + ({c})" if straight else f"({c}) * {ld} + ({r})"
            cb.emit(f"  {frag}[{reg}] = {cvt}({src.ptr}[{off}]);")
        cb.emit("}")
    return emit


def _mma_tf32_emit(name: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        a = _fragment(name, ins[0], "mma.matrix_a")
        b = _fragment(name, ins[1], "mma.matrix_b")
        mma = cb.helper("tc_mma_m16n8k8_tf32")
        for n in range(2):          # the 16 x 8 halves of C
            for h in range(2):      # the k halves
                cb.emit(f"{mma}({c}{f' + {4 * n}' if n else ''}, {a}{f' + {4 * h}' if h else ''}, "
                        f"{b} + {4 * n + 2 * h});")
    return emit


def _mma_emit(name: str, t: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        a = _fragment(name, ins[0], "mma.matrix_a")
        b = _fragment(name, ins[1], "mma.matrix_b")
        mma = cb.helper(f"tc_mma_m16n8k16_{t}")
        cb.emit(f"{mma}({c}, {a}, {b});")               # columns 0..7
        cb.emit(f"{mma}({c} + 4, {a}, {b} + 2);")       # columns 8..15
    return emit


def _fill_emit(name: str, value: str = "0.0f"):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        cb.emit(f"for (int tc_r = 0; tc_r < 8; ++tc_r) {c}[tc_r] = {value};")
    return emit


#: the C conversion of a float to each 16-bit dtype (the cast stores)
_FROM_FLOAT = {"float16": "__float2half", "bfloat16": "__float2bfloat16"}


def _store(name: str, atomic: bool = False, cast: str = ""):
    """The accumulator tile to memory, each lane its 8 elements; ``atomic``: added into
    float32 memory with ``atomicAdd`` (several blocks add partial sums into one tile:
    FlashAttention-2's ``dq``); ``cast``: converted to that 16-bit dtype (rounded to
    nearest) as it is stored."""
    def emit(cb, ins, outs):
        c = _fragment(name, ins[0], "mma.accumulator")
        dst = _memory(name, outs[0])
        layout, ld = _leading_dim(name, dst, 1, "the mma store")   # (element by element)
        cb.emit(f"const int g = {LANE} >> 2, t = {LANE} & 3;")
        for half in range(2):
            for reg in range(4):
                row, col = accumulator_coords(half, reg)
                off = f"({row}) * {ld} + ({col})" if layout == "row_major" \
                    else f"({col}) * {ld} + ({row})"
                val = f"{c}[{4 * half + reg}]"
                if cast:
                    val = f"{_FROM_FLOAT[cast]}({val})"
                cb.emit(f"atomicAdd({dst.ptr} + {off}, {val});" if atomic
                        else f"{dst.ptr}[{off}] = {val};")
    return emit


def _scale_rows_emit(name: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        f = ins[1]         # (ins[0]: the same fragment, as read)
        if f.fragment is not None or f.strides[1] != 0:
            raise BuildError(f"tensor intrinsic {name}: operand {f.name} is a vector in memory "
                             f"read along the tile's rows (column stride 0), got {f.buffer_name} "
                             f"with strides {list(f.strides)}")
        cb.emit(f"const int g = {LANE} >> 2;")
        cb.emit(f"const float tc_f0 = {f.ptr}[g * {f.strides[0]}], "
                f"tc_f1 = {f.ptr}[(g + 8) * {f.strides[0]}];")
        for half in range(2):
            for reg in range(4):   # (registers 2 and 3 of a half: row g + 8)
                cb.emit(f"{c}[{4 * half + reg}] *= tc_f{reg >> 1};")
    return emit


#: the accumulator's floats that A's registers 0..3 pack (lower half first): the
#: accumulator holds ``C[g][2t:2t+2]``, ``C[g+8][2t:2t+2]`` and the same 8 columns on, in
#: order, where A's registers hold ``A[g][2t:2t+2]``, ``A[g+8][2t:2t+2]``,
#: ``A[g][2t+8:2t+10]``, ``A[g+8][2t+8:2t+10]``
ACC_TO_A = ((0, 1), (2, 3), (4, 5), (6, 7))


def _acc_to_a_emit(name: str, dtype: str):
    def emit(cb, ins, outs):
        a = _fragment(name, outs[0], "mma.matrix_a")
        c = _fragment(name, ins[0], "mma.accumulator")
        if outs[0].layout == "col_major":
            raise BuildError(
                f"tensor intrinsic {name}: fragment {outs[0].buffer_name} is read by its mma "
                "transposed (as A[k, i]); the accumulator's registers are the A operand's only "
                "as stored: order the reading mma's loops so that it reads A[i, k]")
        pack = cb.helper(f"tc_pack2_{TC_DTYPES[dtype]}")
        for reg, (lo, hi) in enumerate(ACC_TO_A):
            cb.emit(f"{a}[{reg}] = {pack}({c}[{lo}], {c}[{hi}]);")
    return emit


def _fill_neg_inf():
    return compute((16, 16), lambda i, j: const(float("-inf"), "float32"), name="c")


def _row_reduce(kind: str):
    c = placeholder((16, 16), "float32", name="c")
    k = reduce_axis((0, 16), name="k")
    red = _max if kind == "max" else _sum
    return compute((16, 16), lambda i, j: red(c[i, k], axis=k), name="r")


def _row_reduce_emit(name: str, kind: str):
    def emit(cb, ins, outs):
        r = _fragment(name, outs[0], "mma.accumulator")
        c = _fragment(name, ins[0], "mma.accumulator")
        # (the maximum's helper first: tc_quad_max_f32 calls it)
        mx = cb.helper("tc_max_nan_f32") if kind == "max" else None
        f = cb.helper(f"tc_quad_{kind}_f32")
        # the lane's floats of row g: 0, 1 (columns 2t, 2t + 1) and 4, 5 (8 + 2t, 9 + 2t);
        # of row g + 8: 2, 3, 6, 7
        for half, regs in ((0, (0, 1, 4, 5)), (1, (2, 3, 6, 7))):
            cb.emit(f"const float tc_row{half} = {f}({', '.join(f'{c}[{x}]' for x in regs)});")
        # (the running result is a row tile: its rows' values read from registers 0 and 2
        # and written to all four of each row, one value each, so that a result carried
        # across a loop is two registers, not eight)
        for half in range(2):
            old, new = f"{r}[{2 * half}]", f"tc_row{half}"
            cb.emit(f"const float tc_new{half} = " + (
                f"{mx}({old}, {new});" if kind == "max" else f"{old} + {new};"))
        for reg in range(8):
            cb.emit(f"{r}[{reg}] = tc_new{(reg >> 1) & 1};")
    return emit


def _exp_diff(a, b, base2: bool = False):
    """``exp(a - b)`` (``base2``: ``2^(a - b)``) with ``b = -inf`` read as 0:
    ``cuda.mma_[rows_]exp[2]_diff_or_zero*``'s element.  Where ``b`` is a row's running
    maximum and ``a`` its scores (or its previous maximum), ``b = -inf`` means ``a =
    -inf``, and the result is 0 as the "or zero" guard's; the guard is then one select a
    row, not one an element; a NaN ``b`` gives NaN."""
    f32 = "float32"
    return (exp2 if base2 else fast_exp)(
        a - if_then_else(ne(b, const(float("-inf"), f32)), b, const(0.0, f32)))


def _elementwise(kind: str):
    a = placeholder((16, 16), "float32", name="a")
    b = placeholder((16, 16), "float32", name="b")
    if kind == "exp_diff":
        return compute((16, 16), lambda i, j: fast_exp(a[i, j] - b[i, j]), name="c")
    if kind.removesuffix("_ftz") in ("exp_diff_or_zero", "exp2_diff_or_zero"):
        return compute((16, 16), lambda i, j: _exp_diff(a[i, j], b[i, j],
                                                        kind.startswith("exp2")), name="c")
    return compute((16, 16), lambda i, j: a[i, j] * b[i, j], name="c")


#: the C of each elementwise intrinsic's element from ``x`` (``a``'s) and ``y`` (``b``'s)
_ELEMENTWISE_C = {
    "exp_diff": "__expf({x} - {y})",
    # (y = -inf read as 0: x is -inf there too, a row's maximum and its scores, and
    # exp(-inf) is 0; the select of y once a row, not of each argument, :func:`_exp_diff`;
    # no branch; a NaN y gives NaN, as the softmax's)
    "exp_diff_or_zero": "__expf({x} - (({y} != -INFINITY) ? {y} : 0.0f))",
    # (the same as ex2.approx.ftz of the argument times log2(e): two instructions fewer
    # than __expf's ex2.approx, a result below 2^-126 flushed to 0)
    "exp_diff_or_zero_ftz": "{ex2}(({x} - (({y} != -INFINITY) ? {y} : 0.0f)) * 1.44269504f)",
    # (2^(x - y), operands in base-2 units: no multiply by log2(e); ex2.approx without
    # and with .ftz)
    "exp2_diff_or_zero": "{ex2}({x} - (({y} != -INFINITY) ? {y} : 0.0f))",
    "exp2_diff_or_zero_ftz": "{ex2}({x} - (({y} != -INFINITY) ? {y} : 0.0f))",
    "mul": "{x} * {y}",
    # (the row tiles' own; the reciprocal fast: 2 ulp)
    "copy": "{x}",
    "rcp_or_zero": "({x} > 0.0f) ? __fdividef(1.0f, {x}) : 0.0f",
}


def _elementwise_emit(name: str, kind: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        by = {v.name: v for v in ins}     # (the operands in the order the body reads them)
        a = _fragment(name, by["a"], "mma.accumulator")
        b = _fragment(name, by["b"], "mma.accumulator")
        ex2 = _ex2(cb, kind)
        for reg in range(8):
            cb.emit(f"{c}[{reg}] = " + _ELEMENTWISE_C[kind].format(
                x=f"{a}[{reg}]", y=f"{b}[{reg}]", ex2=ex2) + ";")
    return emit


def _ex2(cb, kind: str):
    """The helper of ``ex2.approx.ftz`` where ``kind`` is an ftz exp, of ``ex2.approx``
    where it is a base-2 one, else None."""
    return (cb.helper("tc_ex2_ftz") if kind.endswith("_ftz")
            else cb.helper("tc_ex2") if kind.startswith("exp2") else None)


def _rows(kind: str):
    """The declared computation of ``cuda.mma_rows_<kind>_f32``: elementwise on row tiles
    (each row's value in all its columns: its operands must be, which the emitter reads
    as two registers a lane)."""
    a = placeholder((16, 16), "float32", name="a")
    f32 = "float32"
    if kind == "copy":
        return compute((16, 16), lambda i, j: a[i, j], name="c")
    if kind == "rcp_or_zero":
        return compute((16, 16), lambda i, j: if_then_else(
            a[i, j] > const(0.0, f32), const(1.0, f32) / a[i, j], const(0.0, f32)), name="c")
    b = placeholder((16, 16), "float32", name="b")
    return compute((16, 16), lambda i, j: {
        "exp_diff_or_zero": lambda: _exp_diff(a[i, j], b[i, j]),
        "exp2_diff_or_zero": lambda: _exp_diff(a[i, j], b[i, j], base2=True),
        "mul": lambda: a[i, j] * b[i, j],
    }[kind.removesuffix("_ftz")](), name="c")


def _rows_emit(name: str, kind: str):
    """Row tiles: each lane computes its two rows' values once, from registers 0 (row g)
    and 2 (row g + 8) of its operands, and writes each to the four registers of its row
    (one value each: a row tile carried across a loop is two registers, and nvcc computes
    a row's value once, not per register)."""
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        by = {v.name: _fragment(name, v, "mma.accumulator") for v in ins}
        ex2 = _ex2(cb, kind)
        for half in range(2):   # (b: the second operand, where the kind has one)
            x, y = (f"{by[n]}[{2 * half}]" if n in by else None for n in ("a", "b"))
            cb.emit(f"const float tc_v{half} = " + _ELEMENTWISE_C[kind].format(
                x=x, y=y, ex2=ex2) + ";")
        for reg in range(8):
            cb.emit(f"{c}[{reg}] = tc_v{(reg >> 1) & 1};")
    return emit


def _store_rows_emit(name: str):
    def emit(cb, ins, outs):
        r = _fragment(name, ins[0], "mma.accumulator")
        v = outs[0]
        _vector(name, v, "rows", "float32")
        # (a row tile: row g's value in every lane of its quad; lane t = 0 stores it)
        cb.emit(f"const int g = {LANE} >> 2;")
        cb.emit(f"if (({LANE} & 3) == 0) {{ {v.ptr}[g * {v.strides[0]}] = {r}[0]; "
                f"{v.ptr}[(g + 8) * {v.strides[0]}] = {r}[2]; }}")
    return emit


def _add_cols():
    a = placeholder((16, 16), "float32", name="a")
    v = placeholder((16, 16), "float32", name="v")
    return compute((16, 16), lambda i, j: a[i, j] + v[i, j], name="c")


def _add_cols_emit(name: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        a = _fragment(name, ins[0], "mma.accumulator")
        v = ins[1]
        if v.fragment is not None or v.strides[0] != 0:
            raise BuildError(f"tensor intrinsic {name}: operand {v.name} is a vector in memory "
                             f"read along the tile's columns (row stride 0), got {v.buffer_name} "
                             f"with strides {list(v.strides)}")
        cb.emit(f"const int t = {LANE} & 3;")
        for half in range(2):
            for col in range(2):   # (the lane's columns 8 half + 2t + col)
                cb.emit(f"const float tc_v{2 * half + col} = "
                        f"{v.ptr}[({8 * half + col} + 2 * t) * {v.strides[1]}];")
        for half in range(2):
            for reg in range(4):
                x = 4 * half + reg
                cb.emit(f"{c}[{x}] = {a}[{x}] + tc_v{2 * half + (reg & 1)};")
    return emit


def _mask_causal():
    a = placeholder((16, 16), "float32", name="a")
    qpos = placeholder((16, 16), "int32", name="qpos")
    kpos = placeholder((16, 16), "int32", name="kpos")
    return compute((16, 16), lambda i, j: if_then_else(
        kpos[i, j] <= qpos[i, j], a[i, j], const(float("-inf"), "float32")), name="c")


def _vector(name: str, view, along: str, dtype: str) -> None:
    """``view``, a 16 x 16 view of a ``dtype`` vector in memory read ``along`` the tile's
    rows (column stride 0) or its columns (row stride 0); BuildError otherwise."""
    zero = 1 if along == "rows" else 0
    if view.fragment is not None or view.strides[zero] != 0 or view.dtype != dtype:
        raise BuildError(
            f"tensor intrinsic {name}: operand {view.name} is a vector of {dtype} in memory read "
            f"along the tile's {along} ({'column' if zero else 'row'} stride 0), got "
            f"{view.buffer_name} ({view.dtype}) with strides {list(view.strides)}")


#: the C test of :func:`_mask_causal_emit` that keeps a score: the key's position ``k`` at
#: most the query's ``q``
CAUSAL_KEEP = "{k} <= {q}"


def _mask_causal_emit(name: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        by = {v.name: v for v in ins}     # (the operands in the order the body reads them)
        a = _fragment(name, by["a"], "mma.accumulator")
        q, k = by["qpos"], by["kpos"]
        _vector(name, q, "rows", "int32")
        _vector(name, k, "columns", "int32")
        cb.emit(f"const int g = {LANE} >> 2, t = {LANE} & 3;")
        # the positions of the lane's rows (g, g + 8) and columns (8 half + 2t + col)
        cb.emit(f"const int tc_q0 = {q.ptr}[g * {q.strides[0]}], "
                f"tc_q1 = {q.ptr}[(g + 8) * {q.strides[0]}];")
        for half in range(2):
            for col in range(2):
                cb.emit(f"const int tc_k{2 * half + col} = "
                        f"{k.ptr}[({8 * half + col} + 2 * t) * {k.strides[1]}];")
        for half in range(2):
            for reg in range(4):
                x = 4 * half + reg
                keep = CAUSAL_KEEP.format(k=f"tc_k{2 * half + (reg & 1)}", q=f"tc_q{reg >> 1}")
                cb.emit(f"{c}[{x}] = ({keep}) ? {a}[{x}] : -INFINITY;")
    return emit


def flash_x_value(s, kbias, qpos, kpos, scale: float, causal: bool):
    """The expression of :func:`flash_x`'s element (a score masked and scaled: the
    online softmax's ``x``) from the loads of its operands."""
    x = s * const(scale, "float32") + kbias
    if causal:
        x = if_then_else(kpos <= qpos, x, const(float("-inf"), "float32"))
    return x


def flash_p_value(s, kbias, lse, qpos, kpos, scale: float, causal: bool):
    """The expression of :func:`flash_p`'s element from the loads of its operands (the
    template's compute and the intrinsic's declaration build it alike)."""
    f32, ninf = "float32", const(float("-inf"), "float32")
    x = flash_x_value(s, kbias, qpos, kpos, scale, causal)
    return if_then_else(lse > ninf, fast_exp(x - lse), const(0.0, f32))


def _logits(cb, by: dict, scale: float, causal: bool) -> list:
    """Emit the loads of a tile's masks (``kbias``, with ``causal`` ``qpos`` and
    ``kpos``: vectors in memory) for :func:`flash_x` and :func:`flash_p`; returns the C of
    each of the lane's 8 masked, scaled scores (``s`` an accumulator)."""
    name, f32 = cb.name, "float32"
    a = _fragment(name, by["s"], "mma.accumulator")
    kb = by["kbias"]
    _vector(name, kb, "columns", f32)
    lit = f"{struct.unpack('f', struct.pack('f', scale))[0]:.9g}f"
    cb.emit(f"const int g = {LANE} >> 2, t = {LANE} & 3;")
    if causal:
        q, k = by["qpos"], by["kpos"]
        _vector(name, q, "rows", "int32")
        _vector(name, k, "columns", "int32")
        cb.emit(f"const int tc_q0 = {q.ptr}[g * {q.strides[0]}], "
                f"tc_q1 = {q.ptr}[(g + 8) * {q.strides[0]}];")
    for half in range(2):
        for col in range(2):   # (the lane's columns 8 half + 2t + col)
            x = 2 * half + col
            cb.emit(f"const float tc_b{x} = {kb.ptr}[({8 * half + col} + 2 * t) * "
                    f"{kb.strides[1]}];")
            if causal:
                cb.emit(f"const int tc_k{x} = {k.ptr}[({8 * half + col} + 2 * t) * "
                        f"{k.strides[1]}];")
    out = []
    for reg in range(8):
        col, row = 2 * (reg >> 2) + (reg & 1), (reg >> 1) & 1
        x = f"{a}[{reg}] * {lit} + tc_b{col}"
        if causal:
            x = f"(({CAUSAL_KEEP.format(k=f'tc_k{col}', q=f'tc_q{row}')}) ? {x} : -INFINITY)"
        out.append(x)
    return out


def _flash_operands(causal: bool):
    f32 = "float32"
    return (placeholder((16, 16), f32, name="s"), placeholder((16, 16), f32, name="kbias"),
            placeholder((16, 16), f32, name="lse"), placeholder((16, 16), "int32", name="qpos"),
            placeholder((16, 16), "int32", name="kpos"))


def flash_x(scale: float, causal: bool):
    """The declared computation of the online softmax's ``x`` on a 16 x 16 tile of scores
    ``s`` in registers (an accumulator): ``s * scale + kbias[j]`` (a vector of the keys in
    memory: 0, a padding mask's value, ``-inf`` past the keys) and, with ``causal``,
    ``-inf`` where ``kpos[j] > qpos[i]`` (int32 vectors in memory), into an accumulator
    tile: what the rows' statistics and ``p`` of ``FlashConfig(form="fragments")`` read.
    Returns ``(op, emitter)``: the template declares one per scale."""
    s, kbias, _, qpos, kpos = _flash_operands(causal)
    op = compute((16, 16), lambda i, j: flash_x_value(
        s[i, j], kbias[i, j], qpos[i, j], kpos[i, j], scale, causal), name="c")

    def emit(cb, ins, outs):
        by = {v.name: v for v in ins}     # (the operands in the order the body reads them)
        c = _fragment(cb.name, outs[0], "mma.accumulator")
        for reg, x in enumerate(_logits(cb, by, scale, causal)):
            cb.emit(f"{c}[{reg}] = {x};")
    return op, emit


def flash_p(scale: float, causal: bool):
    """The declared computation of FlashAttention's ``p`` on a 16 x 16 tile of scores
    ``s`` held in registers (an accumulator): ``exp(x - lse[i])`` where ``lse[i] > -inf``,
    else 0, with ``x`` :func:`flash_x`'s.  Returns ``(op, emitter)``: the template
    declares one per scale (``tecomp.strategy.cuda.attention``)."""
    s, kbias, lse, qpos, kpos = _flash_operands(causal)
    op = compute((16, 16), lambda i, j: flash_p_value(
        s[i, j], kbias[i, j], lse[i, j], qpos[i, j], kpos[i, j], scale, causal), name="c")

    def emit(cb, ins, outs):
        name = cb.name
        by = {v.name: v for v in ins}     # (the operands in the order the body reads them)
        c = _fragment(name, outs[0], "mma.accumulator")
        ls = by["lse"]
        _vector(name, ls, "rows", "float32")
        xs = _logits(cb, by, scale, causal)
        cb.emit(f"const float tc_l0 = {ls.ptr}[g * {ls.strides[0]}], "
                f"tc_l1 = {ls.ptr}[(g + 8) * {ls.strides[0]}];")
        for reg, x in enumerate(xs):
            row = (reg >> 1) & 1
            # (the exp's argument selected, not its result: no branch)
            cb.emit(f"{c}[{reg}] = __expf((tc_l{row} > -INFINITY) ? {x} - tc_l{row} : "
                    "-INFINITY);")
    return op, emit


def _scale_rows():
    c = placeholder((16, 16), "float32", name="c")
    f = placeholder((16, 16), "float32", name="f")
    return compute((16, 16), lambda i, j: c[i, j] * f[i, j], name="c")


def declarations():
    """The ``cuda.mma_*`` intrinsics, as :func:`tecomp.te.intrin_cuda.declarations`."""
    out = [(_fill("float32"), _fill_emit("cuda.mma_fill_f32"), "cuda.mma_fill_f32", False, None)]
    for dt, t in TC_DTYPES.items():
        for operand in ("a", "b"):
            name = f"cuda.mma_load_{operand}_{t}"
            out.append((_copy(dt, dt, f"{operand}_frag"), _load(name, operand), name, False,
                        None))
        name = f"cuda.mma_{t}{t}f32"
        out.append((_mma(dt, "float32"), _mma_emit(name, t), name, False, "cuda.mma_fill_f32"))
        name = f"cuda.mma_store_{t}"
        out.append((_copy("float32", dt, "c"), _store(name, cast=dt), name, False, None))
        name = f"cuda.mma_acc_to_a_{t}"
        out.append((_copy("float32", dt, "a_frag"), _acc_to_a_emit(name, dt), name, False,
                    None))
    # tf32: float32 tiles, rounded to tf32 as they are loaded (four mma.sync.m16n8k8 per
    # 16 x 16 x 16 tile); the computation declared is float32's, which the tensor cores
    # approximate (10 mantissa bits per operand): what a user asks for with tf32=True
    for operand in ("a", "b"):
        name = f"cuda.mma_load_{operand}_tf32"
        out.append((_copy("float32", "float32", f"{operand}_frag"), _load_tf32(name, operand),
                    name, False, None))
    out.append((_mma("float32", "float32"), _mma_tf32_emit("cuda.mma_tf32tf32f32"),
                "cuda.mma_tf32tf32f32", False, "cuda.mma_fill_f32"))
    out.append((_copy("float32", "float32", "c"), _store("cuda.mma_store_f32"),
                "cuda.mma_store_f32", False, None))
    out.append((_copy("float32", "float32", "c"), _store("cuda.mma_atomic_add_f32", atomic=True),
                "cuda.mma_atomic_add_f32", False, None))
    out.append((_scale_rows(), _scale_rows_emit("cuda.mma_scale_rows_f32"),
                "cuda.mma_scale_rows_f32", False, None))
    out.append((_add_cols(), _add_cols_emit("cuda.mma_add_cols_f32"), "cuda.mma_add_cols_f32",
                False, None))
    out.append((_mask_causal(), _mask_causal_emit("cuda.mma_mask_causal_f32"),
                "cuda.mma_mask_causal_f32", False, None))
    out.append((_fill_neg_inf(), _fill_emit("cuda.mma_fill_neg_inf_f32", "-INFINITY"),
                "cuda.mma_fill_neg_inf_f32", False, None))
    out.append((_rows("copy"), _store_rows_emit("cuda.mma_store_rows_f32"),
                "cuda.mma_store_rows_f32", False, None))
    exps = ("exp_diff_or_zero", "exp_diff_or_zero_ftz", "exp2_diff_or_zero",
            "exp2_diff_or_zero_ftz")
    for kind in ("copy", *exps, "mul", "rcp_or_zero"):
        name = f"cuda.mma_rows_{kind}_f32"
        out.append((_rows(kind), _rows_emit(name, kind), name, False, None))
    for kind in ("exp_diff", *exps, "mul"):
        name = f"cuda.mma_{kind}_f32"
        out.append((_elementwise(kind), _elementwise_emit(name, kind), name, False, None))
    for kind, init in (("max", "cuda.mma_fill_neg_inf_f32"), ("sum", "cuda.mma_fill_f32")):
        name = f"cuda.mma_row_{kind}_f32"
        out.append((_row_reduce(kind), _row_reduce_emit(name, kind), name, False, init))
    return out

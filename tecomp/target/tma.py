"""TMA tensor maps on the host: the arguments of ``cuTensorMapEncodeTiled`` checked
before the driver sees them, encoded by the driver for a GPU, or in the CUDA emulation's
own layout for ``tecomp_emu::tma_load`` (tecomp/codegen/cuda_emu_header.h).

A tensor map describes a global tensor (address, extents, byte strides) and the *box* one
``cp.async.bulk.tensor`` copies into shared memory: ``box[i]`` elements along dimension
``i`` (dimension 0 innermost, contiguous), every ``elem_strides[i]``-th of them, laid out
densely in shared memory (``ceil(box[i] / elem_strides[i])`` elements along ``i``), the
16-byte chunks of each row swizzled (``swizzle``: "none", "32B", "64B", "128B": chunk
bits 4.. of the shared address XORed with bits 7..; the layout the wgmma descriptors of
the same swizzle read).  Elements of the box outside the tensor (coordinates below 0 or
past an extent) are filled with zeros, and the copy still completes the whole box's
bytes on its mbarrier: a tile at the tensor's edge needs no padding.

The limits checked (the CUDA driver API's ``cuTensorMapEncodeTiled``): a rank of 1 to 5;
the global address 16-byte aligned; each extent in ``[1, 2**32]``; each byte stride (of
dimensions 1..) a non-zero multiple of 16 below ``2**40``; each box extent in ``[1,
256]``, the inner one a multiple of 16 bytes and, with a swizzle, no wider than the
swizzle's span; each element stride in ``[1, 8]``.  A violation is a
:class:`~tecomp.errors.TensorMapError` naming the field.
"""
from __future__ import annotations

import ctypes
import dataclasses
import struct
from typing import Sequence, Tuple

from ..errors import RuntimeUnavailableError, TargetError, TensorMapError
from .cuda import sm_number

#: CUtensorMapDataType of the dtypes a map may hold
DATA_TYPES = {"uint8": 0, "int8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4,
              "int64": 5, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
ELEM_BYTES = {"uint8": 1, "int8": 1, "uint16": 2, "uint32": 4, "int32": 4, "uint64": 8,
              "int64": 8, "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2}
#: CUtensorMapSwizzle, and the span in bytes of each swizzle's row
SWIZZLES = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
SWIZZLE_SPAN = {"32B": 32, "64B": 64, "128B": 128}
MAX_RANK, MAX_BOX, MAX_ELEM_STRIDE = 5, 256, 8
#: the size of a CUtensorMap (an opaque, 64-byte aligned kernel parameter)
MAP_BYTES = 128
#: the emulation's tag in a map's first word ("TCTM")
EMU_MAGIC = 0x4D544354
_EMU_LAYOUT = "<IIIIQ5Q4Q5H5BB"


@dataclasses.dataclass(frozen=True)
class TensorMapSpec:
    """What a tensor map describes, address aside: ``dtype``, ``dims`` (innermost
    first, as the driver takes them), ``strides`` (bytes, of dimensions 1..: one fewer
    than ``dims``), ``box``, ``elem_strides`` (default all 1) and ``swizzle``."""
    dtype: str
    dims: Tuple[int, ...]
    strides: Tuple[int, ...]
    box: Tuple[int, ...]
    elem_strides: Tuple[int, ...] = ()
    swizzle: str = "none"
    name: str = "tensor"

    def __post_init__(self):
        if not self.elem_strides:
            object.__setattr__(self, "elem_strides", (1,) * len(self.dims))

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    def box_shape(self) -> Tuple[int, ...]:
        """The elements the box lands in shared memory along each dimension."""
        return tuple(-(-b // e) for b, e in zip(self.box, self.elem_strides))

    @property
    def box_bytes(self) -> int:
        """The bytes one copy writes to shared memory (and completes on its mbarrier)."""
        n = self.elem_bytes
        for x in self.box_shape():
            n *= x
        return n


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check(spec: TensorMapSpec, address: int = 0) -> None:
    """Raise :class:`TensorMapError` where the driver or the hardware would refuse the
    map (see the module doc); ``address`` the global tensor's (0: not known yet)."""
    who = f"tensor map of {spec.name!r:.60}"
    if spec.dtype not in DATA_TYPES:
        raise TensorMapError(f"{who}: dtype {spec.dtype!r:.20} has no TMA data type; "
                             f"use one of {', '.join(DATA_TYPES)}")
    rank = len(spec.dims)
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError(f"{who}: rank {rank}; a tensor map has 1 to {MAX_RANK} "
                             "dimensions (reshape the tensor)")
    for field, n in (("strides", rank - 1), ("box", rank), ("elem_strides", rank)):
        if len(getattr(spec, field)) != n:
            raise TensorMapError(f"{who}: {field} has {len(getattr(spec, field))} entries, "
                                 f"the rank {rank} needs {n}")
    if not _int(address) or address % 16:
        raise TensorMapError(f"{who}: the global address 0x{address:x} is not 16-byte aligned; "
                             "TMA copies from 16-byte aligned tensors (allocate the array "
                             "aligned, or copy it)" if _int(address) else
                             f"{who}: the global address {address!r:.30} is not an integer")
    for i, d in enumerate(spec.dims):
        if not _int(d) or not 1 <= d <= 1 << 32:
            raise TensorMapError(f"{who}: extent {d!r:.30} of dimension {i} is not in "
                                 "[1, 2**32]")
    for i, s in enumerate(spec.strides, start=1):
        if not _int(s) or s <= 0 or s % 16 or s >= 1 << 40:
            raise TensorMapError(
                f"{who}: the byte stride {s!r:.30} of dimension {i} is not a positive multiple "
                f"of 16 below 2**40: TMA needs every row of the tensor 16-byte aligned (pad the "
                f"inner extent to a multiple of {16 // spec.elem_bytes or 1} "
                f"{spec.dtype} elements)")
    for i, b in enumerate(spec.box):
        if not _int(b) or not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"{who}: box extent {b!r:.30} of dimension {i} is not in "
                                 f"[1, {MAX_BOX}]: a TMA copy moves at most {MAX_BOX} elements "
                                 "along each dimension (copy the tile in several boxes)")
    for i, e in enumerate(spec.elem_strides):
        if not _int(e) or not 1 <= e <= MAX_ELEM_STRIDE:
            raise TensorMapError(f"{who}: element stride {e!r:.30} of dimension {i} is not in "
                                 f"[1, {MAX_ELEM_STRIDE}]")
    inner = spec.box[0] * spec.elem_bytes
    if inner % 16:
        raise TensorMapError(f"{who}: the box's inner extent is {inner} bytes ({spec.box[0]} "
                             f"{spec.dtype}), not a multiple of 16")
    if spec.swizzle not in SWIZZLES:
        raise TensorMapError(f"{who}: swizzle {spec.swizzle!r:.20} is not one of "
                             f"{', '.join(SWIZZLES)}")
    if spec.swizzle != "none" and inner > SWIZZLE_SPAN[spec.swizzle]:
        raise TensorMapError(f"{who}: the box's inner extent is {inner} bytes, wider than the "
                             f"{spec.swizzle} swizzle's rows of {SWIZZLE_SPAN[spec.swizzle]}: "
                             f"box[0] at most {SWIZZLE_SPAN[spec.swizzle] // spec.elem_bytes}")


def check_target(arch) -> None:
    """TargetError unless ``arch`` (a ``cuda`` target's ``-arch``; None: the device's
    own) has TMA: sm_90 and later."""
    if arch and sm_number(str(arch)) < 90:
        raise TargetError(f"TMA (cp.async.bulk.tensor, tensor maps) needs sm_90 or later; the "
                          f"target is -arch={arch}.  Build for 'cuda -arch=sm_90a', or copy "
                          "the tiles with cp.async (Stage.double_buffer) on this architecture")


def emu_bytes(spec: TensorMapSpec, address: int) -> bytes:
    """The 128 bytes of the map in the CUDA emulation's layout (checked first)."""
    check(spec, address)
    r = len(spec.dims)

    def pad(xs, n):
        return list(xs) + [0] * (n - len(xs))
    raw = struct.pack(_EMU_LAYOUT, EMU_MAGIC, r, spec.elem_bytes, SWIZZLES[spec.swizzle],
                      address, *pad(spec.dims, 5), *pad(spec.strides, 4), *pad(spec.box, 5),
                      *pad(spec.elem_strides, 5), 0)
    return raw + bytes(MAP_BYTES - len(raw))


def encode(spec: TensorMapSpec, address: int, cu) -> bytes:
    """The 128-byte CUtensorMap of ``spec`` at global ``address``, encoded by the CUDA
    driver's ``cuTensorMapEncodeTiled`` (``cu``: the driver library,
    :func:`tecomp.runtime.cuda_driver.libcuda`'s), after :func:`check`."""
    check(spec, address)
    r = len(spec.dims)
    buf = ctypes.create_string_buffer(MAP_BYTES + 64)   # the map 64-byte aligned
    at = ctypes.addressof(buf) + (-ctypes.addressof(buf)) % 64
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    status = cu.cuTensorMapEncodeTiled(
        ctypes.c_void_p(at), ctypes.c_int(DATA_TYPES[spec.dtype]), u32(r), ctypes.c_void_p(address),
        (u64 * r)(*spec.dims), (u64 * max(1, r - 1))(*spec.strides), (u32 * r)(*spec.box),
        (u32 * r)(*spec.elem_strides), ctypes.c_int(0), ctypes.c_int(SWIZZLES[spec.swizzle]),
        ctypes.c_int(2), ctypes.c_int(0))   # no interleave; L2 promotion 128B; OOB zeros
    if status != 0:
        raise RuntimeUnavailableError(
            f"the CUDA driver's cuTensorMapEncodeTiled({spec.name!r:.60}) failed with CUresult "
            f"{status} (the map passed tecomp's checks: dims {spec.dims}, strides "
            f"{spec.strides}, box {spec.box}, swizzle {spec.swizzle})")
    return ctypes.string_at(at, MAP_BYTES)


def row_major(name: str, dtype: str, shape: Sequence[int], box: Sequence[int],
              swizzle: str = "none") -> TensorMapSpec:
    """The map of a C-contiguous tensor of ``shape`` (outermost first, as numpy) with a
    box of ``box`` (also outermost first): the driver's order reversed."""
    eb = ELEM_BYTES.get(dtype, 1)
    dims = tuple(int(x) for x in reversed(shape))
    strides, acc = [], eb
    for d in dims[:-1]:
        acc *= d
        strides.append(acc)
    return TensorMapSpec(dtype, dims, tuple(strides), tuple(int(x) for x in reversed(box)),
                         swizzle=swizzle, name=name)


def reference_box(spec: TensorMapSpec, tensor, coords: Sequence[int]):
    """What one copy of the box at ``coords`` (innermost first) writes to shared memory,
    as a numpy byte array (``spec.box_bytes`` of them, from a 1024-byte aligned address):
    the model the emulation's ``tma_load`` implements.  ``tensor``: a numpy array whose
    memory the map describes (its first byte the map's address)."""
    import numpy as np
    flat = np.ascontiguousarray(tensor).view(np.uint8).reshape(-1)
    eb = spec.elem_bytes
    shape = spec.box_shape()
    out = np.zeros(spec.box_bytes, np.uint8)
    span = SWIZZLE_SPAN.get(spec.swizzle, 0)
    for e in range(spec.box_bytes // eb):
        rem, off, inside = e, 0, True
        for i, n in enumerate(shape):
            s = rem % n
            rem //= n
            g = coords[i] + s * spec.elem_strides[i]
            if not 0 <= g < spec.dims[i]:
                inside = False
            else:
                off += g * (eb if i == 0 else spec.strides[i - 1])
        a = e * eb
        if span:
            a ^= ((a >> 7) & (span // 16 - 1)) << 4
        if inside:
            out[a:a + eb] = flat[off:off + eb]
    return out

"""Host arrays aligned for vector code: ``tc.empty`` and ``tc.aligned``.

numpy places an array of 128 KiB or more (one it gets from ``mmap``) 16 bytes past a
64-byte cache line, so a 16-lane float32 vector read or written in place straddles two
lines on every access.  A memory-bound kernel pays for that: layer norm over 4096 rows
of 768 ran 0.40-0.45 ms on such arrays and 0.29-0.36 ms on 64-byte aligned ones (2
threads, the 2-core Zen 4; benchmarks/DECISIONS.md, "Benchmarks: aligned arrays").
TVM's ``tvm.runtime.empty`` and PyTorch's CPU allocator align to 64 bytes; these give a
numpy array that does the same.
"""
from __future__ import annotations

from typing import Sequence, Union

from numpy.typing import ArrayLike

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError

#: the default alignment in bytes: a cache line, and an AVX-512 vector
DEFAULT_ALIGN = 64


def _check_align(align, fn: str) -> int:
    if isinstance(align, bool) or not isinstance(align, (int, np.integer)) or align < 1 \
            or align & (align - 1):
        raise ArgumentError(f"{fn}: align={align!r} is not a power of two number of bytes; "
                            f"use e.g. 64 (a cache line)")
    return int(align)


def empty(shape: Union[int, Sequence[int]], dtype: Union[str, np.dtype] = "float32",
          align: int = DEFAULT_ALIGN) -> np.ndarray:
    """An uninitialised C-contiguous numpy array whose data starts on an ``align``-byte
    boundary.

    It is an ordinary numpy array (a view of a slightly larger one); pass it to any
    compiled kernel.

    Parameters
    ----------
    shape : int or sequence of int
        Non-negative extents.
    dtype : str or numpy.dtype, optional
        A numeric numpy dtype, ``"float32"`` by default.
    align : int, optional
        The alignment in bytes, a power of two (default 64, a cache line).

    Returns
    -------
    numpy.ndarray
        The array.

    Raises
    ------
    ShapeError
        For a negative or non-integer extent.
    DTypeError
        For a dtype that is not numeric.
    ArgumentError
        For an alignment that is not a power of two.

    Examples
    --------
    >>> import tecomp as tc
    >>> c = tc.empty((4, 8))
    >>> c.ctypes.data % 64
    0
    """
    align = _check_align(align, "tc.empty")
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ShapeError(f"tc.empty: shape {shape!r} has {d!r}; every extent must be a "
                             f"non-negative integer")
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise DTypeError(f"tc.empty: dtype {dtype!r} is not a numpy dtype ({e}); use e.g. "
                         f"'float32'") from None
    if dt.hasobject:
        raise DTypeError(f"tc.empty: dtype {dt} holds Python objects; use a numeric dtype")
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes].view(dt).reshape(dims)


def aligned(a: ArrayLike, align: int = DEFAULT_ALIGN) -> np.ndarray:
    """``a`` itself when it is a C-contiguous numpy array starting on an ``align``-byte
    boundary, else an aligned C-contiguous copy of it.

    Parameters
    ----------
    a : array_like
        The array (anything ``numpy.asarray`` takes).
    align : int, optional
        The alignment in bytes, a power of two (default 64).

    Returns
    -------
    numpy.ndarray
        ``a``, or an aligned copy.

    Raises
    ------
    ArgumentError
        For an alignment that is not a power of two.
    """
    align = _check_align(align, "tc.aligned")
    a = np.asarray(a)
    if a.flags.c_contiguous and a.ctypes.data % align == 0:
        return a
    out = empty(a.shape, a.dtype, align)
    out[...] = a
    return out

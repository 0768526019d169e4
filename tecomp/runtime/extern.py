"""The calls of extern stages (``tc.extern``) from compiled code: a table of call sites
and the one C entry point the kernels call, ``tecomp_extern_call``.

A kernel calls ``int32 tecomp_extern_call(int64 site, void **data, int64 *ints, double
*floats)``: ``data`` holds the data pointer of each buffer argument, ``ints`` each
buffer's extents then its strides (in elements), then the integer scalars, and
``floats`` the float scalars, in the order of the site's arguments.  The entry point
(a ctypes callback: it takes the GIL) views each buffer as a numpy array (zero-copy; an
input read-only, an output writable), calls the function and returns 0; if the function
raises, it keeps the exception for the kernel's caller to re-raise and returns 1, and
the kernel stops with its error code 4.

Sites live as long as the process: the compiled code holds their numbers, and it only
runs here (``export_library`` refuses a kernel with an extern call).
"""
from __future__ import annotations

import ctypes
import gc
import threading
import traceback
import weakref
from typing import Optional

import numpy as np

from ..errors import ComputeError
from ..ir.extern_sites import _SITES, Site, register_site, site  # noqa: F401  (the table)

SYMBOL = "tecomp_extern_call"


_TLS = threading.local()


def _view(ptr: int, dtype: np.dtype, shape, strides, writable: bool, refs: list) -> np.ndarray:
    """A numpy view of a kernel's buffer; a weak reference to the memory object every
    view of it keeps alive is appended to ``refs``."""
    item = dtype.itemsize
    if any(e == 0 for e in shape):
        return np.zeros(shape, dtype)
    lo = sum(min(0, (e - 1) * s) for e, s in zip(shape, strides))
    hi = sum(max(0, (e - 1) * s) for e, s in zip(shape, strides))
    n = hi - lo + 1
    raw = (ctypes.c_char * (n * item)).from_address(ptr + lo * item)
    refs.append(weakref.ref(raw))
    base = np.frombuffer(raw, dtype=dtype, count=n)
    a = np.lib.stride_tricks.as_strided(base[-lo:], shape=tuple(shape),
                                        strides=tuple(s * item for s in strides),
                                        writeable=writable)
    return a


def _escaped(st: Site, refs: list, err: Optional[BaseException]):
    """The error to raise where the function kept a view of a buffer past the call (in a
    global, a closure, an attribute, or the frames of the exception it raised): the
    kernel's temporaries are freed when it returns, and the caller's arrays may be, so
    such a view would read and write freed memory.  None where nothing escaped."""
    if not any(w() is not None for w in refs):
        return None
    if err is not None and err.__traceback__ is not None:
        traceback.clear_frames(err.__traceback__)    # the views in its frames' locals
        del err
        gc.collect()
        if not any(w() is not None for w in refs):
            return None
    gc.collect()                                       # a view in a reference cycle
    if not any(w() is not None for w in refs):
        return None
    return ComputeError(
        f"extern call {st.name}: the function kept a reference to an array it was given "
        f"(a view of the kernel's memory, valid only during the call: the kernel's "
        f"temporaries are freed when it returns), so it would read or write freed memory "
        f"later; keep a copy instead (np.array(x)), or keep nothing")


def call(n: int, data, ints, floats) -> int:
    """Run site ``n`` on the kernel's arguments (see the module doc); 0, or 1 when the
    function raised (the exception is kept for :func:`take_error`)."""
    refs: list = []
    try:
        st = _SITES[n]
        args, bi, k, si, fi = [], 0, 0, 0, 0
        nbuf = len(st.buffers)
        off = sum(2 * nd for _, nd, _ in st.buffers)
        for kind in st.order:
            if kind == "b":
                dt, nd, wr = st.buffers[bi]
                shape = [ints[k + d] for d in range(nd)]
                strides = [ints[k + nd + d] for d in range(nd)]
                args.append(_view(data[bi], np.dtype(dt), shape, strides, wr, refs))
                k += 2 * nd
                bi += 1
            elif st.scalars[si]:
                args.append(float(floats[fi]))
                fi += 1
                si += 1
            else:
                args.append(int(ints[off]))
                off += 1
                si += 1
        assert bi == nbuf
    except BaseException as e:  # noqa: BLE001 - re-raised by the kernel's caller
        _TLS.error = e
        return 1
    err = None
    try:
        st.fn(*args)
    except BaseException as e:  # noqa: BLE001 - re-raised by the kernel's caller
        err = e
    del args
    escaped = _escaped(st, refs, err)
    if escaped is not None:
        err = escaped
    if err is None:
        return 0
    _TLS.error = err
    return 1


def take_error() -> Optional[BaseException]:
    """The exception the last failed extern call on this thread raised (then forgotten)."""
    e = getattr(_TLS, "error", None)
    _TLS.error = None
    return e


_CB_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_double))
_CALLBACK = _CB_TYPE(call)


def address() -> int:
    """The address of the C entry point (kept alive with this module)."""
    return ctypes.cast(_CALLBACK, ctypes.c_void_p).value

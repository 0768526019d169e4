"""Data types.

A dtype is a plain string: ``float16`` and ``bfloat16`` (storage only: arithmetic runs in
float32), ``float32``, ``float64``, ``int8``, ``int16``, ``int32``, ``int64``, ``uint8``,
``bool``.

``bfloat16`` is float32's upper half (8 exponent bits, 7 mantissa bits).  A value becomes
bfloat16 by rounding its float32 value to nearest even (a float64 or an int goes through
float32 first, as the CPU code does; NaN stays a NaN).  numpy has no bfloat16: arrays of it
come from the ``ml_dtypes`` package (``ml_dtypes.bfloat16``) or are torch tensors.

Promotion rules (stated once, here):

* A Python literal adopts the dtype of the other operand (``x + 1`` where ``x`` is
  float16 is float16; ``i * 2.5`` where ``i`` is int32 is an error: an int expression
  cannot absorb a non-integral float literal; write ``i.astype("float32") * 2.5``).
* Two expressions of the same dtype give that dtype.
* Two integer dtypes of different widths (and uint8 with a signed type) promote to the
  wider signed type, as C does for index arithmetic (``int32 + int64 -> int64``).
* Mixing float widths, or an int with a float expression, raises :class:`DTypeError`:
  write ``astype`` explicitly.  (Silent promotion is where precision bugs hide.)
* ``bool`` combines only with ``bool`` (``tc.all``, ``tc.any``, ``&``, ``|``).
"""
from __future__ import annotations

from ..errors import DTypeError

ALL_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
              "uint8", "bool")
_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8, "int16": 16,
         "int32": 32, "int64": 64, "uint8": 8, "bool": 1}
_ALIASES = {"float": "float32", "int": "int32", "double": "float64", "half": "float16",
            "bool_": "bool", "uint8_t": "uint8", "bf16": "bfloat16"}
#: the storage-only floats: loads widen to float32, stores round, arithmetic is float32
STORAGE_FLOATS = ("float16", "bfloat16")


def canon(dtype) -> str:
    """Return the canonical name of ``dtype`` (a string, numpy dtype or type)."""
    name = dtype
    if dtype is None:
        raise DTypeError(f"dtype is None; give one of {', '.join(ALL_DTYPES)}")
    if not isinstance(dtype, str):
        try:
            import numpy as np

            name = np.dtype(dtype).name
        except Exception:  # noqa: BLE001 - anything numpy rejects is not a dtype
            raise DTypeError(f"{dtype!r} is not a dtype; use one of {', '.join(ALL_DTYPES)}") from None
    name = _ALIASES.get(name, name)
    if name not in _BITS:
        raise DTypeError(f"unknown dtype {dtype!r}; use one of {', '.join(ALL_DTYPES)}")
    return name


def bits(dtype: str) -> int:
    return _BITS[dtype]


def nbytes(dtype: str) -> int:
    """Bytes of one element of ``dtype`` in memory (``bool``: 1)."""
    return 1 if dtype == "bool" else bits(dtype) // 8


def is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def is_storage_float(dtype: str) -> bool:
    """float16 or bfloat16: stored narrow, computed in float32."""
    return dtype in STORAGE_FLOATS


def round_bf16(x: float) -> float:
    """``x`` rounded to the nearest bfloat16 (through float32, ties to even)."""
    import struct

    import numpy as np

    with np.errstate(over="ignore"):
        f = float(np.float32(x))
    if f != f:
        return f
    (u,) = struct.unpack("<I", struct.pack("<f", f))
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def round_storage(dtype: str, x: float) -> float:
    """``x`` rounded to the storage float ``dtype`` (float16: once, from ``x``)."""
    if dtype == "bfloat16":
        return round_bf16(x)
    import numpy as np

    with np.errstate(over="ignore"):
        return float(np.float16(x))


def is_int(dtype: str) -> bool:
    """Signed or unsigned integer (not bool)."""
    return dtype.startswith("int") or dtype.startswith("uint")


def is_uint(dtype: str) -> bool:
    return dtype.startswith("uint")


def int_limits(dtype: str):
    """``(smallest, largest)`` value of the integer dtype (bool: ``(0, 1)``)."""
    if dtype == "bool":
        return 0, 1
    b = bits(dtype)
    if is_uint(dtype):
        return 0, (1 << b) - 1
    return -(1 << (b - 1)), (1 << (b - 1)) - 1


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic runs in: float16 and bfloat16 are storage only and compute in
    float32."""
    return "float32" if dtype in STORAGE_FLOATS else dtype


def promote(a: str, b: str, what: str = "operands") -> str:
    """The result dtype of a binary arithmetic operation on expressions of dtypes a, b."""
    if a == b:
        return a
    if is_int(a) and is_int(b):
        wide = max(bits(a), bits(b))
        if is_uint(a) != is_uint(b) and wide == 8:
            wide = 16
        if is_uint(a) and is_uint(b):
            return f"uint{wide}"
        return f"int{max(wide, 8)}"
    raise DTypeError(
        f"{what} have dtypes {a} and {b}, which tecomp does not mix implicitly; "
        f"convert one side with .astype({a!r}) or .astype({b!r})"
    )


def numpy_dtype(dtype: str):
    import numpy as np

    if dtype == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise DTypeError("bfloat16 arrays need the ml_dtypes package (numpy has no "
                             "bfloat16): pip install ml_dtypes, or pass torch tensors") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype("bool" if dtype == "bool" else dtype)

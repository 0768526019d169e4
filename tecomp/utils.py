"""Small helpers TVM users reach for (``tvm.topi.utils``): constant shapes as Python ints.

    from tecomp.utils import get_const_tuple, get_const_int
    get_const_tuple(C.shape)       # (1024, 1024), or (n, 1024) with n kept symbolic
    get_const_int(C.shape[1])      # 1024

Constant extents are also ints directly: ``int(C.shape[0])``,
``operator.index(C.shape[0])``, ``range(C.shape[0])``, ``np.zeros(C.shape)``.
"""
from __future__ import annotations

import numbers
from typing import Iterable, Tuple, Union

from .errors import ExprError
from .ir.expr import Const, Expr
from .ir.simplify import simplify

__all__ = ["get_const_int", "get_const_tuple"]


def _const_or_expr(x, where: str) -> Union[int, Expr]:
    if isinstance(x, bool):
        raise ExprError(f"{where}: {x!r} is a bool, not an extent")
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, Expr):
        e = simplify(x)
        return int(e) if isinstance(e, Const) else e
    raise ExprError(f"{where}: {x!r} ({type(x).__name__}) is neither an int nor a tecomp "
                    f"expression")


def get_const_int(x: Union[int, Expr]) -> int:
    """``x`` as an int: an int, or an integer expression that simplifies to a constant.

    Parameters
    ----------
    x : int or Expr
        The value, e.g. ``C.shape[1]``.

    Returns
    -------
    int
        The constant.

    Raises
    ------
    ExprError
        For a symbolic expression, a bool, or something else.

    Examples
    --------
    >>> import tecomp as tc
    >>> from tecomp.utils import get_const_int
    >>> get_const_int(tc.placeholder((3, 1024)).shape[1])
    1024
    """
    v = _const_or_expr(x, "get_const_int")
    if isinstance(v, Expr):
        raise ExprError(f"get_const_int: `{v}` is symbolic, not a constant; use "
                        f"get_const_tuple to keep symbolic extents, or bind the variable")
    return v


def get_const_tuple(shape: Iterable) -> Tuple[Union[int, Expr], ...]:
    """A shape as a tuple, as TVM's ``get_const_tuple`` does.

    Parameters
    ----------
    shape : iterable of int or Expr
        The extents, e.g. ``C.shape``.

    Returns
    -------
    tuple of int or Expr
        Each constant extent as an int, each symbolic one (``n``, ``n*2``) as its
        simplified expression.

    Raises
    ------
    ExprError
        For something that is not a shape, or an extent that is neither an int nor an
        expression.

    Examples
    --------
    >>> import tecomp as tc
    >>> from tecomp.utils import get_const_tuple
    >>> get_const_tuple(tc.placeholder((tc.var("n"), 4)).shape)
    (Var('n', 'int32'), 4)
    """
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise ExprError(f"get_const_tuple expects a shape (a tuple of extents, e.g. "
                        f"C.shape), got {type(shape).__name__}")
    return tuple(_const_or_expr(x, f"get_const_tuple: extent {d}")
                 for d, x in enumerate(shape))

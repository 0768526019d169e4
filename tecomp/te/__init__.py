"""The user DSL: placeholders, computes, reduce axes, reducers and intrinsics."""
from .tensor import (
    ComputeOp, Operation, PlaceholderOp, Tensor, THREAD_TAGS, compute, const, placeholder,
    reduce_axis, thread_axis, var,
)
from .reduce import Reducer, comm_reducer, max, max_value, min, min_value, prod, sum  # noqa: A004
from .intrin import (
    abs, all, any, cast, ceil, cos, eq, erf, exp, exp2, expm1, fast_exp, floor, floordiv, floormod,
    fma, if_then_else, log, log1p, log2, maximum, minimum, ne, pow, round, rsqrt, select, sigmoid,
    sin, softplus, sqrt, tanh, truncdiv, truncmod, tan, sign, trunc, isnan, isinf, isfinite,
    atan, atan2, cbrt, erfc, fast_erfc, fast_log,
)
from .extern import ExternOp, call_packed, extern, get_global_func, register_func  # noqa: E402
from .scan import ScanOp, scan  # noqa: E402
from .scatter import ScatterOp, scatter_add  # noqa: E402

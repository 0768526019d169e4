"""The loop IR: expression and statement nodes, dtypes, buffers, PrimFunc, the generic
visitor/mutator, the printer and its reader (parse), the simplifier and interval analysis.

Nothing in ``tecomp.ir`` imports from the layers above it.
"""
from . import dtype
from .expr import (
    EQ, GE, GT, INTRINSICS, LE, LT, NE, Add, And, BinaryOp, Buffer, BufferLoad, Call, Cast,
    CmpOp, CommReducer, Const, Div, Expr, FloorDiv, FloorMod, IterVar, Let, Max, Min, Mul, Node,
    Not, Or, ProducerLoad, Range, Reduce, Select, Sub, TruncDiv, TruncMod, TupleCommReducer, Var,
    Comparison, as_expr, as_index, same_as,
)
from .stmt import (
    LOOP_KINDS, Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt,
    Prefetch, PrimFunc, SeqStmt, Stmt, seq, ExternCall,
)
from .functor import Mutator, Visitor, collect, free_vars, post_order, substitute, uses_var
from .printer import to_str
from .parse import parse, structural_equal
from . import simplify as _simplify  # noqa: F401  (registers itself with ir.arith)

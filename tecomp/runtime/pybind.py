"""The compiled argument binder: checks a call's numpy arrays and calls the kernel.

The runtime's own code, as LLVM IR text (this module imports no llvmlite): the LLVM
module (:mod:`tecomp.runtime.llvm`) compiles it once per process, when it first
compiles a kernel.

A call from Python to a kernel that takes only arrays (``f(a, b, c)``) spends most of
its time checking the arrays: their type, dtype, shape, layout and flags, and whether
two of them overlap.  In Python that is about a microsecond for three arrays, one
percent of a 100 us kernel.  The binder does it in compiled code instead: one function
for every kernel of the process, which reads the array objects' fields (numpy's
``PyArrayObject``: ``data``, ``nd``, ``dimensions``, ``base``, ``descr``, ``flags``) and
the call's argument tuple, and follows a kernel's *program*, a list of int64 words the
runtime writes once per kernel (:func:`tecomp.runtime.llvm._binder_program`).

The binder only ever accepts; it never explains.  Any check that fails makes it return
``NOT_HERE`` (-1) before the kernel runs, and the runtime's Python path takes the call:
it binds what the binder does not (views, torch tensors, scalars), picks the variant and
raises the detailed error.  Two arrays whose bytes overlap give ``ALIASED`` (-2): the
Python path checks them (an overlapping output is refused; the same array for an input
and an output runs the aliasing-safe variant where the kernel allows it).  Otherwise it
returns the kernel's own code.

The field offsets are those of CPython's object header and numpy's array struct; the
runtime confirms them on probe arrays (:func:`tecomp.runtime.llvm._probe_binder_layout`)
and does not use the binder where one differs.

Program (int64 words)::

    header  [0] buffers  [1] first args slot (words)  [2] error words (words)
            [3] kernel entry (the contiguous no-alias variant's ``tecomp_<name>``)
            [4] numpy.ndarray's type object  [5] the call's argument count
            [6], [7] unused
    steps of 8 words, from word 8, each [op, a, b, c, d, e, f, 0]:
      ARRAY  a position in the call, b the dtype's descr object, c buffer index,
             d the flags it must have, e ndim, f itemsize: the array's data pointer
             goes to data slot c (the base, when there is one, must be an ndarray that
             owns its memory, as the Python path asks)
      DIM    dimension b of buffer a must be c
      BIND   dimension b of buffer a goes to args slot c, if at most d
      SAME   dimension b of buffer a must equal args slot c (bound before)
      APART  the bytes of buffers a and b must not overlap
      END    call the kernel with the scratch block's data, args and error words
"""
from __future__ import annotations

from dataclasses import dataclass

OP_END, OP_ARRAY, OP_DIM, OP_BIND, OP_SAME, OP_APART = range(6)
STEP_WORDS = 8
HEADER_WORDS = 8
NOT_HERE, ALIASED = -1, -2
SYMBOL = "tecomp_pybind"


@dataclass(frozen=True)
class ObjectLayout:
    """Byte offsets of the fields the binder reads."""

    ob_type: int        # PyObject.ob_type
    tuple_size: int     # PyVarObject.ob_size of a tuple
    tuple_items: int    # PyTupleObject.ob_item[0]
    data: int           # PyArrayObject.data
    nd: int             # .nd (int)
    dims: int           # .dimensions
    base: int           # .base
    descr: int          # .descr
    flags: int          # .flags (int)
    owndata: int        # NPY_ARRAY_OWNDATA


def binder_ir(lay: ObjectLayout) -> str:
    """The binder as textual LLVM IR: ``i32 tecomp_pybind(ptr program, ptr scratch,
    ptr args)`` (``args``: the call's tuple)."""
    return _IR.format(SYMBOL=SYMBOL, L=lay, END=OP_END, ARRAY=OP_ARRAY, DIM=OP_DIM,
                      BIND=OP_BIND, SAME=OP_SAME, APART=OP_APART, STEP=STEP_WORDS,
                      HEAD=HEADER_WORDS, NOT_HERE=NOT_HERE, ALIASED=ALIASED)


_IR = r"""
define i32 @{SYMBOL}(ptr %prog, ptr %scratch, ptr %args) nounwind {{
entry:
  %nbuf = load i64, ptr %prog, align 8
  %slot0 = call i64 @tecomp_pybind.word(ptr %prog, i64 1)
  %err0 = call i64 @tecomp_pybind.word(ptr %prog, i64 2)
  %fnw = call i64 @tecomp_pybind.word(ptr %prog, i64 3)
  %ndw = call i64 @tecomp_pybind.word(ptr %prog, i64 4)
  %ndarray = inttoptr i64 %ndw to ptr
  %nargs = call i64 @tecomp_pybind.word(ptr %prog, i64 5)
  %objs = alloca ptr, i64 %nbuf, align 8
  %sizes = alloca i64, i64 %nbuf, align 8
  %tsp = getelementptr i8, ptr %args, i64 {L.tuple_size}
  %tsize = load i64, ptr %tsp, align 8
  %tok = icmp eq i64 %tsize, %nargs
  br i1 %tok, label %step, label %no

step:
  %pc = phi i64 [ {HEAD}, %entry ], [ %pcn, %next ]
  %pcn = add i64 %pc, {STEP}
  %w0 = getelementptr i64, ptr %prog, i64 %pc
  %op = load i64, ptr %w0, align 8
  %a = call i64 @tecomp_pybind.word(ptr %w0, i64 1)
  %b = call i64 @tecomp_pybind.word(ptr %w0, i64 2)
  %c = call i64 @tecomp_pybind.word(ptr %w0, i64 3)
  switch i64 %op, label %no [ i64 {END}, label %call
                               i64 {ARRAY}, label %array
                               i64 {DIM}, label %dim
                               i64 {BIND}, label %bind
                               i64 {SAME}, label %same
                               i64 {APART}, label %apart ]

array:
  %need = call i64 @tecomp_pybind.word(ptr %w0, i64 4)
  %ndim = call i64 @tecomp_pybind.word(ptr %w0, i64 5)
  %isz = call i64 @tecomp_pybind.word(ptr %w0, i64 6)
  %itp = getelementptr ptr, ptr %args, i64 %a
  %itq = getelementptr i8, ptr %itp, i64 {L.tuple_items}
  %obj = load ptr, ptr %itq, align 8
  %isarr = call i1 @tecomp_pybind.is_array(ptr %obj, ptr %ndarray)
  br i1 %isarr, label %array.descr, label %no
array.descr:
  %dsp = getelementptr i8, ptr %obj, i64 {L.descr}
  %dsc = load i64, ptr %dsp, align 8
  %dok = icmp eq i64 %dsc, %b
  %fl = call i64 @tecomp_pybind.flags(ptr %obj)
  %fm = and i64 %fl, %need
  %fok = icmp eq i64 %fm, %need
  %ndp = getelementptr i8, ptr %obj, i64 {L.nd}
  %nd32 = load i32, ptr %ndp, align 4
  %nd = sext i32 %nd32 to i64
  %nok = icmp eq i64 %nd, %ndim
  %ok1 = and i1 %dok, %fok
  %ok2 = and i1 %ok1, %nok
  br i1 %ok2, label %array.base, label %no
array.base:
  %bsp = getelementptr i8, ptr %obj, i64 {L.base}
  %base = load ptr, ptr %bsp, align 8
  %nobase = icmp eq ptr %base, null
  br i1 %nobase, label %array.size, label %array.owner
array.owner:
  %barr = call i1 @tecomp_pybind.is_array(ptr %base, ptr %ndarray)
  br i1 %barr, label %array.owns, label %no
array.owns:
  %bfl = call i64 @tecomp_pybind.flags(ptr %base)
  %bown = and i64 %bfl, {L.owndata}
  %bok = icmp ne i64 %bown, 0
  br i1 %bok, label %array.size, label %no
array.size:
  %dmp = getelementptr i8, ptr %obj, i64 {L.dims}
  %dims = load ptr, ptr %dmp, align 8
  br label %size.loop
size.loop:
  %i = phi i64 [ 0, %array.size ], [ %i1, %size.body ]
  %n = phi i64 [ %isz, %array.size ], [ %n1, %size.body ]
  %more = icmp slt i64 %i, %ndim
  br i1 %more, label %size.body, label %array.done
size.body:
  %di = call i64 @tecomp_pybind.word(ptr %dims, i64 %i)
  %n1 = mul i64 %n, %di
  %i1 = add i64 %i, 1
  br label %size.loop
array.done:
  %dtp = getelementptr i8, ptr %obj, i64 {L.data}
  %data = load i64, ptr %dtp, align 8
  %slot = getelementptr i64, ptr %scratch, i64 %c
  store i64 %data, ptr %slot, align 8
  %op1 = getelementptr ptr, ptr %objs, i64 %c
  store ptr %obj, ptr %op1, align 8
  %sp1 = getelementptr i64, ptr %sizes, i64 %c
  store i64 %n, ptr %sp1, align 8
  br label %next

dim:
  %dv = call i64 @tecomp_pybind.dim(ptr %objs, i64 %a, i64 %b)
  %dimok = icmp eq i64 %dv, %c
  br i1 %dimok, label %next, label %no

bind:
  %bv = call i64 @tecomp_pybind.dim(ptr %objs, i64 %a, i64 %b)
  %hi = call i64 @tecomp_pybind.word(ptr %w0, i64 4)
  %inr = icmp ule i64 %bv, %hi
  br i1 %inr, label %bind.store, label %no
bind.store:
  %bslot = add i64 %slot0, %c
  %bsl = getelementptr i64, ptr %scratch, i64 %bslot
  store i64 %bv, ptr %bsl, align 8
  br label %next

same:
  %sv = call i64 @tecomp_pybind.dim(ptr %objs, i64 %a, i64 %b)
  %sslot = add i64 %slot0, %c
  %want = call i64 @tecomp_pybind.word(ptr %scratch, i64 %sslot)
  %sok = icmp eq i64 %sv, %want
  br i1 %sok, label %next, label %no

apart:
  %da = call i64 @tecomp_pybind.word(ptr %scratch, i64 %a)
  %db = call i64 @tecomp_pybind.word(ptr %scratch, i64 %b)
  %na = call i64 @tecomp_pybind.word(ptr %sizes, i64 %a)
  %nb = call i64 @tecomp_pybind.word(ptr %sizes, i64 %b)
  %ea = add i64 %da, %na
  %eb = add i64 %db, %nb
  %o1 = icmp ult i64 %da, %eb
  %o2 = icmp ult i64 %db, %ea
  %over = and i1 %o1, %o2
  br i1 %over, label %aliased, label %next

next:
  br label %step

call:
  %fn = inttoptr i64 %fnw to ptr
  %argsp = getelementptr i64, ptr %scratch, i64 %slot0
  %errp = getelementptr i64, ptr %scratch, i64 %err0
  %rc = call i32 %fn(ptr %scratch, ptr %argsp, ptr %errp)
  ret i32 %rc

no:
  ret i32 {NOT_HERE}
aliased:
  ret i32 {ALIASED}
}}

define internal i64 @tecomp_pybind.word(ptr %p, i64 %k) nounwind alwaysinline {{
  %wp = getelementptr i64, ptr %p, i64 %k
  %w = load i64, ptr %wp, align 8
  ret i64 %w
}}

define internal i1 @tecomp_pybind.is_array(ptr %obj, ptr %ndarray) nounwind alwaysinline {{
  %tp = getelementptr i8, ptr %obj, i64 {L.ob_type}
  %type = load ptr, ptr %tp, align 8
  %is = icmp eq ptr %type, %ndarray
  ret i1 %is
}}

define internal i64 @tecomp_pybind.flags(ptr %obj) nounwind alwaysinline {{
  %fp = getelementptr i8, ptr %obj, i64 {L.flags}
  %f = load i32, ptr %fp, align 4
  %fl = zext i32 %f to i64
  ret i64 %fl
}}

define internal i64 @tecomp_pybind.dim(ptr %objs, i64 %k, i64 %d) nounwind alwaysinline {{
  %op = getelementptr ptr, ptr %objs, i64 %k
  %obj = load ptr, ptr %op, align 8
  %dmp = getelementptr i8, ptr %obj, i64 {L.dims}
  %dims = load ptr, ptr %dmp, align 8
  %v = call i64 @tecomp_pybind.word(ptr %dims, i64 %d)
  ret i64 %v
}}
"""

"""Edge cases: what a careless user or an attacker passes, drawn beside the fuzzer's programs.

The program generator (``gen.py``) and the schedule generator (``sched.py``) make legal
programs and schedules and call them the way their authors imagined.  The families here
take such a drawn case and twist *how it is written or called*, the way a user who never
read the docs, or one who wants to crash the caller, would:

``conditions``
    every index condition of the program rewritten with ``|``, ``~``, ``!=`` and ``==``
    (De Morgan's laws: the same values), built with Python's operators.
``big_split``
    a split or tile factor (or nparts) far past the axis' extent: ``extent + 1``,
    ``2**31 - 1``, ``2**31``, ``2**32 + 1``, ``2**40``: the same values, or a
    ``ScheduleError`` where the factor makes an annotated loop impossible (a vectorize of
    a loop that runs the whole symbolic axis, an unroll of 2**31 copies).  Three cases
    in ten (session 31, a stream of their own, ``RandomDraw(seed * 7919 + 65)``) give
    every factor a numpy integer type (:data:`NUMPY_FACTOR_TYPES`): the same values, and
    the schedule's trace replayable (``np.int64(8)`` once had "no name in a trace").
``layouts``
    the same kernel called with inputs as stride-0 broadcasts, reversed and overlapping
    views (the result must not change), and with an output that overlaps an input or
    itself (stride 0): refused with an ``ArgumentError``.  Half of the cases with such
    inputs (session 19, drawn from a stream of their own) also store their outputs past
    the cache (``pragma nontemporal`` on each output's outermost loop) and pass each
    output 0 to 15 elements past a 64-byte line, or reversed: the same values (a
    streamed store aligned for a line its output is not on would fault).  One case in
    five (session 30, stream 55) passes numpy masked arrays instead: every array with a
    mask of nothing (the plain call's values), or one input's or output's element masked
    (refused: a kernel ignores masks, and once read masked inputs as values).
``lazy_bits``
    torch tensors with the negation bit (``torch._neg_view``, ``z.conj().imag``) as
    inputs (read with their sign) and outputs (refused with an ``ArgumentError``); or
    an input or output whose storage was shrunk after a first call
    (``untyped_storage().resize_``, as FSDP frees a parameter; refused likewise); or a
    ZeroTensor (``torch._efficientzerotensor``, data pointer 0) as an input (read as
    zeros) or an output (refused); or (a fifth of the seeds, a stream of their own,
    ``RandomDraw(seed * 7919 + 53)``, session 29) inside a forward-mode AD level
    (``torch.autograd.forward_ad.dual_level``) a dual tensor as an input (its tangent
    would be dropped) or an output (its tangent would stay): refused; or plain tensors
    there: the plain call's outputs; or (15% of the seeds, a stream of their own,
    ``RandomDraw(seed * 7919 + 66)``, session 31) torch tensors inside
    ``torch.jit.trace`` (after a plain call or not): refused, since a trace records torch
    ops only (the traced function returned its outputs' old memory).
``foreign_target``
    the case built for another CPU (``-mcpu``, ``-mattr`` additions and removals), called
    here: the right answer, or a :class:`~tecomp.errors.TecompError` naming the target --
    never a signal.  Half of them exported and loaded.
``big_extent``
    sizes and offsets past 2**31, with memory kept small: the case's arrays placed in a
    lazily mapped buffer with strides that put their elements more than 2**31 elements
    apart (the result must not change); the case's symbolic extent declared int64; or a
    sum over 2**31 + r terms of a stride-0 input (int32 or int64 extent, a random split
    and vectorize or parallel), checked exactly.  Three in ten (session 30, a stream of
    their own, ``RandomDraw(seed * 7919 + 60)``) instead sum over ``k <
    x.astype("int32" | "int64")`` for a float32 or float64 scalar ``x`` of every class
    (:data:`FLOAT_EXTENT_VALUES`: NaN, infinities, past the int type's range, its lowest
    value, negative, fractional, ordinary), scheduled plainly, split and vectorized, or
    parallel: the sum of the first ``trunc(x)`` terms, or the call's ``ArgumentError``
    where the conversion has no defined value (it names the conversion), or, for a
    negative extent, one that the extent must be ``>= 0`` (or the empty sum, where a
    split's rounding makes the loop's count 0).  Before session 30 such an extent was an
    ``InternalError`` at build, NaN a raw ``ValueError`` at the call, and ``1e30``
    wrapped to an extent the kernel did not run.
``deep``
    an expression hundreds to a few thousand levels deep (a chain of + - * min max
    select and casts, as a Python ``sum`` over a loop builds one), beyond Python's
    recursion limit for a recursive pass, with a random simple schedule, on the CPU or in
    the CUDA emulation: equal to numpy's bit for bit.
``records``
    a tuning log for the case's workload whose records are forged or corrupt: a value in
    a step replaced (huge, negative, zero, a float, a string with quotes and newlines,
    nesting), steps dropped, repeated or reordered, times of ``10**4000`` or NaN, lines
    nested 100,000 deep or a megabyte long, beside a genuine record.  ``tc.auto_schedule(
    args, log=...)`` gives a schedule that computes the right values (warnings allowed)
    or an ``AutoScheduleError``.
``library_file``
    an exported library tampered with (bytes flipped, truncated, extended, the sidecar
    swapped, replaced by a FIFO, a directory or a link): ``tc.load_module`` refuses it
    with a ``LoadError``; the untouched copy still loads.  Five cases in six first export
    the library onto a device node (made in a temporary directory), a FIFO, a link to
    one, a socket, or with a FIFO in the sidecar's place: a ``BuildError``, the file
    left as it was (drawn after the tamper, so each seed keeps its tamper).  Two in five
    (drawn after those) also forge a TMA tensor-map box as a GPU library's metadata
    says it (any axis twice, inner parts past their blocks, blocks of any size, within
    the ranges the metadata reader checks) over a tensor of a drawn shape: the host's
    checks refuse its map exactly where the hardware's model (``tma.reference_box``)
    would read past the tensor.
    About a third (a stream of their own, ``RandomDraw(seed * 7919 + 92)``) instead flip
    one bit where the dynamic loader reads the library (:data:`RESEAL_REGIONS`: ELF and
    program headers, dynamic section, dynamic symbols' names, kinds and sections, names,
    GNU hash, versions, relocations, tecomp's metadata) and write its sidecar anew:
    ``load_module`` refuses it, or its call is refused, or it gives the built module's
    outputs; a crash of the process in ``dlopen`` (session 25 found one by hand) is a
    finding.  Of those, three in ten (session 27, a stream of their own,
    ``RandomDraw(seed * 7919 + 95)``) flip a bit of a digit of the metadata instead
    (:data:`DIGIT_REGIONS`: an extent, a stride slot, an offset -- JSON that still reads)
    or of the metadata's sha256 beside the code; and a library that loads with metadata
    other than what ``export_library`` wrote is a finding (before session 27 one loaded
    and took arrays its code did not compute over: a partial result).
    Three in ten (session 28, drawn first, from a stream of their own,
    ``RandomDraw(seed * 7919 + 96)``) also attack the CUDA emulation's cache entry of a
    small kernel (:mod:`tecomp.testing.emu_entry`: a library of another key with its own
    sidecar and a static constructor, one renamed onto the entry between its check and
    its load, truncated or key-flipped and resealed, links, FIFOs, a directory): compiled
    again with the right values and no code of another key run (a directory: a
    BuildError); before session 28 the other key's constructors ran, and a file renamed
    onto the entry after its check was the one loaded.  Of those, 15 in a hundred
    (session 31, ``RandomDraw(seed * 7919 + 64)``, the environment family's stream: no
    seed draws both) rebuild the entry under a file size limit instead (``disk_full``:
    a full disk's errors): a BuildError naming the cache directory, nothing left behind.

Session 8's families, drawn for the edge seeds whose ``(seed // 9) % 8 == 7`` (every
other seed draws what it drew before them; :func:`family_of`):

``gather_ids``
    a gather ``X[ids[i], j]`` through an index tensor (int32 or int64; serial, vectorized,
    parallel or split), built without ``checks=True``, called with ids in range (equal to
    numpy) or with one past the table, at ``-1`` or far outside: a ``BoundsError``.
    Some (session 12, drawn last) read rows at an index whose extremes are not at the
    ends of its range instead -- ``X[(i % p)*q + c, j]``, ``X[int32(int8(i*q)) + c, j]``,
    a sum of ``X[int32(k), j]`` over more than 2**31 int64 terms --, maybe only the rows
    ``i < L`` (under ``tc.if_then_else``), over a table that holds them or misses a row:
    a ``ShapeError`` or ``ArgumentError``, never a read outside (:func:`_run_wrapped`).
``build_args``
    the case built under the name of a runtime function its code may call
    (``parallel_for``, ``ws_alloc``...): a ``BuildError``; or an output's axis split by a
    ``tc.var`` left out of the arguments: a ``LowerError``, then passed (1, 3, past the
    extent) and called: equal to the plain build; or an extern stage whose function keeps
    a view of the kernel's memory past the call (in a list, a slice of it, in the
    exception it raises): a ``ComputeError`` (a copy: runs).
``ir_edit``
    the case's printed IR edited as a user might (an allocation's extent made 0 or
    negative, an index shifted past its buffer), read back with ``tc.ir.parse``, built
    and called: the right answer or a ``TecompError`` (``BoundsError``), never a crash.
    Three in ten (drawn after those) wrap a store ``X[i] = v`` in a branch whose
    condition reads what it writes (``if (v != X[i]) { X[i] = v; X[i] = select(v !=
    X[i], X[i], X[i] + 1) }``): the simplifier's IR computes what the edited IR computes
    (the reference interpreter), bit for bit.
``shared_reduction``
    row sums cached in shared memory (``cache_write(C, "shared")``) in the CUDA emulation:
    computed at the threadIdx loop with no loop of their own bound to it (a
    ``ScheduleError``: every thread would run the whole reduction into the same shared
    elements), or shared among the threads, or in ``local`` scope (equal to numpy, no
    race in the interpreter).

Session 9's families, drawn for the edge seeds whose ``seed // 576`` is odd and whose
``(seed // 9) % 8 == 2`` (one in sixteen from seed 576 on; :func:`family_of`):

``torch_autograd``
    a ``tecomp.torch.op`` of a small smooth formula (exp, tanh, sigmoid, log1p, products
    and a row sum) in float64: a gradient penalty (``torch.autograd.grad(...,
    create_graph=True)`` then a backward through the gradient) equal to torch autograd's
    on the same formula; or a batch of 0 rows, forward and backward, specialised or not;
    one in five called with float32 and float64 tensors for its two float32 inputs: the
    op's ``ArgumentError`` naming both.  Two in five (a stream of their own,
    ``RandomDraw(seed * 7919 + 52)``, session 29) first take the op through ``copy``
    or ``pickle``, before or after a first call (:data:`COPY_WAYS`): a model (a dict)
    holding it deep-copied, as an EMA copy is, and the copy's op used; ``copy.copy``;
    the op, or its forward's compiled module, pickled: an ``ArgumentError`` saying how
    to move it, then the op used as it is (the mixed ones are refused first).  A
    quarter (a stream of their own, ``RandomDraw(seed * 7919 + 66)``, session 31) take
    the gradient penalty through ``tecomp.torch.SyncBatchNorm`` in training instead
    (float64, one process, 0 to 3 spatial dimensions, channels-last or not, affine or
    not): torch's ``BatchNorm``'s gradients; of the others, two in five also run
    ``torch.library.opcheck``'s fake-tensor test of the op's custom op and its backward
    op with a column-major ``X``: the fake implementations give the real strides.
``quant_scales``
    ``quantize``, ``dequantize``, ``requantize`` or ``quantized_dense`` with scales at
    float32's ends (subnormal, the smallest normal, the largest, past it, and products of
    scales that leave the range): a ``ComputeError`` where a scale the kernels hold in
    float32 is not a normal float32, else within one unit of a float64 reference.
``gpu_gather``
    the ``gather_ids`` case scheduled for the GPU (rows on ``blockIdx.x``, columns on
    ``threadIdx.x``) in the CUDA emulation: equal to numpy, or a ``BoundsError`` for an id
    outside the table.
``torch_inplace``
    the drawn case called with torch tensors as its outputs (contiguous: the fast
    binder; or strided views: the generic path; inputs as numpy arrays or torch tensors)
    that autograd saved for a backward (``(w * out).sum()``): the values of the plain
    call, and that backward raises ("modified by an inplace operation"), as after an
    in-place torch op, instead of computing with the overwritten values.  Half of them
    pass every tensor as a ``torch.Tensor`` subclass defined here, called under a torch
    dispatch mode that declines subclasses (as torch.compile's AOT runtime runs a graph).

Session 14's family, in a slot of its own (:func:`in_session14_slot`):

``device_array``
    device arrays that lie, passed to a ``cuda`` module whose driver is a stand-in
    (:mod:`tecomp.testing.device_arrays`: "device memory" is host memory, a launch runs
    the kernel in the CUDA emulation): a ``__cuda_array_interface__`` that is malformed
    (a key missing, a float or negative shape, strides of another rank, a typestr of
    None or one numpy does not read, big-endian, data that is no pair), masked, raising,
    with a null, negative, float, misaligned or past-the-address-space pointer, a
    version-3 ``stream`` of 0 or of no integer, in host memory or on another GPU, or a
    read-only, stride-0 or overlapping output: an
    ``ArgumentError`` before any launch.  Honest ones (an older interface version, a view
    a few elements into its allocation, explicit C-contiguous strides, a ``shape``
    attribute that disagrees with the interface, an interface that describes another
    array on every later read, the same array in place of the elementwise input, a
    ``stream`` naming the producer's stream, which the call waits for once before its
    first launch, the legacy default stream excepted) give numpy's values, each
    interface read once a call.

Session 18's family, in a slot of its own (:func:`in_session18_slot`):

``row_division``
    ``Y[i, j] = X[i, j] / D[i]``, the divisor an input or a row's maximum (exactly one
    drawn value), with divisors of every class: zeros of either sign, infinities, NaN,
    subnormals (the smallest, one whose reciprocal overflows, the largest), the edges of
    the range whose reciprocals are normal, the largest finite values, ordinary ones; and
    numerators of every class.  Scheduled plainly (IEEE division: equal bit for bit), or
    with ``pragma fp_reciprocal`` (vectorized, split, parallel or scalar), or by
    ``tc.auto_schedule`` (its ``rcp.<stage>`` knob on or off): every zero (with its
    sign), infinity and NaN of numpy's quotient, finite quotients within 1 ulp.

Session 19's family, in a slot of its own (:func:`in_session19_slot`):

``flash_config``
    ``tc.nn.flash_attention`` (batch 1-3, 1-2 heads, lengths 1-130, head dims 16-128,
    float16 or bfloat16, causal or not, a padding mask or none) scheduled for the CUDA
    emulation with a ``FlashConfig`` whose fields are each legal or, three in twenty,
    hostile (a float, a string, a bool, None, a numpy integer, 0, -1, ``10**6``, 16-row
    warps, a form of another name; ``exp2``, ``whole`` and ``diagonal_test`` drawn too),
    and lowered: a ``ScheduleError`` whose message starts with the config, never another
    error, and a config of legal fields (numpy integers among them) lowers; three in ten
    of those run in the emulation, within the 16-bit inputs' tolerance of a float64
    attention.

Session 20's family, in a slot of its own (:func:`in_session20_slot`):

``guarded_select``
    ``T[i] = if_then_else(cond, a, b)`` over 1-70 elements (float32, float64 or int32),
    whose condition reads a neighbour ``A[i + d]`` (or ``A[i - d]``) only inside a select
    of its own that guards it (``if_then_else(i < n - d, A[i + d], 0) > t``, on either
    side of the comparison), and whose operands read that neighbour (in ``A`` or in
    another array of the same shape) where the condition holds (it cannot hold where
    the guard does not), the element or a constant elsewhere (maybe written as
    ``if_then_else(~cond, other, neighbour)``); vectorized by 4, 8,
    16 or 32 lanes, split, or scalar; every input placed against an unreadable page (after
    its last element for ``+d``, before its first for ``-d``): numpy's values, and never a
    read past an array (a fault, a crash of the case) -- a select's operands evaluated on
    every lane where only the condition's own select made their loads safe.

Session 21's family, in a slot of its own (:func:`in_session21_slot`):

``environment``
    The drawn program, analytically auto-scheduled for this machine (which reads the
    machine model), built and run in a child process whose environment or cache holds
    what a careless user or an attacker left there: an environment variable tecomp reads
    (``TECOMP_VECTOR_LANES``, ``TECOMP_LLVM_OPT_TIMEOUT``, ``TECOMP_LLVM_WORKER_MAX_MB``,
    ``TECOMP_CALIBRATE``, ``TECOMP_NUM_THREADS``, ``TECOMP_SPIN``) set to a legal value or
    to ``abc``, ``0``, ``-8``, ``nan``, ``inf``..., or, in the machine calibration's place
    (:mod:`tecomp.calibration`, the host's table entry set aside), a FIFO, a directory, a
    link to ``/dev/zero``, a file of 1 MiB, a file of costs forged with absurd values, or a
    genuine one.  A variable whose documented answer is an error must raise it (a
    ``TargetError`` or ``BuildError`` naming the variable: refused); every other case
    computes numpy's values.  A hang (a FIFO read at the first schedule), a raw Python
    error (``int('abc')``, a division by zero) or a "bug in tecomp" message for a setting
    is a finding.  A fourth of them (session 30, a stream of their own,
    ``RandomDraw(seed * 7919 + 60)``, the big_extent family's offset: no seed draws both)
    set an on/off switch (:data:`SWITCHES`) to a word of :data:`SWITCH_VALUES`: after the
    case, the switch as tecomp reads it must be what the word says (``1``/``0``,
    ``true``/``false``, ``yes``/``no``, ``on``/``off``, any case), or, for any other
    word, its default with a warning naming the variable (before session 30
    ``TECOMP_DUMP_IR=off`` was on, ``TECOMP_PY_BINDER=off`` and ``TECOMP_SHARED_POOL=yes``
    their other value, silently).  A fifth of the others (session 31, a stream of their
    own, ``RandomDraw(seed * 7919 + 64)``) set a variable that takes a word
    (:data:`WORD_VARIABLES`: ``TECOMP_CUDA_EMU_MODE``, ``TECOMP_COST_MODEL``) to one of
    :data:`WORD_VALUES` (a word in another case, with blanks around, a near miss, two
    words): it must read as its word, blank as the default, anything else as the
    variable's error, or the default with a warning naming it (before session 31
    ``TECOMP_COST_MODEL=XGBoost`` kept the trees silently and ``TECOMP_CUDA_EMU_MODE="
    serial"`` was an error).

The ``foreign_target`` family also draws (one case in five, after its other draws) a
triple of another system or ABI (``aarch64-apple-darwin``, ``x86_64-linux-gnux32``): a
``TargetError``.

A case's outcome is ``ok``, ``refused`` (a documented refusal: the family allows a
``TecompError`` there and got one, other than ``InternalError``), ``rejected`` (a
resource limit, as in ``diff.py``), ``mismatch`` or ``crash``.  Everything runs in the
fuzzer's worker process, so a signal is recorded as a crash of the case.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import mmap
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import warnings
from typing import List, Optional
from dataclasses import dataclass, field

import numpy as np

import tecomp as tc
import tecomp.target as tgt
from .. import calibration as cal
from .. import threads as _threads
from ..codegen.llvm import jit as _jit
from ..lower import pipeline as _pipeline
from ..runtime import llvm as _rt_llvm
from ..threads import FLAG_WORDS
from ..autoschedule import cost_model as _cost_model, records
from ..codegen import cuda_emu as _cuda_emu
from ..ir import interp
from ..ir.expr import Buffer, Const
from ..ir.dtype import numpy_dtype
from ..lower.passes import simplify_pass
from ..lower.tma_pipeline import TmaBox, TmaDim, map_spec
from ..nn import quant
from ..runtime import aot_format
from ..runtime.elf import inspect_library
from ..runtime.libfiles import write_sidecar
from ..strategy import Knobs, apply_rules
from ..strategy.cpu import cpu_model
from ..strategy.cuda import FlashConfig, schedule_flash_attention, schedule_sdpa_as_flash
from ..target import tma as _tma
from .deep import chain_compute, chain_reference, random_chain
from .device_arrays import FORGERIES, DeviceStandIn, forged_call
from .diff import (
    Case, Outcome, _exc_text, case_arrays, compare, draw_case, numpy_problems, run_case, schedule_case,
)
from .draw import RandomDraw
from .emu_entry import ATTACKS as EMU_ENTRY_ATTACKS, run_attack as run_emu_attack
from .program import Cmp, CAnd, CNot, COr, is_float

FAMILIES = ("conditions", "big_split", "layouts", "lazy_bits", "foreign_target",
            "library_file", "records", "big_extent", "deep")

#: session 8's families (see the module doc); :func:`family_of` draws them
MORE_FAMILIES = ("gather_ids", "build_args", "ir_edit", "shared_reduction")

#: session 9's families (see the module doc), in a slot of their own (:func:`family_of`)
SESSION9_FAMILIES = ("torch_autograd", "quant_scales", "gpu_gather", "torch_inplace")

#: session 14's families (see the module doc), in a slot of their own (:func:`family_of`)
SESSION14_FAMILIES = ("device_array",)

#: session 18's family (see the module doc), in a slot of its own (:func:`family_of`)
SESSION18_FAMILIES = ("row_division",)

#: session 19's family (see the module doc), in a slot of its own (:func:`family_of`)
SESSION19_FAMILIES = ("flash_config",)

#: session 20's family (see the module doc), in a slot of its own (:func:`family_of`)
SESSION20_FAMILIES = ("guarded_select",)

#: session 21's family (see the module doc), in a slot of its own (:func:`family_of`)
SESSION21_FAMILIES = ("environment",)

#: the environment family's variables: (legal values, hostile values, whether a hostile
#: value is an error (the exception's name), else ignored with a warning); the optimiser
#: worker's settings are errors only where the worker runs
ENV_VALUES = {
    "TECOMP_VECTOR_LANES": (("8", "16"), ("abc", "0", "-8", "7", "32", "8.0", "1e3"),
                            "TargetError"),
    "TECOMP_LLVM_OPT_TIMEOUT": (("30", "120.5"), ("nan", "-1", "0", "inf", "abc", "1e400"),
                                "BuildError"),
    "TECOMP_LLVM_WORKER_MAX_MB": (("512", "64"), ("nan", "-1", "0", "abc"), "BuildError"),
    "TECOMP_CALIBRATE": (("0", "off", " OFF "), ("sometimes", "2", "yes"), "TargetError"),
    "TECOMP_NUM_THREADS": (("1", "2", "3"), ("0", "-3", "abc", "2.5"), None),
    "TECOMP_SPIN": (("0", "100"), ("-1", "abc", "1e9"), None),
}

#: (session 30) the environment family's on/off switches and their defaults; a fourth of
#: its cases (stream 60) set one to a value of :data:`SWITCH_VALUES`: a spelling of on or
#: off is read as such, anything else is ignored with a warning naming the variable
SWITCHES = {"TECOMP_SHARED_POOL": False, "TECOMP_PY_BINDER": True, "TECOMP_DUMP_IR": False,
            "TECOMP_LLVM_OPT_WORKER": True}
SWITCH_VALUES = ("1", "0", "true", "False", " ON ", "off", "yes", "No", "abc", "2", "enable",
                 "-1", "t", "disabled")

#: (session 31) the environment family's variables that take a word: (the words, the
#: default, the error another word is, or None: ignored with a warning) and the values a
#: fifth of its cases that set no switch (a stream of their own, 64) set one to: words in
#: other cases, with blanks around, near misses, lists, blank
WORD_VARIABLES = {
    "TECOMP_CUDA_EMU_MODE": (("threads", "serial", "reverse", "last_block_first"), "threads",
                             "ArgumentError"),
    "TECOMP_COST_MODEL": (("trees", "xgboost"), "trees", None),
}
WORD_VALUES = {
    "TECOMP_CUDA_EMU_MODE": ("serial", " serial", "Serial ", "REVERSE", "\tthreads",
                             "last_block_first\n", "Last_Block_First", "bogus", "thread",
                             "serial,reverse", "serial reverse", " "),
    "TECOMP_COST_MODEL": ("xgboost", "XGBoost", " xgboost", "xgboost\n", "Trees", "xgb",
                          "xgbost", "gbdt", "xgboost trees", "  "),
}

#: the settings the optimiser worker reads (errors only where it runs)
_WORKER_SETTINGS = ("TECOMP_LLVM_OPT_TIMEOUT", "TECOMP_LLVM_WORKER_MAX_MB")

#: what the environment family puts in the machine calibration's place
CALIBRATION_FILES = ("fifo", "directory", "link_to_dev_zero", "huge", "forged", "not_json",
                     "genuine")

#: -mtriple values of another system or a 32-bit-pointer ABI (a TargetError)
FOREIGN_SYSTEM_TRIPLES = (
    "llvm -mtriple=aarch64-apple-darwin", "llvm -mtriple=arm64-apple-ios",
    "llvm -mtriple=x86_64-apple-darwin", "llvm -mtriple=aarch64-pc-windows-msvc",
    "llvm -mtriple=x86_64-pc-windows-gnu", "llvm -mtriple=x86_64-linux-gnux32",
    "llvm -mtriple=aarch64-linux-gnu_ilp32", "llvm -mtriple=aarch64-unknown-freebsd",
)

#: what the library_file family first exports onto (None: nothing special): a device
#: node (made in a temporary directory, where this user may: the device of /dev/null), a
#: FIFO, a link to one, a socket, a FIFO in the sidecar's place
EXPORT_ONTO = (None, "char_device", "fifo", "link_to_fifo", "socket", "sidecar_fifo")

#: where the library_file family's resealed flip lands: the parts of the file the dynamic
#: loader reads to map, relocate and bind it (the ELF header, the program headers, the
#: dynamic section, the names, kinds and sections of the dynamic symbols -- not their
#: values, which point into the code --, their names, the GNU hash table, the version
#: needs, the relocations) and tecomp's metadata section.  The code, the data it reads,
#: the symbols' addresses and which declared version each binds to (an older
#: ``pthread_cond_broadcast`` is another function) are trusted once the sidecar matches
#: (docs/runtime.md).
RESEAL_REGIONS = ("ehdr", "phdrs", "dynamic", "dynsym", "dynstr", "gnu_hash", "versions",
                  "relocations", "metadata")

#: where session 27's resealed flips land instead (``RandomDraw(seed * 7919 + 95)``): a
#: digit of the metadata (a change that still reads as JSON: an extent, a slot, an
#: offset), twice as often as the metadata's sha256 (:data:`aot_format.DIGEST_SECTION`)
DIGIT_REGIONS = ("metadata_digits", "metadata_digits", "digest")

#: the kernel names whose symbols (tecomp_<name>) are runtime functions kernels call
RUNTIME_NAMES = ("parallel_for", "ws_alloc", "ws_free", "extern_call")


def in_session9_slot(seed: int) -> bool:
    """Whether edge seed ``seed`` draws one of :data:`SESSION9_FAMILIES`: ``seed // 576``
    odd and ``(seed // 9) % 8 == 2`` (no seed below 576, so the first seeds of every
    earlier family, and the pinned ones, keep their families)."""
    return (seed // 576) % 2 == 1 and (seed // len(FAMILIES)) % 8 == 2


def in_session14_slot(seed: int) -> bool:
    """Whether edge seed ``seed`` draws one of :data:`SESSION14_FAMILIES`: ``seed // 576``
    odd and ``(seed // 9) % 8 == 5`` (as session 9's slot: no seed below 576, and none
    that session 8's or 9's families draw)."""
    return (seed // 576) % 2 == 1 and (seed // len(FAMILIES)) % 8 == 5


def in_session18_slot(seed: int) -> bool:
    """Whether edge seed ``seed`` draws one of :data:`SESSION18_FAMILIES`: ``seed // 576``
    odd and ``(seed // 9) % 8 == 6`` (as session 9's slot: no seed below 576, and none
    that session 8's, 9's or 14's families draw)."""
    return (seed // 576) % 2 == 1 and (seed // len(FAMILIES)) % 8 == 6


def in_session19_slot(seed: int) -> bool:
    """Whether edge seed ``seed`` draws one of :data:`SESSION19_FAMILIES`: ``seed // 576``
    odd and ``(seed // 9) % 8 == 4`` (as session 9's slot: no seed below 576, none that
    the earlier sessions' families draw, and none pinned by a test)."""
    return (seed // 576) % 2 == 1 and (seed // len(FAMILIES)) % 8 == 4


def in_session20_slot(seed: int) -> bool:
    """Whether edge seed ``seed`` draws one of :data:`SESSION20_FAMILIES`: ``seed // 576``
    odd and ``(seed // 9) % 8 == 1`` (as session 9's slot: no seed below 576, none that
    the earlier sessions' families draw, and none pinned by a test)."""
    return (seed // 576) % 2 == 1 and (seed // len(FAMILIES)) % 8 == 1


def in_session21_slot(seed: int) -> bool:
    """Whether edge seed ``seed`` draws one of :data:`SESSION21_FAMILIES`: ``seed``
    odd, ``seed // 576`` odd and ``(seed // 9) % 8 == 0`` (no seed below 576, none that
    the earlier sessions' families draw, and none pinned by a test: 10017506 is even)."""
    return seed % 2 == 1 and (seed // 576) % 2 == 1 and (seed // len(FAMILIES)) % 8 == 0


def family_of(seed: int) -> str:
    """The family of edge seed ``seed``: one of :data:`FAMILIES` by ``seed % 9``, except
    the seeds with ``(seed // 9) % 8 == 7``, which draw one of :data:`MORE_FAMILIES`, and
    those of :func:`in_session9_slot`, :func:`in_session14_slot`,
    :func:`in_session18_slot`, :func:`in_session19_slot`, :func:`in_session20_slot` and
    :func:`in_session21_slot`, which draw one of :data:`SESSION9_FAMILIES`,
    :data:`SESSION14_FAMILIES`, :data:`SESSION18_FAMILIES`, :data:`SESSION19_FAMILIES`,
    :data:`SESSION20_FAMILIES` and :data:`SESSION21_FAMILIES`."""
    if in_session9_slot(seed):
        return SESSION9_FAMILIES[seed % len(SESSION9_FAMILIES)]
    if in_session14_slot(seed):
        return SESSION14_FAMILIES[seed % len(SESSION14_FAMILIES)]
    if in_session18_slot(seed):
        return SESSION18_FAMILIES[seed % len(SESSION18_FAMILIES)]
    if in_session19_slot(seed):
        return SESSION19_FAMILIES[seed % len(SESSION19_FAMILIES)]
    if in_session20_slot(seed):
        return SESSION20_FAMILIES[seed % len(SESSION20_FAMILIES)]
    if in_session21_slot(seed):
        return SESSION21_FAMILIES[seed % len(SESSION21_FAMILIES)]
    if (seed // len(FAMILIES)) % 8 == 7:
        return MORE_FAMILIES[seed % len(MORE_FAMILIES)]
    return FAMILIES[seed % len(FAMILIES)]


#: split factors past any extent the generator draws
BIG_FACTORS = (2**31 - 1, 2**31, 2**31 + 1, 2**32 + 1, 2**40)

#: -mcpu / -mattr spellings a user may copy from another machine's build script
FOREIGN_TARGETS = (
    "llvm -mcpu=x86-64", "llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512",
    "llvm -mcpu=sapphirerapids", "llvm -mcpu=graniterapids", "llvm -mcpu=znver3",
    "llvm -mcpu=znver4", "llvm -mcpu=znver5", "llvm -mcpu=atom", "llvm -mcpu=knl",
    "llvm -mattr=-avx2", "llvm -mattr=+avx512fp16", "llvm -mattr=+amx-tile,+amx-int8",
    "llvm -mattr=-sse2", "llvm -mattr=-cx8", "llvm -mattr=-sse,-sse2,-x87",
    "llvm -mattr=+avx10.2", "llvm -mattr=+avx512", "llvm -mcpu=x86-64-v4 -mattr=-avx512f",
)


@dataclass
class EdgeCase(Case):
    """A drawn case and the family's twist of it (``twist``: what was done, printable)."""

    family: str = ""
    twist: dict = field(default_factory=dict)
    fuzz_seed: int = 0          # the fuzzer's seed of the case (``seed`` is its data's)

    def source(self) -> str:
        head = [f"# edge family {self.family!r}: {self.twist}",
                f"# replay: python -m tecomp.testing.fuzz --replay {self.fuzz_seed} --edge-every 1"]
        return "\n".join(head) + "\n" + Case.source(self)


def draw_edge_case(seed: int) -> EdgeCase:
    """Edge case ``seed``: its family, the drawn case it twists, and the twist."""
    d = RandomDraw(seed * 7919 + 17)      # the twist's own stream: the base case is seed's
    family = family_of(seed)
    base = draw_case(RandomDraw(seed), name=f"edge seed {seed} ({family})")
    twist: dict = {}
    steps = list(base.steps)
    prog = base.program
    target = base.target
    if family == "conditions":
        prog = _rewrite_conditions(prog, d)
        twist["rewritten"] = "conditions through | ~ != == (De Morgan)"
    elif family == "big_split":
        steps, twist = _big_split(steps, prog, d)
        num = RandomDraw(seed * 7919 + 65)   # (session 31: the others keep theirs)
        if num.bool(0.3):
            steps = _numpy_factors(steps, num.choice(NUMPY_FACTOR_TYPES))
            twist["numpy"] = True
    elif family == "foreign_target":
        target = d.choice(FOREIGN_TARGETS)
        twist = {"target": target, "aot": d.bool(0.5)}
        if d.bool(0.2):                         # drawn after the others: they stay
            target = twist["target"] = d.choice(FOREIGN_SYSTEM_TRIPLES)
            twist["system"] = True
    elif family == "layouts":
        twist = {"variant": d.choice(("broadcast_inputs", "reversed_inputs", "overlapping_inputs",
                                      "output_overlaps_input", "stride0_output",
                                      "output_overlaps_itself"))}
        # (session 19, a stream of its own: every seed keeps what it drew) half of the
        # cases that compare values also store each output past the cache (pragma
        # nontemporal on its outermost loop) and pass it a few elements off a cache line
        # (or reversed): the streamed nest's test of where its outputs start
        side = RandomDraw(seed * 104729 + 7)
        outs = [i for i in prog.outputs if prog.tensors[i].shape]
        if twist["variant"] in LAYOUT_INPUT_VARIANTS and outs and side.bool(0.5):
            twist["output_shifts"] = [side.int(0, 15) for _ in prog.outputs]
            twist["reversed_output"] = side.bool(0.25)
            steps += [("pragma", f"T{i}", 0, "nontemporal") for i in outs]
        masked = RandomDraw(seed * 7919 + 55)   # (session 30: the others keep theirs)
        if masked.bool(0.2):
            twist = {"variant": masked.choice(MASKED_VARIANTS), "pick": masked.int(0, 10**6)}
    elif family == "lazy_bits":
        twist = {"variant": d.choice(("neg_view_input", "conj_imag_input", "neg_view_output"))}
        if d.bool(0.3):       # drawn after the variant (the other seeds keep their draws)
            twist = {"variant": "shrunk_storage", "pick": d.int(0, 10**6),
                     "to": d.choice(("empty", "one_element_less", "half", "offset_past"))}
        zero = RandomDraw(seed * 7919 + 91)   # (a stream of its own: other draws stay)
        if zero.bool(0.2):
            twist = {"variant": zero.choice(("zero_tensor_input", "zero_tensor_output"))}
        dual = RandomDraw(seed * 7919 + 53)   # (session 29: the others keep theirs)
        if dual.bool(0.2):
            twist = {"variant": dual.choice(("dual_input", "dual_output", "plain_in_dual_level"))}
        traced = RandomDraw(seed * 7919 + 66)   # (session 31: the others keep theirs)
        if traced.bool(0.15):
            twist = {"variant": traced.choice(("traced_call", "traced_call_warm"))}
    elif family == "library_file":
        twist = {"tamper": d.choice(("flip_byte", "truncate", "append", "swap_sidecar",
                                     "empty", "fifo", "directory", "symlink_to_dev",
                                     "sidecar_fifo", "sidecar_huge"))}
        # (drawn after the tamper: each seed keeps the tamper it drew before)
        twist["export_onto"] = d.choice(EXPORT_ONTO)
        if d.bool(0.4):   # drawn after the others: every seed keeps what it drew
            twist["tma_box"] = _draw_tma_box(d)
        reseal = RandomDraw(seed * 7919 + 92)   # (a stream of its own: other draws stay)
        if reseal.bool(0.35):
            twist["tamper"] = "resealed_flip"
            twist["flip"] = {"region": reseal.choice(RESEAL_REGIONS),
                             "pick": reseal.int(0, 10**6), "bit": reseal.int(0, 7)}
            digits = RandomDraw(seed * 7919 + 95)   # (session 27: the others keep theirs)
            if digits.bool(0.3):
                twist["flip"]["region"] = digits.choice(DIGIT_REGIONS)
        emu = RandomDraw(seed * 7919 + 96)   # (session 28: the others keep theirs)
        if emu.bool(0.3):
            twist["emu_entry"] = {"attack": emu.choice(EMU_ENTRY_ATTACKS), "n": emu.int(1, 300),
                                  "threads": emu.choice((1, 7, 32, 64, 128)),
                                  "k": emu.int(-50, 50), "cut": emu.int(1, 99)}
            # (session 31: stream 64, the environment family's: no seed draws both)
            if RandomDraw(seed * 7919 + 64).bool(0.15):
                twist["emu_entry"]["attack"] = "disk_full"
    elif family == "big_extent":
        v = d.choice(("huge_strides", "huge_strides", "huge_strides", "int64_n", "int64_n",
                      "int64_n", "int64_n", "big_reduction"))
        twist = {"variant": v}
        if v == "int64_n":
            prog = dataclasses.replace(prog, n_dtype="int64")
        elif v == "big_reduction":
            twist.update(terms=2**31 + d.int(1, 999), n_dtype=d.choice(("int32", "int64")),
                         rows=d.int(1, 2), factor=d.choice((0, 4, 8, 64, 1000, 2**31 + 7)),
                         annotate=d.choice(("", "vectorize", "parallel", "unroll")))
            if twist["n_dtype"] == "int32":
                twist["terms"] = 2**31 - d.int(1, 999)
        cast = RandomDraw(seed * 7919 + 60)   # (session 30: the others keep theirs)
        if cast.bool(0.3):
            prog = base.program
            twist = {"variant": "float_extent", "scalar": cast.choice(("float32", "float64")),
                     "to": cast.choice(("int32", "int64")),
                     "value": cast.choice(FLOAT_EXTENT_CLASSES), "pick": cast.int(0, 10**6),
                     "rows": cast.int(1, 3), "cols": cast.int(1, 9),
                     "schedule": cast.choice(("plain", "vectorize", "parallel"))}
    elif family == "deep":
        twist = {"depth": d.int(300, 2500), "rows": d.choice((1, 5, 16)),
                 "schedule": d.choice(("plain", "split", "vectorize", "parallel", "gpu"))}
    elif family == "records":
        twist = {"forgeries": [_draw_forgery(d) for _ in range(d.int(1, 3))],
                 "genuine": d.bool(0.5)}
    elif family == "gather_ids":
        twist = {"V": d.int(1, 40), "D": d.int(1, 20), "B": d.int(1, 30),
                 "ids_dtype": d.choice(("int32", "int64")),
                 "schedule": d.choice(("serial", "vectorize", "parallel", "split")),
                 "bad": d.choice((None, None, "past", "far", "minus_one", "huge"))}
        if twist["bad"] is None and d.bool(0.6):   # drawn last: the seeds with a bad id
            # (seed 64's among them) and the others keep their draws
            twist["window"] = {"step": d.choice((1, 2, "var")), "symbolic_rows": d.bool(0.5),
                               "off": d.choice(("ok", "ok", "ok", "minus_one", "one_past",
                                                "huge", "most_negative"))}
        if d.bool(0.3):   # drawn after the others: every seed keeps what it drew
            twist["wrapped"] = {"form": d.choice(("mod", "int8", "int16", "cast_sum")),
                                "p": d.int(2, 9), "q": d.choice((1, 3, 40, 300, 1000)),
                                "slack": d.choice((0, 0, 0, -1, 5)),
                                "terms": d.choice((7, 2**32 + 1, 2**32 + 9, 2**31 + 3)),
                                "guard": d.choice((None, None, 1, 2, 5))}
    elif family == "build_args":
        twist = {"variant": d.choice(("runtime_name", "unbound_factor")),
                 "name": d.choice(RUNTIME_NAMES), "factor": d.choice((1, 3, 7, 1000))}
        if d.bool(0.3):       # drawn after the others (d7115f3's seeds keep their draws)
            twist["variant"] = "extern_keeps_view"
            twist["keep"] = d.choice(("global", "slice", "exception", "copy"))
    elif family == "ir_edit":
        twist = {"edit": d.choice(("alloc_negative", "alloc_zero", "index_past", "index_minus")),
                 "pick": d.int(0, 10**6), "by": d.choice((1, 7, 2**20))}
        if d.bool(0.3):   # drawn after the others: every seed keeps what it drew
            twist["edit"] = "branch_writes_its_condition"
    elif family == "shared_reduction":
        twist = {"rows": d.choice((16, 40, 64)), "K": d.int(1, 50),
                 "threads": d.choice((4, 8, 16)),
                 "variant": d.choice(("at_thread_loop", "cooperative", "local"))}
    elif family == "torch_autograd":
        twist = {"formula": d.choice(tuple(_FORMULAS)), "rows": d.int(1, 5), "cols": d.int(1, 6),
                 "variant": d.choice(("second_derivative", "second_derivative", "empty_batch")),
                 "dynamic": d.choice((None, False, True))}
        twist["mixed_floats"] = d.bool(0.2)   # (drawn last: the others keep their draws)
        life = RandomDraw(seed * 7919 + 52)   # (session 29: the others keep theirs)
        if life.bool(0.4):
            twist["copied"] = {"how": life.choice(COPY_WAYS), "after_call": life.bool(0.5)}
        bn = RandomDraw(seed * 7919 + 66)   # (session 31: the others keep theirs)
        if bn.bool(0.25):
            twist["syncbn"] = {"channels_last": bn.bool(0.5), "affine": bn.bool(0.7),
                               "spatial": bn.choice(((), (3,), (2, 3), (2, 1, 2)))}
        elif bn.bool(0.4):   # (drawn after: the SyncBatchNorm seeds keep theirs)
            twist["strided_opcheck"] = True
    elif family == "quant_scales":
        twist = {"op": d.choice(("quantize", "dequantize", "requantize", "quantized_dense")),
                 "scales": [d.choice(EDGE_SCALES) for _ in range(3)],
                 "dtype": d.choice(("uint8", "int8", "int32")), "zp": d.int(0, 10**6)}
    elif family == "gpu_gather":
        twist = {"V": d.int(1, 40), "D": d.int(1, 20), "B": d.int(1, 30),
                 "ids_dtype": d.choice(("int32", "int64")), "schedule": "gpu",
                 "bad": d.choice((None, None, "past", "far", "minus_one", "huge"))}
    elif family == "torch_inplace":
        twist = {"variant": d.choice(("contiguous", "strided")), "torch_inputs": d.bool(0.5),
                 "subclass": d.bool(0.5)}
    elif family == "device_array":
        twist = {"forgery": d.choice(tuple(FORGERIES)), "arg": d.choice(("A", "B")),
                 # (bfloat16: "<V2" in the interface, its dtype named as torch's tensors do)
                 "dtype": d.choice(("float32", "float16", "float64", "int8", "int32",
                                    "bfloat16")),
                 "two_d": d.bool(0.4), "rows": d.int(2, 300), "offset": d.int(1, 7),
                 "version": d.choice((0, 1, 2, 3, None)),
                 "key": d.choice(("shape", "typestr", "data")),
                 "garbage": d.choice(("zz9", "", "f4f4", "<Z8", "<f4 ", 42, b"<f4")),
                 "data": d.choice((None, 5, "triple", ())),
                 # an honest call of the same signature first: the module keeps a plan of
                 # it, which must not let the forged call past the checks of its addresses
                 # (drawn last: the earlier seeds keep their other entries)
                 "warm": d.bool(0.5),
                 # the version-3 stream entry: a producer's stream, and one that is none
                 "stream": d.choice((1, 2, 0x9000, 0x9100)),
                 "bad_stream": d.choice((0, -1, "0x9000", 1.5, True))}
    elif family == "row_division":
        twist = {"rows": d.int(1, 9), "cols": d.choice((1, 3, 8, 16, 17, 33, 64)),
                 "dtype": d.choice(("float32", "float64")),
                 "divisor": d.choice(("input", "input", "row_max")),
                 "schedule": d.choice(("plain", "pragma_vector", "pragma_vector",
                                       "pragma_split", "pragma_parallel", "pragma_scalar",
                                       "auto", "auto", "auto_rcp_off")),
                 "lanes": d.choice((4, 8, 16))}
        twist["divisors"] = [d.int(0, len(ROW_DIVISOR_CLASSES) - 1)
                             for _ in range(twist["rows"])]
    elif family == "flash_config":
        twist = _draw_flash_config(d)
    elif family == "guarded_select":
        twist = {"n": d.int(1, 70), "d": d.int(1, 3), "down": d.bool(0.5),
                 "dtype": d.choice(("float32", "float32", "float64", "int32")),
                 "cond": d.choice(GUARDED_CONDITIONS), "true": d.choice(GUARDED_OPERANDS),
                 "other": d.choice(OTHER_OPERANDS), "negated": d.bool(0.5),
                 "schedule": d.choice((1, 4, 8, 8, 16, 16, 32, "split"))}
    elif family == "environment":
        if d.bool(0.6):
            var = d.choice(tuple(ENV_VALUES))
            legal, hostile, _ = ENV_VALUES[var]
            twist = {"var": var, "value": d.choice(hostile if d.bool(0.6) else legal)}
        else:
            twist = {"calibration": d.choice(CALIBRATION_FILES),
                     "cost": d.choice(("fma_bits", "gather_cost", "transpose_cost",
                                       "split_loads_cheap", "gemm_load_cost")),
                     "forged": d.choice(HOSTILE_VALUES[:9] + (-1.0, 1e300, "1.5", [], {}))}
        # (session 30, stream 60 as the big_extent family's: no seed draws both families)
        switch = RandomDraw(seed * 7919 + 60)
        if switch.bool(0.25):
            twist = {"var": switch.choice(tuple(SWITCHES)), "value": switch.choice(SWITCH_VALUES),
                     "switch": True}
        else:
            word = RandomDraw(seed * 7919 + 64)   # (session 31: the others keep theirs)
            if word.bool(0.2):
                var = word.choice(tuple(WORD_VARIABLES))
                twist = {"var": var, "value": word.choice(WORD_VALUES[var]), "word": True}
    return EdgeCase(prog, steps, base.n, base.seed, target, f"edge seed {seed} ({family})",
                    family=family, twist=twist, fuzz_seed=seed)


#: the flash_config family's FlashConfig fields: (legal values, hostile ones)
FLASH_FIELDS = {
    "warps": ((1, 2, 4, 8), (0, -1, 2.0, 2.5, "4", True, None, np.int32(4), 10**6)),
    "block_kv": ((16, 32, 64), (8, 48, 0, 16.0, "16", None, True, np.int64(32))),
    "warp_rows": ((32,), (16, 32.0, True, 8, np.int64(32))),
    "stages": ((1, 2, 3), (0, 9, 2.0, True, np.int64(2), "2")),
    "form": (("shared", "registers", "fragments"), ("register", None, ["registers"], "")),
    # (True with a form other than fragments: a documented refusal naming the config)
    "exp2": ((False, True), (1, "yes", None)),
    # (causal only; True with the register and fragment forms: the intrinsic without the
    # mask on the whole tiles, a test per diagonal tile)
    "whole": ((None, True, True, False), (1, "yes", 0)),
    # (False: the masked intrinsic on every diagonal tile; with whole other than True or
    # the shared form, a documented refusal naming the config)
    "diagonal_test": ((True, False), (0, "no", None)),
}


def _draw_flash_config(d) -> dict:
    """The flash_config family's twist: attention shapes and a FlashConfig whose fields
    are each legal (17 in 20) or hostile."""
    twist = {"batch": d.int(1, 3), "heads": d.int(1, 2),
             "lq": d.choice((1, 17, 64, 100, 130)), "lk": d.choice((1, 16, 50, 100)),
             "d": d.choice((16, 32, 64, 80, 128)), "dtype": d.choice(("float16", "bfloat16")),
             "causal": d.bool(0.5), "mask": d.choice((None, None, "b11L", "11L", "1L"))}
    twist["config"] = cfg = {f: d.choice(legal if d.bool(0.85) else hostile)
                             for f, (legal, hostile) in FLASH_FIELDS.items()}
    # (diagonal_test=False mostly where it drops a test: whole=True; one in five
    # elsewhere, the refusal)
    if cfg["diagonal_test"] is False and cfg["whole"] is not True and d.bool(0.8):
        cfg["diagonal_test"] = True
    twist["run"] = d.bool(0.3)
    # (one in four through scaled_dot_product_attention, not causal: schedule_sdpa_as_flash
    # substitutes flash_attention's computes for its stages, the config as given)
    twist["sdpa"] = not twist["causal"] and d.bool(0.25)
    return twist


# ---------------------------------------------------------------------------------
# the twists


def _map_conditions(x, f):
    """``x`` (a program or part of one) with every condition ``c`` replaced by ``f(c)``."""
    if isinstance(x, (Cmp, CAnd)):
        return f(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map_conditions(v, f) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {fl.name: _map_conditions(getattr(x, fl.name), f)
                   for fl in dataclasses.fields(x)}
        return dataclasses.replace(x, **changes)
    return x


_NEGATED = {"<": ">=", ">=": "<", "==": "!=", "!=": "=="}


def _rewrite_conditions(prog, d):
    """The same program with its conditions written through ``|``, ``~``, ``!=``."""
    def f(c):
        if isinstance(c, CAnd):
            a, b = f(c.a), f(c.b)
            # a & b == ~(~a | ~b)
            return CNot(COr(CNot(a), CNot(b))) if d.bool(0.7) else CAnd(a, b)
        if c.op in _NEGATED and d.bool(0.7):
            return CNot(Cmp(_NEGATED[c.op], c.a, c.b))
        return c

    return _map_conditions(prog, f)


#: (session 31) the numpy integer types the big_split family gives its split and tile
#: factors in three cases in ten (a value a type cannot hold: int64)
NUMPY_FACTOR_TYPES = ("int64", "uint64", "int32", "int16", "uint8")


def _numpy_factors(steps, ty: str):
    """``steps`` with every split/tile factor (or nparts) of numpy type ``ty``."""
    def conv(v):
        if not isinstance(v, int) or isinstance(v, bool):
            return v
        t = np.dtype(ty)
        return (np.int64 if not np.iinfo(t).min <= v <= np.iinfo(t).max else t.type)(v)
    out = []
    for st in steps:
        if st[0] in ("split", "tile"):
            st = tuple(st[:4]) + tuple(conv(v) for v in st[4:])
        out.append(st)
    return out


def _big_split(steps, prog, d):
    """``steps`` with one split/tile factor (or nparts) past any extent."""
    big = d.choice(BIG_FACTORS)
    idx = [i for i, s in enumerate(steps) if s[0] in ("split", "tile")]
    if idx:
        i = d.choice(idx)
        s = list(steps[i])
        if s[0] == "split":
            s[4] = big
        else:
            s[4 if d.bool(0.5) else 5] = big
        steps = steps[:i] + [tuple(s)] + steps[i + 1:]
        return steps, {"step": i, "factor": big}
    # no split drawn: split an output's outermost axis (outputs are never inlined), one
    # that no stage is computed at (a split would end that loop: a legal ScheduleError)
    how = "factor" if d.bool(0.8) else "nparts"
    for t in prog.outputs:
        h = f"T{t}"
        if not any(st[0] == "compute_at" and st[2] == h for st in steps):
            return steps + [("split", h, 0, how, big)], {"appended": f"split {h} {how}={big}"}
    return steps, {"none": "every output has a stage computed at it"}


#: what a forged step value becomes
HOSTILE_VALUES = (0, -1, 2**31, 2**32 + 1, 2**63, 10**30, 1.5, float("nan"), True, None,
                  "", 'x"\n)\nimport os\n#', "\x00", "A" * 1000, [], {"a": 1}, [[[[1]]]])


def _draw_forgery(d) -> dict:
    """One forged or corrupt line of a tuning log (applied by :func:`_forge`)."""
    kind = d.choice(("value", "value", "value", "drop", "repeat", "swap", "time", "raw"))
    f = {"kind": kind, "pick": d.int(0, 10**6)}
    if kind == "value":
        f["value"] = d.int(0, len(HOSTILE_VALUES) - 1)
    elif kind == "time":
        f["time"] = d.choice(("10**4000", "NaN", "-1", '"fast"', "[]", "1e400", "0"))
    elif kind == "raw":
        f["raw"] = d.choice(("deep", "long", "binary", "truncated", "bom", "brace"))
    return f


def _leaves(x, path=()):
    """The paths of the scalar leaves of a JSON value."""
    if isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, path + (i,))
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, path + (k,))
    else:
        yield path


def _set(x, path, value):
    for p in path[:-1]:
        x = x[p]
    x[path[-1]] = value


def _forge(record: dict, f: dict) -> str:
    """The log line of ``record`` forged as ``f`` says."""
    import copy
    import json

    rec = copy.deepcopy(record)
    trace = rec["trace"]
    kind, pick = f["kind"], f["pick"]
    if kind == "value":
        leaves = list(_leaves(trace))
        if leaves:
            _set(trace, leaves[pick % len(leaves)], HOSTILE_VALUES[f["value"]])
        else:
            rec["trace"] = HOSTILE_VALUES[f["value"]]
    elif kind == "drop" and trace:
        del trace[pick % len(trace)]
    elif kind == "repeat" and trace:
        trace.insert(pick % len(trace), trace[pick % len(trace)])
    elif kind == "swap" and len(trace) > 1:
        i = pick % (len(trace) - 1)
        trace[i], trace[i + 1] = trace[i + 1], trace[i]
    rec["times"] = [1e-9]          # forged to look the fastest
    line = json.dumps(rec, allow_nan=True)
    if kind == "time":
        line = line.replace('"times": [1e-09]', f'"times": [{f["time"]}]')
    elif kind == "raw":
        line = {"deep": "[" * 100_000 + "]" * 100_000,
                "long": '{"v": 1, "pad": "' + "x" * (2 << 20) + '"}',
                "binary": "\x00\xff\ufffe" + line[:100],
                "truncated": line[:len(line) // 2],
                "bom": "\ufeff" + line,
                "brace": "{"}[f["raw"]]
    return line


# ---------------------------------------------------------------------------------
# running


def run_edge_case(ec: EdgeCase) -> Outcome:
    """Run an edge case (see the module doc)."""
    if ec.family == "conditions":
        return run_case(ec)
    if ec.family == "big_split":
        # a factor past the extent may make an annotated loop impossible (2**31 lanes of
        # a vectorize, copies of an unroll): a ScheduleError that says so is an answer
        out = run_case(ec)
        if out.kind == "crash" and out.stage == "lower" and \
                "tecomp.errors.ScheduleError" in out.detail:
            return Outcome("refused", ec, out.stage, out.reason, out.ir)
        if out.kind == "ok" and ec.twist.get("numpy"):
            return _check_numpy_trace(ec, out)
        return out
    if ec.family == "big_extent" and ec.twist["variant"] == "int64_n":
        return run_case(ec)
    runner = {"layouts": _run_layouts, "lazy_bits": _run_lazy_bits,
              "foreign_target": _run_foreign_target, "library_file": _run_library_file,
              "records": _run_records, "big_extent": _run_big_extent, "deep": _run_deep,
              "gather_ids": _run_gather_ids, "build_args": _run_build_args,
              "ir_edit": _run_ir_edit, "shared_reduction": _run_shared_reduction,
              "torch_autograd": _run_torch_autograd, "quant_scales": _run_quant_scales,
              "gpu_gather": _run_gather_ids, "torch_inplace": _run_torch_inplace,
              "device_array": _run_device_array, "row_division": _run_row_division,
              "flash_config": _run_flash_config, "guarded_select": _run_guarded_select,
              "environment": _run_environment}
    return runner[ec.family](ec)


def _check_numpy_trace(ec: EdgeCase, out: Outcome) -> Outcome:
    """A big_split case whose factors are numpy integers: its schedule's trace must be
    replayable, its JSON of plain ints (before session 31, ``np.int64(8)`` had "no name
    in a trace")."""
    s, _, _ = schedule_case(ec)
    if not s.trace.replayable:
        return Outcome("mismatch", ec, "trace", f"numpy factors: the trace is not "
                       f"replayable ({s.trace.problem})")
    steps = json.loads(json.dumps(s.trace.to_json()))
    if steps != s.trace.to_json():
        return Outcome("mismatch", ec, "trace", "numpy factors: the trace's JSON changed "
                       "its values")
    return out


def _run_device_array(ec: EdgeCase) -> Outcome:
    """A ``cuda`` module called with one device array forged as the twist says
    (:mod:`tecomp.testing.device_arrays`): refused with an ArgumentError before any
    launch, or, for an honest one, numpy's values with each interface read once."""
    if shutil.which(os.environ.get("CXX") or "g++") is None and shutil.which("clang++") is None:
        return Outcome("ok", ec, "", "no C++ compiler for the CUDA emulation")
    tw = ec.twist
    try:
        mod, args, want, expect, out, drv = forged_call(tw)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build", e)
    what = f"a device array forged as {tw['forgery']} for {tw['arg']} ({tw['dtype']})"
    if tw.get("warm"):
        # honest arrays of the forged call's signature (shape, dtype, C-contiguous)
        honest = [DeviceStandIn(np.zeros_like(a.arr)) for a in args]
        try:
            mod(*honest)
        except Exception as e:  # noqa: BLE001
            return _failure(ec, "call", e)
        what += " after an honest call of its signature"
    warm = drv.launches
    drv.stream_log.clear()
    if expect == "refused":
        got = _expect_refusal(ec, lambda: mod(*args), (tc.ArgumentError,), "call", "", what)
        if got.kind == "refused" and drv.launches > warm:
            return Outcome("mismatch", ec, "call", f"{what}: refused after "
                           f"{drv.launches - warm} launch(es)")
        return got
    try:
        mod(*args)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "call", e)
    if tw["forgery"] == "producer_stream":   # (no stream=: the host waits, legacy excepted)
        waits = [] if tw["stream"] == 1 else [("wait", None, tw["stream"])]
        got = [e for e in drv.stream_log if e[0] == "wait"]
        first = next((i for i, e in enumerate(drv.stream_log) if e[0] == "launch"), 0)
        if got != waits or any(e[0] == "wait" for e in drv.stream_log[first:]):
            return Outcome("mismatch", ec, "call", f"{what}: the producer's stream "
                           f"{tw['stream']:#x} waited for as {got} (want {waits}, before "
                           f"the first launch): {drv.stream_log}")
    reads = [a.reads for a in args]
    if max(reads) > (2 if args[0] is args[1] else 1):
        return Outcome("mismatch", ec, "call", f"{what}: __cuda_array_interface__ read "
                       f"{reads} times in one call (the checks and the launch must share "
                       f"one description)")
    if not np.array_equal(out, want):
        bad = int(np.count_nonzero(out != want))
        return Outcome("mismatch", ec, "compare", f"{what}: {bad} of {want.size} elements "
                       f"differ from numpy's")
    return Outcome("ok", ec, "call", what)


def _built(ec: EdgeCase):
    """(module, outputs of a plain call by argument position, inputs, lowered function) of
    the case built for this machine: the plain call is the reference of the twisted ones."""
    s, args, func = schedule_case(ec)
    mod = tc.build(func, target="llvm")
    inputs = ec.program.random_inputs(ec.n, np.random.default_rng(ec.seed))
    arrs = case_arrays(ec, inputs)
    mod(*arrs)
    return mod, arrs, inputs, func


def _same_outputs(ec: EdgeCase, got: list, want: list, what: str):
    """A description of the differences between two calls' outputs (None: the same)."""
    prog = ec.program
    problems = []
    for pos, i in enumerate(prog.arg_order()):
        if i in prog.outputs:
            spec = prog.tensors[i]
            g = np.asarray(got[pos])
            w = np.asarray(want[pos])
            msg = compare(g, w.astype(np.float64) if is_float(spec.dtype) else w, spec.dtype,
                          f"{what}, output {spec.name}")
            if msg:
                problems.append(msg)
    return "\n".join(problems) or None


def _failure(ec, stage, e, allowed=(), ir="") -> Outcome:
    """The outcome of the exception ``e`` at ``stage``: ``refused`` where it is one of the
    ``allowed`` TecompErrors (never an InternalError), ``rejected`` for a resource limit,
    else a crash."""
    if allowed and isinstance(e, allowed) and not isinstance(e, tc.InternalError):
        return Outcome("refused", ec, stage, str(e).splitlines()[0][:300], ir)
    if isinstance(e, tc.ResourceLimitError):
        return Outcome("rejected", ec, stage, _exc_text(e), ir)
    return Outcome("crash", ec, stage, _exc_text(e), ir)


def _expect_refusal(ec, call, errors, stage, ir, what):
    """``call()`` must raise one of ``errors`` (a refusal); anything else is a finding."""
    try:
        call()
    except errors:
        return Outcome("refused", ec, stage, what, ir)
    except tc.InternalError as e:
        return Outcome("crash", ec, stage, _exc_text(e), ir)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, stage, f"{what}: expected {errors}, got\n{_exc_text(e)}", ir)
    return Outcome("mismatch", ec, stage, f"{what}: accepted, expected a refusal "
                   f"({', '.join(x.__name__ for x in errors)})", ir)



def _call_or_refusal(ec, call, errors, refusal: Optional[str]) -> Optional[Outcome]:
    """``call()`` (at the stage "call"): where ``refusal`` says what is wrong with it, it
    must raise one of ``errors`` (:func:`_expect_refusal`); else an outcome where it
    raised, None where it ran (the caller compares the values)."""
    if refusal is not None:
        return _expect_refusal(ec, call, errors, "call", "", refusal)
    try:
        call()
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "call", e)
    return None

def _prepare(ec):
    """``(ctx, None)``, or ``(None, outcome)`` where the case did not build or run plainly.
    ``ctx``: the module, the plain call's arguments after it (``want``), the inputs,
    the printed IR, the argument positions of inputs and outputs, fresh arguments
    (``arrs``) and the family's variant."""
    import types

    try:
        mod, want, inputs, func = _built(ec)
    except Exception as e:  # noqa: BLE001
        return None, _failure(ec, "build", e)
    prog = ec.program
    order = prog.arg_order()
    return types.SimpleNamespace(
        mod=mod, want=want, inputs=inputs, ir=str(func),
        ins=[p for p, i in enumerate(order) if i not in prog.outputs],
        outs=[p for p, i in enumerate(order) if i in prog.outputs],
        arrs=case_arrays(ec, inputs), variant=ec.twist.get("variant")), None


#: the layouts family's variants that pass inputs as views and compare the values
LAYOUT_INPUT_VARIANTS = ("broadcast_inputs", "reversed_inputs", "overlapping_inputs")

#: (session 30) the layouts family's numpy masked arrays: every array masked by a mask of
#: all False (its data: the values of the plain call), or one element of an input or of
#: an output masked (refused: a kernel ignores masks; once the mask was silently dropped)
MASKED_VARIANTS = ("unmasked_masked", "masked_input", "masked_output")


def _run_masked(ec: EdgeCase, c) -> Outcome:
    """The layouts family's :data:`MASKED_VARIANTS`."""
    mod, ir, arrs, v = c.mod, c.ir, c.arrs, c.variant
    if v == "unmasked_masked":
        arrs = [np.ma.masked_array(a, mask=False) if isinstance(a, np.ndarray) else a
                for a in arrs]
        try:
            mod(*arrs)
        except Exception as e:  # noqa: BLE001
            return Outcome("crash", ec, f"layouts {v}", _exc_text(e), ir)
        got = [a.data if isinstance(a, np.ma.MaskedArray) else a for a in arrs]
        msg = _same_outputs(ec, got, c.want, f"{v} vs plain arrays")
        return Outcome("mismatch", ec, f"layouts {v}", msg, ir) if msg else \
            Outcome("ok", ec, "", "", ir)
    side = [p for p in (c.ins if v == "masked_input" else c.outs) if arrs[p].size]
    if not side:
        return Outcome("ok", ec, "", "", ir)          # no element to mask
    p = side[ec.twist["pick"] % len(side)]
    mask = np.zeros(arrs[p].shape, bool)
    mask.reshape(-1)[ec.twist["pick"] % mask.size] = True
    arrs[p] = np.ma.masked_array(arrs[p], mask=mask)
    return _expect_refusal(ec, lambda: mod(*arrs), (tc.ArgumentError,), f"layouts {v}", ir,
                           f"a masked array ({v})")


def _off_line(a, shift: int, reverse: bool):
    """A copy of the array ``a`` whose first element lies ``shift`` elements past a
    64-byte line (its elements' size permitting), or with ``reverse`` its elements in
    reverse memory order (negative strides); ``a`` itself where it is no numpy array."""
    if not isinstance(a, np.ndarray) or a.ndim == 0:
        return a
    if reverse:
        return np.flip(np.flip(a).copy())
    item = a.itemsize
    raw = np.empty(a.size + 2 * 64 // item + shift, a.dtype)
    start = ((-raw.ctypes.data) % 64) // item + shift if 64 % item == 0 else shift
    out = raw[start:start + a.size].reshape(a.shape)
    out[...] = a
    return out


def _run_layouts(ec: EdgeCase) -> Outcome:
    c, bad = _prepare(ec)
    if bad:
        return bad
    mod, ir, ins, outs, arrs, v = c.mod, c.ir, c.ins, c.outs, c.arrs, c.variant
    if v in MASKED_VARIANTS:
        return _run_masked(ec, c)
    if v in LAYOUT_INPUT_VARIANTS:
        for p, shift in zip(outs, ec.twist.get("output_shifts", ())):
            arrs[p] = _off_line(arrs[p], shift, ec.twist["reversed_output"])
        for p in ins:
            a = arrs[p]
            if v == "broadcast_inputs" and a.ndim and a.shape[0]:
                arrs[p] = np.broadcast_to(a[:1], a.shape)       # stride 0 on the first axis
            elif v == "reversed_inputs":
                arrs[p] = np.flip(np.flip(a).copy())            # the same values, strides < 0
        if v == "overlapping_inputs":
            first = {}
            for p in ins:                      # one array passed for all inputs alike
                arrs[p] = first.setdefault((arrs[p].shape, arrs[p].dtype.str), arrs[p])
        # the reference: the same module on contiguous copies of what was passed
        ref = [np.array(a) if isinstance(a, np.ndarray) else a for a in arrs]
        try:
            mod(*ref)
            mod(*arrs)
        except Exception as e:  # noqa: BLE001
            return Outcome("crash", ec, f"layouts {v}", _exc_text(e), ir)
        msg = _same_outputs(ec, arrs, ref, f"{v} vs contiguous copies")
        return Outcome("mismatch", ec, f"layouts {v}", msg, ir) if msg else \
            Outcome("ok", ec, "", "", ir)
    # outputs that alias: refused
    p = outs[0]
    o = arrs[p]
    if o.size == 0 or (o.size < 2 and v != "output_overlaps_input"):
        return Outcome("ok", ec, "", "", ir)          # nothing can alias in one element
    if v == "stride0_output":
        arrs[p] = np.lib.stride_tricks.as_strided(o, o.shape, (0,) * o.ndim)
    elif v == "output_overlaps_itself":
        # along the outer of two axes of more than one element, each row starts one
        # element after the one before (with one such axis: stride 0 on it)
        dims = [d for d in range(o.ndim) if o.shape[d] > 1]
        st = list(o.strides)
        st[dims[0]] = o.itemsize if len(dims) > 1 else 0
        arrs[p] = np.lib.stride_tricks.as_strided(o, o.shape, tuple(st))
    else:
        # an input of no elements occupies no memory: nothing can overlap it
        ins = [q for q in ins if arrs[q].size]
        if not ins:
            return Outcome("ok", ec, "", "", ir)
        q = ins[0]
        a = arrs[q]
        # one byte buffer: the input, then the output starting inside the input's last
        # element(s), aligned to the output's element
        start = max(0, (a.nbytes - 1) // o.itemsize * o.itemsize)
        buf = np.zeros(start + o.nbytes + a.nbytes, np.uint8)
        buf[:a.nbytes] = a.reshape(-1).view(np.uint8)
        arrs[q] = buf[:a.nbytes].view(a.dtype).reshape(a.shape)
        arrs[p] = buf[start:start + o.nbytes].view(o.dtype).reshape(o.shape)
    return _expect_refusal(ec, lambda: mod(*arrs), (tc.ArgumentError,), f"layouts {v}", ir,
                           f"an output that aliases ({v})")


def _prepare_with_torch(ec):
    """``(torch, ctx, None)``, or ``(None, None, outcome)`` where torch is not installed
    or the case did not build or run plainly (:func:`_prepare`)."""
    try:
        import torch
    except ImportError:
        return None, None, Outcome("ok", ec, "", "torch is not installed")
    c, bad = _prepare(ec)
    return (None, None, bad) if bad else (torch, c, None)


def _run_lazy_bits(ec: EdgeCase) -> Outcome:
    torch, c, bad = _prepare_with_torch(ec)
    if bad:
        return bad
    mod, ir, ins, outs, arrs, v = c.mod, c.ir, c.ins, c.outs, c.arrs, c.variant
    if v == "shrunk_storage":
        return _run_shrunk_storage(ec, torch, c)
    if v in ("zero_tensor_input", "zero_tensor_output"):
        return _run_zero_tensor(ec, torch, c)
    if v in ("dual_input", "dual_output", "plain_in_dual_level"):
        return _run_dual(ec, torch, c)
    if v in ("traced_call", "traced_call_warm"):
        return _run_traced(ec, torch, c)
    call = []
    twisted = False
    for pos, a in enumerate(arrs):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.dtype.itemsize < 4:
            call.append(a)
            continue
        t = torch.from_numpy(a)
        if pos in ins and v == "neg_view_input":
            t = torch._neg_view(torch.from_numpy(-a))          # reads as a, negation bit set
            twisted = True
        elif pos in ins and v == "conj_imag_input":
            z = torch.complex(torch.zeros_like(t), -t)
            t = z.conj().imag                                   # reads as a, negation bit set
            twisted = True
        elif pos in outs and v == "neg_view_output" and not twisted:
            t = torch._neg_view(t)
            twisted = True
        call.append(t)
    if not twisted:
        return Outcome("ok", ec, "", "", ir)
    if v == "neg_view_output":
        return _expect_refusal(ec, lambda: mod(*call), (tc.ArgumentError,), "lazy_bits", ir,
                               "an output tensor with the negation bit")
    try:
        mod(*call)            # the outputs are tensors over ``arrs``' memory
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, f"lazy_bits {v}", _exc_text(e), ir)
    msg = _same_outputs(ec, arrs, c.want, f"{v} vs plain arrays")
    return Outcome("mismatch", ec, f"lazy_bits {v}", msg, ir) if msg else \
        Outcome("ok", ec, "", "", ir)


def _run_zero_tensor(ec: EdgeCase, torch, c) -> Outcome:
    """A ZeroTensor (``torch._efficientzerotensor``: elements, no memory, data pointer 0)
    for the first float input that is not also an output: the outputs of the same call
    with zeros there (the fast binder passed the pointer 0: a segfault); for the first
    float output: an ArgumentError."""
    mod, ins, outs, arrs = c.mod, c.ins, c.outs, c.arrs
    want_out = c.variant == "zero_tensor_output"
    pick = next((pos for pos, a in enumerate(arrs) if isinstance(a, np.ndarray) and
                 a.dtype.kind == "f" and a.dtype.itemsize >= 4 and a.size and
                 ((pos in outs) if want_out else (pos in ins and pos not in outs))), None)
    if pick is None:
        return Outcome("ok", ec, "", "", c.ir)
    a = arrs[pick]
    zt = torch._efficientzerotensor(a.shape, dtype=torch.from_numpy(a[:0]).dtype)
    call = [zt if pos == pick else (torch.from_numpy(x) if isinstance(x, np.ndarray) and
                                     x.dtype.kind == "f" and x.dtype.itemsize >= 4 else x)
            for pos, x in enumerate(arrs)]
    if want_out:
        return _expect_refusal(ec, lambda: mod(*call), (tc.ArgumentError,), "lazy_bits",
                               c.ir, "a ZeroTensor output")
    ref = [np.zeros_like(x) if pos == pick else
           (x.copy() if isinstance(x, np.ndarray) else x) for pos, x in enumerate(arrs)]
    return _same_as_plain(ec, c, ref, call, "a ZeroTensor input vs zeros")


def _same_as_plain(ec: EdgeCase, c, ref, call, what: str) -> Outcome:
    """The module of ``c`` called on the plain arrays ``ref``, then on ``call`` (the
    tensors over ``c.arrs``' memory): the same outputs, else a finding (``what`` names
    the comparison)."""
    stage = f"lazy_bits {c.variant}"
    try:
        c.mod(*ref)
        c.mod(*call)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, stage, _exc_text(e), c.ir)
    msg = _same_outputs(ec, c.arrs, ref, what)
    return Outcome("mismatch", ec, stage, msg, c.ir) if msg else Outcome("ok", ec, "", "", c.ir)


def _run_dual(ec: EdgeCase, torch, c) -> Outcome:
    """Inside ``torch.autograd.forward_ad.dual_level`` (session 29): a dual tensor (a
    tangent of ones) for the first float input that is not also an output, or for the
    first float output: an ArgumentError (read, its tangent was dropped; written, its
    tangent stayed, describing other values); or every tensor plain: the outputs of the
    plain call (the fast binder steps aside inside the level)."""
    import torch.autograd.forward_ad as fwad

    mod, ins, outs, arrs, v = c.mod, c.ins, c.outs, c.arrs, c.variant
    floats = [pos for pos, a in enumerate(arrs) if isinstance(a, np.ndarray) and
              a.dtype.kind == "f" and a.dtype.itemsize >= 4 and a.size]
    pick = next((pos for pos in floats if ((pos in outs) if v == "dual_output" else
                                           (pos in ins and pos not in outs))), None)
    if pick is None:
        return Outcome("ok", ec, "", "", c.ir)
    ref = [x.copy() if isinstance(x, np.ndarray) else x for x in arrs]
    with fwad.dual_level():
        call = [torch.from_numpy(x) if pos in floats else x for pos, x in enumerate(arrs)]
        if v != "plain_in_dual_level":
            call[pick] = fwad.make_dual(call[pick], torch.ones_like(call[pick]))
            return _expect_refusal(ec, lambda: mod(*call), (tc.ArgumentError,), "lazy_bits",
                                   c.ir, f"a forward-mode AD dual tensor as an "
                                   f"{'output' if v == 'dual_output' else 'input'}")
        return _same_as_plain(ec, c, ref, call, "plain tensors in a dual level vs numpy")


def _run_traced(ec: EdgeCase, torch, c) -> Outcome:
    """The case called with torch tensors inside ``torch.jit.trace`` (session 31), after
    a plain call of the same tensors (``traced_call_warm``: its fast binder made) or not:
    an ArgumentError.  A trace records torch ops only: before session 31 the kernel ran
    and the trace kept none of it, so the traced function returned its outputs' old
    memory (``torch.empty``'s, in a tecomp.torch op) without a word."""
    floats = [pos for pos, a in enumerate(c.arrs) if isinstance(a, np.ndarray) and
              a.dtype.kind == "f" and a.dtype.itemsize >= 4 and a.dtype.isnative]
    if not floats:
        return Outcome("ok", ec, "", "", c.ir)
    call = [torch.from_numpy(x) if pos in floats else x for pos, x in enumerate(c.arrs)]
    if c.variant == "traced_call_warm":
        try:
            c.mod(*call)
        except Exception as e:  # noqa: BLE001
            return Outcome("crash", ec, "lazy_bits traced_call_warm", _exc_text(e), c.ir)

    def traced(*ts):
        args = list(call)
        for pos, t in zip(floats, ts):
            args[pos] = t
        c.mod(*args)
        return ts

    return _expect_refusal(
        ec, lambda: torch.jit.trace(traced, tuple(call[p] for p in floats), check_trace=False),
        (tc.ArgumentError,), f"lazy_bits {c.variant}", c.ir,
        "a call inside torch.jit.trace (the trace would not record the kernel)")


def _run_shrunk_storage(ec: EdgeCase, torch, c) -> Outcome:
    """The case called with torch tensors (its fast binder made by a first, plain call),
    then with the storage of one of them shrunk under it (``untyped_storage().resize_``,
    as FSDP frees a parameter): an ArgumentError, never a read or write past the
    storage (which read garbage, wrote into freed memory or segfaulted)."""
    tw = ec.twist
    def tensor(a):
        if not isinstance(a, np.ndarray):
            return a
        a = np.ascontiguousarray(a)
        if a.dtype == np.dtype(numpy_dtype("bfloat16")):   # numpy has no bfloat16 of its own
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).clone()
        return torch.from_numpy(a).clone() if a.dtype.isnative else a

    call = [tensor(a) for a in c.arrs]
    tensors = [p for p, t in enumerate(call) if isinstance(t, torch.Tensor) and t.numel()]
    if not tensors:
        return Outcome("ok", ec, "", "", c.ir)
    try:
        c.mod(*call)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, "lazy_bits shrunk_storage", _exc_text(e), c.ir)
    pos = tensors[tw["pick"] % len(tensors)]
    t = call[pos]
    nbytes = t.numel() * t.element_size()
    how = tw["to"]
    if how == "offset_past":
        # a tensor that starts one element into its storage, which holds one less
        st = torch.empty(t.numel() + 1, dtype=t.dtype).untyped_storage()
        t = call[pos] = torch.empty(0, dtype=t.dtype).set_(st, 1, t.shape)
        st.resize_(nbytes)
    else:
        t.untyped_storage().resize_({"empty": 0, "one_element_less": nbytes - t.element_size(),
                                     "half": nbytes // 2}[how])
    role = "an output" if pos in c.outs else "an input"
    return _expect_refusal(ec, lambda: c.mod(*call), (tc.ArgumentError,),
                           "lazy_bits shrunk_storage", c.ir,
                           f"{role} tensor whose storage was shrunk ({how})")


def _run_foreign_target(ec: EdgeCase) -> Outcome:
    try:
        mod, want, inputs, func = _built(ec)          # this machine's build: the reference
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build for this machine", e)
    ir = str(func)
    if ec.twist.get("system"):
        return _expect_refusal(ec, lambda: tc.build(func, target=ec.target), (tc.TargetError,),
                               f"build for {ec.target}", ir, "a triple of another system")
    stage = f"build for {ec.target}"
    try:
        fmod = tc.build(func, target=ec.target)
        if ec.twist.get("aot"):
            stage = f"export and load for {ec.target}"
            with tempfile.TemporaryDirectory(prefix="tecomp-edge-") as d:
                path = os.path.join(d, "k.so")
                fmod.export_library(path)
                fmod = tc.load_module(path)
        stage = f"call for {ec.target}"
        arrs = case_arrays(ec, inputs)
        fmod(*arrs)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e, (tc.TargetError, tc.BuildError, tc.LoadError), ir)
    msg = _same_outputs(ec, arrs, want, f"{ec.target} vs this machine's build")
    return Outcome("mismatch", ec, stage, msg, ir) if msg else Outcome("ok", ec, "", "", ir)


def _tamper(path: str, how: str, rng) -> None:
    side = path + ".sha256"
    if how == "flip_byte":
        with open(path, "r+b") as f:
            f.seek(0, 2)
            pos = int(rng.integers(0, f.tell()))
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ (1 << int(rng.integers(0, 8)))]))
    elif how == "truncate":
        with open(path, "r+b") as f:
            f.seek(0, 2)
            f.truncate(int(rng.integers(0, f.tell())))
    elif how == "append":
        with open(path, "ab") as f:
            f.write(b"\x7fELF" + bytes(rng.integers(0, 256, 64, dtype=np.uint8)))
    elif how == "swap_sidecar":
        with open(side, "w") as f:
            f.write("0" * 64 + "\n")
    elif how == "empty":
        open(path, "wb").close()
    elif how == "fifo":
        os.unlink(path)
        os.mkfifo(path)
    elif how == "directory":
        os.unlink(path)
        os.mkdir(path)
    elif how == "symlink_to_dev":
        os.unlink(path)
        os.symlink("/dev/zero", path)
    elif how == "sidecar_fifo":
        os.unlink(side)
        os.mkfifo(side)
    elif how == "sidecar_huge":
        with open(side, "wb") as f:
            f.truncate(1 << 33)          # 8 GiB of holes: never read whole
    else:
        raise ValueError(how)


def _region_bytes(data: bytes, region: str) -> List[int]:
    """The offsets of the bytes of ``data`` (a library export_library wrote) that
    :data:`RESEAL_REGIONS`' ``region`` names (the dynamic section's where the file has
    none of it)."""
    import struct

    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 0x20)
    e_phnum, _, e_shnum, e_shstrndx = struct.unpack_from("<HHHH", data, 0x38)
    if region == "ehdr":
        return list(range(64))
    if region == "phdrs":
        return list(range(e_phoff, e_phoff + 56 * e_phnum))
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + 64 * k) for k in range(e_shnum)]
    names = heads[e_shstrndx][4]
    found = {}
    for h in heads:
        name = data[names + h[0]:data.index(b"\0", names + h[0])].decode()
        found[name] = (h[4], h[5])
    wanted = {"dynamic": [".dynamic"], "dynsym": [".dynsym"], "dynstr": [".dynstr"],
              "gnu_hash": [".gnu.hash"], "versions": [".gnu.version_r"],
              "relocations": [".rela.dyn", ".rela.plt"],
              "metadata": [aot_format.SECTION], "metadata_digits": [aot_format.SECTION],
              "digest": [aot_format.DIGEST_SECTION]}[region]
    out = []
    for name in wanted:
        off, size = found.get(name, (0, 0))
        if name == ".dynsym":   # each symbol's name, kind and section: not its value
            out += [off + 24 * k + b for k in range(size // 24) for b in range(8)]
        elif region == "metadata_digits":
            out += [k for k in range(off, off + size) if 48 <= data[k] <= 57]
        else:
            out += range(off, off + size)
    return out or _region_bytes(data, "dynamic")


def digest_rewritten(original: bytes, changed: bytes) -> bytes:
    """``changed``, a copy of the library ``original`` whose metadata was edited in place
    (same length), with the metadata's sha256 beside its code
    (:data:`aot_format.DIGEST_SECTION`) rewritten to match: a forged library, not a damaged
    one, so that the checks after the digest's can be tried on it."""
    def sha(lib: bytes) -> bytes:
        doc = inspect_library(lib, "a library", aot_format.SECTION).section.rstrip(b"\0")
        return aot_format.metadata_digest(doc)

    old = sha(original)
    if len(changed) != len(original) or original.count(old) != 1:
        raise ValueError("not a library with its metadata edited in place")
    k = original.index(old)
    return changed[:k] + sha(changed) + changed[k + len(old):]


def _resealed_flip(path: str, flip: dict) -> str:
    """Flip one bit of the library at ``path`` in ``flip``'s region and write its sidecar
    anew (the sha256 of the changed file): what a tool that edits libraries and reseals
    them would leave.  Says which byte."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    where = _region_bytes(bytes(data), flip["region"])
    pos = where[flip["pick"] % len(where)]
    data[pos] ^= 1 << flip["bit"]
    with open(path, "wb") as f:
        f.write(data)
    write_sidecar(path)
    return f"byte {pos:#x} ({flip['region']}) bit {flip['bit']}"


def _special(path: str, how: str) -> str:
    """A device node, FIFO, link to a FIFO or socket made at ``path`` (or at its
    sidecar's: ``sidecar_fifo``); the path of what was made."""
    if how == "char_device":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            return path
        except (PermissionError, AttributeError, OSError):
            how = "fifo"   # (not this user's to make)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "link_to_fifo":
        os.mkfifo(path + ".fifo")
        os.symlink(path + ".fifo", path)
    elif how == "socket":
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(path)
        finally:
            s.close()
    elif how == "sidecar_fifo":
        os.mkfifo(path + ".sha256")
        return path + ".sha256"
    else:
        raise ValueError(how)
    return path


def _export_onto(ec: EdgeCase, mod, path: str, how: str, ir) -> Optional[Outcome]:
    """Export ``mod`` onto a device, FIFO or socket (``how``): a ``BuildError``, and the
    special file left as it was (export_library renamed its file onto a device: as root,
    /dev/null became a regular file); None when so."""
    os.makedirs(path)
    target = os.path.join(path, "k.so")
    made = _special(target, how)
    before = os.lstat(made)
    what = f"an export onto {how.replace('_', ' ')}"
    out = _expect_refusal(ec, lambda: mod.export_library(target), (tc.BuildError,),
                          f"export_library onto {how}", ir, what)
    try:
        after = os.lstat(made)
        same = (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    except OSError:
        same = False
    if not same:
        return Outcome("mismatch", ec, f"export_library onto {how}",
                       f"{what}: the {stat.filemode(before.st_mode)} file at the path was "
                       f"replaced", ir)
    return None if out.kind == "refused" else out


def _draw_tma_box(d) -> dict:
    """A tensor-map box as a GPU library's metadata may say it (each field in the range
    the reader checks: any axis, any part, coefficients, blocks and box extents): the
    dims of a tensor of a drawn shape and dtype, innermost first.  A third are the
    maps tecomp makes (the tensor's dimensions whole, the last one first)."""
    rank = d.int(1, 3)
    shape = [d.int(1, 40) for _ in range(rank)]
    dtype = d.choice(("float16", "bfloat16", "float32", "uint8"))
    if d.bool(0.33):
        dims = [[rank - 1 - i, 1, d.int(1, 8), "whole", 0] for i in range(rank)]
    else:
        dims = []
        for _ in range(d.int(1, 3)):
            part = d.choice(("whole", "inner", "outer"))
            dims.append([d.int(0, rank - 1), d.choice((1, 2, 4, 8)) if part == "outer" else 1,
                         d.int(1, 8), part, d.choice((1, 2, 8, 16, 9999)) if part == "inner"
                         else 0])
    return {"shape": shape, "dtype": dtype, "dims": dims}


def _check_tma_box(ec: EdgeCase, tw: dict) -> Optional[Outcome]:
    """The map of the drawn box (:func:`_draw_tma_box`) over its tensor: refused by the
    host's checks (``map_spec``, then ``tma.check``, as the loaded library encodes it)
    exactly when the hardware's model (``tma.reference_box``, the emulation's copy) would
    read bytes past the tensor's end with the box at the far corner of the map.  None
    when it agrees."""
    shape, dims = tw["shape"], tw["dims"]
    src = Buffer("X", list(shape), tw["dtype"])
    box = TmaBox(src, src, tuple(TmaDim(*x) for x in dims), ())
    esize = np.dtype(numpy_dtype(tw["dtype"])).itemsize
    total = esize * int(np.prod(shape))
    refused = None
    try:
        spec = map_spec(box, shape)
    except tc.TensorMapError as e:
        if "not whole blocks" in str(e):   # (a documented refusal of its own)
            return None
        refused, spec = str(e), None
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, "tma map", f"{tw}\n{_exc_text(e)}")
    if spec is None:
        # the model, for the refused map: its extents and strides as map_spec makes them
        row = [esize] * len(shape)
        for a in range(len(shape) - 2, -1, -1):
            row[a] = row[a + 1] * shape[a + 1]
        ext = [x[4] if x[3] == "inner" else shape[x[0]] // x[1] if x[3] == "outer"
               else shape[x[0]] for x in dims]
        if not all(ext):
            return None
        spec = _tma.TensorMapSpec(tw["dtype"], tuple(ext),
                                  tuple(row[x[0]] * x[1] for x in dims[1:]),
                                  tuple(x[2] for x in dims), name="X")
    elif not all(spec.dims):
        try:
            _tma.check(spec, 0)
        except tc.TensorMapError:
            return None
        return Outcome("mismatch", ec, "tma map", f"{tw}: a map with an empty dimension "
                       "passed the host's checks")
    # the tensor's bytes (never 0xEE), then guard bytes of 0xEE: the box at the far
    # corner reaches the map's last element
    reach = (spec.dims[0] - 1) * esize + sum((n - 1) * st for n, st in
                                              zip(spec.dims[1:], spec.strides)) + esize
    mem = np.full(max(total, reach) + 64, 0xEE, np.uint8)
    mem[:total] = np.arange(total) % 0xE0
    corner = [max(n - b, 0) for n, b in zip(spec.dims, spec.box)]
    got = _tma.reference_box(spec, mem, corner)
    past = bool((got == 0xEE).any())
    if refused is None and past:
        return Outcome("mismatch", ec, "tma map", f"{tw}: the map reads past its tensor of "
                       f"{total} bytes and the host's checks passed it")
    if refused is not None and not past:
        return Outcome("mismatch", ec, "tma map", f"{tw}: the map stays within its tensor "
                       f"but was refused: {refused}")
    return None


def _run_library_file(ec: EdgeCase) -> Outcome:
    emu = ec.twist.get("emu_entry")
    if emu is not None:
        bad = _check_emu_entry(ec, emu)
        if bad is not None:
            return bad
    tw = ec.twist.get("tma_box")
    if tw is not None:
        bad = _check_tma_box(ec, tw)
        if bad is not None:
            return bad
    c, bad = _prepare(ec)
    if bad:
        return bad
    mod, ir, arrs = c.mod, c.ir, c.arrs
    how = ec.twist["tamper"]
    with tempfile.TemporaryDirectory(prefix="tecomp-edge-lib-") as d:
        good = os.path.join(d, "good", "k.so")
        os.makedirs(os.path.dirname(good))
        try:
            mod.export_library(good)
            tc.load_module(good)(*arrs)
        except Exception as e:  # noqa: BLE001
            return Outcome("crash", ec, "export and load", _exc_text(e), ir)
        msg = _same_outputs(ec, arrs, c.want, "loaded vs built")
        if msg:
            return Outcome("mismatch", ec, "export and load", msg, ir)
        onto = ec.twist.get("export_onto")
        if onto:
            bad = _export_onto(ec, mod, os.path.join(d, "onto"), onto, ir)
            if bad is not None:
                return bad
        bad_path = os.path.join(d, "bad.so")
        mod.export_library(bad_path)
        if how == "resealed_flip":
            return _load_resealed(ec, c, bad_path, ir)
        _tamper(bad_path, how, np.random.default_rng(ec.seed))
        mode = os.lstat(bad_path).st_mode
        what = f"a library tampered with ({how}, {stat.filemode(mode)})"
        return _expect_refusal(ec, lambda: tc.load_module(bad_path), (tc.LoadError,),
                               f"load_module ({how})", ir, what)


def _check_emu_entry(ec: EdgeCase, tw: dict) -> Optional[Outcome]:
    """The CUDA emulation's cache entry of a small kernel attacked as ``tw`` says
    (:func:`tecomp.testing.emu_entry.run_attack`): None where it is compiled again and
    right (or, a directory in its place, refused with a BuildError); else the finding."""
    if shutil.which(os.environ.get("CXX") or "g++") is None and shutil.which("clang++") is None:
        return None
    what = f"the CUDA emulation cache entry attacked ({tw['attack']})"
    try:
        kind, detail = run_emu_attack(tw["attack"], n=tw["n"], threads=tw["threads"],
                                      k=tw["k"], cut=tw["cut"])
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, "emulation cache entry", f"{what}:\n{_exc_text(e)}")
    return Outcome("mismatch", ec, "emulation cache entry", detail) if kind == "mismatch" \
        else None


def _load_resealed(ec: EdgeCase, c, path: str, ir: str) -> Outcome:
    """A library with one bit flipped where the loader reads it, and its sidecar
    resealed: ``load_module`` refuses it (a LoadError), or it loads and its call is
    refused (a TecompError) or gives the outputs of the built module; anything else --
    a crash of the process in ``dlopen`` above all -- is a finding."""
    with open(path, "rb") as fh:
        exported = inspect_library(fh.read(), path, aot_format.SECTION).section
    what = f"a library resealed after a flip at {_resealed_flip(path, ec.twist['flip'])}"
    try:
        m = tc.load_module(path)
    except tc.LoadError:
        return Outcome("refused", ec, "load_module (resealed_flip)", what, ir)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, "load_module (resealed_flip)", f"{what}:\n{_exc_text(e)}",
                       ir)
    if m.metadata != json.loads(exported.rstrip(b"\0")):
        # (its argument checks describe other shapes than its code computes over)
        return Outcome("mismatch", ec, "load_module (resealed_flip)",
                       f"{what}: loaded, with metadata other than what export_library "
                       f"wrote", ir)
    arrs = case_arrays(ec, c.inputs)
    try:
        m(*arrs)
    except tc.TecompError as e:
        if isinstance(e, tc.InternalError):
            return Outcome("crash", ec, "call (resealed_flip)", f"{what}:\n{_exc_text(e)}", ir)
        return Outcome("refused", ec, "call (resealed_flip)", what, ir)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, "call (resealed_flip)", f"{what}:\n{_exc_text(e)}", ir)
    msg = _same_outputs(ec, arrs, c.want, f"{what}: loaded vs built")
    return Outcome("mismatch", ec, "call (resealed_flip)", msg, ir) if msg else \
        Outcome("ok", ec, "", "", ir)


def _run_records(ec: EdgeCase) -> Outcome:
    import warnings


    stage = "schedule"
    try:
        s, args, _ = schedule_case(ec)
        shapes = {"n": ec.n} if ec.program.symbolic else None
        key = records.workload_key(args, "llvm", shapes)
        genuine = records.make_record(key, s.trace.to_json(), [1e-3])
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    import json

    lines = [_forge(genuine, f) for f in ec.twist["forgeries"]]
    if ec.twist["genuine"]:
        lines.append(json.dumps(genuine))
    with tempfile.TemporaryDirectory(prefix="tecomp-edge-log-") as d:
        path = os.path.join(d, "log.json")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write("\n".join(lines) + "\n")
        stage = "auto_schedule(log=)"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # a fresh program: the log's schedule is replayed on its own tensors
                built, nvar = ec.program.build()
                args2 = ec.program.args(built, nvar)
                s2 = tc.auto_schedule(args2, log=path, shapes=shapes)
            stage = "build the log's schedule"
            mod = tc.build(s2, args2)
            inputs = ec.program.random_inputs(ec.n, np.random.default_rng(ec.seed))
            arrs = case_arrays(ec, inputs)
            stage = "call"
            mod(*arrs)
        except Exception as e:  # noqa: BLE001
            return _failure(ec, stage, e, (tc.AutoScheduleError,))
    ref, unknown = ec.program.numpy_reference(inputs, ec.n)
    problems = numpy_problems(ec, inputs, ref, unknown, {"the log's schedule": arrs})
    return Outcome("mismatch", ec, "compare", "\n".join(problems)) if problems else \
        Outcome("ok", ec, "", "")


#: Linux's MAP_NORESERVE: pages of the mapping are neither reserved nor touched until used
_MAP_NORESERVE = 0x4000


def _sparse_view(a: np.ndarray, keep: list):
    """``a``'s values in a lazily mapped buffer, its outermost axis of more than one
    element strided so that the last element is more than 2**31 elements from the first
    (None where the mapping is refused). ``keep`` holds the mapping alive."""
    import mmap

    dims = [d for d in range(a.ndim) if a.shape[d] > 1]
    if not dims or a.size == 0:
        return None
    d0 = dims[0]
    inner = 1
    for e in a.shape[d0 + 1:]:
        inner *= e
    step = max(inner, -(-(2**31 + 64) // (a.shape[d0] - 1)))      # elements
    strides = []
    for d in range(a.ndim):
        if d == d0:
            strides.append(step * a.itemsize)
        else:
            rest = 1
            for e in a.shape[d + 1:]:
                rest *= e
            strides.append(rest * a.itemsize)
    span = sum((e - 1) * st for e, st in zip(a.shape, strides)) + a.itemsize
    try:
        m = mmap.mmap(-1, span, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
    except (OSError, OverflowError, ValueError):
        return None
    keep.append(m)
    v = np.ndarray(a.shape, a.dtype, buffer=m, strides=tuple(strides))
    v[...] = a
    return v


def _run_big_extent(ec: EdgeCase) -> Outcome:
    if ec.twist["variant"] == "big_reduction":
        return _run_big_reduction(ec)
    if ec.twist["variant"] == "float_extent":
        return _run_float_extent(ec)
    c, bad = _prepare(ec)
    if bad:
        return bad
    keep: list = []
    arrs = list(c.arrs)
    placed = 0
    for pos, a in enumerate(arrs):
        if isinstance(a, np.ndarray):
            v = _sparse_view(a, keep)
            if v is not None:
                arrs[pos] = v
                placed += 1
    if not placed:
        return Outcome("ok", ec, "", "", c.ir)
    try:
        c.mod(*arrs)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", ec, "call with arrays 2**31 elements apart", _exc_text(e), c.ir)
    got = [np.array(a) if isinstance(a, np.ndarray) else a for a in arrs]
    del arrs, keep
    msg = _same_outputs(ec, got, c.want, "arrays 2**31 elements apart vs contiguous")
    return Outcome("mismatch", ec, "huge_strides", msg, c.ir) if msg else \
        Outcome("ok", ec, "", "", c.ir)


def _big_reduction_schedule(tw):
    """``B[i] = sum(int64(A[i, k]), k < n)``, scheduled as the twist says: (args, s)."""
    n = tc.var("n", tw["n_dtype"])
    A = tc.placeholder((tw["rows"], n), dtype="int32", name="A")
    k = tc.reduce_axis((0, n), name="k")
    B = tc.compute((tw["rows"],), lambda i: tc.sum(A[i, k].astype("int64"), axis=k), name="B")
    s = tc.create_schedule(B.op)
    if tw["factor"]:
        ko, ki = s[B].split(k, factor=tw["factor"])
        if tw["factor"] <= 64 and tw["annotate"] in ("vectorize", "unroll"):
            rf = s.rfactor(B, ki)
            getattr(s[rf], tw["annotate"])(s[rf].op.axis[0])
        elif tw["annotate"] == "parallel":
            rf = s.rfactor(B, ko)
            s[rf].parallel(s[rf].op.axis[0])
    return [A, B, n], s


def _run_big_reduction(ec: EdgeCase) -> Outcome:
    tw = ec.twist
    stage = "schedule"
    try:
        args, s = _big_reduction_schedule(tw)
        stage = "build"
        mod = tc.build(s, args)
        rows, terms = tw["rows"], tw["terms"]
        vals = np.arange(1, rows + 1, dtype=np.int32) * 3
        a = np.lib.stride_tricks.as_strided(vals, (rows, terms), (4, 0))   # read-only
        b = np.zeros(rows, np.int64)
        stage = "call"
        mod(a, b, terms)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e, (tc.ArgumentError,))
    want = vals.astype(np.int64) * terms
    if not np.array_equal(b, want):
        return Outcome("mismatch", ec, "compare", f"sum over {terms} terms: got {b.tolist()}, "
                       f"expected {want.tolist()}")
    return Outcome("ok", ec, "", "")


#: (session 30) the big_extent family's float scalars cast to an extent, by class (per
#: int type where the class depends on it; a float32 scalar takes the value rounded):
#: none past int32 that int64 holds (a legal extent of 2**31 terms and more: slow)
FLOAT_EXTENT_VALUES = {
    "nan": (float("nan"),),
    "infinity": (float("inf"), -float("inf")),
    "past_range": {"int32": (2.0**31, 3e9, -2.0**31 - 4096, -3e9, 1e30, 3.4e38),
                   "int64": (2.0**63, 1e19, -2.0**63 - 2**12, -1e19, 1e30, -3.4e38)},
    "lowest": {"int32": (-2.0**31,), "int64": (-2.0**63,)},
    "negative": (-1.0, -1.5, -3.0, -7.25, -1e6),
    "fractional": (0.5, -0.5, 0.999, 3.9, 7.999, 1e-30, -1e-30, 2.5),
    "ordinary": (0.0, 1.0, 2.0, 5.0, 9.0, 12.0, 17.0),
}

#: how often each class is drawn (the ones that run twice as often as each refusal)
FLOAT_EXTENT_CLASSES = ("nan", "infinity", "past_range", "past_range", "lowest", "negative",
                        "fractional", "fractional", "ordinary", "ordinary")


def float_extent_value(tw: dict):
    """The float_extent twist's scalar: its class's value ``pick``, in its dtype."""
    vals = FLOAT_EXTENT_VALUES[tw["value"]]
    if isinstance(vals, dict):
        vals = vals[tw["to"]]
    with np.errstate(over="ignore"):
        return np.dtype(tw["scalar"]).type(vals[tw["pick"] % len(vals)])


def _float_extent_schedule(tw: dict):
    """``B[i] = sum(int64(A[i, min(k, cols - 1)]), k < x.astype(to))`` for a float scalar
    ``x``, scheduled as the twist says: (args, s)."""
    x = tc.var("x", tw["scalar"])
    last = tw["cols"] - 1
    A = tc.placeholder((tw["rows"], tw["cols"]), dtype="int32", name="A")
    k = tc.reduce_axis((0, x.astype(tw["to"])), name="k")
    B = tc.compute((tw["rows"],), lambda i: tc.sum(A[i, tc.min(k, last)].astype("int64"),
                                                   axis=k), name="B")
    s = tc.create_schedule(B.op)
    if tw["schedule"] == "vectorize":
        ko, ki = s[B].split(k, factor=4)
        rf = s.rfactor(B, ki)
        s[rf].vectorize(s[rf].op.axis[0])
    elif tw["schedule"] == "parallel":
        s[B].parallel(B.op.axis[0])
    return [A, B, x], s


def _run_float_extent(ec: EdgeCase) -> Outcome:
    """The sum over ``k < x.astype(to)`` of a float scalar ``x``: the first ``trunc(x)``
    terms, or the call's refusal where the conversion has no defined value (NaN, an
    infinity, past the int type) or the extent is negative (or the empty sum there, where
    a split rounds the loop's count up to 0)."""
    tw = ec.twist
    v = float_extent_value(tw)
    lo, hi = (np.iinfo(tw["to"]).min, np.iinfo(tw["to"]).max)
    f = float(v)
    t = int(np.trunc(f)) if np.isfinite(f) else None
    undefined = t is None or not lo <= t <= hi
    what = f"x = {tw['scalar']}({f!r}) cast to {tw['to']} for an extent ({tw['schedule']})"
    stage = "schedule"
    try:
        args, s = _float_extent_schedule(tw)
        stage = "build"
        mod = tc.build(s, args)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    a = (np.arange(tw["rows"] * tw["cols"], dtype=np.int32).reshape(tw["rows"], tw["cols"])
         * 7 - 11)
    b = np.full(tw["rows"], -99, np.int64)
    try:
        mod(a, b, v)
    except tc.ArgumentError as e:
        text = str(e)
        if undefined and "has no defined conversion" in text:
            return Outcome("refused", ec, "call", text.splitlines()[0][:300])
        if not undefined and t < 0 and "must be >= 0" in text:
            return Outcome("refused", ec, "call", text.splitlines()[0][:300])
        return Outcome("mismatch", ec, "call", f"{what}: refused as\n{text[:600]}\nexpected "
                       + ("a refusal of the conversion" if undefined else
                          "a refusal of the negative extent" if t < 0 else f"{t} terms"))
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "call", e)
    if undefined:
        return Outcome("mismatch", ec, "call", f"{what}: accepted (B = {b.tolist()}), expected "
                       "an ArgumentError: the conversion has no defined value")
    n = max(t, 0)
    head = a[:, :min(n, tw["cols"])].astype(np.int64).sum(axis=1)
    want = head + max(n - tw["cols"], 0) * a[:, -1].astype(np.int64)
    if not np.array_equal(b, want):
        return Outcome("mismatch", ec, "compare", f"{what}: got {b.tolist()}, expected "
                       f"{want.tolist()} ({n} terms)")
    return Outcome("ok", ec, "", "")


def _run_deep(ec: EdgeCase) -> Outcome:
    tw = ec.twist
    stage = "compute"
    try:
        ops = random_chain(ec.fuzz_seed, tw["depth"])
        A, B = chain_compute(ops, tw["rows"])
        stage = "schedule"
        s = tc.create_schedule(B.op)
        how, target = tw["schedule"], "llvm"
        if how != "plain" and tw["rows"] > 1:
            outer, inner = s[B].split(B.op.axis[0], factor=4)
            if how == "vectorize":
                s[B].vectorize(inner)
            elif how == "parallel":
                s[B].parallel(outer)
            elif how == "gpu":
                s[B].bind(outer, tc.thread_axis("blockIdx.x"))
                s[B].bind(inner, tc.thread_axis("threadIdx.x"))
                target = "cuda-emu"
        stage = f"build ({target})"
        mod = tc.build(s, [A, B], target=target)
        a = np.random.default_rng(ec.seed).uniform(
            -1, 1, (tw["rows"], len(ops) + 1)).astype("float32")
        got = np.zeros(tw["rows"], "float32")
        stage = "call"
        mod(a, got)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    want = chain_reference(ops, a)
    if not np.array_equal(got, want, equal_nan=True):
        return Outcome("mismatch", ec, "compare", f"a chain {tw['depth']} levels deep: got "
                       f"{got[:4].tolist()}, numpy {want[:4].tolist()}")
    return Outcome("ok", ec, "", "")


# ---------------------------------------------------------------------------------
# session 8's families


def _gather_ids(tw: dict):
    """The ids of a ``gather_ids`` case: in range, or one of them outside the table."""
    V, B = tw["V"], tw["B"]
    rng = np.random.default_rng(V * 1000 + B)
    ids = rng.integers(0, V, B).astype(tw["ids_dtype"])
    bad = {"past": V, "far": V + 12345, "minus_one": -1,
           "huge": 2**31 - 1 if tw["ids_dtype"] == "int32" else 2**40}.get(tw["bad"])
    if bad is not None:
        ids[rng.integers(0, B)] = bad
    return ids, bad


def _schedule_gather(s, G, how: str) -> None:
    """The CPU schedules of a gather's rows and columns (``how``; "gpu" binds them apart)."""
    if how == "vectorize":
        s[G].vectorize(G.op.axis[1])
    elif how == "parallel":
        s[G].parallel(G.op.axis[0])
    elif how == "split":
        o, i = s[G].split(G.op.axis[1], 4)
        s[G].vectorize(i)
        s[G].parallel(G.op.axis[0])


def _run_gather_ids(ec: EdgeCase) -> Outcome:
    tw = ec.twist
    if "window" in tw:
        return _run_window(ec)
    if "wrapped" in tw and tw["bad"] is None:
        return _run_wrapped(ec)
    V, D, B = tw["V"], tw["D"], tw["B"]
    ids_t = tc.placeholder((B,), name="ids", dtype=tw["ids_dtype"])
    X = tc.placeholder((V, D), name="X")
    G = tc.compute((B, D), lambda i, j: X[ids_t[i], j] * 2.0 + 1.0, name="G")
    s = tc.create_schedule(G.op)
    how = tw["schedule"]
    _schedule_gather(s, G, how)
    if how == "gpu":
        if shutil.which(os.environ.get("CXX", "g++")) is None:
            return Outcome("ok", ec, "", "no C++ compiler for the CUDA emulation")
        s[G].bind(G.op.axis[0], tc.thread_axis("blockIdx.x"))
        s[G].bind(G.op.axis[1], tc.thread_axis("threadIdx.x"))
    try:
        f = tc.build(s, [ids_t, X, G], target="cuda-emu" if how == "gpu" else "llvm")
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build", e)
    ids, bad = _gather_ids(tw)
    x = np.random.default_rng(ec.seed).random((V, D), dtype=np.float32)
    g = np.zeros((B, D), np.float32)
    out = _call_or_refusal(ec, lambda: f(ids, x, g), (tc.BoundsError,),
                           None if bad is None else f"a gather with id {bad} of a table of "
                           f"{V} rows")
    if out is not None:
        return out
    want = x[ids.astype(np.int64)] * np.float32(2) + np.float32(1)
    if not np.array_equal(g, want):
        return Outcome("mismatch", ec, "compare", f"gather: got {g.ravel()[:6].tolist()}, "
                       f"numpy {want.ravel()[:6].tolist()}")
    return Outcome("ok", ec, "", "")


def _run_window(ec: EdgeCase) -> Outcome:
    """The gather's rows read at ``X[i * step + off, j]`` instead, ``off`` (and maybe
    ``step``) scalar parameters, the table's rows maybe a symbolic extent: the read's
    range is only known when the kernel is called.  In range: numpy's values; outside
    (``off`` -1, one past, 2**31 - 1, -2**31): an ArgumentError before the kernel runs
    (an unchecked build read and wrote nothing wrong, it read outside X)."""
    tw, w = ec.twist, ec.twist["window"]
    step = 2 if w["step"] == "var" else w["step"]
    D, B = tw["D"], tw["B"]
    V = tw["V"] + (B - 1) * step          # room for the window at tw["V"] offsets
    off_v = tc.var("off")
    step_v = tc.var("step") if w["step"] == "var" else None
    rows = tc.var("rows") if w["symbolic_rows"] else V
    X = tc.placeholder((rows, D), name="X")
    step_e = step_v if step_v is not None else w["step"]
    G = tc.compute((B, D), lambda i, j: X[i * step_e + off_v, j] * 2.0 + 1.0, name="G")
    s = tc.create_schedule(G.op)
    how = tw["schedule"]
    _schedule_gather(s, G, how)
    args = [X, G, off_v] + ([step_v] if step_v is not None else [])
    try:
        f = tc.build(s, args)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build", e)
    top = V - 1 - (B - 1) * step          # the largest offset in range
    rng = np.random.default_rng(ec.seed)
    off = {"ok": int(rng.integers(0, top + 1)), "minus_one": -1, "one_past": top + 1,
           "huge": 2**31 - 1, "most_negative": -2**31}[w["off"]]
    x = rng.random((V, D), dtype=np.float32)
    g = np.zeros((B, D), np.float32)
    call = [x, g, off] + ([step] if step_v is not None else [])
    out = _call_or_refusal(ec, lambda: f(*call), (tc.ArgumentError,),
                           None if 0 <= off <= top else f"rows X[i * {step} + {off}] of a "
                           f"table of {V} rows, i < {B}")
    if out is not None:
        return out
    want = x[np.arange(B) * step + off] * np.float32(2) + np.float32(1)
    if not np.array_equal(g, want):
        return Outcome("mismatch", ec, "compare", f"window: got {g.ravel()[:6].tolist()}, "
                       f"numpy {want.ravel()[:6].tolist()}")
    return Outcome("ok", ec, "", "")


def _run_wrapped(ec: EdgeCase) -> Outcome:
    """The gather's rows read at an index whose extremes are not at the ends of its
    range: ``X[(i % p)*q + c, j]``, ``X[int32(int8(i*q)) + c, j]`` (or int16: the cast
    wraps inside the range), maybe only for the rows ``i < L`` (``guard``: ``L = B -
    guard``; the others -1, under ``tc.if_then_else``), over a table of rows that holds every row read or misses
    one (``slack`` -1); or ``sum(X[int32(k), j] + Z[k], k < N)`` over an int64 ``N`` of
    2**31 + 3 to 2**32 + 9 terms (``Z`` a stride-0 view), where int32(k) wraps past
    2**31 - 1.  A read outside the table is refused -- a ShapeError where the compute
    is defined, or an ArgumentError at the call -- never read (an unchecked build read
    rows before or past X, or segfaulted); in range: numpy's values."""
    tw, w = ec.twist, ec.twist["wrapped"]
    D = tw["D"]
    if w["form"] == "cast_sum":
        return _run_wrapped_sum(ec)
    B = tw["B"] * (10 if w["form"] == "int8" else 1)
    i = np.arange(B, dtype=np.int64)
    if w["form"] == "mod":
        raw = i % w["p"] * w["q"]
    else:
        raw = (i * w["q"]).astype(np.int8 if w["form"] == "int8" else np.int16).astype(np.int64)
    # guarded: only the rows i < L are read (tc.if_then_else), the table fits those
    L = B if w.get("guard") is None else max(1, B - w["guard"])
    c = int(-raw[:L].min())
    rows = raw[:L] + c
    V = max(1, int(rows.max()) + 1 + w["slack"])
    X = tc.placeholder((V, D), name="X")

    def index(i):
        if w["form"] == "mod":
            return i % w["p"] * w["q"] + c
        return (i * w["q"]).astype(w["form"]).astype("int32") + c

    def read(i, j):
        if L == B:
            return X[index(i), j] * 2.0 + 1.0
        return tc.if_then_else(i < L, X[index(i), j] * 2.0 + 1.0, -1.0)

    inside = 0 <= rows.min() and rows.max() < V
    x = np.random.default_rng(ec.seed).random((V, D), dtype=np.float32)
    g = np.zeros((B, D), np.float32)
    try:
        G = tc.compute((B, D), read, name="G")
        s = tc.create_schedule(G.op)
        _schedule_gather(s, G, tw["schedule"])
        f = tc.build(s, [X, G])
        f(x, g)
    except tc.ShapeError as e:
        if not inside:
            return Outcome("refused", ec, "define", str(e).splitlines()[0][:200])
        return _failure(ec, "define", e)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build", e)
    if not inside:
        return Outcome("mismatch", ec, "define",
                       f"rows {rows.min()}..{rows.max()} of a table of {V} were read: the "
                       f"read X[{w['form']} index] outside X was not refused")
    want = np.full((B, D), -1, np.float32)
    want[:L] = x[rows] * np.float32(2) + np.float32(1)
    if not np.array_equal(g, want):
        return Outcome("mismatch", ec, "compare", f"wrapped: got {g.ravel()[:6].tolist()}, "
                       f"numpy {want.ravel()[:6].tolist()}")
    return Outcome("ok", ec, "", "")


def _run_wrapped_sum(ec: EdgeCase) -> Outcome:
    """``S[j] = sum(X[int32(k), j] + Z[k], k < N)``, N int64 (see :func:`_run_wrapped`)."""
    tw, w = ec.twist, ec.twist["wrapped"]
    D, V = tw["D"], tw["V"]
    N = tc.var("N", "int64")
    X = tc.placeholder((V, D), name="X")
    Z = tc.placeholder((N,), name="Z")
    k = tc.reduce_axis((0, N), name="k")
    S = tc.compute((D,), lambda j: tc.sum(X[k.astype("int32"), j] + Z[k], axis=k), name="S")
    s = tc.create_schedule(S.op)
    try:
        f = tc.build(s, [X, Z, S])
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build", e)
    x = np.random.default_rng(ec.seed).random((V, D), dtype=np.float32)
    out = np.zeros(D, np.float32)
    terms = w["terms"] if w["terms"] != 7 else min(V, 7)
    z = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(terms,), strides=(0,))
    failed = _call_or_refusal(ec, lambda: f(x, z, out), (tc.ArgumentError,),
                              None if terms <= V else f"a sum of X[int32(k)] over {terms} "
                              f"terms, X of {V} rows")
    if failed is not None:
        return failed
    want = x[:terms].astype(np.float64).sum(0)
    if not np.allclose(out, want, rtol=1e-5, atol=1e-5):
        return Outcome("mismatch", ec, "compare", f"wrapped sum: got {out.tolist()[:6]}, "
                       f"numpy {want.tolist()[:6]}")
    return Outcome("ok", ec, "", "")


def _run_extern_keeps_view(ec: EdgeCase) -> Outcome:
    """An extern stage whose function keeps a view of the kernel's memory past the call
    (a ComputeError), or a copy of it (runs)."""
    how = ec.twist["keep"]
    kept = []

    def fn(x, y):
        y[:] = x * 2
        if how == "global":
            kept.append(y)
        elif how == "slice":
            kept.append(y[::2])
        elif how == "exception":
            raise ValueError("values kept", y)
        else:
            kept.append(np.array(y))

    X = tc.placeholder((6,), name="X")
    Y = tc.extern((6,), [X], lambda ins, outs: tc.call_packed(fn, ins[0], outs[0]), name="Y")
    Z = tc.compute((6,), lambda i: Y[i] + 1.0, name="Z")
    try:
        mod = tc.build(tc.create_schedule(Z.op), [X, Z])
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "build", e)
    x, z = np.arange(6, dtype=np.float32), np.zeros(6, np.float32)
    if how != "copy":
        return _expect_refusal(ec, lambda: mod(x, z), (tc.ComputeError,), "call", "",
                               f"an extern function keeping a view ({how})")
    try:
        mod(x, z)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "call", e)
    if not (np.array_equal(z, x * 2 + 1) and np.array_equal(kept[0], x * 2)):
        return Outcome("mismatch", ec, "compare", f"extern copy: {z.tolist()}, {kept}")
    return Outcome("ok", ec, "", "")


def _run_build_args(ec: EdgeCase) -> Outcome:
    if ec.twist["variant"] == "extern_keeps_view":
        return _run_extern_keeps_view(ec)
    c, bad = _prepare(ec)
    if bad:
        return bad
    s, args, _ = schedule_case(ec)
    tw = ec.twist
    if tw["variant"] == "runtime_name":
        return _expect_refusal(ec, lambda: tc.build(s, args, name=tw["name"]), (tc.BuildError,),
                               "build", c.ir, f"a kernel named {tw['name']!r}")
    # an output's data-parallel axis (serial, no stage attached at it) split by a tc.var
    attached = {(st.attach_stage, st.attach_ivar) for st in s.stages
                if st.attach_type == "scope"}
    outs = [a for a in args if isinstance(a, tc.Tensor) and any(a.op is o for o in s.outputs)]
    for t in outs:
        st = s[t]
        for iv in st.leaf_iter_vars:
            a = st.iter_attrs.get(iv)
            if iv.kind != "reduce" and (st, iv) not in attached and \
                    (a is None or a.kind == "serial"):
                break
        else:
            continue
        f = tc.var("f")
        st.split(iv, factor=f)
        refused = _expect_refusal(ec, lambda: tc.build(s, args), (tc.LowerError,), "build",
                                  c.ir, "a split factor left out of the arguments")
        if refused.kind != "refused":
            return refused
        try:
            mod = tc.build(s, list(args) + [f])
            mod(*c.arrs, tw["factor"])
        except Exception as e:  # noqa: BLE001
            return _failure(ec, "build and call with the factor passed", e, ir=c.ir)
        msg = _same_outputs(ec, c.arrs, c.want, f"split by f = {tw['factor']} vs the plain build")
        return Outcome("mismatch", ec, "compare", msg, c.ir) if msg else \
            Outcome("ok", ec, "", "", c.ir)
    return Outcome("ok", ec, "", "no serial data-parallel axis of an output to split", c.ir)


def _edit_ir(text: str, tw: dict):
    """The printed IR ``text`` edited as ``tw`` says, or None where it has no such site."""
    import re

    if tw["edit"] == "branch_writes_its_condition":
        # `X[i] = v` -> `if (v != X[i]) { X[i] = v; X[i] = select(v != X[i], X[i], X[i] + 1) }`:
        # the branch's condition, true on entry, is false once the branch stored v
        # (stores to the parameters: an allocation's first values are undefined)
        head = text.split("\n", 1)[0]
        params = dict(re.findall(r"([A-Za-z_][\w.]*): (\w+)\[", head))
        sites = [m for m in re.finditer(r"(?m)^( *)(([A-Za-z_][\w.]*)\[[^\n]*?\]) = ([^\n]+)$",
                                        text) if params.get(m.group(3), "bool") != "bool"]
        if not sites:
            return None
        m = sites[tw["pick"] % len(sites)]
        ind, x, v = m.group(1), m.group(2), m.group(4)
        cond, one = f"({v}) != {x}", Const(1, params[m.group(3)])
        block = (f"{ind}if ({cond}) {{\n{ind}  {x} = {v}\n"
                 f"{ind}  {x} = select({cond}, {x}, {x} + {one})\n{ind}}}")
        return text[:m.start()] + block + text[m.end():]
    if tw["edit"].startswith("alloc"):
        pat = r"(allocate ([^\n]*?): \w+\[)([^\]]*)(\])"
        sites = list(re.finditer(pat, text))
        if sites:
            # one buffer (allocated once per copy of its loop where a loop was partitioned:
            # every declaration alike, as tc.ir.parse requires)
            name = sites[tw["pick"] % len(sites)].group(2)
            k = tw["pick"]
            new = "0" if tw["edit"] == "alloc_zero" else f"-{tw['by']}"

            def edit(m):
                if m.group(2) != name:
                    return m.group(0)
                exts = m.group(3).split(", ")
                exts[k % len(exts)] = new
                return m.group(1) + ", ".join(exts) + m.group(4)

            return re.sub(pat, edit, text)
        tw = {**tw, "edit": "index_past"}
    # an index of a load or store: `name[a, b]` -> `name[a + by, b]` (or - by)
    sites = [m for m in re.finditer(r"(?<![\w.])([A-Za-z_][\w.]*)\[([^\[\]:]+)\]", text)
             if not text[:m.start()].rstrip().endswith(("allocate", "primfn"))
             and ": " not in m.group(2)]
    sites = [m for m in sites if not re.search(r"(allocate|primfn)[^\n]*$", text[:m.start()])]
    if not sites:
        return None
    m = sites[tw["pick"] % len(sites)]
    parts = m.group(2).split(", ")
    k = tw["pick"] % len(parts)
    sign = "+" if tw["edit"] == "index_past" else "-"
    # the constant in the index's own type: an int64 index (`2i64`, a loop over `n` of
    # int64) takes `7i64`, as the IR converts nothing implicitly (seed 70266)
    index, edits = parts[k], []
    for lit in (f"{tw['by']}", f"{tw['by']}i64"):
        parts[k] = f"{index} {sign} {lit}"
        edits.append(text[:m.start(2)] + ", ".join(parts) + text[m.end(2):])
        try:
            tc.ir.parse(edits[-1])
        except tc.IRParseError:
            continue
        return edits[-1]
    return edits[0]


def _stores_into_edited(text: str) -> bool:
    """Whether the IR ``text`` stores into an allocation the alloc edits gave an extent
    of 0 or below."""
    names = {m.group(1) for m in re.finditer(r"allocate ([^\n]*?): \w+\[([^\]]*)\]", text)
             if any(e.strip() == "0" or e.strip().startswith("-")
                    for e in m.group(2).split(","))}
    return any(re.search(rf"(?m)^\s*{re.escape(n)}\[[^\n]*\] = ", text) for n in names)


def _interpreter_refuses(func, arrs) -> bool:
    """Whether the reference interpreter refuses to run ``func`` on ``arrs`` (a store past
    an allocation of no element that runs, a negative extent)."""
    try:
        interp.run(func, *arrs)
    except tc.TecompError:
        return True
    return False


def _run_ir_edit(ec: EdgeCase) -> Outcome:
    c, bad = _prepare(ec)
    if bad:
        return bad
    text = _edit_ir(c.ir, ec.twist)
    if text is None:
        return Outcome("ok", ec, "", "nothing to edit", c.ir)
    stage = "parse"
    try:
        func = tc.ir.parse(text)
        if ec.twist["edit"] == "branch_writes_its_condition":
            return _simplified_alike(ec, c, func, text)
        stage = "build"
        mod = tc.build(func)
        stage = "call"
        if ec.twist["edit"].startswith("alloc") and _stores_into_edited(text) \
                and _interpreter_refuses(func, case_arrays(ec, c.inputs)):
            # the stage that owns the buffer stores into it: no element to store to
            # (lowering may have dropped every store: a stage read only under a
            # condition that never holds, as at seed 21300118; or every store is in a
            # loop that runs no iteration, n = 0 at seed 27000070: the reference
            # interpreter says which)
            return _expect_refusal(ec, lambda: mod(*case_arrays(ec, c.inputs)),
                                   (tc.BoundsError,), stage, text,
                                   "stores into an allocation of no element")
        mod(*case_arrays(ec, c.inputs))
    except tc.IRParseError as e:
        return Outcome("crash", ec, stage, f"the edit made text tc.ir.parse refuses (a bug of "
                       f"the family's edit):\n{_exc_text(e)}", text)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e, (tc.TecompError,), text)
    return Outcome("ok", ec, "", "", text)


def _simplified_alike(ec: EdgeCase, c, func, text: str) -> Outcome:
    """The IR ``func`` and the simplifier's version of it compute the same (the reference
    interpreter on the case's inputs): a fact the simplifier learned from a branch's
    condition must not outlive the memory it read."""
    try:
        simple = simplify_pass(func)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "simplify", e, (), text)
    runs = []
    first = case_arrays(ec, c.inputs)
    for f in (func, simple):
        arrs = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in first]
        try:
            interp.run(f, *arrs)
        except Exception as e:  # noqa: BLE001
            return _failure(ec, "interp", e, (tc.TecompError,), str(f))
        runs.append(arrs)
    for pos, (a, b) in enumerate(zip(*runs)):
        if isinstance(a, np.ndarray) and a.tobytes() != b.tobytes():   # (NaNs: bit for bit)
            return Outcome("mismatch", ec, "simplify", f"argument {pos} differs after the "
                           f"simplifier: a fact outlived the memory it read", str(simple))
    return Outcome("ok", ec, "", "", text)


def _run_shared_reduction(ec: EdgeCase) -> Outcome:
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        return Outcome("ok", ec, "", "no C++ compiler for the CUDA emulation")
    tw = ec.twist
    R, K, T = tw["rows"], tw["K"], tw["threads"]
    A = tc.placeholder((R, K), name="A")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((R,), lambda i: tc.sum(A[i, k] * 2.0, axis=k), name="C")
    s = tc.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], T)
    s[C].bind(o, tc.thread_axis("blockIdx.x"))
    s[C].bind(i, tc.thread_axis("threadIdx.x"))
    v = tw["variant"]
    CS = s.cache_write(C, "local" if v == "local" else "shared")
    if v == "cooperative":
        s[CS].compute_at(s[C], o)
        s[CS].bind(CS.op.axis[0], tc.thread_axis("threadIdx.x"))
    else:
        s[CS].compute_at(s[C], i)
    if v == "at_thread_loop":
        return _expect_refusal(ec, lambda: tc.lower(s, [A, C], target="cuda-emu"),
                               (tc.ScheduleError,), "lower", "",
                               "a shared reduction run whole by every thread")
    a = np.random.default_rng(ec.seed).random((R, K), dtype=np.float32)
    want = (a * np.float32(2)).sum(1, dtype=np.float64)
    stage = "lower"
    try:
        func = tc.lower(s, [A, C], target="cuda-emu")
        stage = "interp"
        ci = np.zeros(R, np.float32)
        interp.run(func, a, ci)
        stage = "cuda-emu"
        ce = np.zeros(R, np.float32)
        tc.build(s, [A, C], target="cuda-emu")(a, ce)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    for name, got in (("interp", ci), ("cuda-emu", ce)):
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            return Outcome("mismatch", ec, name, f"{v}: got {got[:4].tolist()}, numpy "
                           f"{want[:4].tolist()}", str(func))
    return Outcome("ok", ec, "", "", str(func))


# ---------------------------------------------------------------------------------
# session 9's families

#: torch_autograd's formulas: (tecomp body of x = X[i, k] and w = W[k], torch's) of
#: Y[i] = sum_k body
_FORMULAS = {
    "exp_mul": (lambda x, w: tc.exp(x) * x * w, lambda x, w: __import__("torch").exp(x) * x * w),
    "tanh_sq": (lambda x, w: tc.tanh(x * w) * tc.tanh(x * w),
                lambda x, w: __import__("torch").tanh(x * w) ** 2),
    "sigmoid": (lambda x, w: tc.sigmoid(x) * w, lambda x, w: __import__("torch").sigmoid(x) * w),
    "softplus": (lambda x, w: tc.log1p(tc.exp(x * w)),
                 lambda x, w: __import__("torch").log1p(__import__("torch").exp(x * w))),
    "cubic": (lambda x, w: x * x * x * w + x * w * w, lambda x, w: x ** 3 * w + x * w * w),
}


#: what torch_autograd's ``copied`` twist does with the op before the gradient penalty
#: (session 29): deep-copy a model (a dict) holding it, as an EMA copy does, and use the
#: copy; ``copy.copy`` it; pickle it, or the module of its forward (both refused with an
#: ArgumentError saying how), then use it as it is
COPY_WAYS = ("deepcopy_holder", "deepcopy_holder", "copy_op", "pickle_op", "pickle_module")


def _copied_op(o, how: str, x0, w0):
    """``o`` after torch_autograd's ``copied`` twist ``how`` (:data:`COPY_WAYS`): the op to
    use; a pickle's refusal checked (a mismatch raised as ``_Mismatch`` otherwise)."""
    import copy
    import pickle

    if how == "deepcopy_holder":
        held = copy.deepcopy({"op": o, "weights": [x0, w0]})
        if held["weights"][0] is x0:
            raise _Mismatch("copy.deepcopy kept a tensor it should have copied")
        return held["op"]
    if how == "copy_op":
        return copy.copy(o)
    what = o if how == "pickle_op" else next(iter(o._compiled.values())).fwd
    try:
        pickle.dumps(what)
    except tc.ArgumentError as e:
        if "cannot be pickled" not in str(e):
            raise _Mismatch(f"pickling {how[7:]} refused, but not saying how:\n{e}")
        return o
    raise _Mismatch(f"pickling {how[7:]} accepted: its kernels are this process's code")


class _Mismatch(Exception):
    """A fuzz check that found a wrong behaviour (not a crash)."""


def _run_torch_autograd(ec: EdgeCase) -> Outcome:
    try:
        import torch
    except ImportError:
        return Outcome("ok", ec, "", "torch is not installed")
    tct = tc.torch            # (the package's lazy attribute: tecomp.torch needs torch)
    tw = ec.twist
    if tw.get("syncbn"):
        return _run_syncbn_penalty(ec, torch, tct)
    body, ref = _FORMULAS[tw["formula"]]
    stage = "op"
    try:
        n = tc.var("n")
        X = tc.placeholder((n, tw["cols"]), name="X")
        W = tc.placeholder((tw["cols"],), name="W")
        k = tc.reduce_axis((0, tw["cols"]), name="k")
        Y = tc.compute((n,), lambda i: tc.sum(body(X[i, k], W[k]), axis=k), name="Y")
        r = tc.reduce_axis((0, n), name="r")
        S = tc.compute((tw["cols"],), lambda j: tc.sum(X[r, j] * W[j], axis=r), name="S")
        o = tct.op([X, W], [Y, S], dynamic=tw["dynamic"])
        g = torch.Generator().manual_seed(ec.fuzz_seed)
        rows = 0 if tw["variant"] == "empty_batch" else tw["rows"]
        x0 = torch.randn(rows, tw["cols"], generator=g, dtype=torch.float64) * 0.5
        w0 = torch.randn(tw["cols"], generator=g, dtype=torch.float64) * 0.5

        def penalty(f):
            x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
            y, s_ = f(x, w)
            gx, gw = torch.autograd.grad(y.sum() + s_.sum(), (x, w), create_graph=True)
            ((gx ** 2).sum() + (gw ** 2).sum() + y.sum()).backward()
            return [y, s_, x.grad, w.grad]

        if tw.get("mixed_floats"):
            # X and W (both declared float32) as float32 and float64: the op's own refusal
            stage = "float32 and float64 for two inputs declared float32"
            try:
                o(x0.float(), w0)
            except tc.ArgumentError as e:
                if "are both declared float32" in str(e):
                    return Outcome("refused", ec, stage, str(e).splitlines()[0][:300])
                return Outcome("mismatch", ec, stage, f"refused, but not by the op, naming "
                               f"both inputs:\n{_exc_text(e)}")
            return Outcome("mismatch", ec, stage, "accepted: expected an ArgumentError")
        cp = tw.get("copied")
        if cp:   # (session 29) deep-copied, copied or pickled, before or after a call
            stage = f"the op {cp['how']} {'after' if cp['after_call'] else 'before'} a call"
            if cp["after_call"] or cp["how"] == "pickle_module":
                o(x0, w0)
            try:
                o = _copied_op(o, cp["how"], x0, w0)
            except _Mismatch as e:
                return Outcome("mismatch", ec, stage, str(e))
        stage = f"{tw['variant']} through tecomp.torch.op"
        got = penalty(o)
        stage = "the same in torch"
        want = penalty(lambda x, w: (ref(x, w).sum(1), (x * w).sum(0)))
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    for name, a, b in zip(("Y", "S", "x.grad", "w.grad"), got, want):
        if a is None or b is None or a.shape != b.shape or \
                not torch.allclose(a.detach(), b.detach(), rtol=1e-6, atol=1e-8):
            return Outcome("mismatch", ec, "compare", f"{tw['variant']} of {tw['formula']}: "
                           f"{name} {None if a is None else a.detach().flatten()[:4].tolist()}, "
                           f"torch {None if b is None else b.detach().flatten()[:4].tolist()}")
    if tw.get("strided_opcheck"):
        return _strided_opcheck(ec, torch, o, x0, w0)
    return Outcome("ok", ec, "", "")


def _strided_opcheck(ec: EdgeCase, torch, o, x0, w0) -> Outcome:
    """(session 31) ``torch.library.opcheck``'s schema and fake-tensor tests of the op's
    custom op and its backward op, with the input ``X`` and an incoming gradient in
    column-major strides: the fake implementations must give the real outputs' shapes
    and strides (torch.compile plans with them; before session 31 the backward's fake
    gave a strided input's gradient its strides, the real one was contiguous)."""
    def col_major(t):
        return t.t().contiguous().t()

    fwd = getattr(torch.ops.tecomp, o.name).default
    bwd = getattr(torch.ops.tecomp, f"{o.name}_backward").default
    x = col_major(x0)
    calls = [(fwd, (x, w0)), (bwd, (x, w0, torch.ones(x0.shape[0], dtype=x0.dtype), None)),
             (bwd, (x0, w0, None, torch.ones_like(w0)))]
    for f, args in calls:
        try:
            torch.library.opcheck(f, args, test_utils=("test_schema", "test_faketensor"))
        except Exception as e:  # noqa: BLE001
            return Outcome("mismatch", ec, f"opcheck of {f} with strided X", _exc_text(e))
    return Outcome("ok", ec, "", "")


def _run_syncbn_penalty(ec: EdgeCase, torch, tct) -> Outcome:
    """(session 31) ``tecomp.torch.SyncBatchNorm`` in training, one process, float64: a
    gradient penalty through it (the input's and the parameters' gradients, from
    ``create_graph=True``) equal to torch's ``BatchNorm``'s.  Before session 31 its first
    gradient came from kernels outside autograd, a constant, and the penalty's terms
    vanished from the gradients silently."""
    tw, sb = ec.twist, ec.twist["syncbn"]
    shape = (tw["rows"] + 1, tw["cols"], *sb["spatial"])
    stage = "SyncBatchNorm's gradient penalty"
    try:
        g = torch.Generator().manual_seed(ec.fuzz_seed)
        x0 = torch.randn(shape, generator=g, dtype=torch.float64)
        if sb["channels_last"] and x0.dim() in (4, 5):
            x0 = x0.to(memory_format=torch.channels_last if x0.dim() == 4 else
                       torch.channels_last_3d)
        w0 = torch.rand(tw["cols"], generator=g, dtype=torch.float64) + 0.5
        mods = [tct.SyncBatchNorm(tw["cols"], affine=sb["affine"]).double(),
                {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
                 5: torch.nn.BatchNorm3d}[x0.dim()](tw["cols"], affine=sb["affine"]).double()]
        got = []
        for m in mods:
            if sb["affine"]:
                with torch.no_grad():
                    m.weight.copy_(w0)
            x = x0.clone().requires_grad_()
            y = m(x)
            gx, = torch.autograd.grad(y.pow(3).sum(), [x], create_graph=True)
            torch.autograd.backward(gx.square().sum() + y.sum())
            got.append([gx, x.grad] + ([m.weight.grad, m.bias.grad] if sb["affine"] else []))
            stage = "the same in torch"
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    for name, a, b in zip(("gx", "x.grad", "weight.grad", "bias.grad"), *got):
        if a is None or b is None or not torch.allclose(a, b, rtol=1e-6, atol=1e-8):
            return Outcome("mismatch", ec, "compare", f"SyncBatchNorm {shape} {sb}: {name} "
                           f"{None if a is None else a.flatten()[:4].tolist()}, torch "
                           f"{None if b is None else b.flatten()[:4].tolist()}")
    return Outcome("ok", ec, "", "")


#: quant_scales' scales: float32's ends (subnormal, the smallest normal, the largest, past
#: them) and ordinary ones
EDGE_SCALES = (1e-45, 1e-40, 1.1e-38, 1.2e-38, 1e-30, 1e-20, 0.01, 0.1, 1.0, 1e20, 1e30,
               3e38, 3.5e38, 1e39, 1e300)


def _f32_normal(v) -> bool:
    with np.errstate(over="ignore", under="ignore"):
        a = abs(float(np.float32(v)))
    return float(np.finfo(np.float32).tiny) <= a <= float(np.finfo(np.float32).max)


def _run_quant_scales(ec: EdgeCase) -> Outcome:
    tw = ec.twist
    op, dt = tw["op"], tw["dtype"]
    s1, s2, s3 = (float(v) for v in tw["scales"])
    rng = np.random.default_rng(ec.fuzz_seed)
    lo, hi = quant.QDTYPES[dt]
    zp = lo + tw["zp"] % (hi - lo + 1) if dt != "int32" else tw["zp"] % 201 - 100
    sd = 3 if op == "quantized_dense" else 1
    if op == "quantized_dense":
        dt, zp = "uint8", tw["zp"] % 256
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            prod = np.float32(s1) * np.float32(s2)
            legal = all(map(_f32_normal, (s1, s2, s3, prod, prod / np.float32(s3))))
    else:
        legal = all(_f32_normal(v) for v in (s1, s2)[:1 + (op == "requantize")])
    stage = "compute"
    try:
        if op == "quantize":
            X = tc.placeholder((40,), name="X")
            Y = quant.quantize(X, s1, zp, dt)
        elif op == "dequantize":
            X = tc.placeholder((40,), dt, name="X")
            Y = quant.dequantize(X, s1, zp)
        elif op == "requantize":
            X = tc.placeholder((40,), dt, name="X")
            Y = quant.requantize(X, s1, zp, s2, 0)
        else:
            X = tc.placeholder((3, 8), "uint8", name="X")
            Wt = tc.placeholder((5, 8), "int8", name="W")
            Y = quant.quantized_dense(X, s1, zp, Wt, s2, 0, None, s3, 7, out_dtype="uint8")
    except tc.ComputeError as e:
        if legal:
            return Outcome("crash", ec, stage, f"scales {tw['scales']} refused:\n{_exc_text(e)}")
        return Outcome("refused", ec, stage, str(e).splitlines()[0][:300])
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    if not legal:
        return Outcome("mismatch", ec, stage, f"{op} with scales {tw['scales'][:sd + 1]}: "
                       f"accepted, though one is not a normal float32 (expected a ComputeError)")
    ins = [X] if op != "quantized_dense" else [X, Wt]
    stage = "build"
    try:
        f = tc.build(tc.auto_schedule(ins + [Y], trials=0), ins + [Y])
        if op == "quantize":
            with np.errstate(over="ignore"):
                x = (np.float32(s1) * rng.uniform(-300, 300, 40)).astype(np.float32)
            x[:4] = (0.0, 1e30, -3e38, 1.0)
        elif op == "quantized_dense":
            x = rng.integers(0, 256, (3, 8)).astype(np.uint8)
            w = rng.integers(-128, 128, (5, 8)).astype(np.int8)
        else:
            x = rng.integers(lo, hi, 40, endpoint=True).astype(dt)
        y = np.zeros([int(e.value) for e in Y.shape], Y.dtype)
        stage = "call"
        f(*((x, w) if op == "quantized_dense" else (x,)), y)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    f64 = lambda v: float(np.float32(v))  # noqa: E731  (a scale as the kernels hold it)
    with np.errstate(over="ignore", invalid="ignore"):
        if op == "quantize":
            want = np.clip(np.rint(x.astype(np.float64) / f64(s1)) + zp, lo, hi)
        elif op == "dequantize":
            want = ((x.astype(np.float64) - zp) * f64(s1)).astype(np.float32)
        elif op == "requantize":
            real = ((x.astype(np.float64) - zp) * f64(s1)).astype(np.float32).astype(np.float64)
            want = np.clip(np.rint(real / f64(s2)), lo, hi)
        else:
            acc = (x.astype(np.int64) - zp) @ w.astype(np.int64).T
            m = f64(s1) * f64(s2) / f64(s3)
            want = np.clip(np.rint(acc * m) + 7, 0, 255)
    got = y.astype(np.float64)
    if op == "dequantize":
        bad = ~np.isclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
    else:
        # one unit, or float32's roundings (the dequantized value's and the quantized
        # one's: a few units in the last place) of a value past 2**24 (int32)
        bad = ~(np.abs(got - want) <= np.maximum(1, np.abs(want) * 2.0 ** -21))
    if bad.any():
        i = int(np.argmax(bad))
        return Outcome("mismatch", ec, "compare", f"{op} ({dt}, zero point {zp}) with scales "
                       f"{tw['scales'][:sd + 1]}: element {i} is {got.flat[i]}, the float64 "
                       f"reference {want.flat[i]}")
    return Outcome("ok", ec, "", "")


def _run_torch_inplace(ec: EdgeCase) -> Outcome:
    torch, c, bad = _prepare_with_torch(ec)
    if bad:
        return bad
    tw = ec.twist
    call, saved, keep = list(c.arrs), [], []
    for pos, a in enumerate(c.arrs):
        if not isinstance(a, np.ndarray):
            continue
        if pos in c.outs:
            try:
                dt = torch.from_numpy(np.zeros(0, a.dtype)).dtype
            except TypeError:                     # a dtype torch has no tensors of
                continue
            t = torch.zeros(a.shape, dtype=dt)
            if tw["variant"] == "strided" and a.ndim:
                big = torch.zeros(*a.shape[:-1], 2 * a.shape[-1], dtype=dt)
                t = big[..., ::2]
                keep.append(big)
            w = torch.ones(a.shape, dtype=dt if dt.is_floating_point else torch.float32,
                           requires_grad=True)
            saved.append((w * t).sum())           # autograd saves t for w's gradient
            call[pos] = t
        elif pos in c.ins and (tw["torch_inputs"] or tw.get("subclass")) and a.dtype.isnative:
            try:
                call[pos] = torch.from_numpy(np.ascontiguousarray(a))
            except TypeError:                     # a dtype torch has no tensors of
                pass
    if not saved:
        return Outcome("ok", ec, "", "no output torch has tensors of", c.ir)
    try:
        if tw.get("subclass"):
            sub, mode = _subclass_and_mode(torch)
            call = [t.as_subclass(sub) if isinstance(t, torch.Tensor) else t for t in call]
            with mode():
                c.mod(*call)
        else:
            c.mod(*call)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, "call with torch outputs", e, ir=c.ir)
    got = [t.as_subclass(torch.Tensor).numpy() if isinstance(t, torch.Tensor) else t
           for t in call]
    msg = _same_outputs(ec, got, c.want, f"torch outputs ({tw['variant']}) vs numpy")
    if msg:
        return Outcome("mismatch", ec, "compare", msg, c.ir)
    for y in saved:
        try:
            y.backward()
        except RuntimeError as e:
            if "modified by an inplace operation" in str(e):
                continue
            return Outcome("crash", ec, "backward", _exc_text(e), c.ir)
        return Outcome("mismatch", ec, "backward", f"an output tensor ({tw['variant']}) that "
                       f"autograd saved was overwritten by the kernel, and the backward ran "
                       f"(its version counter did not go up)", c.ir)
    return Outcome("refused", ec, "backward", "the backward through an overwritten output "
                   "raised", c.ir)


_SUBCLASS = None


def _subclass_and_mode(torch):
    """(a torch.Tensor subclass defined outside torch, a dispatch mode that declines every
    call with a subclass's tensor among its arguments, as torch.compile's AOT runtime's
    does)."""
    global _SUBCLASS
    if _SUBCLASS is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class EdgeTensor(torch.Tensor):
            pass

        class DeclinesSubclasses(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                flat = torch.utils._pytree.tree_leaves((args, kwargs or {}))
                if any(isinstance(x, torch.Tensor) and type(x) is not torch.Tensor
                       for x in flat):
                    return NotImplemented
                return func(*args, **(kwargs or {}))

        _SUBCLASS = (EdgeTensor, DeclinesSubclasses)
    return _SUBCLASS


#: the classes of row_division's divisors (:func:`_row_divisor`)
ROW_DIVISOR_CLASSES = ("zero", "minus_zero", "inf", "minus_inf", "nan", "smallest_subnormal",
                       "subnormal", "largest_subnormal", "smallest_normal", "below_top",
                       "top", "above_top", "largest", "one", "ordinary")


def _row_divisor(cls: str, dtype: str, rng) -> float:
    """A divisor of the class ``cls`` (:data:`ROW_DIVISOR_CLASSES`) in ``dtype``, its sign
    drawn where the class leaves it open."""
    fi = np.finfo(dtype)
    top = float(np.ldexp(1.0, fi.maxexp - 2))          # 2**(emax - 1): 1 / top is normal
    sign = -1.0 if rng.random() < 0.5 else 1.0
    v = {"zero": 0.0, "minus_zero": -0.0, "inf": np.inf, "minus_inf": -np.inf, "nan": np.nan,
         "smallest_subnormal": sign * float(fi.smallest_subnormal),
         "subnormal": sign * float(fi.tiny) * rng.uniform(1e-6, 0.99),
         "largest_subnormal": sign * float(fi.tiny - fi.smallest_subnormal),
         "smallest_normal": sign * float(fi.tiny),
         "below_top": sign * float(np.nextafter(np.array(top, dtype), np.array(0, dtype))),
         "top": sign * top, "above_top": sign * top * rng.uniform(1.0001, 1.99),
         "largest": sign * float(fi.max), "one": sign,
         "ordinary": sign * float(rng.uniform(0.5, 2.0) * 10.0 ** rng.integers(-30, 30))}[cls]
    return np.array(v, dtype=dtype)[()]


def _row_numerators(n: int, dtype: str, rng) -> np.ndarray:
    """``n`` numerators of every class (zeros, infinities, NaN, subnormals, the largest,
    ordinary values of any magnitude), shuffled."""
    fi = np.finfo(dtype)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, float(fi.smallest_subnormal),
                -float(fi.tiny) / 3, float(fi.max), -float(fi.max), 1.0, 1e-3]
    vals = (rng.standard_normal(n) * 10.0 ** rng.integers(-35, 35, n)).astype(dtype)
    k = min(n, len(specials))
    pick = rng.choice(len(specials), k, replace=False)
    vals[rng.choice(n, k, replace=False)] = np.array(specials, dtype)[pick]
    return vals


def _run_flash_config(ec: EdgeCase) -> Outcome:
    """``tc.nn.flash_attention`` scheduled with the twist's FlashConfig for the CUDA
    emulation and lowered: a ScheduleError that names the config (its message starts
    with it) for a field that is no int, out of range or not the forward's (16-row
    warps), never another exception or an error from deeper in the template; a
    config of legal fields lowers, and three in ten of those run in the emulation,
    within the 16-bit inputs' tolerance of a float64 attention."""
    tw = ec.twist
    B, H, Lq, Lk, D, dt = tw["batch"], tw["heads"], tw["lq"], tw["lk"], tw["d"], tw["dtype"]
    cfg = FlashConfig(**tw["config"])
    sdpa = tw.get("sdpa", False)
    stage = "compute"
    try:
        q, k, v = (tc.placeholder((B, H, n, D), dt, name=x)
                   for x, n in (("q", Lq), ("k", Lk), ("v", Lk)))
        mshape = {"b11L": (B, 1, 1, Lk), "11L": (1, 1, 1, Lk), "1L": (1, Lk)}.get(tw["mask"])
        m = tc.placeholder(mshape, dt, name="m") if mshape else None
        if sdpa:
            outs = [tc.nn.scaled_dot_product_attention(q, k, v, m)]
        else:
            outs = list(tc.nn.flash_attention(q, k, v, causal=tw["causal"], mask=m))
        args = [q, k, v] + ([m] if m is not None else []) + outs
        stage = "schedule"
        if sdpa:
            s = schedule_sdpa_as_flash(outs, target="cuda-emu", config=cfg)
            if s is None:   # (not a FlashAttention: the generic rules' business)
                return Outcome("ok", ec, stage)
        else:
            s = schedule_flash_attention(outs, target="cuda-emu", config=cfg)
        stage = "lower"
        tc.lower(s, args, target="cuda-emu")
    except tc.ScheduleError as e:
        if str(e).startswith("FlashConfig("):
            return Outcome("refused", ec, stage, str(e)[:300])
        return _failure(ec, stage, e)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    if _flash_config_hostile(tw["config"]):
        return Outcome("mismatch", ec, stage, f"{cfg} was taken (a field no FlashConfig "
                       f"of the forward may have)")
    if not tw["run"] or (shutil.which(os.environ.get("CXX") or "g++") is None
                         and shutil.which("clang++") is None):
        return Outcome("ok", ec, stage)
    try:
        stage = "build"
        mod = tc.build(s, args, target="cuda-emu")
        rng = np.random.default_rng(ec.fuzz_seed)
        npdt = numpy_dtype(dt)
        qa, ka, va = (rng.standard_normal(shape).astype(npdt)
                      for shape in ((B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)))
        ma = None
        if mshape:
            ma = rng.standard_normal(mshape).astype(npdt)
            ma.reshape(-1)[::3] = -np.inf
        o = np.full((B, H, Lq, D), np.nan, npdt)
        ls = np.full((B, H, Lq), np.nan, np.float32)
        stage = "call"
        mod(*([qa, ka, va] + ([ma] if ma is not None else []) + [o] + ([] if sdpa else [ls])),
            mode="reverse")
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    want, want_lse = _attention64(qa, ka, va, tw["causal"], ma, lse=True)
    tol = 4e-3 if dt == "float16" else 3e-2
    err = float(np.abs(o.astype(np.float64) - want).max())
    if not err <= tol:
        return Outcome("mismatch", ec, "compare", f"{cfg}: max |error| {err} against a "
                       f"float64 attention (tolerance {tol})")
    if sdpa:
        return Outcome("ok", ec, "compare")
    # the logsumexp (what the backward reads) in natural-log units, -inf where a row has
    # no key (FlashConfig(exp2=True) converts it back from base-2 units)
    with np.errstate(invalid="ignore"):
        lerr = np.where(np.isneginf(want_lse) & np.isneginf(ls), 0.0,
                        np.abs(ls.astype(np.float64) - want_lse))
    if not float(np.nan_to_num(lerr, nan=np.inf).max()) <= 1e-4:
        return Outcome("mismatch", ec, "compare", f"{cfg}: the logsumexp's max |error| "
                       f"{float(np.nanmax(lerr))} against a float64 one (tolerance 1e-4)")
    return Outcome("ok", ec, "compare")


def _flash_config_hostile(fields: dict) -> bool:
    """Whether a FlashConfig of ``fields`` has one that no forward may take: a value
    not among the flash_config family's legal ones (a numpy integer counts as its int)."""
    def legal(v, values):
        if isinstance(v, np.integer):
            v = int(v)
        return any(type(v) is type(x) and v == x for x in values)
    return not all(legal(v, FLASH_FIELDS[f][0]) for f, v in fields.items())


def _attention64(q, k, v, causal: bool, mask, lse: bool = False):
    """float64 attention of 16-bit arrays ``[b, h, L, d]``: a row with no key is 0; with
    ``lse``, ``(output, the rows' logsumexp)``, ``-inf`` where a row has no key."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask.astype(np.float64).reshape(-1 if mask.ndim == 4 and mask.shape[0] > 1
                                                else 1, 1, 1, k.shape[2])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    with np.errstate(all="ignore"):
        m = s.max(-1, keepdims=True)
        p = np.exp(s - np.where(np.isfinite(m), m, 0))
        total = p.sum(-1, keepdims=True)
        p = p / total
        out = np.nan_to_num(p, nan=0.0) @ v
        rows = (np.where(np.isfinite(m), m, 0) + np.log(total))[..., 0]
    return (out, rows) if lse else out


def _run_row_division(ec: EdgeCase) -> Outcome:
    tw = ec.twist
    M, N, dt = tw["rows"], tw["cols"], tw["dtype"]
    rng = np.random.default_rng(ec.fuzz_seed)
    b = np.array([_row_divisor(ROW_DIVISOR_CLASSES[c], dt, rng) for c in tw["divisors"]], dt)
    x = np.stack([_row_numerators(N, dt, rng) for _ in range(M)]) if M else \
        np.zeros((0, N), dt)
    how = tw["schedule"]
    stage = "compute"
    try:
        X = tc.placeholder((M, N), dtype=dt, name="x")
        if tw["divisor"] == "row_max":
            B = tc.placeholder((M, 3), dtype=dt, name="b")
            k = tc.reduce_axis((0, 3), name="k")
            D = tc.compute((M,), lambda i: tc.max(B[i, k], axis=k), name="d")
            barg = np.repeat(b[:, None], 3, axis=1)
        else:
            B = D = tc.placeholder((M,), dtype=dt, name="b")
            barg = b
        Y = tc.compute((M, N), lambda i, j: X[i, j] / D[i], name="y")
        args = [X, B, Y]
        stage = "schedule"
        if how.startswith("auto"):
            s = tc.auto_schedule(args) if how == "auto" else \
                _rules_schedule(args, {"rcp.y": False})
        else:
            s = tc.create_schedule(Y.op)
            if D is not B:
                s[D].compute_at(s[Y], Y.op.axis[0])
            if how != "plain":
                s[Y].pragma(Y.op.axis[0], "fp_reciprocal")
            if how in ("pragma_vector", "pragma_split", "pragma_parallel"):
                jo, ji = s[Y].split(Y.op.axis[1], tw["lanes"])
                if how != "pragma_split":
                    s[Y].vectorize(ji)
                if how == "pragma_parallel":
                    s[Y].parallel(Y.op.axis[0])
        stage = "build"
        f = tc.build(s, args)
        y = np.full((M, N), 42.0, dt)
        stage = "call"
        f(x, barg, y)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    with np.errstate(all="ignore"):
        want = x / b[:, None]
    exact = ~np.isfinite(want) | (want == 0) if how != "plain" else np.ones(want.shape, bool)
    same = (y == want) & (np.signbit(y) == np.signbit(want)) | (np.isnan(y) & np.isnan(want))
    finite = ~exact & np.isfinite(y)
    with np.errstate(all="ignore"):
        ulps = np.abs(y - want) / np.spacing(np.abs(want))
    bad = np.where(exact, ~same, ~(finite & (ulps <= 1.0)))
    if bad.any():
        rows, cols = np.nonzero(bad)
        ex = [f"{x[r, c]!r} / {b[r]!r} = {y[r, c]!r}, numpy {want[r, c]!r}"
              for r, c in list(zip(rows, cols))[:4]]
        return Outcome("mismatch", ec, "compare", f"{int(bad.sum())} quotients of {bad.size} "
                       f"differ ({how}): " + "; ".join(ex))
    return Outcome("ok", ec, "compare")


def _rules_schedule(args, values: dict):
    """The auto-scheduler's rules' schedule of ``args`` with the knobs ``values``."""
    return apply_rules(args, Knobs(values), cpu_model("llvm"), {})


#: the guarded_select family's conditions: the neighbour ``A[i + d]`` read under a select
#: of the condition's own that guards it (0 where it does not hold), compared with 0 or
#: multiplied by the element; each false where the guard does not hold, so that the
#: operand it picks may read the neighbour (a read the program makes out of range is the
#: user's, which the range check lets through where a condition reads data)
GUARDED_CONDITIONS = ("next_gt", "next_times_elem", "next_ne", "plain_guard")

#: the guarded_select family's operands: the neighbour in ``A`` or in ``B`` (the same
#: shape), a function of it (for the operand the condition picks), the element, a
#: constant (for the other)
GUARDED_OPERANDS = ("a_next", "b_next", "a_next_twice")
OTHER_OPERANDS = ("a_elem", "const")


def _guarded_select(tw: dict):
    """(T's body over the placeholders A, B, its numpy reference over a, b) of a
    guarded_select twist."""
    n, dd, down, dt = tw["n"], tw["d"], tw["down"], tw["dtype"]
    zero = tc.const(0, dt)

    def guard(i):
        return i >= dd if down else i < n - dd

    def nb(X, i):
        return X[i - dd] if down else X[i + dd]

    def body(A, B):
        def opnd(kind, i):
            if kind == "a_next":
                return nb(A, i)
            if kind == "b_next":
                return nb(B, i)
            if kind == "a_next_twice":
                return nb(A, i) * tc.const(2, dt) + tc.const(1, dt)
            if kind == "a_elem":
                return A[i]
            return tc.const(-7, dt)

        def f(i):
            g = tc.if_then_else(guard(i), nb(A, i), zero)
            c = {"next_gt": lambda: g > zero, "next_times_elem": lambda: A[i] * g > zero,
                 "next_ne": lambda: zero != g, "plain_guard": lambda: guard(i)}[tw["cond"]]()
            if tw["negated"]:     # not c: the neighbour's operand second
                return tc.if_then_else(~c, opnd(tw["other"], i), opnd(tw["true"], i))
            return tc.if_then_else(c, opnd(tw["true"], i), opnd(tw["other"], i))
        return f

    def reference(a, b):
        idx = np.arange(n)
        ok = idx >= dd if down else idx < n - dd
        src = np.clip(idx - dd if down else idx + dd, 0, n - 1)
        g = np.where(ok, a[src], 0)
        c = {"next_gt": g > 0, "next_times_elem": a * g > 0, "next_ne": g != 0,
             "plain_guard": ok}[tw["cond"]]

        def opnd(kind):
            if kind == "a_next":
                return a[src]
            if kind == "b_next":
                return b[src]
            if kind == "a_next_twice":
                return a[src] * 2 + 1
            if kind == "a_elem":
                return a
            return np.full(n, -7, a.dtype)
        # (an operand read where the condition says the neighbour is out: any value, as
        # the select discards it; clipped here)
        return np.where(c, opnd(tw["true"]), opnd(tw["other"])).astype(a.dtype)
    return body, reference


def _against_guard_page(a: np.ndarray, before: bool, keep: list) -> np.ndarray:
    """A copy of the 1-d ``a`` whose last element ends at an unreadable page (its first
    starts at one: ``before``); the mapping is appended to ``keep``, which must outlive
    the array's uses."""
    page = mmap.PAGESIZE
    size = max(page, -(-a.nbytes // page) * page)
    buf = mmap.mmap(-1, size + 2 * page)
    keep.append(buf)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(base, page, 0) or libc.mprotect(base + page + size, page, 0):
        raise OSError(ctypes.get_errno(), "mprotect failed")
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size,
                        offset=page if before else page + size - a.nbytes)
    out[:] = a
    return out


def _run_guarded_select(ec: EdgeCase) -> Outcome:
    tw = ec.twist
    n, dt, how = tw["n"], tw["dtype"], tw["schedule"]
    rng = np.random.default_rng(ec.fuzz_seed)
    body, reference = _guarded_select(tw)
    keep: list = []
    stage = "compute"
    try:
        A = tc.placeholder((n,), dtype=dt, name="A")
        B = tc.placeholder((n,), dtype=dt, name="B")
        T = tc.compute((n,), body(A, B), name="T")
        stage = "schedule"
        s = tc.create_schedule(T.op)
        if how == "split":
            s[T].split(T.op.axis[0], factor=5)
        elif how > 1:
            s[T].vectorize(s[T].split(T.op.axis[0], factor=how)[1])
        stage = "build"
        f = tc.build(s, [A, B, T])
        if dt == "int32":
            a, b = (rng.integers(-3, 4, n).astype(dt) for _ in range(2))
        else:
            a, b = (rng.standard_normal(n).astype(dt) for _ in range(2))
        out = np.full(n, 42, dt)
        stage = "call"
        f(_against_guard_page(a, tw["down"], keep), _against_guard_page(b, tw["down"], keep),
          out)
    except Exception as e:  # noqa: BLE001
        return _failure(ec, stage, e)
    want = reference(a, b)
    msg = compare(out, want.astype(np.float64) if dt != "int32" else want, dt, "T")
    if msg:
        return Outcome("mismatch", ec, "compare", msg)
    return Outcome("ok", ec, "compare")


#: seconds the environment family's child may take (its import, the auto-schedule, the
#: builds and the interpreter, on a loaded machine): past it, the case hangs
ENVIRONMENT_TIMEOUT = 240.0


def _environment_expects(tw: dict, env: dict) -> Optional[str]:
    """The exception the environment case ``tw`` must raise (its class's name), or None
    where it must compute the values."""
    var = tw.get("var")
    if var is None or tw.get("switch") or tw.get("word"):
        return None
    legal, hostile, error = ENV_VALUES[var]
    if tw["value"] in legal or error is None:
        return None
    worker = env.get("TECOMP_LLVM_OPT_WORKER", "").strip().lower() not in ("0", "false",
                                                                            "no", "off")
    if var in _WORKER_SETTINGS and not worker:
        return None      # (read by the optimiser worker, which does not run)
    return error


def _plant_calibration(tw: dict) -> None:
    """In the child: the twist's file in the machine calibration's place, and the host's
    table entry set aside (so that the file is what the machine model reads)."""
    host = tc.Target("llvm")
    tgt.MEASURED = {k: v for k, v in tgt.MEASURED.items() if k != host.cpu}
    path = cal.cache_path(host)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    kind = tw["calibration"]
    costs = {"fma_bits": 32 * host.lanes, "gather_cost": 3.0, "transpose_cost": 0.7,
             "split_loads_cheap": False, "gemm_load_cost": 0.4}
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "link_to_dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "huge":
        path.write_text(json.dumps({"costs": costs}) + " " * (1 << 20))
    elif kind == "not_json":
        path.write_bytes(b"\xff\xfe{costs" * 10)
    else:
        if kind == "forged":
            costs[tw["cost"]] = tw["forged"]
        path.write_text(json.dumps({"costs": costs}, allow_nan=True))


def environment_child(seed: int) -> dict:
    """The environment family's case ``seed`` as its child process runs it (its
    environment already set by the parent): the twist's calibration file planted, then
    the drawn program auto-scheduled (analytic), built and run against the interpreter
    and numpy.  Returns the outcome as a dict (kind, stage, detail)."""
    ec = draw_edge_case(seed)
    if "calibration" in ec.twist:
        _plant_calibration(ec.twist)
    base = Case(ec.program, ec.steps, ec.n, ec.seed, "llvm", ec.name, auto=-1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")      # (a setting ignored with a warning)
        try:
            out = run_case(base)
            read = (_read_switch(ec.twist["var"]) if ec.twist.get("switch") else
                    _read_word(ec.twist["var"]) if ec.twist.get("word") else None)
        except Exception as e:  # noqa: BLE001  (run_case never raises for a finding)
            return {"kind": "crash", "stage": "run", "detail": _exc_text(e)}
    got = {"kind": out.kind, "stage": out.stage, "detail": out.detail or ""}
    if ec.twist.get("switch") or ec.twist.get("word"):
        got["read"] = read
        got["warned"] = any(str(w.message).startswith(ec.twist["var"] + "=") for w in caught)
    return got


class _Compiling(Exception):
    pass


def compiled_binder_wanted() -> bool:
    """Whether the runtime would compile its argument binder now (``TECOMP_PY_BINDER``
    on): it asks for the compile, and the compile_ir given stops it there; the process's
    binder, if any, is kept."""
    def compile_ir(ir, symbols):
        raise _Compiling

    saved = _rt_llvm._binder_state[:]
    _rt_llvm._binder_state.clear()
    try:
        return _rt_llvm._binder(compile_ir) is not None
    except _Compiling:
        return True
    finally:
        _rt_llvm._binder_state[:] = saved


def _read_switch(var: str):
    """In the child, after the case ran: the switch ``var`` as tecomp reads it (for
    TECOMP_PY_BINDER: whether the runtime would compile its binder; False also where
    this interpreter's layout has none; None where the host has no worker to switch)."""
    if var == "TECOMP_PY_BINDER":
        return compiled_binder_wanted()
    if var == "TECOMP_LLVM_OPT_WORKER":
        return _jit.worker_enabled() if _jit._WORKER_OK else None
    if var == "TECOMP_DUMP_IR":
        return _pipeline._dump_ir()
    return _threads.shared_pool_from_env()


def _read_word(var: str) -> str:
    """In the child, after the case ran: the word variable ``var`` as tecomp reads it, or
    ``!`` and the class of the exception its reader raised."""
    try:
        if var == "TECOMP_CUDA_EMU_MODE":
            return _cuda_emu.default_mode()
        return _cost_model.model_from_env()
    except Exception as e:  # noqa: BLE001  (the class is the answer)
        return "!" + type(e).__name__


def word_expected(var: str, value: str):
    """What the word variable ``var`` set to ``value`` must read as (its word, the
    default, or ``!`` and the error's class) and whether a warning must name it."""
    words, default, error = WORD_VARIABLES[var]
    word = value.strip().lower()
    if not word:
        return default, False
    if word in words:
        return word, False
    return ("!" + error, False) if error else (default, True)


def _run_environment(ec: EdgeCase, prelude: str = "",
                     timeout: float = ENVIRONMENT_TIMEOUT) -> Outcome:
    """Run :func:`environment_child` in a child process (``prelude``: Python run there
    first, e.g. a test's stand-in for old code) and judge what it returned."""
    tw = ec.twist
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="tecomp-edge-env-") as d:
        env["TECOMP_CACHE_DIR"] = os.path.join(d, "cache")
        if "var" in tw:
            env[tw["var"]] = tw["value"]
        if tw.get("var") != "TECOMP_CALIBRATE":
            env["TECOMP_CALIBRATE"] = "0"    # (never measure: seconds of timing)
        expect = _environment_expects(tw, env)
        code = (f"{prelude}\nimport json\nfrom tecomp.testing.edges import environment_child\n"
                f"print('@@' + json.dumps(environment_child({ec.fuzz_seed})))\n")
        what = ", ".join(f"{k}={v!r}" for k, v in tw.items() if k in ("var", "value",
                                                                    "calibration", "forged"))
        try:
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=timeout, cwd=d)
        except subprocess.TimeoutExpired:
            return Outcome("crash", ec, "child", f"{what}: the child did not finish within "
                           f"{timeout:g} s (a hang)")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@")]
    if p.returncode != 0 or not lines:
        return Outcome("crash", ec, "child", f"{what}: the child exited with status "
                       f"{p.returncode}:\n{p.stderr[-3000:]}")
    got = json.loads(lines[-1][2:])
    if tw.get("switch") and got["kind"] == "ok":
        word = FLAG_WORDS.get(tw["value"].strip().lower())
        want = SWITCHES[tw["var"]] if word is None else word
        if got["read"] is not None and got["read"] != want:
            return Outcome("mismatch", ec, "switch", f"{what}: read as "
                           f"{'on' if got['read'] else 'off'}, expected "
                           f"{'on' if want else 'off'}")
        if got["warned"] != (word is None):
            return Outcome("mismatch", ec, "switch", f"{what}: " + (
                "no warning naming the variable" if word is None else "a warning"))
    if tw.get("word") and got["kind"] == "ok":
        want, warn = word_expected(tw["var"], tw["value"])
        if got["read"] != want:
            return Outcome("mismatch", ec, "word", f"{what}: read as {got['read']!r}, "
                           f"expected {want!r}")
        if got["warned"] != warn:
            return Outcome("mismatch", ec, "word", f"{what}: " + (
                "no warning naming the variable" if warn else "a warning"))
    if expect is not None:
        if got["kind"] == "crash" and f"tecomp.errors.{expect}: {tw['var']}=" in got["detail"]:
            return Outcome("refused", ec, got["stage"], f"{what}: {expect}")
        if got["kind"] in ("ok", "refused", "rejected"):
            return Outcome("mismatch", ec, got["stage"], f"{what}: accepted, expected a "
                           f"{expect} naming {tw['var']}")
        return Outcome(got["kind"], ec, got["stage"], f"{what}: expected a {expect} "
                       f"naming {tw['var']}, got\n{got['detail']}")
    detail = f"{what}: {got['detail']}" if got["kind"] != "ok" else what
    return Outcome(got["kind"], ec, got["stage"], detail)

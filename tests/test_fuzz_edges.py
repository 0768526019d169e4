"""The fuzzer's edge families (tecomp.testing.edges): each runs clean on a few seeds, and
each finds its class of bug where the code that prevents it is taken away (so a campaign
with them would have found what issue 47's hour of careless and hostile use found)."""
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir.expr import Cast, Let, Select
from tecomp.testing import edges
from tecomp.testing.edges import (
    FAMILIES, MORE_FAMILIES, SESSION9_FAMILIES, SESSION14_FAMILIES, SESSION18_FAMILIES,
    SESSION19_FAMILIES, SESSION20_FAMILIES, SESSION21_FAMILIES, draw_edge_case, family_of,
    in_session9_slot, in_session14_slot, in_session18_slot, in_session19_slot, in_session20_slot,
    in_session21_slot, run_edge_case,
)

#: the long tests draw more seeds of each family; the default run about half as many as
#: before session 29 (the suite's budget: the bugs found are pinned seeds below)
LONG = os.environ.get("TECOMP_LONG_TESTS") == "1"


def _seeds(family, count):
    """The first ``count`` seeds of ``family`` (edges.family_of)."""
    out, seed = [], 0
    while len(out) < count:
        if family_of(seed) == family:
            out.append(seed)
        seed += 1
    return out


def test_the_families_of_sessions_8_to_21_leave_the_other_seeds_alone():
    """A seed draws one of MORE_FAMILIES only where (seed // 9) % 8 == 7, one of
    SESSION9_FAMILIES, SESSION14_FAMILIES, SESSION18_FAMILIES, SESSION19_FAMILIES or
    SESSION20_FAMILIES only in their slots (from seed 576 on, one in sixteen each: those seeds drew an earlier
    family before; none of them is pinned below); every other seed keeps the family
    seed % 9 gave it (the pinned seeds below among them)."""
    pinned = [64, 65, 66, 69, 135, 10011706, 10017506, *WRAPPED_SEEDS]
    slots = (in_session9_slot, in_session14_slot, in_session18_slot, in_session19_slot,
             in_session20_slot, in_session21_slot)
    assert not any(slot(s) for slot in slots for s in list(range(576)) + pinned)
    for seed in list(range(4000)) + pinned:
        assert sum(slot(seed) for slot in slots) <= 1
        if in_session9_slot(seed):
            assert family_of(seed) in SESSION9_FAMILIES
        elif in_session14_slot(seed):
            assert family_of(seed) in SESSION14_FAMILIES
        elif in_session18_slot(seed):
            assert family_of(seed) in SESSION18_FAMILIES
        elif in_session19_slot(seed):
            assert family_of(seed) in SESSION19_FAMILIES
        elif in_session20_slot(seed):
            assert family_of(seed) in SESSION20_FAMILIES
        elif in_session21_slot(seed):
            assert family_of(seed) in SESSION21_FAMILIES
        elif (seed // len(FAMILIES)) % 8 != 7:
            assert family_of(seed) == FAMILIES[seed % len(FAMILIES)]
        else:
            assert family_of(seed) in MORE_FAMILIES
    assert {family_of(s) for s in range(4000)} == set(FAMILIES) | set(MORE_FAMILIES) | \
        set(SESSION9_FAMILIES) | set(SESSION14_FAMILIES) | set(SESSION18_FAMILIES) | \
        set(SESSION19_FAMILIES) | set(SESSION20_FAMILIES) | set(SESSION21_FAMILIES)
    for slot in slots[:-1]:
        assert sum(map(slot, range(576 * 20))) == 576 * 20 // 16
    assert sum(map(in_session21_slot, range(576 * 20))) == 320   # (the odd seeds: 1 in 36)


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES + SESSION9_FAMILIES +
                         SESSION14_FAMILIES + SESSION18_FAMILIES + SESSION19_FAMILIES +
                         SESSION20_FAMILIES + SESSION21_FAMILIES)
def test_family_runs_clean(family):
    if family in ("lazy_bits", "torch_autograd", "torch_inplace"):
        pytest.importorskip("torch")
    kinds = []
    # (a torch_autograd case compiles a forward, a backward and a backward's backward)
    for seed in _seeds(family, 12 if LONG else 1 if family == "torch_autograd" else 2):
        ec = draw_edge_case(seed)
        assert ec.family == family
        out = run_edge_case(ec)
        assert out.ok, out.report()
        kinds.append(out.kind)
    assert kinds


def test_draws_are_deterministic_and_name_their_replay():
    a, b = draw_edge_case(40), draw_edge_case(40)
    assert (a.family, a.twist, a.steps, a.n, a.target) == (b.family, b.twist, b.steps, b.n, b.target)
    assert "--replay 40 --edge-every 1" in a.source()


def test_conditions_family_finds_eq_evaluated_in_python(monkeypatch):
    """With == on expressions giving Python's bool again (the old trap), the family's
    rewritten conditions make wrong results or errors."""
    from tecomp.ir import expr

    def old_eq(self, o):
        return expr.same_as(self, o)

    def old_ne(self, o):
        return not expr.same_as(self, o)

    for cls in (expr.Expr, expr.IterVar, *expr._all_subclasses(expr.Expr)):
        monkeypatch.setattr(cls, "__eq__", old_eq)
        monkeypatch.setattr(cls, "__ne__", old_ne)
    bad = 0
    for seed in _seeds("conditions", 12):
        ec = draw_edge_case(seed)
        if any("==" in str(x) or "!=" in str(x) for x in [ec.program]):
            bad += not run_edge_case(ec).ok
    assert bad >= 1


def test_layouts_family_finds_aliasing_outputs(monkeypatch):
    from tecomp.runtime.argcheck import ArgChecker

    monkeypatch.setattr(ArgChecker, "check_overlap", lambda self, args, metas=None: False)
    found = set()
    for seed in _seeds("layouts", 30):
        ec = draw_edge_case(seed)
        out = run_edge_case(ec)
        if out.kind == "mismatch":
            found.add(ec.twist["variant"])
    assert {"stride0_output", "output_overlaps_input"} & found, found


def test_layouts_family_finds_streamed_outputs_off_a_line(monkeypatch):
    """Half of the layouts cases with input views store their outputs past the cache
    (``pragma nontemporal``) and pass them off a 64-byte line or reversed: with the copy
    of the nest that runs for an output off a line taken away (its stores left out), the
    family finds the outputs unwritten."""
    from tecomp.codegen.llvm.emit_memory import _MemoryEmitter

    real = _MemoryEmitter.nontemporal_nest

    def without_the_plain_copy(self, body):
        def if_(cond, then_fn, else_fn=None, name="if"):
            return type(self).if_(self, cond, then_fn, None if name == "nt" else else_fn,
                                  name)
        self.if_ = if_
        try:
            real(self, body)
        finally:
            del self.if_

    cases = [draw_edge_case(s) for s in _seeds("layouts", 60)]
    cases = [ec for ec in cases if "output_shifts" in ec.twist]
    assert len(cases) >= 5 and all(run_edge_case(ec).ok for ec in cases[:3])
    monkeypatch.setattr(_MemoryEmitter, "nontemporal_nest", without_the_plain_copy)
    assert any(run_edge_case(ec).kind == "mismatch" for ec in cases[:8])


def test_library_family_refuses_every_tampering():
    seen = set()
    for seed in _seeds("library_file", 40 if LONG else 7):
        ec = draw_edge_case(seed)
        out = run_edge_case(ec)
        assert out.ok, out.report()
        seen.add((ec.twist["tamper"], out.kind))
    # (a resealed flip may leave a library that loads and computes right: a name's
    # spelling, an unused entry)
    assert all(kind == "refused" for t, kind in seen if t != "resealed_flip"), seen
    assert ("resealed_flip", "refused") in seen, seen


def test_library_family_finds_an_export_that_replaces_a_device(monkeypatch):
    """The library_file family first exports onto a device node, a FIFO, a link to one,
    a socket or a FIFO in the sidecar's place: refused, left as it was; with the check
    taken away (export_library renamed its file onto whatever was there: /dev/null,
    exported to as root, became a regular file) the family reports it."""
    from tecomp.codegen import libwrite

    seeds = [s for s in _seeds("library_file", 40) if draw_edge_case(s).twist["export_onto"]]
    for seed in seeds[:3]:
        out = run_edge_case(draw_edge_case(seed))
        assert out.ok and out.kind == "refused", out.report()
    monkeypatch.setattr(libwrite, "special_file", lambda path: "")
    out = run_edge_case(draw_edge_case(seeds[0]))
    assert out.kind == "mismatch" and "was replaced" in out.report(), out.report()


def _tma_box_cases(count):
    out = []
    for s in _seeds("library_file", 4 * count):
        ec = draw_edge_case(s)
        if "tma_box" in ec.twist:
            out.append(ec)
            if len(out) == count:
                break
    return out


def test_library_family_finds_tensor_maps_read_past_their_tensor(monkeypatch):
    """Two cases in five of the library_file family also draw a tensor-map box as a GPU
    library's metadata may say it: its map is refused exactly where the hardware's
    model would read past the tensor.  With the check taken away (map_spec encoded a
    forged box's map as given, before this check), the family reports it."""
    from tecomp.lower import tma_pipeline

    cases = _tma_box_cases(40 if LONG else 6)
    for ec in cases:
        assert edges._check_tma_box(ec, ec.twist["tma_box"]) is None, ec.twist
    monkeypatch.setattr(tma_pipeline, "check_reach", lambda *a: None)
    found = [edges._check_tma_box(ec, ec.twist["tma_box"]) for ec in cases]
    found = [out for out in found if out is not None]
    assert found and all(out.kind == "mismatch" and "reads past its tensor" in out.report()
                         for out in found), [out.report() for out in found]


def test_ir_edit_family_finds_facts_that_outlive_the_memory_they_read(monkeypatch):
    """Three ir_edit cases in ten wrap a store in a branch whose condition reads what the
    branch then writes: the simplifier's IR computes the same.  With the check taken
    away (the simplifier knew such a condition everywhere in the branch, also after the
    store), the family reports it."""
    from tecomp.ir import simplify as simp

    seeds = [s for s in _seeds("ir_edit", 30)
             if draw_edge_case(s).twist["edit"] == "branch_writes_its_condition"][:1]
    assert all(run_edge_case(draw_edge_case(s)).kind == "ok" for s in seeds), seeds
    monkeypatch.setattr(simp, "_holding", lambda c, body, truth: (c, truth))
    outs = [run_edge_case(draw_edge_case(s)) for s in seeds]
    assert any(o.kind == "mismatch" and "a fact outlived the memory it read" in o.report()
               for o in outs), [o.report() for o in outs]


def test_records_family_replays_the_genuine_record():
    """The genuine record of a records case is found for the workload and replayed: the
    family tests the log's checks, not a log that never matches."""
    import json
    import warnings

    from tecomp.autoschedule import records
    from tecomp.testing.diff import schedule_case

    ec = draw_edge_case(_seeds("records", 1)[0])
    s, args, _ = schedule_case(ec)
    shapes = {"n": ec.n} if ec.program.symbolic else None
    rec = records.make_record(records.workload_key(args, "llvm", shapes), s.trace.to_json(),
                              [1e-3])
    built, nvar = ec.program.build()
    args2 = ec.program.args(built, nvar)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "log.json")
        with open(path, "w") as f:
            f.write(edges._forge(rec, {"kind": "raw", "pick": 0, "raw": "deep"}) + "\n")
            f.write(json.dumps(rec) + "\n")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s2 = tc.auto_schedule(args2, log=path, shapes=shapes)
    assert s2.trace.to_json() == rec["trace"]
    assert any("log.json:1" in str(x.message) for x in w), [str(x.message) for x in w]


@pytest.mark.parametrize("seed", [
    10011706,   # big_extent: an int32 producer inlined into an int64 consumer (InternalError)
    10017506,   # layouts: the output "overlapping" an input of no elements (none can)
    70266,      # ir_edit: `2i64 + 7` past an int64 index, text the IR parser refuses (the
                # family's edit wrote an int32 constant)
    21300118,   # ir_edit: an allocation of no element that lowering stores nothing into
                # (its stage read only under a condition that never holds): no refusal due
    27000070,   # ir_edit: an allocation of no element whose every store is in a loop of
                # n = 0 iterations: none runs, no refusal due (the interpreter says so)
])
def test_campaign_findings_run_clean(seed):
    out = run_edge_case(draw_edge_case(seed))
    assert out.ok, out.report()


@pytest.mark.parametrize("seed", [
    64,     # gather_ids: id 2**40 in a table of 33 rows (SIGSEGV before d7115f3)
    69,     # build_args: a kernel named "ws_alloc" (InternalError before)
    65,     # build_args: an extern function keeping a view of a temporary (freed memory)
    66,     # ir_edit: an allocation of extent -7 (ran silently before)
    135,    # shared_reduction: every thread ran the block's reduction (wrong sums before)
])
def test_session_8_findings_run_clean(seed):
    out = run_edge_case(draw_edge_case(seed))
    assert out.ok and out.kind == "refused", out.report()


# ---------------------------------------------------------------------------------
# session 9's families find what they were made for


def test_torch_autograd_family_finds_constant_second_derivatives(monkeypatch):
    """With the backward's gradients made constants again (once_differentiable's, before
    960918a), the gradient penalties of the family differ from torch's."""
    tct = pytest.importorskip("tecomp.torch")

    def constant(self, tensors, grad_outputs):
        return [g.detach() for g in self.backward([t.detach() for t in tensors],
                                                  [None if g is None else g.detach()
                                                   for g in grad_outputs])]

    monkeypatch.setattr(tct.Op, "_differentiable_backward", constant)
    seed = next(s for s in _seeds("torch_autograd", 12)
                if draw_edge_case(s).twist["variant"] == "second_derivative"
                and not draw_edge_case(s).twist["mixed_floats"])
    assert run_edge_case(draw_edge_case(seed)).kind == "mismatch"


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # (the unchecked scales)
def test_quant_scales_family_finds_scales_outside_float32(monkeypatch):
    """Without the check of a scale's float32 range, the family's scales at float32's ends
    are accepted (a mismatch: a refusal was expected) or give wrong values."""
    from tecomp.nn import quant

    monkeypatch.setattr(quant, "_float32_scale", lambda v, what: None)
    kinds = {run_edge_case(draw_edge_case(s)).kind for s in _seeds("quant_scales", 8)}
    assert "mismatch" in kinds, kinds


def test_gpu_gather_family_finds_unchecked_device_ids(monkeypatch):
    """With the CUDA renderer's check of data-dependent indices taken away, an id one
    past the table is read silently: the family expected a BoundsError (a mismatch)."""
    import shutil

    from tecomp.codegen import cuda
    from tecomp.codegen.c_source import CSource

    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler for the CUDA emulation")
    monkeypatch.setattr(cuda.CudaRenderer, "flat_index", CSource.flat_index)
    # only ids one past the table: a read of the row after it stays in the process' heap
    seeds = [s for s in _seeds("gpu_gather", 40) if draw_edge_case(s).twist["bad"] == "past"]
    assert seeds
    assert run_edge_case(draw_edge_case(seeds[0])).kind == "mismatch"


def test_torch_inplace_family_finds_outputs_written_behind_autograd(monkeypatch):
    """With the version counters of written outputs left alone (as before 99b5903), the
    family's backward through an overwritten output runs: a mismatch."""
    torch = pytest.importorskip("torch")

    monkeypatch.setattr(torch._C, "_increment_version", lambda ts: None)
    kinds = {run_edge_case(draw_edge_case(s)).kind for s in _seeds("torch_inplace", 3)}
    assert "mismatch" in kinds, kinds


def test_torch_inplace_family_finds_subclasses_read_through_dlpack(monkeypatch):
    """With torch tensors recognised by their class's module again (a subclass defined
    elsewhere went through DLPack, before c203d64), the family's subclass tensors under a
    dispatch mode that declines them crash the call."""
    pytest.importorskip("torch")
    from tecomp.runtime import argcheck

    monkeypatch.setattr(argcheck, "_is_torch_tensor",
                        lambda a: type(a).__module__.startswith("torch"))
    seed = next(s for s in _seeds("torch_inplace", 8) if draw_edge_case(s).twist["subclass"])
    assert run_edge_case(draw_edge_case(seed)).kind == "crash"


def test_torch_autograd_family_finds_mixed_floats_refused_by_the_kernel(monkeypatch):
    """With the op's dtype map of before 06550c9 (an input of its declared float type
    itself not counted), float32 and float64 tensors for two float32 inputs reach the
    kernel, whose message speaks of numpy: the family's mixed cases are mismatches."""
    tct = pytest.importorskip("tecomp.torch")

    def old_map(self, dtypes):
        dmap = {}
        for x, td in zip(self.inputs, dtypes):
            want = tct._TC_DTYPE.get(td)
            if want != x.dtype:
                dmap[x.dtype] = want
        return dmap

    monkeypatch.setattr(tct.Op, "_dtype_map", old_map)
    seed = next(s for s in _seeds("torch_autograd", 20) if draw_edge_case(s).twist["mixed_floats"])
    assert run_edge_case(draw_edge_case(seed)).kind == "mismatch"


def _shrunk_storage_seeds(count):
    return [s for s in _seeds("lazy_bits", 60)
            if draw_edge_case(s).twist["variant"] == "shrunk_storage"][:count]


def test_lazy_bits_family_refuses_tensors_whose_storage_was_shrunk():
    pytest.importorskip("torch")
    for seed in _shrunk_storage_seeds(12 if LONG else 2):
        out = run_edge_case(draw_edge_case(seed))
        assert out.kind == "refused", out.report()


def test_lazy_bits_family_finds_tensors_read_past_their_storage(monkeypatch):
    """With the storage checks taken away (both binders read and wrote past a storage
    shrunk by untyped_storage().resize_(), before 3a28358), an input whose storage was
    halved is read: accepted, a mismatch (inputs only: a write past it could damage
    this process's heap)."""
    torch = pytest.importorskip("torch")
    from tecomp.runtime import argcheck, llvm

    src = llvm._fast_path_source
    monkeypatch.setattr(argcheck, "_check_inside_storage", lambda t, label, written: None)
    monkeypatch.setattr(llvm, "_fast_path_source", lambda *a, **k: "\n".join(
        line for line in src(*a, **k).split("\n") if "untyped_storage" not in line) + "\n")
    kinds = []
    for seed in _shrunk_storage_seeds(2):
        ec = draw_edge_case(seed)
        c, _ = edges._prepare(ec)
        sized = [p for p, a in enumerate(c.arrs) if isinstance(a, np.ndarray) and a.size]
        ec.twist.update(pick=sized.index(c.ins[0]), to="half")
        kinds.append(run_edge_case(ec).kind)
    assert kinds == ["mismatch", "mismatch"], kinds


def _window_seeds(offs, count):
    out = []
    for s in _seeds("gather_ids", 200):
        w = draw_edge_case(s).twist.get("window")
        if w and w["off"] in offs:
            out.append(s)
            if len(out) == count:
                break
    return out


def test_gather_family_windows_at_offsets_given_when_called():
    """``X[i * step + off, j]`` with ``off`` a scalar parameter: numpy's values in range,
    an ArgumentError before the kernel runs outside (it read outside X before)."""
    for seed in _window_seeds(("ok", "one_past", "huge", "most_negative"), 8 if LONG else 3):
        out = run_edge_case(draw_edge_case(seed))
        assert out.ok, out.report()


def test_gather_family_finds_windows_read_outside_the_table(monkeypatch):
    """With the conditions on reads that the arguments decide taken away (before this
    session's fix), an offset one row before or past the table is accepted: a mismatch
    (only a row outside: a far one could kill the process)."""
    from tecomp.lower import schedule_ops

    monkeypatch.setattr(schedule_ops, "symbolic_read_conditions", lambda *a, **k: [])
    kinds = [run_edge_case(draw_edge_case(s)).kind
             for s in _window_seeds(("minus_one", "one_past"), 2)]
    assert kinds == ["mismatch", "mismatch"], kinds



#: gather_ids seeds that read at a wrapped index (edges._run_wrapped): a table a row short
#: (8996: int8(i) under if_then_else(i < 95) over 100 rows; 11156: (i % 2)*300 over 11
#: rows, in range at the ends; 12376: (i % 3)*3 under i < 26 over 28), a sum of
#: X[int32(k)] over 2**32 + 9 terms (11012), and in range (712: (i % 4)*1000; 428:
#: int16(i*300), which wraps, under i < 29 over 30 rows)
WRAPPED_SEEDS = {8996: ("int8", -1), 11156: ("mod", -1), 12376: ("mod", -1),
                 11012: ("cast_sum", 0), 712: ("mod", 0), 428: ("int16", 0)}


def test_gather_family_refuses_reads_outside_between_the_ends():
    """``X[(i % p)*q + c, j]`` and ``X[int32(int8(i*q)) + c, j]`` over a table a row short
    (a ShapeError when defined: every point of the rows is evaluated), and a sum of
    ``X[int32(k), j]`` over 2**32 + 9 int64 terms (an ArgumentError: the cast's operand
    must fit int32; with 2**32 + 1 terms int32(k) was 0 at the last one, and the sum
    read past X or segfaulted), clean; so is each form in range."""
    for seed, (form, slack) in WRAPPED_SEEDS.items():
        ec = draw_edge_case(seed)
        w = ec.twist["wrapped"]
        assert "window" not in ec.twist and ec.twist["bad"] is None and \
            (w["form"], w["slack"]) == (form, slack), (seed, ec.twist)
        out = run_edge_case(ec)
        assert out.ok, out.report()
        assert out.kind == ("refused" if slack < 0 or form == "cast_sum" else "ok"), \
            out.report()


def test_gather_family_finds_reads_outside_between_the_ends(monkeypatch):
    """With the indices whose extremes are not at the corners judged at the corners only
    (before this session's fix), a table one row short is read past: a mismatch (only
    constant domains: the int64 sum would read gigabytes past X)."""
    from tecomp.te import range_check

    monkeypatch.setattr(range_check, "_first_outside", lambda *a, **k: None)
    kinds = [run_edge_case(draw_edge_case(s)).kind for s in (11156, 12376)]
    assert kinds == ["mismatch", "mismatch"], kinds


def test_gather_family_finds_guarded_reads_outside(monkeypatch):
    """With the reads under tc.if_then_else judged nowhere (before this session's fix),
    a table a row short of the rows its condition lets through is read past: a
    mismatch."""
    from tecomp.te import range_check

    monkeypatch.setattr(range_check, "guarded_load_error", lambda *a, **k: None)
    kinds = [run_edge_case(draw_edge_case(s)).kind for s in (8996, 12376)]
    assert kinds == ["mismatch", "mismatch"], kinds


# ---------------------------------------------------------------------------------
# session 14's family finds what it was made for


def test_device_array_family_refuses_every_forgery_and_runs_the_honest_arrays():
    """Every forgery of the device_array family is refused with an ArgumentError before
    a launch; every honest device array gives numpy's values (a sample of each)."""
    from tecomp.testing.device_arrays import FORGERIES

    seen = {}
    for seed in _seeds("device_array", 400 if LONG else 80):
        ec = draw_edge_case(seed)
        if ec.twist["forgery"] in seen and not LONG:
            continue
        out = run_edge_case(ec)
        assert out.ok, out.report()
        if out.detail == "no C++ compiler for the CUDA emulation":
            pytest.skip(out.detail)
        seen[ec.twist["forgery"]] = out.kind
    assert seen == {f: want for f, (want, _) in FORGERIES.items()}, seen


def test_device_array_family_finds_forged_arrays_accepted(monkeypatch):
    """With the interface read as before this session (no check of its entries or
    pointer) and no question of where the memory lives, the family's masked arrays,
    strides of another rank, misaligned inputs and arrays in host memory or on another
    GPU are launched on: mismatches (only forgeries that cannot kill the process)."""
    from tecomp.runtime import argcheck
    from tecomp.runtime import cuda as runtime_cuda

    def unchecked(arg, cai, name, pos):
        strides = cai.get("strides")
        ptr, readonly = cai["data"]
        return argcheck.ArrayMeta(tuple(int(x) for x in cai["shape"]), np.dtype(cai["typestr"]),
                                  None if strides is None else tuple(int(s) for s in strides),
                                  not readonly, True, int(ptr or 0))

    monkeypatch.setattr(argcheck, "_device_meta", unchecked)
    monkeypatch.setattr(runtime_cuda, "arrays_device", lambda *a, **k: None)
    harmless = {"mask", "strides_rank", "host_memory", "other_device"}
    kinds = {}
    for seed in _seeds("device_array", 400):
        ec = draw_edge_case(seed)
        f = ec.twist["forgery"]
        if f in harmless and f not in kinds or \
                f == "misaligned_pointer" and ec.twist["arg"] == "A" and f not in kinds \
                and ec.twist["dtype"] != "int8":   # (int8: past the address space instead)
            kinds[f] = run_edge_case(ec).kind
        if len(kinds) == len(harmless) + 1:
            break
    assert set(kinds) == harmless | {"misaligned_pointer"}, kinds
    assert set(kinds.values()) == {"mismatch"}, kinds


def test_device_array_family_finds_a_runtime_that_ignores_the_producer_stream(monkeypatch):
    """With the interface's version-3 stream ignored (as before this session: no wait,
    any value taken), the family's producer streams go unwaited for and its streams of 0
    or of no integer are launched on: mismatches."""
    from tecomp.runtime import argcheck
    from tecomp.runtime import cuda as runtime_cuda

    if shutil.which(os.environ.get("CXX") or "g++") is None and shutil.which("clang++") is None:
        pytest.skip("no C++ compiler for the CUDA emulation")
    monkeypatch.setattr(runtime_cuda.CudaModule, "_wait_producers", lambda *a: None)
    monkeypatch.setattr(argcheck, "_stream_entry", lambda stream, name, pos: None)
    kinds = {}
    for seed in _seeds("device_array", 400):
        ec = draw_edge_case(seed)
        f = ec.twist["forgery"]
        if f == "bad_stream" and f not in kinds or \
                f == "producer_stream" and f not in kinds and ec.twist["stream"] != 1:
            kinds[f] = run_edge_case(ec).kind
        if len(kinds) == 2:
            break
    assert kinds == {"bad_stream": "mismatch", "producer_stream": "mismatch"}, kinds


def test_device_array_family_finds_a_plan_that_skips_the_address_checks(monkeypatch):
    """With the call plans (kept from an honest call of the same signature) not checking
    the addresses of a later call -- their alignment, their device, whether the driver
    knows them -- the family's warm cases launch on misaligned inputs and on arrays in
    host memory or on another GPU: mismatches (forgeries that cannot kill the process)."""
    from tecomp.runtime import cuda as runtime_cuda

    if shutil.which(os.environ.get("CXX") or "g++") is None and shutil.which("clang++") is None:
        pytest.skip("no C++ compiler for the CUDA emulation")

    class NoAddressChecks(runtime_cuda._PlanEntry):
        __slots__ = ()

        def __init__(self, env, spans, pairs, nonempty, elements):
            super().__init__(env, spans, pairs, nonempty, [])

    monkeypatch.setattr(runtime_cuda, "_PlanEntry", NoAddressChecks)
    monkeypatch.setattr(runtime_cuda.CudaModule, "_plan_driver",
                        lambda self, entry, ptrs: self.driver())
    want = {"host_memory", "other_device", "misaligned_pointer"}
    kinds = {}
    for seed in _seeds("device_array", 400):
        ec = draw_edge_case(seed)
        f = ec.twist["forgery"]
        if ec.twist["warm"] and f in want - set(kinds) and (
                f != "misaligned_pointer" or ec.twist["arg"] == "A"
                and ec.twist["dtype"] != "int8"):
            kinds[f] = run_edge_case(ec).kind
        if set(kinds) == want:
            break
    assert set(kinds) == want, kinds
    assert set(kinds.values()) == {"mismatch"}, kinds


def test_row_division_family_finds_reciprocals_that_are_not_normal(monkeypatch):
    """With ``pragma fp_reciprocal`` as LLVM's ``fdiv arcp`` (a * (1 / b), no scaling of
    a subnormal or huge b), the family's divisors give quotients the division does not
    (``0 / 1e-40`` NaN: ``0 * inf``; ``1e-3 / 1e-40`` inf)."""
    from tecomp.codegen.llvm import emit_expr

    def arcp(self, a, c):
        return self.map2(a, emit_expr.Val(c), lambda x, y: self.b.fdiv(x, y, flags=("arcp",)))

    monkeypatch.setattr(emit_expr._ExprEmitter, "_reciprocal_div", arcp)
    kinds = [run_edge_case(draw_edge_case(s)).kind for s in _seeds("row_division", 16)]
    assert "mismatch" in kinds, kinds


def test_flash_config_family_finds_configs_taken_unchecked(monkeypatch):
    """Without the forward's check of its FlashConfig (a field that is no int, 16-row
    warps), the family finds a TypeError, an error from deep in the template (a split's
    factor, an unrolled loop of no constant extent) or a config taken that no forward
    may have."""
    from tecomp.strategy.cuda import attention

    cases = [ec for ec in map(draw_edge_case, _seeds("flash_config", 40))
             if not ec.twist["run"]]     # (scheduled and lowered, not run: fast)
    assert all(run_edge_case(ec).ok for ec in cases[:4])
    monkeypatch.setattr(attention, "_checked_config", lambda cfg, forward: cfg)
    kinds = {run_edge_case(ec).kind for ec in cases}
    assert kinds & {"crash", "mismatch"}, kinds


def test_flash_config_family_finds_a_logsumexp_left_in_base_2(monkeypatch):
    """With ``FlashConfig(exp2=True)``'s logsumexp not converted back to natural-log
    units (``LN2`` taken as 1), the family's runs of the fragment form with ``exp2``
    find it (the output is right: only the logsumexp, which it compares too, differs)."""
    from tecomp.strategy.cuda import attention

    # (of legal fields, diagonal_test=False only with whole=True: no refusal of those)
    cases = [ec for ec in map(draw_edge_case, _seeds("flash_config", 240))
             if ec.twist["run"] and ec.twist["config"]["form"] == "fragments"
             and ec.twist["config"]["exp2"] is True and not ec.twist["sdpa"]
             and not edges._flash_config_hostile(ec.twist["config"])
             and (ec.twist["config"]["diagonal_test"] or ec.twist["config"]["whole"])][:3]
    assert cases
    monkeypatch.setattr(attention, "LN2", 1.0)
    kinds = [run_edge_case(ec).kind for ec in cases]
    assert "mismatch" in kinds, kinds


def test_flash_config_family_finds_diagonal_tiles_run_without_the_mask(monkeypatch):
    """With ``FlashConfig(diagonal_test=False)`` dropping the diagonal tiles' per-tile
    test the wrong way round (the intrinsic without the mask on every diagonal tile,
    where the masked one belongs), the family's causal runs of ``whole=True`` with it
    find a mismatch (keys after a query reach it)."""
    from tecomp.lower import causal_tiles

    cases = [ec for ec in map(draw_edge_case, _seeds("flash_config", 400))
             if ec.twist["run"] and ec.twist["causal"]
             and ec.twist["config"]["whole"] is True
             and ec.twist["config"]["diagonal_test"] is False
             and ec.twist["config"]["form"] in ("registers", "fragments")][:2]
    assert cases
    keep = causal_tiles._MaskEveryTile.visit_IfThenElse

    def unmasked(self, s):
        out = keep(self, s)
        return s.then_case if out is s.else_case else out
    monkeypatch.setattr(causal_tiles._MaskEveryTile, "visit_IfThenElse", unmasked)
    kinds = [run_edge_case(ec).kind for ec in cases]
    assert "mismatch" in kinds, kinds


_OLD_SPECULATION = """
import sys
from tecomp.codegen.llvm import emit_expr
from tecomp.ir.expr import Expr
from tecomp.ir.functor import collect
from tecomp.testing.edges import draw_edge_case, run_edge_case
# the speculation rule before session 20: every node of the condition counted as
# evaluated, the operands of a select inside it among them
emit_expr._unconditional = lambda c: set(collect(c, lambda n: isinstance(n, Expr)))
for seed in map(int, sys.argv[1:]):
    print(seed, run_edge_case(draw_edge_case(seed)).kind, flush=True)
"""


def test_guarded_select_family_finds_operands_speculated_past_the_array():
    """With a select's operands speculated on loads its condition makes only inside a
    select of its own (the rule before session 20), the family's cases read past an
    array into the unreadable page after (or before) it: the child process ends by a
    signal (or reports a crash) within the first dozen seeds; with the rule, they run."""
    seeds = _seeds("guarded_select", 12)
    assert all(run_edge_case(draw_edge_case(s)).ok for s in seeds[:4])
    r = subprocess.run([sys.executable, "-c", _OLD_SPECULATION, *map(str, seeds)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 or " crash" in r.stdout, (r.returncode, r.stdout[-2000:])


#: the environment family's seeds (edges.family_of) of the settings the code before
#: session 21 got wrong: a FIFO in the calibration's place, TECOMP_LLVM_OPT_TIMEOUT=nan,
#: TECOMP_VECTOR_LANES=abc and =7
ENV_SEEDS = {"fifo": 583, "opt_timeout_nan": 1801, "lanes_abc": 7567, "lanes_7": 1009}

#: the code before session 21, put back in the child (edges._run_environment's prelude)
_OLD_ENVIRONMENT = {
    # the calibration read with open(): a FIFO blocks until a writer comes
    "fifo": """
import json, tecomp.calibration as cal
def _load(path, lanes):
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(65537).decode())
    except (OSError, ValueError):
        return None
    return dict(doc["costs"]) if cal._valid(doc.get("costs"), lanes) is None else None
cal._load = _load
""",
    # float() of the variable, whatever it holds
    "opt_timeout_nan": """
import os, tecomp.codegen.llvm.jit as jit
jit._opt_timeout = lambda ir_bytes=0: float(os.environ["TECOMP_LLVM_OPT_TIMEOUT"]) * (
    1.0 + ir_bytes / 2**20)
""",
    # int() of the variable, whatever it holds
    "lanes": """
import os, tecomp.target as tgt
tgt.number_from_env = lambda name, default, **kw: int(os.environ[name]) if \\
    os.environ.get(name) else default
""",
}


def test_environment_family_runs_the_settings_of_session_21():
    """With the fixes: the FIFO is ignored (the values computed), a time limit of nan and
    lanes of abc or 7 are an error naming the variable."""
    want = {"fifo": "ok", "opt_timeout_nan": "refused", "lanes_abc": "refused",
            "lanes_7": "refused"}
    for key, seed in ENV_SEEDS.items():
        ec = draw_edge_case(seed)
        assert ec.family == "environment"
        out = run_edge_case(ec)
        if key == "opt_timeout_nan" and out.kind == "ok":   # (no optimiser worker here)
            continue
        assert out.kind == want[key], out.report()


def test_environment_family_finds_the_settings_the_old_code_got_wrong():
    """Each setting with the code before session 21 put back in the child: the FIFO
    hangs the first schedule (past the child's time limit), ``nan`` seconds fail every
    build as a crash of LLVM, ``abc`` lanes are a raw ValueError and 7 lanes are taken."""
    got = {}
    for key, seed in ENV_SEEDS.items():
        prelude = _OLD_ENVIRONMENT["lanes" if key.startswith("lanes") else key]
        out = edges._run_environment(draw_edge_case(seed), prelude,
                                     timeout=40.0 if key == "fifo" else 240.0)
        got[key] = (out.kind, out.detail)
    assert got["fifo"][0] == "crash" and "a hang" in got["fifo"][1], got
    assert got["lanes_abc"][0] == "crash" and "ValueError" in got["lanes_abc"][1], got
    assert got["lanes_7"][0] == "mismatch" and "accepted" in got["lanes_7"][1], got
    assert got["opt_timeout_nan"][0] in ("crash", "ok"), got     # ok: no worker here
    if got["opt_timeout_nan"][0] == "crash":
        assert "bug in tecomp or LLVM" in got["opt_timeout_nan"][1], got


def test_lazy_bits_family_reads_zero_tensors_as_zeros():
    """ZeroTensor inputs (torch._efficientzerotensor: data pointer 0; the fast binder
    passed it and the kernel read address 0) run as zeros; ZeroTensor outputs are
    refused."""
    pytest.importorskip("torch")
    seeds = [s for s in _seeds("lazy_bits", 60)
             if draw_edge_case(s).twist["variant"].startswith("zero_tensor")]
    assert {draw_edge_case(s).twist["variant"] for s in seeds} == {"zero_tensor_input",
                                                                  "zero_tensor_output"}
    for seed in seeds[:12 if LONG else 2]:
        out = run_edge_case(draw_edge_case(seed))
        assert out.kind in ("ok", "refused"), out.report()


def test_library_family_resealed_flips_find_dlopen_crashes():
    """Session 26: a third of the library_file cases flip one bit where the dynamic loader
    reads the library and write its sidecar anew.  Seeds 1553 (a relocation's place) and
    2507 (a loadable segment's) are refused; with the checks of the segments and the
    relocations (and the symbols) taken away, the case kills its process in dlopen (run
    in a child)."""
    for seed, region in ((1553, "relocations"), (2507, "phdrs")):
        ec = draw_edge_case(seed)
        assert ec.twist["tamper"] == "resealed_flip" and ec.twist["flip"]["region"] == region
        out = run_edge_case(ec)
        assert out.kind == "refused", out.report()
    child = ("from tecomp.runtime import elf\n"
             "for f in ('_check_segment', '_check_layout', '_check_relocations',\n"
             "          '_check_symbols'):\n"
             "    setattr(elf, f, lambda *a, **k: None)\n"
             "elf._section_place = lambda *a: None\n"
             "from tecomp.testing import edges\n"
             "import sys\n"
             "print(edges.run_edge_case(edges.draw_edge_case(int(sys.argv[1]))).kind)\n")
    for seed in (1553, 2507):
        p = subprocess.run([sys.executable, "-c", child, str(seed)], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode < 0 or p.returncode > 128, (seed, p.returncode, p.stdout[-300:])


def test_library_family_attacks_the_emulation_cache_entry(monkeypatch):
    """Session 28: three in ten library_file seeds also attack the CUDA emulation's cache
    entry (tecomp.testing.emu_entry).  Seed 383 plants a library of another key, with its
    own sidecar and a static constructor; 1229 renames one onto the entry between its
    check and its load: neither runs, the kernel is compiled again (the seeds then go on
    to their tampered library: refused).  With the key taken from the entry's name (as
    good as not read from its bytes) seed 383's constructor runs: a mismatch."""
    from tecomp.codegen import cuda_emu

    try:
        cuda_emu.find_cxx()
    except Exception:  # noqa: BLE001
        pytest.skip("no C++ compiler for the CUDA emulation")
    # (seed 1229 renames one onto the entry between its check and its load: the same
    # attack as test_cuda_emu's swap_after_check; with the long tests only)
    seeds = ((383, "other_key"), (1229, "swap_after_check")) if LONG else ((383, "other_key"),)
    for seed, attack in seeds:
        ec = draw_edge_case(seed)
        assert ec.twist["emu_entry"]["attack"] == attack
        out = run_edge_case(ec)
        assert out.kind in ("ok", "refused") and out.stage != "emulation cache entry", \
            out.report()
    monkeypatch.setattr(cuda_emu, "entry_key", lambda data, where="": os.path.basename(where)[:-3])
    out = run_edge_case(draw_edge_case(383))
    assert out.kind == "mismatch" and "constructor of a library of another key ran" in \
        out.detail, out.report()


def test_library_family_metadata_flips_are_refused(monkeypatch):
    """Session 27: three in ten of the resealed flips land on a digit of the metadata or
    on its sha256 beside the code, and a library that loads with metadata other than what
    export_library wrote is a finding.  Seed 257 (the tecomp version's digit) and 104 (the
    sha256) are refused; without the check of the sha256 seed 257 loads with the changed
    metadata (so would an extent changed 16 -> 56: tests/must_fail/test_load_errors.py::
    test_metadata_that_is_not_the_codes)."""
    for seed, region in ((257, "metadata_digits"), (104, "digest")):
        ec = draw_edge_case(seed)
        assert ec.twist["tamper"] == "resealed_flip" and ec.twist["flip"]["region"] == region
        out = run_edge_case(ec)
        assert out.kind == "refused", out.report()
    from tecomp.runtime import aot_format

    monkeypatch.setattr(aot_format, "check_digest", lambda *a, **k: None)
    out = run_edge_case(draw_edge_case(257))
    assert out.kind == "mismatch" and "metadata other than" in out.detail, out.report()


def test_torch_autograd_family_copies_and_pickles_ops(monkeypatch):
    """(session 29) The family's ``copied`` twist: a model holding the op deep-copied
    (an EMA copy) and the copy used, the op or its module pickled (refused, saying how).
    Clean; with the copy and pickle methods of ops and modules taken away (before
    session 29: a TypeError about a thread lock, an AttributeError about a lambda)
    both crash."""
    tct = pytest.importorskip("tecomp.torch")
    from tecomp.runtime import timing

    seeds = {}
    for s in _seeds("torch_autograd", 40):
        tw = draw_edge_case(s).twist
        cp = tw.get("copied")
        if cp and cp["how"] in ("deepcopy_holder", "pickle_module") and not tw["mixed_floats"]:
            seeds.setdefault(cp["how"], s)
    assert len(seeds) == 2, seeds
    for s in seeds.values():
        assert run_edge_case(draw_edge_case(s)).kind == "ok"
    for cls in (tct.Op, timing.Timed):
        for name in ("__copy__", "__deepcopy__", "__reduce_ex__"):
            monkeypatch.delattr(cls, name)
    for s in seeds.values():
        assert run_edge_case(draw_edge_case(s)).kind == "crash"


def test_lazy_bits_family_refuses_forward_mode_dual_tensors(monkeypatch):
    """(session 29) The family's dual variants: a forward-mode AD dual tensor as an input
    or an output refused, plain tensors inside the level run as plain ones.  With the
    check and the fast binder's step aside taken away (before session 29: the tangent
    dropped, or left on an overwritten output, silently), the dual ones are mismatches
    (accepted)."""
    pytest.importorskip("torch")
    from tecomp.runtime import argcheck, llvm

    seeds = {}
    for s in _seeds("lazy_bits", 300):
        v = draw_edge_case(s).twist["variant"]
        if v in ("dual_input", "dual_output", "plain_in_dual_level"):
            seeds.setdefault(v, []).append(s)
    picks = [seeds["dual_input"][0], 318, seeds["plain_in_dual_level"][0]]
    assert draw_edge_case(318).twist["variant"] == "dual_output"
    assert [run_edge_case(draw_edge_case(s)).kind for s in picks] == ["refused", "refused", "ok"]
    source = llvm._fast_path_source
    monkeypatch.setattr(argcheck, "forward_ad_level", lambda: -1)
    monkeypatch.setattr(llvm, "_fast_path_source", lambda *a, **k: (source(*a, **k) or "").replace(
        "    if fwad._current_level >= 0 or tracing(): return None\n",
        "    if tracing(): return None\n"))
    assert [run_edge_case(draw_edge_case(s)).kind for s in picks] == ["mismatch", "mismatch", "ok"]


#: (session 31) lazy_bits seeds of stream 66: a call inside torch.jit.trace, the first
#: call of its tensors and one after a plain call (the fast binder made)
TRACED_SEEDS = (111, 273)


def test_lazy_bits_family_finds_kernels_called_inside_a_jit_trace(monkeypatch):
    """Torch tensors passed to a kernel while torch.jit.trace records are refused (the
    trace records torch ops only); with the generic check, or the fast binder's step
    aside, taken away (before session 31: the kernel ran, the trace kept nothing of
    it), the family reports the seeds as accepted."""
    pytest.importorskip("torch")
    from tecomp.runtime import argcheck, llvm

    assert [draw_edge_case(s).twist["variant"] for s in TRACED_SEEDS] == \
        ["traced_call", "traced_call_warm"]
    assert [run_edge_case(draw_edge_case(s)).kind for s in TRACED_SEEDS] == ["refused"] * 2
    monkeypatch.setattr(argcheck, "jit_tracing", lambda: False)
    assert [run_edge_case(draw_edge_case(s)).kind for s in TRACED_SEEDS] == ["mismatch"] * 2
    monkeypatch.undo()
    source = llvm._fast_path_source
    monkeypatch.setattr(llvm, "_fast_path_source", lambda *a, **k: (source(*a, **k) or "").replace(
        " or tracing()", ""))
    assert [run_edge_case(draw_edge_case(s)).kind for s in TRACED_SEEDS] == ["mismatch"] * 2


def test_torch_autograd_family_finds_syncbn_penalties_without_second_order(monkeypatch):
    """(session 31, stream 66) A gradient penalty through tecomp.torch.SyncBatchNorm (seed
    3404: channels-last 5-d, affine) is torch BatchNorm's; with the differentiable
    backward taken away (its first gradient a constant, as before session 31) the family
    reports a mismatch."""
    pytest.importorskip("torch")
    import tecomp.torch as tct

    ec = draw_edge_case(3404)
    assert ec.family == "torch_autograd" and ec.twist["syncbn"]["channels_last"]
    assert run_edge_case(ec).kind == "ok"
    monkeypatch.setattr(tct, "_create_graph", lambda tensors: False)
    assert run_edge_case(ec).kind == "mismatch"


def test_torch_autograd_family_checks_the_fake_strides(monkeypatch):
    """(session 31, stream 66) Seed 816 runs torch.library.opcheck's fake-tensor test on
    the op's custom ops with a column-major input; with the backward's fake of before
    session 31 (empty_like: the input's strides, the real gradient contiguous) it reports
    a mismatch."""
    torch = pytest.importorskip("torch")
    import tecomp.torch as tct

    ec = draw_edge_case(816)
    assert ec.family == "torch_autograd" and ec.twist.get("strided_opcheck")
    assert run_edge_case(ec).kind == "ok"
    monkeypatch.setattr(tct, "_fake_grads", lambda o, ts: [torch.empty_like(ts[i])
                                                           for i in o._diff])
    assert run_edge_case(ec).kind == "mismatch"


#: (session 30) layouts seeds of the masked-array variants (stream 55): an output and an
#: input with one element masked, and every array masked by a mask of all False
MASKED_SEEDS = (38, 551, 416)


def test_layouts_family_finds_masked_arrays_taken_as_their_data(monkeypatch):
    """A numpy masked array that masks an element is refused (a kernel ignores masks),
    one that masks nothing computes the plain call's values; with the check taken away
    (the mask was silently dropped: masked inputs read as values, results hidden under an
    output's mask) the family reports the masked seeds as accepted."""
    from tecomp.runtime import argcheck

    cases = [draw_edge_case(s) for s in MASKED_SEEDS]
    assert [ec.twist["variant"] for ec in cases] == ["masked_output", "masked_input",
                                                      "unmasked_masked"]
    outs = [run_edge_case(ec) for ec in cases]
    assert [o.kind for o in outs] == ["refused", "refused", "ok"], [o.report() for o in outs]
    monkeypatch.setattr(argcheck, "_check_unmasked", lambda a, label, written: None)
    assert [run_edge_case(ec).kind for ec in cases] == ["mismatch", "mismatch", "ok"]


#: (session 30) big_extent seeds of the float_extent variant (stream 60): a float64 NaN
#: cast to int64 (split and vectorized), a float32 2**63 cast to int64, -1.0 cast to
#: int32, 0.999 cast to int32 (no term)
FLOAT_EXTENT_SEEDS = (250, 1465, 223, 88)


def test_big_extent_family_finds_float_extents_the_call_misreads(monkeypatch):
    """A float scalar cast to a loop extent: the call refuses a conversion with no defined
    value (NaN, an infinity, past the int type) and a negative extent, and sums the
    truncated count's terms otherwise.  With the host's conversion as it was before
    session 30 (a raw ValueError for NaN, 2**63 wrapped to a negative int64 and refused as
    a negative extent) the family reports them; with the index-dtype pass's leaves as
    they were (a float->int cast not one), the builds of an int32 extent are an
    InternalError."""
    from tecomp.ir import host_eval
    from tecomp.lower import index_dtype

    cases = [draw_edge_case(s) for s in FLOAT_EXTENT_SEEDS]
    assert [(ec.twist["variant"], ec.twist["value"]) for ec in cases] == [
        ("float_extent", "nan"), ("float_extent", "past_range"),
        ("float_extent", "negative"), ("float_extent", "fractional")]
    outs = [run_edge_case(ec) for ec in cases]
    assert [o.kind for o in outs] == ["refused", "refused", "refused", "ok"], \
        [o.report() for o in outs]
    with monkeypatch.context() as m:
        m.setattr(host_eval, "_float_to_int", lambda e, v, env: math.trunc(v))
        assert [run_edge_case(ec).kind for ec in cases] == ["crash", "mismatch", "refused", "ok"]
    monkeypatch.setattr(index_dtype, "_is_leaf", lambda e: not isinstance(
        e, index_dtype._RING + index_dtype._ORDERED + (Cast, Select, Let)))
    outs = [run_edge_case(ec) for ec in cases]
    assert [o.kind for o in outs] == ["refused", "refused", "crash", "crash"]
    assert all("does not fit int32" in o.detail for o in outs[2:]), outs[2].detail


#: (session 30) environment seeds of the on/off switches (stream 60): TECOMP_DUMP_IR=off,
#: TECOMP_PY_BINDER=off and TECOMP_PY_BINDER=t (not a switch's word: a warning)
SWITCH_SEEDS = (1081, 1875, 655)

#: the readers before session 30, put back in the child
_OLD_SWITCHES = """
import os, tecomp
import tecomp.threads as t
from tecomp.lower import pipeline as p
p._dump_ir = lambda: os.environ.get("TECOMP_DUMP_IR", "") not in ("", "0")
t.flag_from_env = lambda name, default, use: os.environ.get(name, "1") != "0"
"""


@pytest.mark.slow
def test_environment_family_finds_switches_misread():
    """Each switch read as its word says, a word that is none ignored with a warning;
    with the readers before session 30 (``off`` read as on for TECOMP_DUMP_IR and
    TECOMP_PY_BINDER, ``t`` taken silently) the family reports each seed.  (Six child
    processes: under the slow marker.)"""
    cases = [draw_edge_case(s) for s in SWITCH_SEEDS]
    assert [(ec.twist.get("var"), ec.twist.get("value")) for ec in cases] == [
        ("TECOMP_DUMP_IR", "off"), ("TECOMP_PY_BINDER", "off"), ("TECOMP_PY_BINDER", "t")]
    outs = [run_edge_case(ec) for ec in cases]
    assert [o.kind for o in outs] == ["ok"] * 3, [o.report() for o in outs]
    outs = [edges._run_environment(ec, _OLD_SWITCHES) for ec in cases]
    assert [o.kind for o in outs] == ["mismatch"] * 3, [o.report() for o in outs]
    assert "read as on, expected off" in outs[0].detail and \
        "no warning naming the variable" in outs[2].detail


#: (session 31) environment seeds of the variables that take a word (stream 64):
#: TECOMP_COST_MODEL=XGBoost, TECOMP_CUDA_EMU_MODE=" serial", TECOMP_COST_MODEL=xgbost
WORD_SEEDS = (653, 4105, 6771)

#: the readers before session 31, put back in the child
_OLD_WORDS = """
import os
import tecomp as tc
from tecomp.codegen import cuda_emu as ce
from tecomp.autoschedule import cost_model as cm
def _mode():
    mode = os.environ.get("TECOMP_CUDA_EMU_MODE") or "threads"
    if mode not in ce.MODES:
        raise tc.ArgumentError(f"TECOMP_CUDA_EMU_MODE={mode!r}")
    return mode
ce.default_mode = _mode
cm.model_from_env = lambda: "xgboost" if os.environ.get("TECOMP_COST_MODEL") == "xgboost" \\
    else "trees"
"""


@pytest.mark.slow
def test_environment_family_finds_words_misread():
    """Each word read in any case with blanks around, another word ignored with a
    warning; with the readers before session 31 (``XGBoost`` read as the trees, `` serial``
    an error, ``xgbost`` taken silently) the family reports each seed.  (Six child
    processes: under the slow marker.)"""
    cases = [draw_edge_case(s) for s in WORD_SEEDS]
    assert [(ec.twist.get("var"), ec.twist.get("value")) for ec in cases] == [
        ("TECOMP_COST_MODEL", "XGBoost"), ("TECOMP_CUDA_EMU_MODE", " serial"),
        ("TECOMP_COST_MODEL", "xgbost")]
    outs = [run_edge_case(ec) for ec in cases]
    assert [o.kind for o in outs] == ["ok"] * 3, [o.report() for o in outs]
    outs = [edges._run_environment(ec, _OLD_WORDS) for ec in cases]
    assert [o.kind for o in outs] == ["mismatch"] * 3, [o.report() for o in outs]
    assert "read as 'trees', expected 'xgboost'" in outs[0].detail and \
        "read as '!ArgumentError', expected 'serial'" in outs[1].detail and \
        "no warning naming the variable" in outs[2].detail


def test_word_variables_expected_reading(monkeypatch):
    """The family's model of a word variable (edges.word_expected) is the readers' own
    rule, checked in this process for every value the family draws."""
    import warnings as _w

    from tecomp.autoschedule import cost_model
    from tecomp.codegen import cuda_emu
    readers = {"TECOMP_CUDA_EMU_MODE": cuda_emu.default_mode,
               "TECOMP_COST_MODEL": cost_model.model_from_env}
    for var, values in edges.WORD_VALUES.items():
        for value in values:
            monkeypatch.setenv(var, value)
            want, warn = edges.word_expected(var, value)
            with _w.catch_warnings(record=True) as caught:
                _w.simplefilter("always")
                try:
                    got = readers[var]()
                except tc.TecompError as e:
                    got = "!" + type(e).__name__
            assert (got, bool(caught)) == (want, warn), (var, value)


#: (session 31) big_split seeds whose factors are numpy integers (stream 65): np.int64
#: 2**31 (split), np.int32 2 (a drawn split of the schedule)
NUMPY_FACTOR_SEEDS = (1, 37)


def test_big_split_family_gives_numpy_factors_and_replays_their_trace(monkeypatch):
    """The factors as numpy integers compute the same values and leave a replayable
    trace; with the primitives and the trace's encoding before session 31 (numpy
    integers passed on as they were, and they had no name in a trace) both seeds are
    mismatches."""
    from tecomp.schedule import trace as _trace

    cases = [draw_edge_case(s) for s in NUMPY_FACTOR_SEEDS]
    assert all(ec.family == "big_split" and ec.twist.get("numpy") for ec in cases)
    assert [o.kind for o in map(run_edge_case, cases)] == ["ok", "ok"]
    enc = _trace.Trace._enc

    def old_enc(self, x):
        if isinstance(x, np.integer):
            raise _trace._Unnamed(f"{type(x).__name__} {x!r:.60} has no name in a trace")
        return enc(self, x)

    monkeypatch.setattr(_trace.Trace, "_enc", old_enc)
    monkeypatch.setattr(_trace, "_plain_int", lambda v: v)
    outs = [run_edge_case(ec) for ec in cases]
    assert [o.kind for o in outs] == ["mismatch", "mismatch"], [o.report() for o in outs]
    assert "has no name in a trace" in outs[0].detail


#: (session 31) library_file seeds whose emulation-cache attack is a full disk (stream
#: 64): the entry rebuilt under a file size limit of 10.1 and 6.9 KiB
DISK_FULL_SEEDS = (293, 374)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(os.environ.get("CXX") or "g++") is None, reason="needs g++")
def test_library_family_builds_the_emulation_entry_on_a_full_disk(monkeypatch):
    """(Four builds of the emulation library: under the slow marker.)  Refused with a BuildError naming the cache directory, then right; with the
    compiler's messages of a full disk unknown (as before session 31: its death
    reported as "likely a tecomp bug") both seeds are mismatches."""
    from tecomp.codegen import cuda_emu

    cases = [draw_edge_case(s) for s in DISK_FULL_SEEDS]
    assert [ec.twist["emu_entry"]["attack"] for ec in cases] == ["disk_full"] * 2
    for ec in cases:
        assert edges._check_emu_entry(ec, ec.twist["emu_entry"]) is None
    monkeypatch.setattr(cuda_emu, "_WRITE_FAILURES", ())
    for ec in cases:
        out = edges._check_emu_entry(ec, ec.twist["emu_entry"])
        assert out is not None and out.kind == "mismatch" and "likely a tecomp bug" in \
            out.detail, out

"""The fuzzer's drawn machine models (tecomp.testing.machines): small caches and
thresholds, so that the ``ops`` and ``producers`` families' small shapes take the
schedules' big-shape paths."""
import pytest

import tecomp as tc
from tecomp.testing import machines, ops, producers
from tecomp.testing.draw import RandomDraw


def test_drawn_machine_replaces_the_fields_and_restores_them():
    before = tc.target.cpu_model("llvm -mcpu=znver4")
    with machines.drawn_machine({"l2_bytes": 2048, "stream_output_bytes": 64}):
        inside = tc.target.cpu_model("llvm -mcpu=znver4")
        assert (inside.l2_bytes, inside.stream_output_bytes) == (2048, 64)
        assert inside.lanes == before.lanes and inside.vregs == before.vregs
    assert tc.target.cpu_model("llvm -mcpu=znver4") == before
    with pytest.raises(KeyError):
        with machines.drawn_machine({"l1_bytes": 512}):
            raise KeyError("x")
    assert tc.target.cpu_model("llvm -mcpu=znver4") == before


def test_drawn_caches_are_ordered():
    for k in range(200):
        m = machines.draw_machine(RandomDraw(k))
        assert m["l1_bytes"] <= m["l2_bytes"] <= m["l3_bytes"]
        assert set(m) == set(machines.CHOICES)


@pytest.mark.parametrize("family", ["ops", "producers"])
def test_the_twist_keeps_the_other_draws(family, monkeypatch):
    """The model comes from a stream of its own: a seed's case is the one it was, the
    model aside (and a quarter of the seeds or so have one)."""
    mod = ops if family == "ops" else producers
    draw = ops.draw_op_case if family == "ops" else producers.draw_producer_case
    with_model = [draw(s) for s in range(120)]
    monkeypatch.setattr(mod, "maybe_machine", lambda seed, salt: None)
    without = [draw(s) for s in range(120)]
    drawn = 0
    for a, b in zip(with_model, without):
        drawn += "machine" in a.spec
        # (the ops family's eleventh stream gives some poolings a model of its own where
        # none was drawn: the case aside from its model stays the same)
        assert {k: v for k, v in a.spec.items() if k != "machine"} == \
            {k: v for k, v in b.spec.items() if k != "machine"}
        assert a.seed == b.seed
    assert 10 <= drawn <= 60, drawn


def test_an_ops_case_under_a_drawn_model_streams_its_output():
    """ops seed 260: max_pool2d of 3x13x13x16 (NHWC) under a model whose
    ``stream_output_bytes`` is 64: its output stored past the cache (not on the host's
    model), the values PyTorch's; the reproducer names the model."""
    case = ops.draw_op_case(260)
    m = case.spec["machine"]
    assert m["stream_output_bytes"] == 64 and case.spec["op"] == "max_pool2d"
    X, W, Y, n = ops.build_op(case)
    with machines.drawn_machine(m):
        text = str(tc.lower(tc.auto_schedule([X, Y], "llvm -mcpu=znver4"), [X, Y]))
    assert "nontemporal" in text
    assert "drawn machine model" in case.source() and "'machine'" in case.source()
    o = ops.run_op_case(case)
    assert o.kind == "ok", o.report() if hasattr(o, "report") else o.detail

"""torch.compile(model, backend="tecomp") on models of the zoo (benchmarks/torch_compile_zoo.py:
torchvision's classification models, transformers' BERT/GPT-2/DistilBERT in small
configurations, random weights): inference outputs within 1e-4 relative of eager.

By default a tiny torchvision model at 32 x 32 (skipped where torchvision is not
installed); every model of the sweep, each in its own process, with TECOMP_LONG_TESTS=1."""
import logging
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import tecomp  # noqa: E402
import tecomp.dynamo  # noqa: E402,F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import torch_compile_zoo as zoo  # noqa: E402

RTOL = 1e-4
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _torchvision():
    tv = zoo.import_torchvision()
    if tv is None:
        pytest.skip("torchvision is not installed (pip install torchvision)")
    return tv


#: squeezenet1_1 (the cheapest to compile) by default; mobilenet_v3_small and
#: shufflenet_v2_x0_5 (grouped convolutions and a channel split run eagerly between
#: kernels) with TECOMP_LONG_TESTS=1
_TINY = ["squeezenet1_1"] + [pytest.param(n, marks=pytest.mark.skipif(
    not LONG, reason="slow: set TECOMP_LONG_TESTS=1")) for n in ("mobilenet_v3_small",
                                                                  "shufflenet_v2_x0_5")]


@pytest.mark.parametrize("name", _TINY)
def test_torchvision_model_matches_eager(name, caplog):
    _torchvision()
    model, inputs, _ = zoo.build(name, 32)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="tecomp.dynamo"):
        want = model(*inputs)
        compiled = torch.compile(model, backend="tecomp")
        got = compiled(*inputs)
        # the second call reuses the intermediates the first kept, the third allocates
        # them again: the same outputs
        again = compiled(*inputs)
        tecomp.release_workspace()
        released = compiled(*inputs)
    assert zoo.max_rel_error(got, want) <= RTOL
    assert torch.equal(again, got) and torch.equal(released, got)
    msgs = [r.getMessage() for r in caplog.records]
    assert not [m for m in msgs if "could not be compiled" in m], msgs
    kernels = [m for m in msgs if "inference graph:" in m]
    assert kernels and " 0 tecomp kernels" not in kernels[0], kernels
    if name == "squeezenet1_1":
        # its max pooling rounds up (ceil_mode): eager, said once in the log
        assert any("max_pool2d_with_indices.default runs eagerly" in m and "ceil_mode" in m
                   for m in msgs), msgs


@pytest.mark.skipif(not LONG, reason="slow (a model zoo, minutes per model): set "
                    "TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("name", zoo.MODELS)
def test_zoo_model_matches_eager(name, tmp_path):
    r = zoo.run_one(name, zoo.VISION.get(name, 0), 1, 1200, str(tmp_path))
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert "error" not in r, r["error"]
    assert not r["failed"], r["failed"]
    assert r["max_rel_err"] <= RTOL, r
    assert r["calls_differ"] <= RTOL, r  # a second call, a call after release_workspace()
